// A run's page (#run/<id>): its facts (the version too when the run is
// parked, from its journal), what a running run waits on, parent and
// children, input, result or error, where a stuck run's code left its
// journal, its generations, its journal as a timeline, its streams read
// live, and the actions that work on it (below: signal, query, update,
// complete an awakeable, cancel, terminate, reset), each through the
// public API.
import { api, post } from "./api.js";
import { el, time } from "./dom.js";
import { timeline, divergence, generations, waitingOn } from "./timeline.js";
import { readStreams, streamNames } from "./streams.js";

// The version a run's journal names (its run_started's detail; empty: 1),
// for a parked run, whose summary does not know it (version 0).
function journaledVersion(started) {
  return started ? Number(started.detail || "1") : null;
}

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
  const records = journal.records ?? [];
  // The current generation's start: its input, parent and version.
  const started = records.findLast((record) => record.kind === "run_started");
  const commands = journal.commands ?? [];
  const children = commands.filter((command) => command.command === "child");
  const diverged = run.status === "stuck" ? divergence(run.error ?? "", run.stuck_position) : null;
  // A finished run's own last record says how it ended: the summary may
  // still hold the error of before (a stuck run ended keeps its
  // nondeterminism error there until the engine reopens).
  const ended = run.finished_at_ms ? records.findLast((record) => record.kind === "run_failed" || record.kind === "run_cancelled") : null;
  const error = ended ? String(ended.value) : run.error ?? "";
  const link = (runId) => el("a", { href: `#run/${encodeURIComponent(runId)}` }, runId);
  const version = run.version
    ? `version ${run.version}`
    : journaledVersion(started) ? `version ${journaledVersion(started)}, parked: read from its journal` : "version not known: parked";
  const facts = el("table", { id: "run", class: "facts" },
    [["Id", run.id], ["Workflow", `${run.workflow} (${version})`],
     ["Status", el("span", { class: `status-${run.status}` }, run.status)],
     ["Generation", run.generation], ["Started", `${time(run.started_at_ms)} UTC`],
     ["Finished", run.finished_at_ms ? `${time(run.finished_at_ms)} UTC` : ""],
     ["Parent", started?.parent ? link(started.parent) : "none (started from outside)"],
     ["Children", children.length
       ? children.flatMap((child, i) => [i ? ", " : "", link(child.name), ` (${child.outcome})`]) : "none"],
     ["Error", error],
     ...(diverged ? [["Diverged", divergedFact(diverged)]] : [])]
      .map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", { id: `fact-${name.toLowerCase()}` }, value))));
  const input = started ? [el("h2", {}, "Input"), el("pre", { id: "input" }, JSON.stringify(started.flag ? started.value.input : started.value, null, 2))] : [];
  const result = "result" in run ? [el("h2", {}, "Result"), el("pre", { id: "result" }, JSON.stringify(run.result, null, 2))] : [];
  const history = generations(records, run);
  const journalPart = journal.commands
    ? timeline(commands, records, run, diverged)
    : el("p", { class: "empty", id: "journal" },
        `${journal.error ?? "No journal."} A finished run keeps its journal while Config::keep_finished_journals is on.`);
  const details = el("div", { id: "run-details" }, facts, waitingPart(run, commands), ...input, ...result,
    history ? [el("h2", {}, "Generations"), history] : [], el("h2", {}, "Journal"), journalPart);
  // A refresh of the same run in the same status replaces its details only,
  // so a signal being typed in the actions is not swept away.
  const shown = document.getElementById("run-details");
  if (shown && view.dataset.run === id && view.dataset.status === run.status) {
    shown.replaceWith(details);
    refreshActions(commands);
  } else {
    // The same run in a new status keeps its streams section: its readers
    // read on (a stream that ends with the run shows its end).
    const streams = (view.dataset.run === id && document.getElementById("streams")) || el("section", { id: "streams" });
    view.replaceChildren(el("h1", {}, `Run ${run.id}`), details, streams, runActions(run, commands, diverged, rerender));
    view.dataset.run = id;
    view.dataset.status = run.status;
  }
  readStreams(document.getElementById("streams"), id, streamNames(commands));
  return run.status === "running" || run.status === "stuck" ? 2000 : null;
}

// A link to the journal's row at `position`.
function journalLink(position, text) {
  return el("a", { href: `#journal-${position}`, onclick: (event) => {
    event.preventDefault();  // the hash is the route: scroll instead
    document.getElementById(`journal-${position}`)?.scrollIntoView({ block: "center" });
  } }, text);
}

// Where the code left the journal, linked to the journal's row.
function divergedFact(diverged) {
  if (diverged.position === null) return diverged.what;
  return [journalLink(diverged.position, `at position ${diverged.position}`), `: ${diverged.what}`];
}

// What a running run waits on now, as the engine says (waiting_on), each
// linked to its journal row -- when it has one: a next_update is
// journaled only once an update is taken. Nothing for a run that is not
// running.
function waitingPart(run, commands) {
  if (run.status !== "running") return [];
  const waits = run.waiting_on ?? [];
  const journaled = new Set(commands.map((command) => command.position));
  return [el("h2", {}, "Waiting on"), waits.length
    ? el("ul", { id: "waiting-on" }, waits.map((wait) => el("li", { "data-position": wait.position },
        journaled.has(wait.position) ? journalLink(wait.position, `position ${wait.position}`)
          : el("span", { title: "not in the journal yet" }, `position ${wait.position}`),
        ": ", waitingOn(wait))))
    : el("p", { class: "empty", id: "waiting-on" }, "Nothing now: its code is running between commands.")];
}

// --- Actions ---

// The last action's message, per run: it stays through refreshes (a
// cancel's "requested" while the run winds down, an update's answer) until
// the next action or another run.
let said = { run: null, text: "", error: false };

function say(runId, text, error = false) {
  said = { run: runId, text: `${new Date().toLocaleTimeString()} ${text}`, error };
  const shown = document.getElementById("action-result");
  if (shown) sayIn(shown);
}

function sayIn(node) {
  node.textContent = said.text;
  node.className = said.error ? "error" : "said";
}

// A form's JSON field: its value, or undefined after saying why not.
function jsonField(runId, what, text) {
  if (!text.trim()) return null;
  try {
    return JSON.parse(text);
  } catch {
    say(runId, `${what}: the value is not JSON (a number, "text" in quotes, {...}, null)`, true);
    return undefined;
  }
}

// The reset points a journal offers: after each step that completed (by
// name), and before each position, the end included (keep every command).
function resetPoints(commands) {
  const steps = [...new Set(commands.filter((command) => command.command === "step" && command.outcome === "completed")
    .map((command) => command.name))];
  const end = commands.length ? Math.max(...commands.map((command) => command.position)) + 1 : 0;
  return [
    ...steps.map((name) => [`after:${name}`, `after step '${name}' (its last completion)`]),
    ...commands.map((command) => [`position:${command.position}`, `before position ${command.position} (${command.command} '${command.name}')`]),
    [`position:${end}`, `position ${end}: the end (keep every command)`],
  ];
}

function pointOptions(select, commands) {
  const chosen = select.value;
  select.replaceChildren(...resetPoints(commands).map(([value, label]) => el("option", { value }, label)));
  if ([...select.options].some((option) => option.value === chosen)) select.value = chosen;
}

// A refresh of the same run in the same status: the reset points follow the
// journal (unless the operator is choosing one).
function refreshActions(commands) {
  const select = document.querySelector("#reset select[name=point]");
  if (select && document.activeElement !== select) pointOptions(select, commands);
}

// A form of labelled inputs whose submit calls `send(data)`.
function actionForm(id, fields, button, send) {
  return el("form", { class: "filters", id, onsubmit: (event) => {
    event.preventDefault();
    send(new FormData(event.target));
  } },
    fields.map(([label, name, attributes = {}]) => el("label", {}, `${label} `, el("input", { name, ...attributes }))),
    el("button", { type: "submit" }, button));
}

// The actions that work on the run in its status: a running run takes all;
// a stuck run's code cannot run, so only what needs no code (cancel,
// terminate, reset); a finished run can only be reset.
function runActions(run, commands, diverged, rerender) {
  const path = `/v1/runs/${encodeURIComponent(run.id)}`;
  if (said.run !== run.id) said = { run: run.id, text: "", error: false };
  const result = el("p", { id: "action-result", role: "status" });
  sayIn(result);
  // An action's reason is for that action: the field empties once done.
  const act = async (what, call, form = null) => {
    try {
      say(run.id, `${what}: ${await call()}`);
      if (form?.elements.reason) form.elements.reason.value = "";
      await rerender();
    } catch (error) {
      say(run.id, `${what}: ${error.message}`, true);
    }
  };
  const reason = (data) => data.get("reason").trim() || "from the console";
  const running = run.status === "running";
  const stuck = run.status === "stuck";

  const signal = actionForm("signal", [["Signal", "name", { required: "" }], ["value (JSON)", "value"]], "Send", (data) => {
    const value = jsonField(run.id, "signal", data.get("value"));
    if (value === undefined) return;
    const name = data.get("name");
    act(`signal '${name}'`, async () => {
      await post(`${path}/signals/${encodeURIComponent(name)}`, { value });
      return "accepted";
    });
  });
  const query = actionForm("query", [["Query", "name", { required: "" }], ["argument (JSON)", "arg"]], "Ask", (data) => {
    const arg = jsonField(run.id, "query", data.get("arg"));
    if (arg === undefined) return;
    const name = data.get("name");
    act(`query '${name}'`, async () => {
      const answer = await post(`${path}/queries/${encodeURIComponent(name)}`, arg === null ? {} : { arg });
      return `answered ${JSON.stringify(answer.answer)}`;
    });
  });
  const update = actionForm("update", [["Update", "name", { required: "" }], ["argument (JSON)", "arg"]], "Send", (data) => {
    const arg = jsonField(run.id, "update", data.get("arg"));
    if (arg === undefined) return;
    const name = data.get("name");
    act(`update '${name}'`, async () => {
      const answer = await post(`${path}/updates/${encodeURIComponent(name)}`, arg === null ? {} : { arg });
      return answer.status === "completed" ? `completed, result ${JSON.stringify(answer.result)}`
        : `${answer.status}: ${answer.error?.message ?? JSON.stringify(answer.error)}`;
    });
  });
  const awakeable = actionForm("awakeable",
    [["Complete awakeable: token", "token", { required: "", size: "40", autocomplete: "off" }], ["value (JSON)", "value"]], "Complete", (data) => {
      const value = jsonField(run.id, "awakeable", data.get("value"));
      if (value === undefined) return;
      act("awakeable", async () => {
        await post(`/v1/awakeables/${encodeURIComponent(data.get("token").trim())}/complete`, { value });
        return "completed";
      });
    });

  // Cancel and terminate share the reason; each asks first.
  const ending = el("form", { class: "filters", id: "end", onsubmit: (event) => event.preventDefault() },
    el("label", {}, "Reason ", el("input", { name: "reason", size: "40", placeholder: "recorded in the run's error" })),
    [["cancel", "cancel requested", "Cancel"], ["terminate", "terminated", "Terminate"]].map(([what, done, label]) =>
      el("button", { type: "button", id: what, onclick: (event) => {
        const why = reason(new FormData(event.target.form));
        if (confirm(`${label} run ${run.id}? (${why})`)) {
          act(what, async () => {
            await post(`${path}/${what}`, { reason: why });
            return `${done} (${why})`;
          }, event.target.form);
        }
      } }, label)));

  const point = el("select", { name: "point" });
  pointOptions(point, commands);
  // A stuck run's likely reset: to just before where its code diverged.
  point.value = diverged?.position != null ? `position:${diverged.position}` : "position:0";
  const reset = el("form", { class: "filters", id: "reset", onsubmit: (event) => {
    event.preventDefault();
    const data = new FormData(event.target);
    const [kind, where] = data.get("point").split(/:(.*)/s);
    const body = kind === "after" ? { after_step: where } : { position: Number(where) };
    const why = reason(data);
    const label = point.selectedOptions[0]?.textContent ?? data.get("point");
    if (confirm(`Reset run ${run.id} to ${label}? A new generation replays from there. (${why})`)) {
      act("reset", async () => {
        const answer = await post(`${path}/reset`, { ...body, reason: why });
        return `generation ${answer.generation} replays from ${label} (${why})`;
      }, event.target);
    }
  } },
    el("label", {}, "Reset to ", point),
    el("label", {}, "reason ", el("input", { name: "reason", size: "30" })),
    el("button", { type: "submit" }, "Reset"));

  return el("section", { id: "actions" }, el("h2", {}, "Actions"),
    running ? [signal, query, update, awakeable] : [],
    stuck ? el("p", { class: "empty", id: "stuck-note" },
      "Its code does not match its journal, so it cannot run: deploy code that does and it goes on, " +
      "or reset it to before the divergence, or end it. (Signals are kept for the fixed code; queries, " +
      "updates and awakeables need code that runs.)") : null,
    running || stuck ? ending : null,
    reset, result);
}
