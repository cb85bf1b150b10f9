// The web console in a real browser: Debian's chromium, headless, driven by
// puppeteer-core, against real runs (tests/console_browser.sh starts the
// service and makes them). Fails on any error a page logs or throws, and on
// any request to another host.
// Usage: node e2e.mjs http://HOST:PORT SCREENSHOT_DIR [local|server]
//   local:  examples/http_service's own listener, every page and action,
//           and the service killed and started again under the page
//           ($FUSEE_SERVICE_PID, $FUSEE_SERVICE, $FUSEE_SERVICE_PID_FILE);
//   server: fusee server --http's front, with one worker behind it.
import { spawn } from "node:child_process";
import { openSync, readFileSync, writeFileSync } from "node:fs";
import puppeteer from "puppeteer-core";

const [base, shots, mode = "local"] = process.argv.slice(2);
const problems = [];
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

// While the service is down on purpose, the page's refused calls are
// expected (Chromium logs each as an error).
let outage = false;

function fail(message) {
  problems.push(message);
}

const text = (page, selector) => page.$eval(selector, (node) => node.textContent);
const texts = (page, selector) => page.$$eval(selector, (nodes) => nodes.map((node) => node.textContent));
const runIds = (page) => texts(page, "#runs tbody tr td:first-child");

// Waits until the runs table shows exactly `ids`, in any order (the order
// is the engine's).
async function waitForRuns(page, ids) {
  try {
    await page.waitForFunction((wanted) => {
      const shown = [...document.querySelectorAll("#runs tbody tr td:first-child")].map((cell) => cell.textContent);
      return JSON.stringify(shown.sort()) === JSON.stringify([...wanted].sort());
    }, { timeout: 10000 }, ids);
  } catch {
    fail(`the runs table shows ${JSON.stringify(await runIds(page))}, not ${JSON.stringify(ids)}`);
  }
}

// Waits until the view is drawn for the URL's hash: after Back, Forward or
// a link, the table may still show the page before for a moment, and a
// check of it would read the wrong page.
async function waitForShown(page) {
  await page.waitForFunction(() => document.getElementById("view").dataset.shown === location.hash,
    { timeout: 10000 });
}

// Waits until `selector`'s text matches `pattern`.
async function waitForText(page, selector, pattern, timeout = 15000) {
  try {
    await page.waitForFunction((where, source) => new RegExp(source).test(document.querySelector(where)?.textContent ?? ""),
      { timeout }, selector, pattern.source);
  } catch {
    fail(`${selector} never matched ${pattern}: ${JSON.stringify(await page.$eval(selector, (node) => node.textContent).catch(() => "(none)"))}`);
  }
}

// The hash of the page's URL, decoded.
const hashOf = (page) => decodeURIComponent(new URL(page.url()).hash);

// A call to the API from the test itself (setting up schedules, queues;
// what the page should show), with the token when the API wants one.
async function call(path, body) {
  const headers = process.env.FUSEE_TOKEN ? { Authorization: `Bearer ${process.env.FUSEE_TOKEN}` } : {};
  const response = await fetch(`${base}${path}`, body === undefined ? { headers } : {
    method: "POST", headers: { ...headers, "Content-Type": "application/json" }, body: JSON.stringify(body) });
  if (!response.ok) fail(`${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

// A time as the console shows it (dom.js's time): UTC, to the millisecond.
const timeText = (ms) => new Date(ms).toISOString().replace("T", " ").replace("Z", "");

// Waits until the runs table's Waiting on column shows `wanted` ({id:
// text}) for those runs.
async function waitForWaiting(page, wanted) {
  try {
    await page.waitForFunction((expected) => {
      const shown = Object.fromEntries([...document.querySelectorAll("#runs tbody tr")]
        .map((row) => [row.cells[0].textContent, row.querySelector("td.waiting")?.textContent]));
      return Object.entries(expected).every(([id, text]) => shown[id] === text);
    }, { timeout: 10000 }, wanted);
  } catch {
    const shown = await page.$$eval("#runs tbody tr", (rows) => rows.map((row) => [row.cells[0].textContent, row.querySelector("td.waiting")?.textContent]));
    fail(`the Waiting on column shows ${JSON.stringify(shown)}, not ${JSON.stringify(wanted)}`);
  }
}

// Runs `body` while the page gets the API's answers for the paths in
// `rewrites` ({pathname: answer => answer}) rewritten: what the example
// cannot make (a retried step, a parked run, an error of an older engine).
async function withAnswers(page, rewrites, body) {
  const intercept = async (request) => {
    const rewrite = rewrites[new URL(request.url()).pathname];
    if (!rewrite) {
      request.continue();
      return;
    }
    const answer = await (await fetch(request.url(), { headers: request.headers() })).json();
    request.respond({ status: 200, contentType: "application/json", body: JSON.stringify(rewrite(answer)) });
  };
  await page.setRequestInterception(true);
  page.on("request", intercept);
  try {
    await body();
  } finally {
    page.off("request", intercept);
    await page.setRequestInterception(false);
  }
}

// Waits until the status line has changed `times` times (live refreshes).
async function refreshes(page, times) {
  for (let i = 0; i < times; i++) {
    const before = await text(page, "#status");
    await page.waitForFunction((was) => document.getElementById("status").textContent !== was &&
      document.getElementById("status").textContent.startsWith("updated"), { timeout: 10000 }, before);
  }
}

// Waits until every request of the page has been answered (the hash routes
// within one document, so page.goto to another hash waits for nothing).
const settle = (page) => page.waitForNetworkIdle({ idleTime: 150, timeout: 10000 });

async function setFilter(page, name, value) {
  await page.$eval(`#filters [name=${name}]`, (input, given) => { input.value = given; }, value);
}

// A run's page; waits for its journal. (Another run's page may be showing:
// a new hash is not a new document.)
async function openRun(page, id) {
  await page.goto(`${base}/ui/#run/${encodeURIComponent(id)}`, { waitUntil: "networkidle0" });
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
  await runsAndFilters(page);
  await stuckRun(page);
  await waitingKinds(page);
  await finishedRuns(page);
  await attemptsAndParked(page);
  await oddId(page);
  await payment(page);
  await schedulesAndQueues(page);
  await restart(page);

  // A run that does not exist: a clear error, no console error.
  await page.goto(`${base}/ui/#run/nobody`, { waitUntil: "networkidle0" });
  await page.waitForSelector(".error");
  const message = await text(page, ".error");
  if (!message.includes("no run 'nobody'")) fail(`a missing run says: ${message}`);

  // The engine: its figures, its activity charts and the latency chart.
  // The restarted service has written since it opened (q-1's approval):
  // its samples hold a durable write.
  await page.goto(`${base}/ui/#engine`, { waitUntil: "networkidle0" });
  await page.waitForSelector("#engine");
  const engine = await text(page, "#engine");
  if (!engine.includes("held here") || !engine.includes("Records per write")) fail(`the engine page: ${engine}`);
  const buckets = await page.$$eval("#latency rect", (rects) => rects.length);
  if (buckets < 2) fail(`the latency chart has ${buckets} bars`);
  if (await page.$("#holders")) fail("a lone engine's page shows a server's shard holders");
  await activityCharts(page, true);
  await page.screenshot({ path: `${shots}/engine.png`, fullPage: true });
}

// The polylines and dots of an activity chart, each as its number of
// points.
const chartMarks = (page, id) => page.$$eval(`#${id} polyline, #${id} circle`, (marks) =>
  marks.map((mark) => (mark.tagName === "circle" ? 1 : mark.getAttribute("points").trim().split(/\s+/).length)));

// The engine page's activity charts (GET /v1/stats/activity) once the
// engine has read its counters at least twice: steps/s and runs/s drawn
// over every sample, latency where a sample has durable writes (`flushed`:
// some must), and the totals of GET /v1/stats beside them.
async function activityCharts(page, flushed, worker = false) {
  let samples = [];
  for (let tries = 0; tries < 100; tries++) {
    samples = (await call("/v1/stats/activity")).samples;
    if (samples.length >= 2 && (!flushed || samples.some((sample) => sample.flushes > 0))) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (samples.length < 2) fail(`/v1/stats/activity has ${samples.length} samples after 10 s`);
  const wrote = samples.some((sample) => sample.flushes > 0);
  if (flushed && !wrote) fail(`no sample of /v1/stats/activity has a durable write: ${JSON.stringify(samples)}`);
  // The page's next refresh reads samples at least as new as these.
  try {
    await page.waitForFunction((least, latency) => {
      const points = (id) => [...document.querySelectorAll(`#${id} polyline`)].map((line) => line.getAttribute("points").trim().split(/\s+/).length);
      return points("activity-steps").some((count) => count >= least) && points("activity-runs").filter((count) => count >= least).length === 3 &&
        (!latency || document.querySelectorAll("#activity-latency polyline, #activity-latency circle").length > 0);
    }, { timeout: 10000 }, 2, wrote);
  } catch {
    fail(`the activity charts: steps ${await chartMarks(page, "activity-steps")}, runs ${await chartMarks(page, "activity-runs")}, ` +
      `latency ${await chartMarks(page, "activity-latency")} (points per line), from ${samples.length} samples`);
  }
  if (!/^Activity \(the last /.test(await text(page, "#activity h2, #activity h3"))) fail(`the activity heading: ${await text(page, "#activity")}`);
  // The totals, as GET /v1/stats has them: the page's next refresh shows
  // what the API says (read again while they change).
  const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`;
  let wanted = [];
  let shown = [];
  for (let tries = 0; tries < 60; tries++) {
    const stats = await call("/v1/stats");
    wanted = [`${plural(stats.steps_completed, "step")} completed since the engine opened`,
      `${plural(stats.runs_started, "run")} started, ${stats.runs_finished} finished (${stats.runs_failed} failed) since the engine opened`,
      `${plural(stats.flushes, "durable write")} since the engine opened` +
        (worker ? " (the server's log writes for its workers: its charts are above)" : "")];
    shown = await Promise.all(["#total-steps", "#total-runs", "#total-flushes"].map((id) => text(page, id).catch(() => "(none)")));
    if (JSON.stringify(shown) === JSON.stringify(wanted)) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  if (JSON.stringify(shown) !== JSON.stringify(wanted)) fail(`the activity totals: ${JSON.stringify(shown)}, GET /v1/stats: ${JSON.stringify(wanted)}`);
}

// Runs: the table and the counts; the filters and the page in the URL
// (Back returns to the filters before, a link opens them as they were);
// a time range with nothing in it, then one with everything.
async function runsAndFilters(page) {
  await page.goto(`${base}/`, { waitUntil: "networkidle0" });
  if (!page.url().endsWith("/ui/")) fail(`/ led to ${page.url()}, not /ui/`);
  await page.waitForSelector("#runs tbody tr");
  const everyRun = ["order-1", "order-2", "order-3", "order-4", "batch-1", "batch-1-1", "batch-1-2", "pay-1", "odd:id@x~y+z=w,v"];
  const ids = await runIds(page);
  for (const id of everyRun) {
    if (!ids.includes(id)) fail(`the runs table lacks ${id}: ${ids}`);
  }
  const counts = await text(page, "#counts");
  if (!counts.includes("completed 1") || !counts.includes("running 7") || !counts.includes("stuck 1")) fail(`counts: ${counts}`);
  // What each running run waits on (the API's waiting_on): a waiting
  // order its signal, the batch its children (linked), a payment its
  // awakeable and its next update; nothing for a finished or stuck run.
  await waitForWaiting(page, { "order-2": "signal approval", "order-3": "signal approval", "batch-1-1": "signal approval",
    "batch-1": "child batch-1-1, child batch-1-2", "pay-1": "awakeable charged, update add_tip", "order-4": "", "order-1": "" });
  const childLinks = await page.$$eval("#runs td.waiting a", (links) => links.map((link) => link.getAttribute("href")));
  if (JSON.stringify(childLinks) !== JSON.stringify(["#run/batch-1-1", "#run/batch-1-2"])) fail(`the Waiting on column's links: ${childLinks}`);
  const waits = (await call("/v1/runs/order-2")).waiting_on;
  if (JSON.stringify(waits.map((wait) => [wait.command, wait.name])) !== JSON.stringify([["wait_for", "approval"]])) {
    fail(`order-2's waiting_on: ${JSON.stringify(waits)}`);
  }
  await page.screenshot({ path: `${shots}/runs.png` });

  await setFilter(page, "prefix", "order-");
  await page.select("#filters select[name=status]", "running");
  await page.click("#filters button[type=submit]");
  await waitForRuns(page, ["order-2", "order-3"]);
  if (hashOf(page) !== "#runs?status=running&prefix=order-") fail(`the filters are not in the URL: ${hashOf(page)}`);
  await setFilter(page, "prefix", "");
  await page.select("#filters select[name=status]", "");
  await setFilter(page, "to", "2000-01-01T00:00:00");
  await page.click("#filters button[type=submit]");
  await page.waitForSelector("#no-runs");
  const empty = await text(page, "#no-runs");
  if (!empty.includes("No run matches")) fail(`an empty filter says: ${empty}`);
  // Back: the filters before, in the form and in the table.
  await page.goBack();
  await waitForRuns(page, ["order-2", "order-3"]);
  const form = await page.$eval("#filters", (node) => ({ status: node.status.value, prefix: node.prefix.value, to: node.to.value }));
  if (JSON.stringify(form) !== JSON.stringify({ status: "running", prefix: "order-", to: "" })) fail(`Back shows the filters ${JSON.stringify(form)}`);
  await page.goBack();
  await waitForRuns(page, everyRun);
  await page.goForward();
  await waitForRuns(page, ["order-2", "order-3"]);
  // A link to a filtered page, opened afresh.
  await page.goto(`${base}/ui/#runs?status=stuck`);
  await page.reload({ waitUntil: "networkidle0" });
  await waitForRuns(page, ["order-1"]);
  if ((await page.$eval("#filters select[name=status]", (node) => node.value)) !== "stuck") fail("a link's status filter is not in the form");
  await setFilter(page, "status", "");
  await page.select("#filters select[name=status]", "");
  await setFilter(page, "from", "2000-01-01T00:00:00");
  await page.click("#filters button[type=submit]");
  await waitForRuns(page, everyRun);
  // Pages of 2: the next page's cursor is in the URL, and Back is the page before.
  await page.goto(`${base}/ui/#runs?limit=2`, { waitUntil: "networkidle0" });
  await page.waitForFunction(() => document.querySelectorAll("#runs tbody tr").length === 2);
  const first = await runIds(page);
  await page.click("#next-page");
  await page.waitForFunction(() => location.hash.includes("cursor="));
  await page.waitForFunction((before) => {
    const shown = [...document.querySelectorAll("#runs tbody tr td:first-child")].map((cell) => cell.textContent);
    return shown.length === 2 && !shown.some((id) => before.includes(id));
  }, { timeout: 10000 }, first);
  // The total is every run, on every page; Previous page goes back too.
  const totalText = await page.$eval("#runs-total", (node) => node.textContent);
  if (totalText !== `${ids.length} runs match`) fail(`the total says "${totalText}", not ${ids.length} runs`);
  await page.click("#previous-page");
  await waitForRuns(page, first);
  await page.goBack();
  await page.goBack();
  await waitForShown(page);
  await waitForRuns(page, first);
  if (await page.$("#first-page")) fail("the first page offers a First page button");
  if (await page.$("#previous-page")) fail("the first page offers a Previous page button");
  // Newest first by default: the started times do not rise down the table.
  const started = await page.$$eval("#runs tbody tr td.started", (cells) => cells.map((cell) => cell.textContent));
  if ([...started].sort().reverse().join() !== started.join()) fail(`not newest first: ${started.join(", ")}`);
  // By id, on request, in the URL.
  // A hash-only goto is a same-document navigation: it returns before the
  // view is drawn for it, and the table of two rows just shown would pass a
  // check of "more than one row" (the form not yet showing the order: a
  // fresh clone's make test failed so once).
  await page.goto(`${base}/ui/#runs?order=id`, { waitUntil: "networkidle0" });
  await waitForShown(page);
  await page.waitForFunction(() => document.querySelectorAll("#runs tbody tr").length > 1);
  const byId = await runIds(page);
  if ([...byId].sort().join() !== byId.join()) fail(`order=id is not by id: ${byId.join(", ")}`);
  if ((await page.$eval("#filters select[name=order]", (node) => node.value)) !== "id") fail("the order is not in the form");
}

// A stuck run: the position where its code left the journal, marked; only
// cancel, terminate and reset offered. Cancelled with a reason, its error
// is the cancel's at once, and its last wait no longer "waiting".
async function stuckRun(page) {
  await openRun(page, "order-1");
  await waitForFact(page, "status", /stuck/);
  await waitForFact(page, "diverged", /at position 1: the journal has wait_for 'approval' but the workflow asked for stream write 'progress'/);
  const stuck = (await call("/v1/runs/order-1")).stuck_position;
  if (stuck !== 1) fail(`order-1's stuck_position: ${stuck}`);
  const marked = await page.$$eval("#journal tr.diverged", (rows) => rows.map((row) => row.id));
  if (JSON.stringify(marked) !== JSON.stringify([`journal-${stuck}`])) fail(`the diverged rows: ${JSON.stringify(marked)}, stuck_position ${stuck}`);
  // The position is the API's: an error that names none still marks it;
  // with none from the API (an older engine) the error's stands in.
  const markedWith = async (rewrite) => {
    let rows = null;
    await withAnswers(page, { "/v1/runs/order-1": rewrite }, async () => {
      await page.reload({ waitUntil: "networkidle0" });  // the page is order-1's: show it afresh
      await page.waitForSelector("#fact-diverged");
      rows = await page.$$eval("#journal tr.diverged", (found) => found.map((row) => row.id));
      rows.push(await text(page, "#fact-diverged"));
    });
    return rows;
  };
  const fromApi = await markedWith((answer) => ({ ...answer, error: "run 'order-1': its code diverged" }));
  if (JSON.stringify(fromApi) !== JSON.stringify(["journal-1", "at position 1: run 'order-1': its code diverged"])) {
    fail(`a divergence from stuck_position alone: ${JSON.stringify(fromApi)}`);
  }
  const fromError = await markedWith((answer) => ({ ...answer, stuck_position: null }));
  if (fromError[0] !== "journal-1" || !fromError[1].startsWith("at position 1: the journal has wait_for")) {
    fail(`a divergence from the error alone: ${JSON.stringify(fromError)}`);
  }
  await openRun(page, "order-1");
  await waitForFact(page, "diverged", /at position 1: the journal has wait_for/);
  if (!(await text(page, "#journal tr.diverged-note")).includes("stream write 'progress'")) fail("no note under the diverged row");
  for (const form of ["#signal", "#query", "#update", "#awakeable"]) {
    if (await page.$(form)) fail(`a stuck run offers ${form}`);
  }
  for (const action of ["#cancel", "#terminate", "#reset", "#stuck-note"]) {
    if (!(await page.$(action))) fail(`a stuck run does not offer ${action}`);
  }
  const point = await page.$eval("#reset select[name=point]", (select) => select.value);
  if (point !== "position:1") fail(`a stuck run's reset is offered from ${point}, not from where it diverged`);
  await page.screenshot({ path: `${shots}/run-stuck.png`, fullPage: true });
  await page.type("#end input[name=reason]", "bad deploy");
  await page.click("#cancel");
  await waitForFact(page, "status", /cancelled/);
  const error = await text(page, "#fact-error");
  if (!error.includes("bad deploy") || error.includes("nondeterminism")) fail(`a cancelled stuck run's error: ${error}`);
  if (await page.$("#fact-diverged")) fail("a cancelled run still shows where it diverged");
  const journal = await text(page, "#journal");
  if (journal.includes("so far") || !(await text(page, "#journal-1")).includes("not completed: the run ended")) {
    fail(`a finished run's last wait: ${await text(page, "#journal-1")}`);
  }
  await waitForText(page, "#action-result", /cancel: cancel requested \(bad deploy\)/);
}

// Every kind of command a run waits on, as its page says it: the example
// waits only on signals, children, awakeables and updates, so order-3's
// page is given a waiting_on with each kind (a sleep's due time, a
// wait_for's timeout) put in.
async function waitingKinds(page) {
  const at = Date.UTC(2031, 0, 2, 3, 4, 5, 6);
  const waiting = [["step", "charge", null], ["sleep", "nap", at], ["wait_for", "approval", at + 1000], ["wait_for", "done", null],
    ["child", "order-3:x@1", null], ["next_update", "set-limit", null], ["awakeable", "paid", null]]
    .map(([command, name, due], position) => ({ position, command, name, due_ms: due }));
  await withAnswers(page, { "/v1/runs/order-3": (answer) => ({ ...answer, waiting_on: waiting }) }, async () => {
    await openRun(page, "order-3");
    await page.waitForSelector("#waiting-on li");
    const shown = await texts(page, "#waiting-on li");
    const wanted = ["position 0: step charge", "position 1: sleep nap until 2031-01-02 03:04:05.006 UTC",
      "position 2: signal approval until 2031-01-02 03:04:06.006 UTC (its timeout)", "position 3: signal done",
      "position 4: child order-3:x@1", "position 5: update set-limit", "position 6: awakeable paid"];
    if (JSON.stringify(shown) !== JSON.stringify(wanted)) fail(`the kinds of waits: ${JSON.stringify(shown)}`);
    const child = await page.$eval("#waiting-on li[data-position='4'] .waiting-on a", (link) => link.getAttribute("href")).catch(() => null);
    if (child !== `#run/${encodeURIComponent("order-3:x@1")}`) fail(`a waited-on child's link: ${child}`);
  });
}

// The live stream of a waiting order; a signal; children and parent; a
// terminate and a cancel with the operator's reasons (the message stays
// once the run has ended); resets after a step and to a position, and the
// generations they leave.
async function finishedRuns(page) {
  // A finished run: facts, input, result, the journal as a timeline, its
  // stream read to its end.
  await openRun(page, "order-4");
  if (!(await text(page, "#run")).includes("completed")) fail(`order-4's facts: ${await text(page, "#run")}`);
  if ((await text(page, "#input")).trim() !== "3") fail(`order-4's input: ${await text(page, "#input")}`);
  if ((await text(page, "#result")).trim() !== "85") fail(`order-4's result: ${await text(page, "#result")}`);
  const commands = await texts(page, "#journal tbody tr:not(.attempt):not(.diverged-note) td:nth-child(3)");
  if (JSON.stringify(commands) !== JSON.stringify(["quote", "progress", "approval", "progress"])) {
    fail(`order-4's journal: ${commands}`);
  }
  const bars = await page.$$eval("#journal svg.bar rect", (rects) => rects.length);
  if (bars !== 4) fail(`order-4's timeline has ${bars} bars, not 4`);
  await waitForStream(page, "progress", ["75", "85"], "ended");
  await page.screenshot({ path: `${shots}/run.png`, fullPage: true });

  // A live stream: order-2 has written its quote; a signal through the page
  // completes it, and the open stream shows the total and its end.
  // What it waits on, as the API says, at its journal position (linked to
  // the row, which waits too); gone once it has finished.
  await openRun(page, "order-2");
  await waitForStream(page, "progress", ["25"], "live");
  const [wait] = (await call("/v1/runs/order-2")).waiting_on;
  const listed = await page.$$eval("#waiting-on li", (items) => items.map((item) => ({
    position: item.dataset.position, text: item.textContent, link: item.querySelector("a")?.getAttribute("href") })));
  if (JSON.stringify(listed) !== JSON.stringify([{ position: String(wait?.position), text: `position ${wait?.position}: signal approval`,
      link: `#journal-${wait?.position}` }])) {
    fail(`order-2's Waiting on: ${JSON.stringify(listed)}, the API's ${JSON.stringify(wait)}`);
  }
  if (!(await text(page, `#journal-${wait?.position}`).catch(() => "")).includes("waiting")) fail(`order-2's waiting row: ${await text(page, "#journal")}`);
  await page.screenshot({ path: `${shots}/run-live.png`, fullPage: true });
  await signalThroughPage(page, "approval", "5");
  await waitForStream(page, "progress", ["25", "30"], "ended");
  await waitForFact(page, "status", /completed/);
  if (await page.$("#waiting-on")) fail("a completed run still says what it waits on");

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
  // A terminate, confirmed: the child ends at once, cancelled, and says why;
  // its wait ended with it (no "so far").
  await page.waitForSelector("#terminate");
  await page.type("#end input[name=reason]", "duplicate child");
  await page.click("#terminate");
  await waitForFact(page, "status", /cancelled/);
  await waitForFact(page, "error", /duplicate child/);
  if ((await text(page, "#journal")).includes("so far")) fail(`a terminated run's journal: ${await text(page, "#journal")}`);

  // A cancel, confirmed, with a reason: order-3 ends cancelled; the
  // message stays after the page has been rebuilt for the new status.
  await openRun(page, "order-3");
  await page.waitForSelector("#cancel");
  await page.type("#end input[name=reason]", "out of stock");
  await page.click("#cancel");
  await waitForFact(page, "status", /cancelled/);
  await waitForFact(page, "error", /out of stock/);
  await waitForText(page, "#action-result", /cancel: cancel requested \(out of stock\)/);

  // Resets, confirmed: after the step 'quote' (generation 2), then to
  // position 2 (generation 3); the generations table shows each, oldest
  // first, with its start, how it ended and its step attempts.
  await openRun(page, "order-4");
  await page.waitForSelector("#reset");
  await page.select("#reset select[name=point]", "after:quote");
  await page.type("#reset input[name=reason]", "replay the approval");
  await page.click("#reset button[type=submit]");
  await waitForFact(page, "generation", /^2$/);
  await waitForText(page, "#action-result", /reset: generation 2 replays from after step 'quote'.*\(replay the approval\)/);
  await page.select("#reset select[name=point]", "position:2");
  await page.click("#reset button[type=submit]");
  await waitForFact(page, "generation", /^3$/);
  await page.waitForSelector("#generations");
  const generations = await page.$$eval("#generations tbody tr", (rows) => rows.map((row) => ({
    generation: row.dataset.generation, started: row.cells[1].textContent, ended: row.cells[2].textContent, attempts: row.cells[3].textContent })));
  const summary = JSON.stringify(generations);
  if (generations.length !== 3 || generations.map((row) => row.generation).join() !== "1,2,3") fail(`generations: ${summary}`);
  else {
    // Each earlier generation's start, from the run_reset that ended it
    // (started_ms): generation 2's is the current run_reset's, generation
    // 1's the one among that reset's dropped records.
    const resets = (await call("/v1/runs/order-4/journal")).records.filter((record) => record.kind === "run_reset");
    const last = resets.at(-1);
    const earlier = last?.value?.dropped?.find((record) => record.kind === "run_reset");
    const starts = [earlier?.value?.started_ms, last?.value?.started_ms];
    if (!starts.every(Number.isInteger)) fail(`order-4's run_reset records lack started_ms: ${JSON.stringify(resets)}`);
    else if (generations[0].started !== timeText(starts[0]) || generations[1].started !== timeText(starts[1])) {
      fail(`generations' starts: ${summary}, the run_reset records say ${starts.map(timeText)}`);
    }
    if (!/completed at .*, then reset at .* to position 1 \(replay the approval\)/.test(generations[0].ended)) fail(`generation 1 ended: ${summary}`);
    if (!/reset at .* to position 2 \(from the console\)/.test(generations[1].ended)) fail(`generation 2 ended: ${summary}`);
    if (!/^completed at/.test(generations[2].ended)) fail(`generation 3: ${summary}`);
    if (!generations.every((row) => row.attempts.includes("0: quote ×1"))) fail(`generations' attempts: ${summary}`);
  }
  await page.screenshot({ path: `${shots}/run-generations.png`, fullPage: true });
}

// Every attempt of a step, with its error, and a parked run's version (its
// summary says 0: not known) from its journal. The example's steps do not
// fail and its runs park only after a minute, so the page is shown
// order-3's real answers with a retried quote and version 0 put in.
async function attemptsAndParked(page) {
  const id = "order-3";
  const path = `/v1/runs/${id}`;
  const retried = (answer) => {
    const completed = answer.records.findIndex((record) => record.kind === "step_completed" && record.position === 0);
    const failed = (attempt, error) => ({ ...answer.records[completed], kind: "step_attempt_failed", number: attempt,
      value: error, time_ms: answer.records[completed].at_ms + 100 * attempt });
    answer.records.splice(completed, 0, failed(1, "the quote service answered 503"), failed(2, "timed out after 2 s"));
    answer.commands[0].attempts = 3;
    return answer;
  };
  await withAnswers(page, { [path]: (answer) => ({ ...answer, version: 0 }), [`${path}/journal`]: retried }, async () => {
    await openRun(page, id);
    await waitForFact(page, "workflow", /^order \(version 1, parked: read from its journal\)$/);
    const attempts = await texts(page, "#journal tr.attempt[data-position='0']");
    if (attempts.length !== 3 || !/attempt 1 failed.*: the quote service answered 503 \(next attempt at /.test(attempts[0]) ||
        !/attempt 2 failed.*: timed out after 2 s/.test(attempts[1]) || !/attempt 3 completed/.test(attempts[2])) {
      fail(`a retried step's attempts: ${JSON.stringify(attempts)}`);
    }
    await page.screenshot({ path: `${shots}/run-attempts.png`, fullPage: true });
  });
}

// A run whose id holds `: @ ~ + = ,`: opened from the runs table, signalled
// and cancelled through the page.
async function oddId(page) {
  const id = "odd:id@x~y+z=w,v";
  await page.goto(`${base}/ui/#runs?prefix=odd`, { waitUntil: "networkidle0" });
  await waitForRuns(page, [id]);
  await page.click("#runs tbody tr td:first-child a");
  await page.waitForFunction((heading) => document.querySelector("h1")?.textContent === heading, {}, `Run ${id}`);
  if (hashOf(page) !== `#run/${id}` || !page.url().includes(encodeURIComponent(id))) fail(`the odd id's URL: ${page.url()}`);
  await signalThroughPage(page, "nudge", '{"note": "<b>hi</b>"}');
  await waitForText(page, "#action-result", /signal 'nudge': accepted/);
  await page.type("#end input[name=reason]", "odd one out");
  await page.click("#cancel");
  await waitForFact(page, "status", /cancelled/);
  await waitForFact(page, "error", /odd one out/);
  const records = await call(`/v1/runs/${encodeURIComponent(id)}/journal`);
  if (!records.records.some((record) => record.kind === "signal_received" && record.name === "nudge")) fail("the odd id's signal is not in its journal");
}

// A payment from its page: a query for its awakeable's token, an update
// (its answer stays through the refreshes after), the awakeable completed.
async function payment(page) {
  await openRun(page, "pay-1");
  // It waits on two commands at once; only a journaled one links to its
  // row (a next_update is journaled when an update is taken).
  const journaled = new Set((await call("/v1/runs/pay-1/journal")).commands.map((command) => command.position));
  const wanted = (await call("/v1/runs/pay-1")).waiting_on.map((wait) =>
    [`position ${wait.position}: ${wait.command === "awakeable" ? "awakeable" : "update"} ${wait.name}`, journaled.has(wait.position)]);
  const payWaits = await page.$$eval("#waiting-on li", (items) => items.map((item) => [item.textContent, item.querySelector("a") !== null]));
  if (wanted.length !== 2 || JSON.stringify(payWaits) !== JSON.stringify(wanted)) fail(`pay-1's Waiting on: ${JSON.stringify(payWaits)}, not ${JSON.stringify(wanted)}`);
  await page.type("#query input[name=name]", "token");
  await page.click("#query button[type=submit]");
  await waitForText(page, "#action-result", /query 'token': answered "awk1\./);
  const token = /answered "([^"]+)"/.exec(await text(page, "#action-result"))?.[1];
  await page.type("#update input[name=name]", "add_tip");
  await page.type("#update input[name=arg]", "5");
  await page.click("#update button[type=submit]");
  await waitForText(page, "#action-result", /update 'add_tip': completed, result 105/);
  await refreshes(page, 2);
  if (!/update 'add_tip': completed, result 105/.test(await text(page, "#action-result"))) {
    fail(`the update's answer did not outlive the refresh: ${await text(page, "#action-result")}`);
  }
  await page.screenshot({ path: `${shots}/run-actions.png`, fullPage: true });
  await page.type("#awakeable input[name=token]", token ?? "no token");
  await page.type("#awakeable input[name=value]", "105");
  await page.click("#awakeable button[type=submit]");
  await waitForFact(page, "status", /completed/);
  if ((await text(page, "#result")).trim() !== "105") fail(`pay-1's result: ${await text(page, "#result")}`);
  await waitForText(page, "#action-result", /awakeable: completed/);
}

// Schedules (next due, pause with a note, resume, trigger) and queues
// (depth, running, bounds, by partition), made through the API here.
async function schedulesAndQueues(page) {
  await call("/v1/schedules", { id: "nightly", spec: { cron: "0 6 * * *", time_zone: "Europe/Paris" }, workflow: "order", input: 1,
    options: { overlap: "allow_all" } });
  await page.goto(`${base}/ui/#schedules`, { waitUntil: "networkidle0" });
  const row = "#schedules tr[data-schedule='nightly']";
  await page.waitForSelector(row);
  await waitForText(page, `${row} td.next-due`, /^\d{4}-\d\d-\d\d \d\d:00:00\.000 UTC$/);
  if (!(await text(page, row)).includes("cron 0 6 * * * (Europe/Paris)")) fail(`the schedule: ${await text(page, row)}`);
  await page.type(`${row} input[name=note]`, "the warehouse is closed");
  await page.click(`${row} button.pause`);
  await waitForText(page, row, /paused: the warehouse is closed/);
  await waitForText(page, `${row} td.next-due`, /none \(paused\)/);
  await page.click(`${row} button.resume`);
  await waitForText(page, row, /active/);
  await page.click(`${row} button.trigger`);
  await waitForText(page, "#schedule-result", /nightly: trigger done, started nightly@/);
  await waitForText(page, row, /nightly@/);
  await page.screenshot({ path: `${shots}/schedules.png`, fullPage: true });

  await call("/v1/queues", { name: "orders", options: { concurrency: 1, partition_concurrency: 1 } });
  for (const [id, partition] of [["q-1", "eu"], ["q-2", "eu"], ["q-3", "us"]]) {
    await call("/v1/queues/orders/runs", { workflow: "order", id, input: 1, partition });
  }
  await page.goto(`${base}/ui/#queues`, { waitUntil: "networkidle0" });
  await waitForText(page, "#queues tr[data-queue='orders'] td.running", /^1$/);
  await waitForText(page, "#queues tr[data-queue='orders'] td.waiting", /^2$/);
  await page.click("#queues tr[data-queue='orders'] a");
  await page.waitForSelector("#partitions");
  if (hashOf(page) !== "#queue/orders") fail(`the queue's URL: ${page.url()}`);
  const partitions = await page.$$eval("#partitions tbody tr", (rows) => rows.map((row) => [...row.cells].map((cell) => cell.textContent).join(" ")));
  if (JSON.stringify(partitions) !== JSON.stringify(["eu 1 1", "us 1 0"])) fail(`the queue by partition: ${JSON.stringify(partitions)}`);
  const running = await texts(page, "#running tbody tr td:first-child");
  const waiting = await texts(page, "#waiting tbody tr td:first-child");
  if (JSON.stringify(running) !== JSON.stringify(["q-1"]) || JSON.stringify(waiting.sort()) !== JSON.stringify(["q-2", "q-3"])) {
    fail(`the queue's runs: running ${running}, waiting ${waiting}`);
  }
  if (!(await text(page, "#queue")).includes("1 at once, 1 per partition")) fail(`the queue's bounds: ${await text(page, "#queue")}`);
  await page.screenshot({ path: `${shots}/queue.png`, fullPage: true });
}

// The service killed under a live page, then started again on the same
// directory and port: the page says the engine is away, and once it is
// back shows fresh data without a reload -- q-1 (an order the queue
// started) approved after the restart shows completed, and its stream
// reads on from where it was cut, each chunk once.
async function restart(page) {
  await openRun(page, "q-1");
  await waitForStream(page, "progress", ["25"], "live");
  await page.evaluate(() => { window.sameDocument = true; });
  outage = true;  // the refused calls below are what a page sees then
  process.kill(Number(process.env.FUSEE_SERVICE_PID), "SIGKILL");
  await waitForText(page, "#status", /does not answer.*trying again/);
  await waitForText(page, ".stream[data-stream=progress] .stream-state", /disconnected|not readable/);
  const [program, ...args] = process.env.FUSEE_SERVICE.split(" ");
  // Its output goes to a file, not a pipe: the suite ends without waiting
  // for it (console_browser.sh kills it by the pid left here).
  const said = `${process.env.FUSEE_SERVICE_PID_FILE}.out`;
  const service = spawn(program, args, { stdio: ["ignore", openSync(said, "w"), "inherit"] });
  service.unref();
  writeFileSync(process.env.FUSEE_SERVICE_PID_FILE, String(service.pid));
  for (let tries = 0; !readFileSync(said, "utf8").includes("listening on"); tries++) {
    if (tries > 500 || service.exitCode !== null) throw new Error(`the service did not start again: ${readFileSync(said, "utf8")}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await call("/v1/runs/q-1/signals/approval", { value: 1 });
  await waitForFact(page, "status", /completed/);
  await waitForStream(page, "progress", ["25", "26"], "ended");
  await waitForText(page, "#status", /^updated /);
  outage = false;
  if (!(await page.evaluate(() => window.sameDocument))) fail("the page was reloaded");
  await page.screenshot({ path: `${shots}/run-after-restart.png`, fullPage: true });
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
  if (JSON.stringify(ids.sort()) !== JSON.stringify(["order-s1", "order-s2"])) fail(`the server's runs: ${ids}`);
  await waitForWaiting(page, { "order-s1": "", "order-s2": "signal approval" });
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
  await activityCharts(page, false, true);
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
    if (outage && /net::ERR_/.test(message.text())) return;
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
  ? `console e2e (server): runs and what they wait on, a run's live stream, a signal, the shard holders and the worker's ` +
    `activity charts and totals through fusee server --http; screenshots in ${shots}`
  : `console e2e (local): runs and what they wait on, filters and pages in the URL (Back, links), a stuck run (its ` +
    `divergence marked at the API's stuck_position, the error's as a fallback, ` +
    `only its actions, cancelled), a waiting run's Waiting on, a run's timeline, input, result and streams (live), ` +
    `children and parent, a signal, a terminate, a cancel and resets with reasons, generations and their starts, ` +
    `a retried step's attempts, a parked run's version, ` +
    `an id with : @ ~ + = ,, a query, an update and an awakeable, schedules and queues, the service restarted under ` +
    `the page, a missing run and the engine page with its activity charts and totals; screenshots in ${shots}`);
