// A run's page (#run/<id>): its facts, parent and children, input, result
// or error, its journal as a timeline, its streams read live, and actions
// (signal, cancel, terminate, reset) through the public API.
import { api } from "./api.js";
import { el, time } from "./dom.js";
import { timeline } from "./timeline.js";
import { readStreams, streamNames } from "./streams.js";

// Shows run `id` in `view`; returns the refresh delay, or null once the run
// has finished.
export async function showRun(view, id, rerender) {
  const path = `/v1/runs/${encodeURIComponent(id)}`;
  const run = await api(path);
  let journal;
  try {
    journal = await api(`${path}/journal`);
  } catch (error) {
    journal = { error: error.message };
  }
  const started = journal.records?.find((record) => record.kind === "run_started");
  const children = (journal.commands ?? []).filter((command) => command.command === "child");
  const link = (runId) => el("a", { href: `#run/${encodeURIComponent(runId)}` }, runId);
  const facts = el("table", { id: "run", class: "facts" },
    [["Id", run.id], ["Workflow", `${run.workflow} (version ${run.version})`],
     ["Status", el("span", { class: `status-${run.status}` }, run.status)],
     ["Generation", run.generation], ["Started", `${time(run.started_at_ms)} UTC`],
     ["Finished", run.finished_at_ms ? `${time(run.finished_at_ms)} UTC` : ""],
     ["Parent", started?.parent ? link(started.parent) : "none (started from outside)"],
     ["Children", children.length
       ? children.flatMap((child, i) => [i ? ", " : "", link(child.name), ` (${child.outcome})`]) : "none"],
     ["Error", run.error ?? ""]].map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", { id: `fact-${name.toLowerCase()}` }, value))));
  const input = started ? [el("h2", {}, "Input"), el("pre", { id: "input" }, JSON.stringify(started.flag ? started.value.input : started.value, null, 2))] : [];
  const result = "result" in run ? [el("h2", {}, "Result"), el("pre", { id: "result" }, JSON.stringify(run.result, null, 2))] : [];
  const commands = journal.commands
    ? timeline(journal.commands, run)
    : el("p", { class: "empty", id: "journal" },
        `${journal.error ?? "No journal."} A finished run keeps its journal while Config::keep_finished_journals is on.`);
  const details = el("div", { id: "run-details" }, facts, ...input, ...result, el("h2", {}, "Journal"), commands);
  // A refresh of the same run in the same status replaces its details only,
  // so a signal being typed in the actions is not swept away.
  const shown = document.getElementById("run-details");
  if (shown && view.dataset.run === id && view.dataset.status === run.status) {
    shown.replaceWith(details);
  } else {
    // The same run in a new status keeps its streams section: its readers
    // read on (a stream that ends with the run shows its end).
    const streams = (view.dataset.run === id && document.getElementById("streams")) || el("section", { id: "streams" });
    view.replaceChildren(el("h1", {}, `Run ${run.id}`), details, streams, runActions(run, rerender));
    view.dataset.run = id;
    view.dataset.status = run.status;
  }
  readStreams(document.getElementById("streams"), id, streamNames(journal.commands ?? []));
  return run.status === "running" || run.status === "stuck" ? 2000 : null;
}

// Signal, cancel, terminate and reset, each through the public API; the
// ones that end or rewrite a run ask first.
function runActions(run, rerender) {
  const path = `/v1/runs/${encodeURIComponent(run.id)}`;
  const said = el("p", { id: "action-result", role: "status" });
  const act = async (what, call) => {
    try {
      await call();
      said.textContent = `${what}: done`;
      await rerender();
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
