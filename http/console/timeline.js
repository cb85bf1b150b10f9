// A run's journal as a timeline: one row per command (position, kind, name,
// outcome, attempts, when it began, how long it took, its input and value
// where recorded) with a bar on the run's time axis, and below a step that
// failed an attempt, a row per attempt with its error. Commands whose times
// overlap ran concurrently: their rows are marked as one group and their
// bars stand side by side on the axis. A stuck run's row where its code
// left the journal is marked. The run's generations (a reset's) are read
// from the same records. Also what a running run waits on, as the API
// says (waiting_on), for the runs table and the run's page.
import { el, svg, time, duration, json } from "./dom.js";

const barWidth = 260;

// When a command began and ended (ms since the epoch); null when its
// records carry no times (a journal written before they did).
// `waiting`: still waiting now; `cut`: was waiting when the run ended (it
// waits no more: its bar ends at the run's end, and it took no "so far").
function spanOf(command, run, now) {
  if (command.began_at_ms === undefined) return null;
  const open = command.outcome === "waiting";
  const cut = open && run.finished_at_ms !== null && run.finished_at_ms !== undefined;
  const end = open ? (cut ? run.finished_at_ms : now) : command.last_at_ms;
  return { begin: command.began_at_ms, end: Math.max(end, command.began_at_ms), waiting: open && !cut, cut };
}

// Where a stuck run's code left its journal: {position, what}. The
// position is the API's stuck_position; the error (engine/run.cpp's
// diverge messages) says what differs there, and gives the position only
// when the API does not (stuck_position null: a version with no code
// registered, whose error names none).
export function divergence(error, stuckPosition = null) {
  const said = divergenceSaid(error);
  return stuckPosition === null || stuckPosition === undefined ? said : { position: stuckPosition, what: said.what };
}

function divergenceSaid(error) {
  let found = /nondeterminism at position (\d+): (.*)$/s.exec(error);
  if (found) return { position: Number(found[1]), what: found[2] };
  found = /the workflow returned at position \d+, but the journal has (.*) at (\d+)$/s.exec(error);
  if (found) return { position: Number(found[2]), what: `the code returned here, but the journal has ${found[1]}` };
  found = /the journal's any at position (\d+) (.*)$/s.exec(error);
  if (found) return { position: Number(found[1]), what: `the journal's any ${found[2]}` };
  return { position: null, what: error };
}

// One command a running run waits on (an entry of the API's waiting_on)
// as page nodes: "signal approval", "sleep nap until <time> UTC", "child
// <its id, linked>", "update set-limit", "awakeable paid", "step charge";
// a wait_for's due time is its timeout.
const waitWords = { wait_for: "signal", next_update: "update" };

export function waitingOn(wait) {
  const name = wait.command === "child" ? el("a", { href: `#run/${encodeURIComponent(wait.name)}` }, wait.name) : wait.name;
  const due = wait.due_ms === null || wait.due_ms === undefined ? null
    : ` until ${time(wait.due_ms)} UTC${wait.command === "wait_for" ? " (its timeout)" : ""}`;
  return el("span", { class: "waiting-on", "data-position": wait.position, "data-command": wait.command },
    waitWords[wait.command] ?? wait.command, wait.name ? [" ", name] : null, due);
}

// A step's attempts that ended, from its records (one generation's):
// [{attempt, outcome, at_ms, took_us, error, retry_at_ms}], in order.
function attemptsOf(records, position) {
  const attempts = [];
  for (const record of records) {
    if (record.position !== position) continue;
    if (record.kind === "step_attempt_failed") {
      attempts.push({ attempt: record.number, outcome: "failed", at_ms: record.at_ms, took_us: record.took_us,
                      error: record.value, retry_at_ms: record.time_ms });
    } else if (record.kind === "step_failed") {
      attempts.push({ attempt: record.number, outcome: "failed", at_ms: record.at_ms, took_us: record.took_us,
                      error: record.value, last: true });
    } else if (record.kind === "step_completed") {
      attempts.push({ attempt: (attempts.at(-1)?.attempt ?? 0) + 1, outcome: "completed", at_ms: record.at_ms,
                      took_us: record.took_us });
    }
  }
  return attempts;
}

// A row per attempt of a step that failed one, under the step's row.
function attemptRows(command, records, run, columns) {
  if (command.command !== "step") return [];
  const attempts = attemptsOf(records.filter((record) => record.generation === run.generation), command.position);
  if (!attempts.some((attempt) => attempt.outcome === "failed")) return [];
  const rows = attempts.map((attempt) => el("tr", { class: "attempt", "data-position": command.position },
    el("td", {}), el("td", { colspan: columns - 1 },
      el("span", { class: `outcome-${attempt.outcome}` }, `attempt ${attempt.attempt} ${attempt.outcome}`),
      attempt.at_ms ? ` at ${time(attempt.at_ms)}` : "",
      attempt.took_us ? ` after ${duration(attempt.took_us / 1000)}` : "",
      attempt.error !== undefined ? [": ", el("span", { class: "mono attempt-error" }, String(attempt.error))] : "",
      attempt.retry_at_ms > 0 ? ` (next attempt at ${time(attempt.retry_at_ms)})` : "")));
  const last = attempts.at(-1);
  if (command.outcome === "waiting" && last.retry_at_ms > 0) {
    rows.push(el("tr", { class: "attempt", "data-position": command.position }, el("td", {}),
      el("td", { colspan: columns - 1, class: "outcome-waiting" },
        `attempt ${last.attempt + 1} ${last.retry_at_ms > Date.now() ? `due at ${time(last.retry_at_ms)}` : "under way"}`)));
  }
  return rows;
}



// Groups of commands that ran at once (intervals that overlap, chained):
// position -> group number, for groups of two or more.
function concurrentGroups(spans) {
  const sorted = [...spans.entries()].filter(([, span]) => span).sort((a, b) => a[1].begin - b[1].begin);
  const groups = new Map();
  let group = [];
  let groupEnd = -Infinity;
  let number = 0;
  const close = () => {
    if (group.length > 1) {
      number++;
      for (const position of group) groups.set(position, number);
    }
  };
  for (const [position, span] of sorted) {
    if (span.begin < groupEnd) {
      group.push(position);  // began before the group's last end: at once
    } else {
      close();
      group = [position];
    }
    groupEnd = Math.max(groupEnd, span.end);
  }
  close();
  return groups;
}

export function timeline(commands, records, run, diverged = null) {
  if (!commands.length) {
    return el("p", { class: "empty", id: "journal" }, run.status === "running"
      ? "No commands yet: the run has not reached its first step, sleep or wait."
      : "This run ran no commands.");
  }
  const now = Date.now();
  const spans = new Map(commands.map((command) => [command.position, spanOf(command, run, now)]));
  const known = [...spans.values()].filter(Boolean);
  const t0 = Math.min(run.started_at_ms, ...known.map((span) => span.begin));
  const t1 = Math.max(t0 + 1, run.finished_at_ms ?? 0, ...known.map((span) => span.end));
  const x = (ms) => ((ms - t0) / (t1 - t0)) * barWidth;
  const groups = concurrentGroups(spans);
  const headings = ["Position", "Command", "Name", "Outcome", "Attempts", "Began (UTC)", "Took", `Timeline (${duration(t1 - t0)})`, "Input", "Value"];
  const rows = commands.flatMap((command) => {
    const span = spans.get(command.position);
    const group = groups.get(command.position);
    // A step's running time; another command's span (an instant: none);
    // a waiting one's so far; one the run's end cut short, until then.
    const took = command.took_us !== undefined ? duration(command.took_us / 1000)
      : !span || span.end === span.begin ? ""
      : span.waiting ? `${duration(span.end - span.begin)} so far`
      : span.cut ? `${duration(span.end - span.begin)}, until the run ended`
      : duration(span.end - span.begin);
    // Waiting when the run ended: it waits no more.
    const cut = command.outcome === "waiting" && Boolean(run.finished_at_ms);
    const here = diverged?.position === command.position;
    const bar = span
      ? svg("svg", { class: "bar", width: barWidth, height: 14, viewBox: `0 0 ${barWidth} 14` },
          svg("rect", { x: Math.min(x(span.begin), barWidth - 2).toFixed(1), y: 2, height: 10,
                        width: Math.max(2, x(span.end) - x(span.begin)).toFixed(1),
                        class: `outcome-${cut ? "cancelled" : command.outcome}` },
            svg("title", {}, `${time(span.begin)} → ${span.waiting ? "still waiting" : span.cut ? `the run's end, ${time(span.end)}` : time(span.end)}`)))
      : el("span", { class: "empty" }, "no times");
    const classes = [group ? "concurrent" : null, here ? "diverged" : null].filter(Boolean).join(" ");
    const row = el("tr", { id: `journal-${command.position}`, class: classes || null, "data-group": group ?? null },
      el("td", {}, command.position, here ? el("span", { class: "diverged-mark", title: diverged.what }, " ⚠ diverged") : null),
      el("td", {}, command.command),
      el("td", {}, command.command === "child"
        ? el("a", { href: `#run/${encodeURIComponent(command.name)}` }, command.name) : command.name),
      el("td", { class: `outcome-${cut ? "cancelled" : command.outcome}` }, cut ? "not completed: the run ended" : command.outcome),
      el("td", {}, command.attempts ?? ""),
      el("td", {}, span ? time(span.begin) : ""),
      el("td", {}, took),
      el("td", { class: "timeline" }, bar, group ? el("span", { class: "group" }, ` ∥${group}`) : null),
      el("td", { class: "mono" }, command.command === "stream write" ? "" : json(command.input)),  // the chunk is its value
      el("td", { class: "mono" }, command.message ?? json(command.value)));
    const note = here ? el("tr", { class: "diverged-note" }, el("td", {}),
      el("td", { colspan: headings.length - 1 }, `The code diverged here: ${diverged.what}`)) : null;
    return [row, note, ...attemptRows(command, records, run, headings.length)].filter(Boolean);
  });
  return el("table", { id: "journal" },
    el("thead", {}, el("tr", {}, headings.map((heading) => el("th", {}, heading)))),
    el("tbody", {}, rows));
}

// --- Generations ---

const ends = { run_completed: "completed", run_failed: "failed", run_cancelled: "cancelled" };

// One generation's steps and their attempts, as text: "quote ×1", or
// "charge: attempt 1 failed (boom), attempt 2 completed".
function stepAttempts(records) {
  const positions = [...new Set(records.filter((record) => record.kind.startsWith("step_") && record.position !== null)
    .map((record) => record.position))].sort((a, b) => a - b);
  return positions.flatMap((position) => {
    const attempts = attemptsOf(records, position);
    if (!attempts.length) return [];
    const name = records.find((record) => record.position === position)?.name;
    const text = attempts.every((attempt) => attempt.outcome === "completed")
      ? `${name} ×${attempts.length}`
      : `${name}: ${attempts.map((attempt) => `attempt ${attempt.attempt} ${attempt.outcome}${attempt.error !== undefined ? ` (${attempt.error})` : ""}`).join(", ")}`;
    return [el("li", { "data-position": position }, `${position}: ${text}`)];
  });
}

// The run's generations, oldest first, as its journal holds them: the
// current one's records, and in its run_reset the older generation's
// records past the cut -- among them that generation's own run_reset, and so
// on back to the first. Each run_reset says when the generation it ended
// began (started_ms); a record written before it did has the older
// generation's own reset's time instead, or for the first generation its
// first record's. Null for a run with one generation.
export function generations(records, run) {
  const chain = [];  // newest first
  let entry = {
    generation: run.generation,
    records: records.filter((record) => record.generation === run.generation),
    started: records.find((record) => record.kind === "run_started")?.at_ms,
  };
  for (;;) {
    chain.push(entry);
    const reset = entry.records.find((record) => record.kind === "run_reset");
    if (!reset) break;
    const cut = reset.value?.position ?? 0;
    const dropped = reset.value?.dropped ?? [];
    // The older generation: the commands before the cut (copied into the
    // newer one, with their times) and those past it.
    const older = [...entry.records.filter((record) => record.position !== null && record.position < cut), ...dropped];
    const olderReset = dropped.find((record) => record.kind === "run_reset");
    const known = older.map((record) => record.at_ms).filter((ms) => ms > 0);
    const kept = reset.value?.started_ms ?? null;
    entry = {
      generation: reset.number,
      records: older,
      started: kept ?? (olderReset ? olderReset.time_ms : known.length ? Math.min(...known) : null),
      approximate: kept === null && !olderReset,
      end: { at_ms: reset.time_ms, cut, reason: reset.detail, droppedCount: reset.value?.dropped_count },
    };
  }
  if (chain.length < 2) return null;
  const rows = chain.reverse().map((generation) => {
    const finished = generation.records.find((record) => ends[record.kind]);
    const how = generation.end ? [
      finished ? `${ends[finished.kind]} at ${time(finished.at_ms)}, then ` : "",
      `reset at ${time(generation.end.at_ms)} to position ${generation.end.cut}`,
      generation.end.reason ? ` (${generation.end.reason})` : ""].join("")
      : run.finished_at_ms ? `${run.status} at ${time(run.finished_at_ms)}` : `${run.status} (this generation)`;
    const attempts = stepAttempts(generation.records);
    return el("tr", { "data-generation": generation.generation },
      el("td", {}, generation.generation),
      el("td", { class: "started" }, generation.started ? `${time(generation.started)}${generation.approximate ? " (its first record)" : ""}` : "not kept"),
      el("td", { class: "ended" }, how),
      el("td", { class: "attempts" }, generation.end?.droppedCount !== undefined
        ? `${generation.end.droppedCount} records past the cut (too large to keep)`
        : attempts.length ? el("ul", {}, attempts) : "no steps"));
  });
  return el("table", { id: "generations" },
    el("thead", {}, el("tr", {}, ["Generation", "Started (UTC)", "How it ended", "Step attempts"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}
