// The runs page (#runs): counts by status, a table of runs with filters
// (workflow, status including stuck, id prefix, start time range) and
// paging, all through GET /v1/runs and /v1/stats.
import { api } from "./api.js";
import { el, time } from "./dom.js";

const filters = { workflow: "", status: "", prefix: "", from: "", to: "", cursor: "" };
const statuses = ["", "running", "completed", "failed", "cancelled", "stuck"];

// A datetime-local input's text, read as UTC like every time the console
// shows, in ms since the epoch; null when empty.
function millisecondsOf(text) {
  return text ? Date.parse(`${text}Z`) : null;
}

// Shows the runs in `view`; returns the refresh delay (live).
export async function showRuns(view, rerender) {
  const query = new URLSearchParams({ limit: "50" });
  if (filters.workflow) query.set("workflow", filters.workflow);
  if (filters.status) query.set("status", filters.status);
  if (filters.prefix) query.set("id_prefix", filters.prefix);
  if (filters.from) query.set("started_from_ms", millisecondsOf(filters.from));
  if (filters.to) query.set("started_to_ms", millisecondsOf(filters.to));
  if (filters.cursor) query.set("cursor", filters.cursor);
  const [page, stats] = await Promise.all([api(`/v1/runs?${query}`), api("/v1/stats")]);
  const counts = el("p", { class: "counts", id: "counts" },
    Object.entries(stats.runs).map(([status, count]) =>
      el("span", { class: count ? `status-${status}` : "zero" }, `${status} ${count}`)));
  const rows = page.runs.map((run) =>
    el("tr", {},
      el("td", { class: "mono" }, el("a", { href: `#run/${encodeURIComponent(run.id)}` }, run.id)),
      el("td", {}, run.workflow),
      el("td", {}, run.version),
      el("td", { class: `status-${run.status}` }, run.status),
      el("td", {}, time(run.started_at_ms)),
      el("td", {}, time(run.finished_at_ms)),
      el("td", {}, run.error ?? "")));
  const paging = el("p", {},
    filters.cursor ? el("button", { id: "first-page", onclick: () => { filters.cursor = ""; rerender(); } }, "First page") : null,
    page.next_cursor
      ? el("button", { id: "next-page", onclick: () => { filters.cursor = page.next_cursor; rerender(); } }, "Next page")
      : null);
  const filtered = filters.workflow || filters.status || filters.prefix || filters.from || filters.to;
  const table = rows.length
    ? el("table", { id: "runs" },
        el("thead", {}, el("tr", {}, ["Id", "Workflow", "Version", "Status", "Started (UTC)", "Finished (UTC)", "Error"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows))
    : el("p", { class: "empty", id: "no-runs" }, filtered
        ? "No run matches these filters: widen them, or clear them with Filter on empty fields."
        : "No runs yet. Start one with POST /v1/runs (docs/http-api.md) or Engine::start.");
  const details = el("div", { id: "runs-details" }, table, paging);
  // A refresh replaces the counts and the table only, so a filter being
  // typed is not swept away.
  const shown = document.getElementById("runs-details");
  if (shown && view.dataset.page === "runs") {
    document.getElementById("counts").replaceWith(counts);
    shown.replaceWith(details);
  } else {
    view.replaceChildren(el("h1", {}, "Runs"), counts, filterForm(rerender), details);
    view.dataset.page = "runs";
  }
  return 2000;
}

function filterForm(rerender) {
  const apply = (event) => {
    event.preventDefault();
    const data = new FormData(event.target);
    for (const name of ["workflow", "status", "prefix", "from", "to"]) filters[name] = (data.get(name) ?? "").trim();
    filters.cursor = "";
    delete document.getElementById("view").dataset.page;  // the form shows the new filters
    rerender();
  };
  return el("form", { class: "filters", id: "filters", onsubmit: apply },
    el("label", {}, "Workflow ", el("input", { name: "workflow", value: filters.workflow })),
    el("label", {}, "Status ",
      el("select", { name: "status" }, statuses.map((status) => {
        const option = el("option", { value: status }, status || "any");
        if (status === filters.status) option.selected = true;
        return option;
      }))),
    el("label", {}, "Id prefix ", el("input", { name: "prefix", value: filters.prefix })),
    el("label", {}, "Started (UTC) from ", el("input", { name: "from", type: "datetime-local", step: "1", value: filters.from })),
    el("label", {}, "to ", el("input", { name: "to", type: "datetime-local", step: "1", value: filters.to })),
    el("button", { type: "submit" }, "Filter"));
}
