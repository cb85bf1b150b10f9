// The engine page (#engine): this engine's log, checkpoints and run store
// (GET /v1/stats), the durable writes' latency as a chart, and under
// `fusee server --http` the server's own: its shards and who holds them,
// its log (GET /v1/server).
import { api } from "./api.js";
import { el, svg, duration } from "./dom.js";

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
