// The Fusee web console: plain JavaScript over the engine's public HTTP API
// (docs/http-api.md), served by the same listener. Every request goes to the
// page's own origin; a bearer token, when the engine wants one, is kept in
// this tab's sessionStorage.
const view = document.getElementById("view");
const statusLine = document.getElementById("status");
const login = document.getElementById("login");
const tokenKey = "fusee.token";
let refreshTimer = null;

// An element with attributes and children (strings become text, never HTML).
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// A call to the engine's API: its JSON, or an ApiError saying what went wrong.
async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  const token = sessionStorage.getItem(tokenKey);
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    login.hidden = false;
    throw new ApiError(401, "unauthorized", "This engine wants a token: enter it above.");
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, body?.error ?? "error", body?.message ?? `HTTP ${response.status}`);
  }
  return body;
}

function time(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "";
}

function showError(error) {
  delete view.dataset.run;
  delete view.dataset.page;
  view.replaceChildren(el("p", { class: "error" }, error.message));
}

// --- Runs ---------------------------------------------------------------

const runFilters = { workflow: "", status: "", prefix: "", cursor: "" };

async function showRuns() {
  const query = new URLSearchParams({ limit: "50" });
  if (runFilters.workflow) query.set("workflow", runFilters.workflow);
  if (runFilters.status) query.set("status", runFilters.status);
  if (runFilters.cursor) query.set("cursor", runFilters.cursor);
  const [page, stats] = await Promise.all([api(`/v1/runs?${query}`), api("/v1/stats")]);
  const counts = el("p", { class: "counts", id: "counts" },
    Object.entries(stats.runs).map(([status, count]) => el("span", { class: `status-${status}` }, `${status} ${count}`)));
  const runs = page.runs.filter((run) => run.id.startsWith(runFilters.prefix));
  const rows = runs.map((run) =>
    el("tr", {},
      el("td", { class: "mono" }, el("a", { href: `#run/${encodeURIComponent(run.id)}` }, run.id)),
      el("td", {}, run.workflow),
      el("td", {}, run.version),
      el("td", { class: `status-${run.status}` }, run.status),
      el("td", {}, time(run.started_at_ms)),
      el("td", {}, time(run.finished_at_ms)),
      el("td", {}, run.error ?? "")));
  const filters = el("form", { class: "filters", onsubmit: (event) => { event.preventDefault(); applyFilters(event.target); } },
    el("label", {}, "Workflow ", el("input", { name: "workflow", value: runFilters.workflow })),
    el("label", {}, "Status ",
      el("select", { name: "status" }, ["", "running", "completed", "failed", "cancelled", "stuck"].map((status) => {
        const option = el("option", { value: status }, status || "any");
        if (status === runFilters.status) option.selected = true;
        return option;
      }))),
    el("label", {}, "Id prefix ", el("input", { name: "prefix", value: runFilters.prefix })),
    el("button", { type: "submit" }, "Filter"));
  const paging = el("p", {},
    runFilters.cursor ? el("button", { onclick: () => { runFilters.cursor = ""; render(); } }, "First page") : null,
    page.next_cursor ? el("button", { onclick: () => { runFilters.cursor = page.next_cursor; render(); } }, "Next page") : null);
  const table = rows.length
    ? el("table", { id: "runs" },
        el("thead", {}, el("tr", {}, ["Id", "Workflow", "Version", "Status", "Started", "Finished", "Error"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows))
    : el("p", { class: "empty" }, "No runs match. Start one with POST /v1/runs, or change the filters.");
  const details = el("div", { id: "runs-details" }, table, paging);
  // A refresh replaces the counts and the table only, so a filter being
  // typed is not swept away.
  const shown = document.getElementById("runs-details");
  if (shown && view.dataset.page === "runs") {
    document.getElementById("counts").replaceWith(counts);
    shown.replaceWith(details);
  } else {
    view.replaceChildren(el("h1", {}, "Runs"), counts, filters, details);
    view.dataset.page = "runs";
  }
  refreshTimer = setTimeout(render, 2000);  // live
}

function applyFilters(form) {
  const data = new FormData(form);
  runFilters.workflow = data.get("workflow").trim();
  runFilters.status = data.get("status");
  runFilters.prefix = data.get("prefix").trim();
  runFilters.cursor = "";
  delete view.dataset.page;  // the form shows the new filters
  render();
}

// --- A run --------------------------------------------------------------

async function showRun(id) {
  const path = `/v1/runs/${encodeURIComponent(id)}`;
  const run = await api(path);
  let journal = null;
  try {
    journal = await api(`${path}/journal`);
  } catch (error) {
    journal = { error: error.message };
  }
  const facts = el("table", { id: "run" },
    [["Id", run.id], ["Workflow", `${run.workflow} (version ${run.version})`], ["Status", run.status],
     ["Generation", run.generation], ["Started", time(run.started_at_ms)], ["Finished", time(run.finished_at_ms)],
     ["Error", run.error ?? ""]].map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", {}, value))));
  const result = "result" in run ? [el("h2", {}, "Result"), el("pre", {}, JSON.stringify(run.result, null, 2))] : [];
  const commands = journal.commands
    ? el("table", { id: "journal" },
        el("thead", {}, el("tr", {}, ["Position", "Command", "Name", "Outcome", "Attempts", "Value"].map((h) => el("th", {}, h)))),
        el("tbody", {}, journal.commands.map((command) =>
          el("tr", {}, el("td", {}, command.position), el("td", {}, command.command), el("td", {}, command.name),
             el("td", {}, command.outcome), el("td", {}, command.attempts ?? ""),
             el("td", { class: "mono" }, "value" in command ? JSON.stringify(command.value) : "")))))
    : el("p", { class: "empty" }, journal.error ?? "No journal.");
  const details = el("div", { id: "run-details" }, facts, ...result, el("h2", {}, "Journal"), commands);
  // A refresh of the same run in the same status replaces its details only,
  // so a signal being typed in the actions is not swept away.
  const shown = document.getElementById("run-details");
  if (shown && view.dataset.run === id && view.dataset.status === run.status) {
    shown.replaceWith(details);
  } else {
    view.replaceChildren(el("h1", {}, `Run ${run.id}`), details, runActions(run));
    view.dataset.run = id;
    view.dataset.status = run.status;
  }
  if (run.status === "running") refreshTimer = setTimeout(render, 2000);
}

// Signal, cancel, terminate and reset, each through the public API; the
// ones that end or rewrite a run ask first.
function runActions(run) {
  const path = `/v1/runs/${encodeURIComponent(run.id)}`;
  const said = el("p", { id: "action-result", role: "status" });
  const act = async (what, call) => {
    try {
      await call();
      said.textContent = `${what}: done`;
      await render();
      document.getElementById("action-result")?.replaceChildren(`${what}: done`);
    } catch (error) {
      said.textContent = `${what}: ${error.message}`;
      said.className = "error";
    }
  };
  const post = (suffix, body) => api(`${path}${suffix}`, { method: "POST", body: JSON.stringify(body) });
  const running = run.status === "running" || run.status === "stuck";
  const signal = el("form", { class: "filters", id: "signal", onsubmit: (event) => {
    event.preventDefault();
    const data = new FormData(event.target);
    let value;
    try {
      value = JSON.parse(data.get("value") || "null");
    } catch {
      said.textContent = "signal: the value is not JSON (a number, \"text\" in quotes, {...})";
      said.className = "error";
      return;
    }
    act("signal", () => post(`/signals/${encodeURIComponent(data.get("name"))}`, { value }));
  } },
    el("label", {}, "Signal ", el("input", { name: "name", required: "" })),
    el("label", {}, "value (JSON) ", el("input", { name: "value" })),
    el("button", { type: "submit" }, "Send"));
  const ending = (what, suffix) => el("button", { id: what, onclick: () => {
    if (confirm(`${what} run ${run.id}?`)) act(what, () => post(suffix, { reason: "from the console" }));
  } }, what[0].toUpperCase() + what.slice(1));
  const reset = el("form", { class: "filters", id: "reset", onsubmit: (event) => {
    event.preventDefault();
    const position = Number(new FormData(event.target).get("position"));
    if (confirm(`Reset run ${run.id} to position ${position}? A new generation replays from there.`)) {
      act("reset", () => post("/reset", { position, reason: "from the console" }));
    }
  } },
    el("label", {}, "Reset to position ", el("input", { name: "position", type: "number", min: "0", value: "0" })),
    el("button", { type: "submit" }, "Reset"));
  return el("section", {}, el("h2", {}, "Actions"),
    running ? [signal, el("p", {}, ending("cancel", "/cancel"), " ", ending("terminate", "/terminate"))] : [],
    reset, said);
}

// --- Engine -------------------------------------------------------------

async function showEngine() {
  const stats = await api("/v1/stats");
  const rows = [["Shards", `${stats.shards_held} of ${stats.shards} held here`], ["Records written", stats.records_written],
    ["Durable writes", stats.flushes], ["Records per write", stats.records_per_flush.toFixed(2)],
    ["Log segments", `${stats.wal_segments} (${stats.wal_bytes} bytes)`], ["Checkpoints", stats.checkpoints],
    ["Segments retired", stats.segments_retired], ["Run store", `${stats.run_store_bytes} bytes`],
    ["Runs parked / woken", `${stats.runs_parked} / ${stats.runs_woken}`],
    ["Log", stats.log_error ?? "working"], ["Checkpoints state", stats.checkpoint_error ?? "working"]];
  const latency = stats.flush_latency;
  const buckets = latency.counts.map((count, i) =>
    el("tr", {}, el("td", {}, i < latency.bounds_us.length ? `≤ ${latency.bounds_us[i]} µs` : "slower"), el("td", {}, count)));
  view.replaceChildren(el("h1", {}, "Engine"),
    el("table", { id: "engine" }, rows.map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", {}, value)))),
    el("h2", {}, "Durable writes by latency"), el("table", { id: "latency" }, buckets));
  refreshTimer = setTimeout(render, 2000);
}

// --- Routing ------------------------------------------------------------

async function render() {
  clearTimeout(refreshTimer);
  const hash = decodeURIComponent(location.hash.slice(1));
  if (!hash.startsWith("run/")) delete view.dataset.run;
  if (hash.startsWith("run/") || hash === "engine") delete view.dataset.page;
  try {
    if (hash.startsWith("run/")) await showRun(hash.slice(4));
    else if (hash === "engine") await showEngine();
    else await showRuns();
    statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    showError(error);
  }
}

login.addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(tokenKey, document.getElementById("token").value);
  login.hidden = true;
  render();
});
window.addEventListener("hashchange", render);
render();
