// The engine's pages. #engine: this engine's log, checkpoints and run store
// (GET /v1/stats), the durable writes' latency as a chart, and under
// `fusee server --http` the server's own: its shards and who holds them,
// its log (GET /v1/server). #schedules and #queues (below): what starts
// runs besides callers.
import { api, post } from "./api.js";
import { el, svg, time, duration } from "./dom.js";

function bytes(count) {
  if (count < 1024) return `${count} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = count;
  let unit = -1;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

function factTable(id, rows) {
  return el("table", { id, class: "facts" }, rows.map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", {}, value))));
}

// A latency histogram ({bounds_us, counts, sum_us}) as a bar chart: one bar
// per bucket, its count above it, the bucket's bound below.
function latencyChart(id, histogram, noun = "durable writes") {
  const width = 640;
  const height = 180;
  const bottom = 34;
  const counts = histogram.counts;
  const slot = width / counts.length;
  const most = Math.max(1, ...counts);
  const total = counts.reduce((sum, count) => sum + count, 0);
  const chart = svg("svg", { id, class: "chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" },
    svg("title", {}, `${total} ${noun} by latency`),
    counts.flatMap((count, i) => {
      const barHeight = (count / most) * (height - bottom - 16);
      const label = i < histogram.bounds_us.length ? `≤${duration(histogram.bounds_us[i] / 1000)}` : "slower";
      const x = i * slot + 3;
      return [
        svg("rect", { x: x.toFixed(1), y: (height - bottom - barHeight).toFixed(1), width: (slot - 6).toFixed(1),
                      height: Math.max(count ? 1 : 0, barHeight).toFixed(1), class: "chart-bar" },
          svg("title", {}, `${label}: ${count}`)),
        svg("text", { x: (x + (slot - 6) / 2).toFixed(1), y: (height - bottom - barHeight - 4).toFixed(1),
                      class: "chart-count" }, count),
        svg("text", { x: (x + (slot - 6) / 2).toFixed(1), y: height - bottom + 14, class: "chart-label" }, label),
      ];
    }),
    svg("line", { x1: 0, x2: width, y1: height - bottom, y2: height - bottom, class: "chart-axis" }));
  const mean = total ? duration(histogram.sum_us / total / 1000) : "none yet";
  return el("figure", {}, chart, el("figcaption", {}, `${total} ${noun}, mean ${mean}`));
}

function logRows(stats) {
  return [["Records written", stats.records_written], ["Durable writes", stats.flushes],
    ["Records per write", stats.records_per_flush.toFixed(2)],
    ["Log segments", `${stats.wal_segments}${stats.wal_bytes !== undefined ? ` (${bytes(stats.wal_bytes)})` : ""}`],
    ["Staged, not yet durable", bytes(stats.staged_bytes)],
    ["Checkpoints", stats.checkpoints], ["Segments retired", stats.segments_retired],
    ["Run store", bytes(stats.run_store_bytes)],
    ["Log", stats.log_error ? el("span", { class: "error" }, stats.log_error) : "working"]];
}

export async function showEngine(view) {
  const [stats, server] = await Promise.all([api("/v1/stats"), api("/v1/server")]);
  const parts = [el("h1", {}, "Engine")];
  if (server.server) {
    const held = server.holders.filter((holder) => holder.worker !== null).length;
    parts.push(
      el("h2", {}, "Server"),
      el("p", {}, `fusee server: ${held} of ${server.shards} shards held, ${server.workers_waiting} workers on standby.`),
      el("table", { id: "holders" },
        el("thead", {}, el("tr", {}, ["Shard", "Held by", "Lease epoch", "HTTP API"].map((h) => el("th", {}, h)))),
        el("tbody", {}, server.holders.map((holder) => el("tr", {},
          el("td", {}, holder.shard),
          el("td", { class: holder.worker === null ? "status-stuck" : "" }, holder.worker ?? "nobody: its runs wait for a worker"),
          el("td", {}, holder.epoch), el("td", { class: "mono" }, holder.http ?? ""))))),
      el("h3", {}, "The server's log"), factTable("server-log", logRows(server)),
      el("h3", {}, "Durable writes by latency"), latencyChart("server-latency", server.flush_latency),
      el("h3", {}, "Appends, arrival to durable"), latencyChart("append-latency", server.append_latency, "appends"),
      el("h2", {}, "This worker"));
  }
  parts.push(
    factTable("engine", [["Shards", `${stats.shards_held} of ${stats.shards} held here`],
      ["Runs", Object.entries(stats.runs).map(([status, count]) => `${status} ${count}`).join(", ")],
      ["Runs parked / woken", `${stats.runs_parked} / ${stats.runs_woken}`],
      ...(server.server ? [] : logRows(stats)),
      ["Checkpointer", stats.checkpoint_error ? el("span", { class: "error" }, stats.checkpoint_error) : "working"]]));
  if (!server.server) parts.push(el("h2", {}, "Durable writes by latency"), latencyChart("latency", stats.flush_latency));
  view.replaceChildren(...parts);
  return 2000;
}

// --- Schedules (#schedules) and queues (#queues, #queue/<name>) ---
// The engine's other sources of runs, as GET /v1/schedules and /v1/queues
// describe them, with a schedule's pause, resume and trigger.

const runLink = (id) => el("a", { href: `#run/${encodeURIComponent(id)}` }, id);
const when = (ms) => (ms ? `${time(ms)} UTC` : "");

function specText(spec) {
  const base = spec.cron ? `cron ${spec.cron}${spec.time_zone ? ` (${spec.time_zone})` : ""}`
    : `every ${duration(spec.every_ms)}${spec.offset_ms ? `, offset ${duration(spec.offset_ms)}` : ""}`;
  return [base, spec.jitter_ms ? `, jitter ${duration(spec.jitter_ms)}` : "", spec.end_ms ? `, until ${when(spec.end_ms)}` : ""].join("");
}

// The last schedule action's message: it stays through refreshes.
let scheduleSaid = { text: "", error: false };

function scheduleResult() {
  return el("p", { id: "schedule-result", role: "status", class: scheduleSaid.error ? "error" : "said" }, scheduleSaid.text);
}

function scheduleActions(schedule, rerender) {
  const path = `/v1/schedules/${encodeURIComponent(schedule.id)}`;
  const act = async (what, body) => {
    try {
      const answer = await post(`${path}/${what}`, body);
      const runs = answer.runs ?? [];
      scheduleSaid = { text: `${new Date().toLocaleTimeString()} ${schedule.id}: ${what} done` +
        (what === "trigger" ? (runs.length ? `, started ${runs.join(", ")}` : ", the overlap policy let it pass") : ""), error: false };
    } catch (error) {
      scheduleSaid = { text: `${new Date().toLocaleTimeString()} ${schedule.id}: ${what}: ${error.message}`, error: true };
    }
    await rerender();
  };
  const paused = schedule.options.paused;
  return el("form", { class: "schedule-actions", "data-schedule": schedule.id, onsubmit: (event) => event.preventDefault() },
    paused ? null : el("input", { name: "note", placeholder: "why (pause)", size: "16" }),
    el("button", { type: "button", class: paused ? "resume" : "pause", onclick: (event) => {
      const note = paused ? "" : new FormData(event.target.form).get("note").trim();
      act(paused ? "resume" : "pause", note ? { note } : {});
    } }, paused ? "Resume" : "Pause"),
    el("button", { type: "button", class: "trigger", onclick: () => act("trigger", {}) }, "Trigger"));
}

let schedulesShown = "";  // what the table shows, as JSON

export async function showSchedules(view, render) {
  const { schedules } = await api("/v1/schedules");
  const rerender = async () => {
    delete view.dataset.page;  // an action rebuilds the table at once
    await render();
  };
  const table = schedules.length
    ? el("table", { id: "schedules" },
        el("thead", {}, el("tr", {}, ["Id", "Workflow", "When", "Overlap", "State", "Next due", "Last started", "Started / skipped", "Recent runs", ""]
          .map((h) => el("th", {}, h)))),
        el("tbody", {}, schedules.map((schedule) => el("tr", { "data-schedule": schedule.id },
          el("td", { class: "mono" }, schedule.id),
          el("td", {}, schedule.workflow),
          el("td", {}, specText(schedule.spec)),
          el("td", {}, `${schedule.options.overlap}${schedule.buffered_ms?.length ? ` (${schedule.buffered_ms.length} buffered)` : ""}`),
          el("td", { class: schedule.options.paused ? "status-cancelled" : "status-running" },
            schedule.options.paused ? `paused${schedule.options.note ? `: ${schedule.options.note}` : ""}` : "active"),
          el("td", { class: "next-due" }, schedule.next_due_ms ? when(schedule.next_due_ms) : schedule.options.paused ? "none (paused)" : "none (past its end)"),
          el("td", {}, schedule.running ? runLink(schedule.running) : ""),
          el("td", {}, `${schedule.started} / ${schedule.skipped}`),
          el("td", {}, (schedule.recent ?? []).slice(-3).flatMap((id, i) => [i ? ", " : "", runLink(id)])),
          el("td", {}, scheduleActions(schedule, rerender))))))
    : el("p", { class: "empty", id: "no-schedules" }, "No schedules. Make one with POST /v1/schedules (docs/http-api.md) or Engine::schedule.");
  const details = el("div", { id: "schedules-details" }, table, scheduleResult());
  // A refresh leaves the table be when nothing changed, and while a pause
  // note is being typed.
  const shown = document.getElementById("schedules-details");
  const key = JSON.stringify([schedules, scheduleSaid]);
  if (shown && view.dataset.page === "schedules") {
    const typing = shown.contains(document.activeElement) && document.activeElement.tagName === "INPUT";
    if (!typing && schedulesShown !== key) {
      shown.replaceWith(details);
      schedulesShown = key;
    }
  } else {
    schedulesShown = key;
    view.replaceChildren(el("h1", {}, "Schedules"), details);
    view.dataset.page = "schedules";
  }
  return 2000;
}

const optionText = (options) => [
  options.concurrency ? `${options.concurrency} at once` : "no bound at once",
  options.partition_concurrency ? `${options.partition_concurrency} per partition` : null,
  options.per_second ? `${options.per_second} starts/s` : null].filter(Boolean).join(", ");

export async function showQueues(view) {
  const { queues } = await api("/v1/queues");
  const table = queues.length
    ? el("table", { id: "queues" },
        el("thead", {}, el("tr", {}, ["Queue", "Bounds", "Waiting", "Running", "Started", "Next start"].map((h) => el("th", {}, h)))),
        el("tbody", {}, queues.map((queue) => el("tr", { "data-queue": queue.name },
          el("td", { class: "mono" }, el("a", { href: `#queue/${encodeURIComponent(queue.name)}` }, queue.name)),
          el("td", {}, optionText(queue.options)),
          el("td", { class: "waiting" }, queue.waiting.length),
          el("td", { class: "running" }, queue.running.length),
          el("td", {}, queue.started),
          el("td", {}, queue.next_start_ms > Date.now() ? when(queue.next_start_ms) : "")))))
    : el("p", { class: "empty", id: "no-queues" }, "No queues. Declare one with POST /v1/queues (docs/http-api.md) or Engine::queue.");
  view.replaceChildren(el("h1", {}, "Queues"), table);
  view.dataset.page = "queues";
  return 2000;
}

// Waiting and running by partition ("" is the queue's default one).
function partitions(queue) {
  const by = new Map();
  for (const [list, field] of [[queue.waiting, "waiting"], [queue.running, "running"]]) {
    for (const entry of list) {
      const counts = by.get(entry.partition) ?? { waiting: 0, running: 0 };
      counts[field]++;
      by.set(entry.partition, counts);
    }
  }
  return [...by.entries()].sort(([a], [b]) => a.localeCompare(b));
}

export async function showQueue(view, name) {
  const queue = await api(`/v1/queues/${encodeURIComponent(name)}`);
  const entryTable = (id, entries, columns) => entries.length
    ? el("table", { id }, el("thead", {}, el("tr", {}, columns.map(([h]) => el("th", {}, h)))),
        el("tbody", {}, entries.map((entry) => el("tr", {}, columns.map(([, cell]) => el("td", {}, cell(entry)))))))
    : el("p", { class: "empty", id }, "none");
  // A waiting run is not a run yet (GET /v1/runs/{id} is 404 until it
  // starts): only a running one is linked.
  const common = (linked) => [["Id", (entry) => (linked ? runLink(entry.id) : el("span", { class: "mono", title: "not started yet" }, entry.id))],
    ["Workflow", (entry) => entry.workflow], ["Partition", (entry) => entry.partition || "(default)"], ["Priority", (entry) => entry.priority]];
  view.replaceChildren(el("h1", {}, `Queue ${queue.name}`),
    factTable("queue", [["Bounds", optionText(queue.options)], ["Waiting", queue.waiting.length], ["Running", queue.running.length],
      ["Started, since declared", queue.started], ["Next start", queue.next_start_ms > Date.now() ? when(queue.next_start_ms) : "when a slot frees"]]),
    el("h2", {}, "By partition"),
    entryTable("partitions", partitions(queue), [["Partition", ([partition]) => partition || "(default)"],
      ["Waiting", ([, counts]) => counts.waiting], ["Running", ([, counts]) => counts.running]]),
    el("h2", {}, "Waiting, in the order they will start"),
    entryTable("waiting", queue.waiting, [...common(false), ["Dedup id", (entry) => entry.dedup_id], ["Enqueued", (entry) => when(entry.enqueued_ms)]]),
    el("h2", {}, "Running"),
    entryTable("running", queue.running, [...common(true), ["Started", (entry) => when(entry.started_ms)]]));
  view.dataset.page = "queue";
  return 2000;
}
