// A run's journal as a timeline: one row per command (position, kind, name,
// outcome, attempts, when it began, how long it took, its input and value
// where recorded) with a bar on the run's time axis. Commands whose times
// overlap ran concurrently: their rows are marked as one group and their
// bars stand side by side on the axis.
import { el, svg, time, duration, json } from "./dom.js";

const barWidth = 260;

// When a command began and ended (ms since the epoch); null when its
// records carry no times (a journal written before they did).
function spanOf(command, run, now) {
  if (command.began_at_ms === undefined) return null;
  const waiting = command.outcome === "waiting";
  const end = waiting ? (run.finished_at_ms ?? now) : command.last_at_ms;
  return { begin: command.began_at_ms, end: Math.max(end, command.began_at_ms), waiting };
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

export function timeline(commands, run) {
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
  const rows = commands.map((command) => {
    const span = spans.get(command.position);
    const group = groups.get(command.position);
    // A step's running time; another command's span (an instant: none);
    // a waiting one's so far.
    const took = command.took_us !== undefined ? duration(command.took_us / 1000)
      : !span || span.end === span.begin ? ""
      : span.waiting ? `${duration(span.end - span.begin)} so far`
      : duration(span.end - span.begin);
    const bar = span
      ? svg("svg", { class: "bar", width: barWidth, height: 14, viewBox: `0 0 ${barWidth} 14` },
          svg("rect", { x: Math.min(x(span.begin), barWidth - 2).toFixed(1), y: 2, height: 10,
                        width: Math.max(2, x(span.end) - x(span.begin)).toFixed(1),
                        class: `outcome-${command.outcome}` },
            svg("title", {}, `${time(span.begin)} → ${span.waiting ? "still waiting" : time(span.end)}`)))
      : el("span", { class: "empty" }, "no times");
    return el("tr", { class: group ? "concurrent" : null, "data-group": group ?? null },
      el("td", {}, command.position),
      el("td", {}, command.command),
      el("td", {}, command.command === "child"
        ? el("a", { href: `#run/${encodeURIComponent(command.name)}` }, command.name) : command.name),
      el("td", { class: `outcome-${command.outcome}` }, command.outcome),
      el("td", {}, command.attempts ?? ""),
      el("td", {}, span ? time(span.begin) : ""),
      el("td", {}, took),
      el("td", { class: "timeline" }, bar, group ? el("span", { class: "group" }, ` ∥${group}`) : null),
      el("td", { class: "mono" }, command.command === "stream write" ? "" : json(command.input)),  // the chunk is its value
      el("td", { class: "mono" }, command.message ?? json(command.value)));
  });
  return el("table", { id: "journal" },
    el("thead", {}, el("tr", {},
      ["Position", "Command", "Name", "Outcome", "Attempts", "Began (UTC)", "Took", `Timeline (${duration(t1 - t0)})`, "Input", "Value"]
        .map((heading) => el("th", {}, heading)))),
    el("tbody", {}, rows));
}
