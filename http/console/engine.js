// The engine's pages. #engine: in replicated mode the cluster's replicas
// (GET /v1/cluster), then this engine's log, checkpoints and run store
// (GET /v1/stats), its work over the last minutes as line charts (steps
// and runs per second, durable write latency: GET /v1/stats/activity), the
// durable writes' latency as a chart, and under `fusee server --http` the
// server's own: its shards and who holds them, its log (GET /v1/server).
// #schedules and #queues (below): what starts runs besides callers.
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

// --- Activity: what the engine did each second (GET /v1/stats/activity) ---

// The narrowest time axis: a chart of the first few seconds' samples does
// not stretch them over its whole width.
const chartSpanMinMs = 60_000;

// 0 up to `value`, rounded up to 1, 2 or 5 times a power of ten.
function scaleTop(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((step) => step * power).find((top) => top >= value * (1 - 1e-9));
}

// A count per second, with two figures past the point at most.
const perSecond = (value) => `${+value.toFixed(value < 10 ? 2 : value < 100 ? 1 : 0)}/s`;
const microseconds = (value) => duration(value / 1000);

// A sample's count of `field` per second of its interval.
const rateOf = (field) => (sample) => (sample.interval_ms > 0 ? sample[field] / (sample.interval_ms / 1000) : null);

// Samples over time as a line chart: one line per series ({name, value:
// sample -> number or null}), broken where a series has no value (null: a
// latency in a second with no durable write); a value alone between gaps
// is a dot. The scale runs from 0; the axis from the oldest sample to the
// newest, or over the last minute while there is less. `total` (nodes)
// goes under the title: the count since the engine opened.
function lineChart(id, title, samples, series, format, total) {
  const width = 340;
  const height = 150;
  const left = 52;
  const right = 8;
  const top = 10;
  const bottom = 22;
  const end = samples.at(-1)?.at_ms ?? Date.now();
  const begin = Math.min(samples.length ? samples[0].at_ms - samples[0].interval_ms : end, end - chartSpanMinMs);
  const values = series.map((line) => samples.map((sample) => [sample.at_ms, line.value(sample)]));
  const known = values.flat().map(([, value]) => value).filter((value) => value !== null);
  const most = scaleTop(Math.max(0, ...known));
  const x = (ms) => left + ((ms - begin) / (end - begin)) * (width - left - right);
  const y = (value) => top + (1 - value / most) * (height - top - bottom);
  const marks = values.flatMap((points, i) => {
    const stretches = [[]];  // the runs of points with a value, between gaps
    for (const [at, value] of points) {
      if (value === null) {
        if (stretches.at(-1).length) stretches.push([]);
      } else {
        stretches.at(-1).push([x(at).toFixed(1), y(value).toFixed(1)]);
      }
    }
    return stretches.filter((stretch) => stretch.length).map((stretch) => stretch.length > 1
      ? svg("polyline", { points: stretch.map((point) => point.join(",")).join(" "), class: `chart-line series-${i}` })
      : svg("circle", { cx: stretch[0][0], cy: stretch[0][1], r: 2, class: `chart-dot series-${i}` }));
  });
  const chart = svg("svg", { id, class: "chart activity-chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" },
    svg("title", {}, title),
    svg("line", { x1: left, x2: width - right, y1: height - bottom, y2: height - bottom, class: "chart-axis" }),
    svg("line", { x1: left, x2: left, y1: top, y2: height - bottom, class: "chart-axis" }),
    svg("line", { x1: left, x2: width - right, y1: top, y2: top, class: "chart-grid" }),
    svg("text", { x: left - 4, y: top + 4, class: "chart-scale" }, format(most)),
    svg("text", { x: left - 4, y: height - bottom + 4, class: "chart-scale" }, "0"),
    svg("text", { x: left, y: height - 6, class: "chart-time" }, `${duration(end - begin)} ago`),
    svg("text", { x: width - right, y: height - 6, class: "chart-time chart-time-end" }, `${time(end).slice(11, 19)} UTC`),
    samples.length ? marks
      : svg("text", { x: (left + width - right) / 2, y: height / 2, class: "chart-label" }, "no samples yet"));
  // The legend says each series' last value and its highest.
  const legend = series.map((line, i) => {
    const shown = values[i].map(([, value]) => value).filter((value) => value !== null);
    return el("span", { class: `legend series-${i}` }, shown.length
      ? `${line.name} ${format(shown.at(-1))} last, ${format(Math.max(...shown))} at most`
      : `${line.name}: none in this window`);
  });
  return el("figure", { class: "activity-figure" }, chart,
    el("figcaption", {}, el("strong", {}, title), el("br"), total, el("br"), legend));
}

// The engine's last minutes as charts, each with its totals since the
// engine opened (GET /v1/stats) beside it; `activity` null: an engine
// that keeps no history (GET /v1/stats/activity is not there). A worker
// behind `fusee server` (`worker`) writes no log: the server does.
function activityPart(stats, activity, heading, worker) {
  const samples = activity?.samples ?? [];
  const total = (id, text) => el("span", { class: "total", id }, text);
  const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`;
  const span = samples.length ? ` (the last ${duration(samples.at(-1).at_ms - samples[0].at_ms + samples[0].interval_ms)})` : "";
  return el("section", { id: "activity" }, el(heading, {}, `Activity${span}`),
    activity ? null : el("p", { class: "empty", id: "no-activity" }, "This engine keeps no activity history: only its totals show."),
    el("div", { class: "activity" },
      lineChart("activity-steps", "Steps completed per second", samples,
        [{ name: "steps", value: rateOf("steps_completed") }], perSecond,
        total("total-steps", `${plural(stats.steps_completed, "step")} completed since the engine opened`)),
      lineChart("activity-runs", "Runs per second", samples,
        [{ name: "started", value: rateOf("runs_started") }, { name: "finished", value: rateOf("runs_finished") },
         { name: "failed", value: rateOf("runs_failed") }], perSecond,
        total("total-runs", `${plural(stats.runs_started, "run")} started, ${stats.runs_finished} finished ` +
          `(${stats.runs_failed} failed) since the engine opened`)),
      lineChart("activity-latency", "Durable write latency (p50, p99)", samples,
        [{ name: "p50", value: (sample) => (sample.flushes ? sample.flush_p50_us : null) },
         { name: "p99", value: (sample) => (sample.flushes ? sample.flush_p99_us : null) }], microseconds,
        total("total-flushes", `${plural(stats.flushes, "durable write")} since the engine opened` +
          (worker ? " (the server's log writes for its workers: its charts are above)" : "")))));
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

// Replicated mode's cluster (GET /v1/cluster): each replica as it answers
// now, this one marked; a replica that did not answer is shown so.
function clusterPart(cluster) {
  const cell = (replica, value) => el("td", {}, replica.answered ? String(value) : "");
  return [
    el("h2", {}, "Cluster"),
    el("table", { id: "cluster" },
      el("thead", {}, el("tr", {}, ["Replica", "Address", "Role", "View", "Commit", "Log end", "Durable end", "Lag (batches)",
        "Lag (bytes)", "Lag (time)"]
        .map((h) => el("th", {}, h)))),
      el("tbody", {}, cluster.replicas.map((replica) => el("tr", { "data-replica": replica.id, "data-role": replica.role ?? "" },
        el("td", {}, replica.self ? `${replica.id} (this one)` : String(replica.id)),
        el("td", { class: "mono" }, replica.address),
        el("td", { class: !replica.answered || replica.suspect ? "status-stuck" : replica.role === "primary" ? "status-completed" : "" },
          !replica.answered ? "no answer" : replica.suspect ? `${replica.role} (suspect)` : replica.role),
        cell(replica, replica.view), cell(replica, replica.commit), cell(replica, replica.log_end),
        cell(replica, replica.durable_end),
        el("td", {}, replica.lag_batches === null ? "" : String(replica.lag_batches)),
        el("td", {}, replica.lag_bytes === null ? "" : bytes(replica.lag_bytes)),
        // How long ago the oldest batch it lacks was proposed.
        el("td", {}, replica.lag_us === null ? "" : `${(replica.lag_us / 1000).toFixed(1)} ms`))))),
  ];
}

export async function showEngine(view) {
  const optional = (path) => api(path).catch((error) => {
    if (error.status === 404) return null;
    throw error;
  });
  const [stats, server, activity, cluster] = await Promise.all([api("/v1/stats"), api("/v1/server"),
    optional("/v1/stats/activity"), optional("/v1/cluster")]);
  const parts = [el("h1", {}, "Engine")];
  if (cluster?.replicated) parts.push(...clusterPart(cluster), el("h2", {}, "This replica"));
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
      ["Checkpointer", stats.checkpoint_error ? el("span", { class: "error" }, stats.checkpoint_error) : "working"]]),
    activityPart(stats, activity, server.server ? "h3" : "h2", server.server));
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
