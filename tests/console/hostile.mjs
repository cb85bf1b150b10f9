// A hostile page on another origin, in a real browser: Debian's chromium,
// headless, driven by puppeteer-core, opens the page
// tests/cross_site_browser.sh serves (hostile.html, from another host name
// and port than the API) and lets it try every write a browser allows a
// page to send to another site: forms, no-cors and cors fetches, beacons.
// This script only waits until each attempt has settled and prints what the
// page and the network saw; whether anything changed is for the shell script
// to find out with curl (a page may not be trusted about what it did).
// Exits 1 when an attempt never settled, the page threw, or the page could
// read an answer (the API allowed it through CORS).
// Usage: node hostile.mjs API_BASE PAGE_BASE
//   e.g. node hostile.mjs http://127.0.0.1:8080 http://localhost:8081
import puppeteer from "puppeteer-core";

const [api, pageBase] = process.argv.slice(2);
if (!api || !pageBase) {
  console.error("usage: node hostile.mjs API_BASE PAGE_BASE");
  process.exit(2);
}
// Far above what a refused request takes on loopback; only there so that a
// hang ends with a message instead of the shell script's timeout.
const settleMs = 15000;
const problems = [];
const fail = (message) => problems.push(message);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

// Every request the browser makes to the API, as the network saw it: the
// page itself may not read a cross-site answer, the browser's tools may.
const network = [];
function settle(request, how) {
  const entry = network.find((candidate) => candidate.request === request);
  if (entry && !entry.outcome) entry.outcome = how;
}

try {
  const page = await browser.newPage();
  page.on("pageerror", (error) => fail(`the hostile page threw: ${error.message}`));
  page.on("request", (request) => {
    if (request.url().startsWith(api)) network.push({ request, outcome: null });
  });
  page.on("requestfinished", (request) => settle(request, `answered ${request.response()?.status() ?? "?"}`));
  page.on("requestfailed", (request) => {
    const status = request.response()?.status();
    settle(request, `failed (${request.failure()?.errorText ?? "?"})${status ? `, answered ${status}` : ""}`);
  });

  await page.goto(`${pageBase}/hostile.html?api=${encodeURIComponent(api)}`, { waitUntil: "load" });
  // window.attack: the page's own promise, every attempt settled (each one
  // bounded by the page: "unsettled" after settleMs).
  const report = await page.evaluate((limit) => window.attack(limit), settleMs);
  for (const attempt of report.attempts) {
    console.log(`hostile: ${attempt.name}: ${attempt.outcome}`);
    if (attempt.outcome.startsWith("unsettled")) fail(`${attempt.name} never settled`);
    if (attempt.outcome.startsWith("readable")) fail(`${attempt.name}: the page read the API's answer (${attempt.outcome})`);
  }

  // A beacon gives the page nothing to wait on: wait for the browser to
  // have sent every beacon the page queued, and for every request to the
  // API to have its answer or failure, before the shell script looks.
  const deadline = Date.now() + settleMs;
  const pending = () => network.filter((entry) => !entry.outcome);
  const pings = () => network.filter((entry) => entry.request.resourceType() === "ping" && entry.outcome).length;
  while (Date.now() < deadline && (pending().length > 0 || pings() < report.beacons)) await sleep(50);
  if (pending().length > 0) fail(`requests without an answer: ${pending().map((entry) => entry.request.url()).join(", ")}`);
  if (pings() < report.beacons) fail(`the page queued ${report.beacons} beacons, the browser sent ${pings()}`);
  for (const { request, outcome } of network) {
    const body = request.postData();
    console.log(`hostile: network: ${request.method()} ${request.url().slice(api.length)} (${request.resourceType()}` +
      `${body ? `, body ${JSON.stringify(body)}` : ""}): ${outcome ?? "no answer"}`);
  }
} catch (error) {
  fail(`the script stopped: ${error.message}`);
} finally {
  await browser.close();
}
if (problems.length) {
  for (const problem of problems) console.error(`hostile: ${problem}`);
  process.exit(1);
}
console.log(`hostile: every attempt against ${api} settled`);
