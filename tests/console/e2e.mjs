// The web console in a real browser: Debian's chromium, headless, driven by
// puppeteer-core, against real runs (tests/console_browser.sh starts the
// service and makes them). Fails on any error a page logs or throws, and on
// any request to another host.
// Usage: node e2e.mjs http://HOST:PORT SCREENSHOT_DIR [local|server]
//   local:  examples/http_service's own listener, every page and action;
//   server: fusee server --http's front, with one worker behind it.
import puppeteer from "puppeteer-core";

const [base, shots, mode = "local"] = process.argv.slice(2);
const problems = [];
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

function fail(message) {
  problems.push(message);
}

const text = (page, selector) => page.$eval(selector, (node) => node.textContent);
const texts = (page, selector) => page.$$eval(selector, (nodes) => nodes.map((node) => node.textContent));
const runIds = (page) => texts(page, "#runs tbody tr td:first-child");

// Waits until the runs table shows exactly `ids`, in order.
async function waitForRuns(page, ids) {
  try {
    await page.waitForFunction((wanted) => {
      const shown = [...document.querySelectorAll("#runs tbody tr td:first-child")].map((cell) => cell.textContent);
      return JSON.stringify(shown) === JSON.stringify(wanted);
    }, { timeout: 10000 }, ids);
  } catch {
    fail(`the runs table shows ${JSON.stringify(await runIds(page))}, not ${JSON.stringify(ids)}`);
  }
}

async function setFilter(page, name, value) {
  await page.$eval(`#filters [name=${name}]`, (input, given) => { input.value = given; }, value);
}

// A run's page; waits for its journal. (Another run's page may be showing:
// a new hash is not a new document.)
async function openRun(page, id) {
  await page.goto(`${base}/ui/#run/${id}`, { waitUntil: "networkidle0" });
  await page.waitForFunction((heading) => document.querySelector("h1")?.textContent === heading &&
    document.getElementById("journal") !== null, {}, `Run ${id}`);
}

// Waits until the stream `name` on the page shows `chunks` and `state`.
async function waitForStream(page, name, chunks, state) {
  try {
    await page.waitForFunction((stream, wanted, wantedState) => {
      const block = document.querySelector(`.stream[data-stream="${stream}"]`);
      if (!block) return false;
      const shown = [...block.querySelectorAll("li")].map((item) => item.textContent);
      return JSON.stringify(shown) === JSON.stringify(wanted) && block.querySelector(".stream-state").textContent === wantedState;
    }, { timeout: 15000 }, name, chunks, state);
  } catch {
    const shown = await page.$$eval(".stream", (blocks) => blocks.map((block) => block.textContent));
    fail(`stream ${name}: wanted ${JSON.stringify(chunks)} ${state}, the page shows ${JSON.stringify(shown)}`);
  }
}

async function signalThroughPage(page, name, value) {
  await page.waitForSelector("#signal");
  await page.type("#signal input[name=name]", name);
  await page.type("#signal input[name=value]", value);
  await page.click("#signal button[type=submit]");
}

async function waitForFact(page, fact, pattern) {
  try {
    await page.waitForFunction((id, source) => new RegExp(source).test(document.getElementById(id)?.textContent ?? ""),
      { timeout: 15000 }, `fact-${fact}`, pattern.source);
  } catch {
    fail(`the run's ${fact} never matched ${pattern}: ${await text(page, "#run").catch(() => "no #run")}`);
  }
}

async function local(page) {
  // Runs: the table, the counts, then the filters (server-side prefix and
  // status, a start time range with nothing in it, then none).
  await page.goto(`${base}/`, { waitUntil: "networkidle0" });
  if (!page.url().endsWith("/ui/")) fail(`/ led to ${page.url()}, not /ui/`);
  await page.waitForSelector("#runs tbody tr");
  const ids = await runIds(page);
  for (const id of ["order-1", "order-2", "order-3", "batch-1", "batch-1-1", "batch-1-2"]) {
    if (!ids.includes(id)) fail(`the runs table lacks ${id}: ${ids}`);
  }
  const counts = await text(page, "#counts");
  if (!counts.includes("completed 1") || !counts.includes("running 5")) fail(`counts: ${counts}`);
  await page.screenshot({ path: `${shots}/runs.png` });
  await setFilter(page, "prefix", "order-");
  await page.select("#filters select[name=status]", "running");
  await page.click("#filters button[type=submit]");
  await waitForRuns(page, ["order-2", "order-3"]);
  await setFilter(page, "prefix", "");
  await page.select("#filters select[name=status]", "");
  await setFilter(page, "to", "2000-01-01T00:00:00");
  await page.click("#filters button[type=submit]");
  await page.waitForSelector("#no-runs");
  const empty = await text(page, "#no-runs");
  if (!empty.includes("No run matches")) fail(`an empty filter says: ${empty}`);
  await setFilter(page, "to", "");
  await setFilter(page, "from", "2000-01-01T00:00:00");
  await page.click("#filters button[type=submit]");
  await waitForRuns(page, ["batch-1", "batch-1-1", "batch-1-2", "order-1", "order-2", "order-3"]);

  // A finished run: facts, input, result, the journal as a timeline, its
  // stream read to its end.
  await openRun(page, "order-1");
  if (!(await text(page, "#run")).includes("completed")) fail(`order-1's facts: ${await text(page, "#run")}`);
  if ((await text(page, "#input")).trim() !== "3") fail(`order-1's input: ${await text(page, "#input")}`);
  if ((await text(page, "#result")).trim() !== "85") fail(`order-1's result: ${await text(page, "#result")}`);
  const commands = await texts(page, "#journal tbody tr td:nth-child(3)");
  if (JSON.stringify(commands) !== JSON.stringify(["quote", "progress", "approval", "progress"])) {
    fail(`order-1's journal: ${commands}`);
  }
  const bars = await page.$$eval("#journal svg.bar rect", (rects) => rects.length);
  if (bars !== 4) fail(`order-1's timeline has ${bars} bars, not 4`);
  await waitForStream(page, "progress", ["75", "85"], "ended");
  await page.screenshot({ path: `${shots}/run.png`, fullPage: true });

  // A live stream: order-2 has written its quote; a signal through the page
  // completes it, and the open stream shows the total and its end.
  await openRun(page, "order-2");
  await waitForStream(page, "progress", ["25"], "live");
  await page.screenshot({ path: `${shots}/run-live.png`, fullPage: true });
  await signalThroughPage(page, "approval", "5");
  await waitForStream(page, "progress", ["25", "30"], "ended");
  await waitForFact(page, "status", /completed/);

  // Children and parent: batch-1's two orders, started together, show as
  // concurrent commands and link to their runs, which link back.
  await openRun(page, "batch-1");
  const children = await texts(page, "#fact-children a");
  if (JSON.stringify(children) !== JSON.stringify(["batch-1-1", "batch-1-2"])) fail(`batch-1's children: ${children}`);
  const concurrent = await page.$$eval("#journal tr.concurrent", (rows) => rows.map((row) => row.dataset.group));
  if (concurrent.length !== 2 || concurrent[0] !== concurrent[1]) {
    fail(`batch-1's two children are not shown as one concurrent group: ${JSON.stringify(concurrent)}`);
  }
  await page.screenshot({ path: `${shots}/run-children.png`, fullPage: true });
  await page.click("#fact-children a");
  await waitForFact(page, "parent", /batch-1/);
  if ((await text(page, "h1")) !== "Run batch-1-1") fail(`the child link led to ${await text(page, "h1")}`);
  // A terminate, confirmed: the child ends at once, cancelled, and says why.
  await page.waitForSelector("#terminate");
  await page.click("#terminate");
  await waitForFact(page, "status", /cancelled/);
  await waitForFact(page, "error", /from the console/);

  // A cancel, confirmed: order-3 ends cancelled.
  await openRun(page, "order-3");
  await page.waitForSelector("#cancel");
  await page.click("#cancel");
  await waitForFact(page, "status", /cancelled/);
  // A reset, confirmed: order-1 replays as its generation 2.
  await openRun(page, "order-1");
  await page.waitForSelector("#reset");
  await page.click("#reset button[type=submit]");
  await waitForFact(page, "generation", /^2$/);

  // A run that does not exist: a clear error, no console error.
  await page.goto(`${base}/ui/#run/nobody`, { waitUntil: "networkidle0" });
  await page.waitForSelector(".error");
  const message = await text(page, ".error");
  if (!message.includes("no run 'nobody'")) fail(`a missing run says: ${message}`);

  // The engine: its figures and the latency chart.
  await page.goto(`${base}/ui/#engine`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#engine");
  const engine = await text(page, "#engine");
  if (!engine.includes("held here") || !engine.includes("Records per write")) fail(`the engine page: ${engine}`);
  const buckets = await page.$$eval("#latency rect", (rects) => rects.length);
  if (buckets < 2) fail(`the latency chart has ${buckets} bars`);
  if (await page.$("#holders")) fail("a lone engine's page shows a server's shard holders");
  await page.screenshot({ path: `${shots}/engine.png`, fullPage: true });
}

async function server(page) {
  // Through the front, which wants a token: the login prompt, then the runs
  // (from the worker), a run and its live stream (the token goes along), a
  // signal, the engine page with the server's shards and holders.
  await page.goto(`${base}/`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#login:not([hidden])");
  if (!(await text(page, ".error")).includes("wants a token")) fail(`without a token: ${await text(page, ".error")}`);
  await page.screenshot({ path: `${shots}/login.png` });
  await page.type("#token", process.env.FUSEE_TOKEN);
  await page.click("#login button[type=submit]");
  await page.waitForSelector("#runs tbody tr");
  const kept = await page.evaluate(() => sessionStorage.getItem("fusee.token"));
  if (kept !== process.env.FUSEE_TOKEN) fail(`the token is not kept in the tab's sessionStorage: ${kept}`);
  const ids = await runIds(page);
  if (JSON.stringify(ids) !== JSON.stringify(["order-s1", "order-s2"])) fail(`the server's runs: ${ids}`);
  await openRun(page, "order-s2");
  await waitForStream(page, "progress", ["50"], "live");
  await signalThroughPage(page, "approval", "1");
  await waitForStream(page, "progress", ["50", "51"], "ended");
  await waitForFact(page, "status", /completed/);
  await page.goto(`${base}/ui/#engine`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#holders");
  const holders = await page.$$eval("#holders tbody tr", (rows) => rows.map((row) => row.cells[1].textContent));
  if (holders.length !== 2 || holders.some((holder) => holder.startsWith("nobody"))) fail(`shard holders: ${holders}`);
  const flushes = await page.$$eval("#server-latency rect", (rects) => rects.length);
  if (flushes < 2) fail(`the server's latency chart has ${flushes} bars`);
  if (!(await text(page, "#engine")).includes("2 of 2 held here")) fail(`the worker: ${await text(page, "#engine")}`);
  await page.screenshot({ path: `${shots}/engine-server.png`, fullPage: true });
}

try {
  const page = await browser.newPage();
  // CONSOLE_SCALE below 1 makes the smaller screenshots docs/ shows.
  await page.setViewport({ width: 1200, height: 800, deviceScaleFactor: Number(process.env.CONSOLE_SCALE ?? 1) });
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    // The missing run's 404, and the 401s before the token is given, are
    // the errors a page is expected to see.
    const url = message.location()?.url ?? "";
    if (url.includes("/v1/runs/nobody") || (mode === "server" && message.text().includes("401"))) return;
    fail(`console error: ${message.text()} (${message.location()?.url ?? "?"})`);
  });
  page.on("pageerror", (error) => fail(`page error: ${error.message}`));
  page.on("dialog", (dialog) => dialog.accept());  // the console asks before it ends or resets a run
  page.on("request", (request) => {
    if (!request.url().startsWith(base) && !request.url().startsWith("data:")) fail(`a request left for ${request.url()}`);
  });
  if (mode === "server") await server(page);
  else await local(page);
} catch (error) {
  fail(`the suite stopped: ${error.message}`);
} finally {
  await browser.close();
}
if (problems.length) {
  for (const problem of problems) console.error(`console e2e (${mode}): ${problem}`);
  process.exit(1);
}
console.log(mode === "server"
  ? `console e2e (server): runs, a run's live stream, a signal and the shard holders through fusee server --http; screenshots in ${shots}`
  : `console e2e (local): runs and filters, a run's timeline, input, result and streams (live), children and parent, a signal, a terminate, a cancel, a reset, a missing run and the engine page; screenshots in ${shots}`);
