// The runs page (#runs): counts by status, a table of runs with filters
// (workflow prefix, status including stuck, id prefix, start time range),
// an order (newest first, oldest first, by id), how many match, what each
// running run waits on, and paging both ways, all through GET /v1/runs and
// /v1/stats. The filters, the page size and the page's cursor live in the
// hash (#runs?status=stuck&cursor=C), so a filtered page is a link to
// share, and Back goes to the filters or the page before.
import { api } from "./api.js";
import { el, time } from "./dom.js";
import { waitingOn } from "./timeline.js";

const fields = ["workflow", "status", "prefix", "from", "to", "order"];
const orders = ["", "oldest", "id"];  // "": newest first, the API's default
const statuses = ["", "running", "completed", "failed", "cancelled", "stuck"];
const pageSizes = ["20", "50", "100", "500"];
const defaultLimit = "50";
// The commands a row names of what a run waits on (a batch may wait on
// hundreds of children): its page lists them all.
const waitsShown = 3;

// What a running run waits on: its first commands, and how many more.
function waitingCell(run) {
  const waits = run.status === "running" ? run.waiting_on ?? [] : [];
  const more = waits.length - waitsShown;
  return el("td", { class: "waiting" },
    waits.slice(0, waitsShown).flatMap((wait, i) => [i ? ", " : "", waitingOn(wait)]),
    more > 0 ? ` and ${more} more` : null);
}

// A datetime-local input's text, read as UTC like every time the console
// shows, in ms since the epoch; null when empty or not a time.
function millisecondsOf(text) {
  const ms = text ? Date.parse(`${text}Z`) : NaN;
  return Number.isNaN(ms) ? null : ms;
}

// The page's state, read from the hash's parameters.
function stateOf(params) {
  const state = { cursor: params.get("cursor") ?? "", limit: params.get("limit") ?? defaultLimit };
  for (const name of fields) state[name] = params.get(name) ?? "";
  if (!/^[1-9][0-9]{0,4}$/.test(state.limit)) state.limit = defaultLimit;
  return state;
}

// Goes to the runs page with `state` (a new history entry, so Back undoes it).
function go(state) {
  const params = new URLSearchParams();
  for (const name of fields) if (state[name]) params.set(name, state[name]);
  if (state.limit !== defaultLimit) params.set("limit", state.limit);
  if (state.cursor) params.set("cursor", state.cursor);
  const query = params.toString();
  location.hash = query ? `runs?${query}` : "runs";
}

// Shows the runs in `view`; returns the refresh delay (live).
export async function showRuns(view, params) {
  const state = stateOf(params);
  const query = new URLSearchParams({ limit: state.limit });
  if (state.workflow) query.set("workflow", state.workflow);
  if (state.status) query.set("status", state.status);
  if (state.prefix) query.set("id_prefix", state.prefix);
  if (millisecondsOf(state.from) !== null) query.set("started_from_ms", millisecondsOf(state.from));
  if (millisecondsOf(state.to) !== null) query.set("started_to_ms", millisecondsOf(state.to));
  if (state.order) query.set("order", state.order);
  if (state.cursor) query.set("cursor", state.cursor);
  const [page, stats] = await Promise.all([api(`/v1/runs?${query}`), api("/v1/stats")]);
  const counts = el("p", { class: "counts", id: "counts" },
    Object.entries(stats.runs).map(([status, count]) =>
      el("span", { class: count ? `status-${status}` : "zero" }, `${status} ${count}`)));
  const rows = page.runs.map((run) =>
    el("tr", {},
      el("td", { class: "mono" }, el("a", { href: `#run/${encodeURIComponent(run.id)}` }, run.id)),
      el("td", {}, run.workflow),
      // 0: the engine does not know it here (a parked run's: its page
      // reads it from the journal).
      el("td", {}, run.version || el("span", { class: "empty", title: "parked: its page reads the version from its journal" }, "parked")),
      el("td", { class: `status-${run.status}` }, run.status),
      waitingCell(run),
      el("td", { class: "started" }, time(run.started_at_ms)),
      el("td", {}, time(run.finished_at_ms)),
      el("td", {}, run.error ?? "")));
  // The total counts what matches, not the page; a lower bound is said so.
  const total = el("p", { id: "runs-total" },
    `${page.total_exact ? "" : "at least "}${page.total} run${page.total === 1 ? "" : "s"} match`);
  const paging = el("p", {},
    state.cursor ? el("button", { id: "first-page", onclick: () => go({ ...state, cursor: "" }) }, "First page") : null,
    page.previous_cursor
      ? el("button", { id: "previous-page", onclick: () => go({ ...state, cursor: page.previous_cursor }) }, "Previous page")
      : null,
    page.next_cursor
      ? el("button", { id: "next-page", onclick: () => go({ ...state, cursor: page.next_cursor }) }, "Next page")
      : null);
  const filtered = fields.some((name) => state[name]);
  const table = rows.length
    ? el("table", { id: "runs" },
        el("thead", {}, el("tr", {}, ["Id", "Workflow", "Version", "Status", "Waiting on", "Started (UTC)", "Finished (UTC)", "Error"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows))
    : el("p", { class: "empty", id: "no-runs" }, filtered || state.cursor
        ? "No run matches these filters: widen them, or clear them with Filter on empty fields."
        : "No runs yet. Start one with POST /v1/runs (docs/http-api.md) or Engine::start.");
  const details = el("div", { id: "runs-details" }, total, table, paging);
  // A refresh of the same filters replaces the counts and the table only,
  // so a filter being typed is not swept away; new filters (a link, Back)
  // rebuild the form to show them.
  const shown = document.getElementById("runs-details");
  const key = params.toString();
  if (shown && view.dataset.page === "runs" && view.dataset.query === key) {
    document.getElementById("counts").replaceWith(counts);
    shown.replaceWith(details);
  } else {
    view.replaceChildren(el("h1", {}, "Runs"), counts, filterForm(state), details);
    view.dataset.page = "runs";
    view.dataset.query = key;
  }
  return 2000;
}

function filterForm(state) {
  const apply = (event) => {
    event.preventDefault();
    const data = new FormData(event.target);
    const next = { cursor: "", limit: data.get("limit") ?? defaultLimit };
    for (const name of fields) next[name] = (data.get(name) ?? "").trim();
    go(next);
  };
  const select = (name, values, label) => el("select", { name }, values.map((value) => {
    const option = el("option", { value }, label(value));
    if (value === state[name]) option.selected = true;
    return option;
  }));
  return el("form", { class: "filters", id: "filters", onsubmit: apply },
    el("label", {}, "Workflow ", el("input", { name: "workflow", value: state.workflow })),
    el("label", {}, "Status ", select("status", statuses, (status) => status || "any")),
    el("label", {}, "Id prefix ", el("input", { name: "prefix", value: state.prefix })),
    el("label", {}, "Started (UTC) from ", el("input", { name: "from", type: "datetime-local", step: "1", value: state.from })),
    el("label", {}, "to ", el("input", { name: "to", type: "datetime-local", step: "1", value: state.to })),
    el("label", {}, "Order ", select("order", orders, (order) => order === "" ? "newest first" : order === "oldest" ? "oldest first" : "by id")),
    el("label", {}, "Per page ", select("limit", pageSizes.includes(state.limit) ? pageSizes : [...pageSizes, state.limit], String)),
    el("button", { type: "submit" }, "Filter"));
}
