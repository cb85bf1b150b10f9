// Replicated mode's console in a real browser (headless chromium through
// puppeteer-core): on every replica's own listener, the engine page shows
// the cluster (GET /v1/cluster) -- every replica, the one primary the test
// names, this replica marked -- and a backup's runs page lists the runs,
// which it asks of the primary. Fails on any error a page logs or throws,
// and on any request to another host. tests/replicated_engine_kill_test.sh
// runs it at the end.
// Usage: node cluster.mjs SCREENSHOT_DIR PRIMARY_ID URL...
import puppeteer from "puppeteer-core";

const [shots, primaryArg, ...bases] = process.argv.slice(2);
const primary = Number(primaryArg);
const problems = [];
const fail = (message) => problems.push(message);
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

try {
  for (const [id, base] of bases.entries()) {
    const page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 800 });
    page.on("console", (message) => {
      if (message.type() === "error") fail(`replica ${id}: console error: ${message.text()}`);
    });
    page.on("pageerror", (error) => fail(`replica ${id}: page error: ${error.message}`));
    page.on("request", (request) => {
      if (!request.url().startsWith(base) && !request.url().startsWith("data:")) {
        fail(`replica ${id}: a request left for ${request.url()}`);
      }
    });
    await page.goto(`${base}/ui/#engine`);
    try {
      await page.waitForFunction((count) => document.querySelectorAll("#cluster tbody tr").length === count &&
        document.querySelector('#cluster tbody tr[data-role="primary"]') !== null, { timeout: 15000 }, bases.length);
    } catch {
      fail(`replica ${id}: the engine page shows no cluster of ${bases.length} with a primary: ` +
        JSON.stringify(await page.$eval("#view", (node) => node.textContent).catch(() => "(none)")));
      await page.close();
      continue;
    }
    const rows = await page.$$eval("#cluster tbody tr", (trs) => trs.map((tr) => ({
      replica: Number(tr.dataset.replica), role: tr.dataset.role, cells: [...tr.cells].map((cell) => cell.textContent),
    })));
    const primaries = rows.filter((row) => row.role === "primary").map((row) => row.replica);
    if (JSON.stringify(primaries) !== JSON.stringify([primary])) {
      fail(`replica ${id}: the cluster shows primaries ${JSON.stringify(primaries)}, not [${primary}]`);
    }
    if (!rows[id]?.cells[0].includes("(this one)")) fail(`replica ${id}: its own row is not marked: ${JSON.stringify(rows[id])}`);
    for (const row of rows) {
      // Its lag as the primary counts it: batches, bytes, time.
      if (row.role !== "primary" && row.cells.slice(7, 10).some((cell) => cell === "")) {
        fail(`replica ${id}: replica ${row.replica} shows no lag: ${JSON.stringify(row.cells)}`);
      }
      // Every replica knows what was committed, a backup too.
      if (!(Number(row.cells[4]) > 0)) fail(`replica ${id}: replica ${row.replica} shows commit ${row.cells[4]}`);
    }
    if (id !== primary) {
      // A backup's runs page: the runs, as the primary's index pages them.
      await page.screenshot({ path: `${shots}/cluster-backup.png`, fullPage: true });
      await page.goto(`${base}/ui/#runs`);
      try {
        await page.waitForFunction(() => document.querySelectorAll("#runs tbody tr").length > 0, { timeout: 15000 });
      } catch {
        fail(`replica ${id}: a backup's runs page lists no runs`);
      }
    }
    await page.close();
  }
} catch (error) {
  fail(`the suite stopped: ${error.message}`);
} finally {
  await browser.close();
}
if (problems.length) {
  for (const problem of problems) console.error(`console cluster: ${problem}`);
  process.exit(1);
}
console.log(`console cluster: every replica's engine page shows ${bases.length} replicas, primary ${primary}, ` +
  `itself marked and every backup's lag; a backup's runs page lists the runs`);
