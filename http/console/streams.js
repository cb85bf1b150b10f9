// A run's streams read live: each stream the journal names is read from
// its start as server-sent events, its chunks shown as they become durable,
// until it ends. One reader per stream while the run's page shows.
import { readStream } from "./api.js";
import { el, json } from "./dom.js";

const readers = new Map();  // stream name -> AbortController, for the run shown
let readersRun = null;

// Stops every reader (the page shows another run, or none).
export function stopStreams() {
  for (const controller of readers.values()) controller.abort();
  readers.clear();
  readersRun = null;
}

// The names of the streams a journal's commands write or close.
export function streamNames(commands) {
  return [...new Set(commands.filter((command) => command.command.startsWith("stream")).map((command) => command.name))];
}

// Makes sure `section` (#streams) reads each of `names` live for run `id`.
export function readStreams(section, id, names) {
  if (readersRun !== id) {
    stopStreams();
    readersRun = id;
  }
  if (!names.length && !section.querySelector(".stream")) {
    section.replaceChildren(el("h2", {}, "Streams"), el("p", { class: "empty" }, "This run has written no stream."));
    return;
  }
  for (const name of names) {
    if (readers.has(name)) continue;
    const controller = new AbortController();
    readers.set(name, controller);
    const state = el("span", { class: "stream-state" }, "live");
    const chunks = el("ol", { class: "mono chunks", start: "0" });
    const block = el("div", { class: "stream", "data-stream": name }, el("h3", {}, `${name} `, state), chunks);
    if (!section.querySelector(".stream")) section.replaceChildren(el("h2", {}, "Streams"));
    section.append(block);
    const path = `/v1/runs/${encodeURIComponent(id)}/streams/${encodeURIComponent(name)}?from=0`;
    readStream(path, {
      signal: controller.signal,
      onChunk: (offset, value) => chunks.append(el("li", { value: String(offset) }, json(value))),
      onEnd: () => { state.textContent = "ended"; state.className = "stream-state ended"; },
    }).then((ended) => {
      if (ended) return;
      state.textContent = "disconnected: reload the page to read on";
      state.className = "stream-state error";
    }).catch((error) => {
      if (error.name === "AbortError") return;
      state.textContent = `not readable: ${error.message}`;
      state.className = "stream-state error";
    });
  }
}
