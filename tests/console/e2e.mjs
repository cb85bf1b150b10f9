// The web console in a real browser: Debian's chromium, headless, driven by
// puppeteer-core, against a running examples/http_service with real runs
// (tests/console_browser.sh starts it and makes them). Fails on any error a
// page logs or throws, and on any request to another host.
// Usage: node e2e.mjs http://HOST:PORT SCREENSHOT_DIR
import puppeteer from "puppeteer-core";

const [base, shots] = process.argv.slice(2);
const problems = [];
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

function fail(message) {
  problems.push(message);
}

try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 800 });
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    // The missing run's 404 is the one error a page is expected to see.
    if ((message.location()?.url ?? "").includes("/v1/runs/nobody")) return;
    fail(`console error: ${message.text()} (${message.location()?.url ?? "?"})`);
  });
  page.on("pageerror", (error) => fail(`page error: ${error.message}`));
  page.on("dialog", (dialog) => dialog.accept());  // the console asks before it ends or resets a run
  page.on("request", (request) => {
    if (!request.url().startsWith(base) && !request.url().startsWith("data:")) fail(`a request left for ${request.url()}`);
  });

  // Runs: the table, the counts, then a filter.
  await page.goto(`${base}/`, { waitUntil: "networkidle0" });
  if (!page.url().endsWith("/ui/")) fail(`/ led to ${page.url()}, not /ui/`);
  await page.waitForSelector("#runs tbody tr");
  const ids = await page.$$eval("#runs tbody tr td:first-child", (cells) => cells.map((cell) => cell.textContent));
  for (const id of ["order-1", "order-2"]) if (!ids.includes(id)) fail(`the runs table lacks ${id}: ${ids}`);
  const counts = await page.$eval("#counts", (node) => node.textContent);
  if (!counts.includes("completed 1") || !counts.includes("running 2")) fail(`counts: ${counts}`);
  await page.screenshot({ path: `${shots}/runs.png` });
  await page.select("select[name=status]", "running");
  await page.click(".filters button[type=submit]");
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll("#runs tbody tr td:first-child")].map((cell) => cell.textContent);
    return rows.length === 2 && rows[0] === "order-2" && rows[1] === "order-3";
  });

  // A run: its facts, result and journal.
  await page.goto(`${base}/ui/#run/order-1`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#journal tbody tr");
  const facts = await page.$eval("#run", (node) => node.textContent);
  if (!facts.includes("completed")) fail(`order-1's facts: ${facts}`);
  const steps = await page.$$eval("#journal tbody tr td:nth-child(3)", (cells) => cells.map((cell) => cell.textContent));
  if (!steps.includes("quote")) fail(`order-1's journal lacks its quote step: ${steps}`);
  const result = await page.$eval("pre", (node) => node.textContent);
  if (result.trim() !== "85") fail(`order-1's result: ${result}`);
  await page.screenshot({ path: `${shots}/run.png` });

  // Actions. A signal: order-2 gets its approval and completes.
  await page.goto(`${base}/ui/#run/order-2`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#signal");
  await page.type("#signal input[name=name]", "approval");
  await page.type("#signal input[name=value]", "5");
  await page.click("#signal button[type=submit]");
  await page.waitForFunction(() => (document.querySelector("#run")?.textContent ?? "").includes("completed"),
    { timeout: 15000 });
  await page.screenshot({ path: `${shots}/run-signalled.png` });
  // A cancel, confirmed: order-3 ends cancelled.
  await page.goto(`${base}/ui/#run/order-3`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#cancel");
  await page.click("#cancel");
  await page.waitForFunction(() => (document.querySelector("#run")?.textContent ?? "").includes("cancelled"),
    { timeout: 15000 });
  // A reset, confirmed: order-1 replays as its generation 2.
  await page.goto(`${base}/ui/#run/order-1`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#reset");
  await page.click("#reset button[type=submit]");
  await page.waitForFunction(() => /Generation\s*2/.test(document.querySelector("#run")?.textContent ?? ""),
    { timeout: 15000 });

  // A run that does not exist: a clear error, no console error.
  await page.goto(`${base}/ui/#run/nobody`, { waitUntil: "networkidle0" });
  await page.waitForSelector(".error");
  const message = await page.$eval(".error", (node) => node.textContent);
  if (!message.includes("no run 'nobody'")) fail(`a missing run says: ${message}`);

  // Engine.
  await page.goto(`${base}/ui/#engine`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#engine");
  const engine = await page.$eval("#engine", (node) => node.textContent);
  if (!engine.includes("held here")) fail(`the engine page: ${engine}`);
  await page.screenshot({ path: `${shots}/engine.png` });
} catch (error) {
  fail(`the suite stopped: ${error.message}`);
} finally {
  await browser.close();
}
if (problems.length) {
  for (const problem of problems) console.error(`console e2e: ${problem}`);
  process.exit(1);
}
console.log(`console e2e: runs, a run, a signal, a cancel, a reset, a missing run and the engine page checked; screenshots in ${shots}`);
