// A run's streams read live: each stream the journal names is read from
// its start as server-sent events, its chunks shown as they become durable,
// until it ends. One reader per stream while the run's page shows; a reader
// cut off (the engine stopped or restarted) reads on from the chunk after
// its last at the page's next refresh.
import { readStream } from "./api.js";
import { el, json } from "./dom.js";

// stream name -> {controller, next (the offset to read from), cut (the
// connection went before the stream's end)}, for the run shown.
const readers = new Map();
let readersRun = null;

// Stops every reader (the page shows another run, or none).
export function stopStreams() {
  for (const reader of readers.values()) reader.controller.abort();
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
    const known = readers.get(name);
    if (known && !known.cut) continue;
    if (known) {
      read(id, name, known);
      continue;
    }
    const state = el("span", { class: "stream-state" }, "live");
    const chunks = el("ol", { class: "mono chunks", start: "0" });
    const block = el("div", { class: "stream", "data-stream": name }, el("h3", {}, `${name} `, state), chunks);
    if (!section.querySelector(".stream")) section.replaceChildren(el("h2", {}, "Streams"));
    section.append(block);
    const reader = { next: 0, state, chunks };
    readers.set(name, reader);
    read(id, name, reader);
  }
}

// Reads stream `name` from `reader.next` on, into its block.
function read(id, name, reader) {
  const controller = new AbortController();
  Object.assign(reader, { controller, cut: false });
  const { state, chunks } = reader;
  state.textContent = "live";
  state.className = "stream-state";
  const path = `/v1/runs/${encodeURIComponent(id)}/streams/${encodeURIComponent(name)}?from=${reader.next}`;
  readStream(path, {
    signal: controller.signal,
    onChunk: (offset, value) => {
      if (offset < reader.next) return;  // read before the cut
      chunks.append(el("li", { value: String(offset) }, json(value)));
      reader.next = offset + 1;
    },
    onEnd: () => { state.textContent = "ended"; state.className = "stream-state ended"; },
  }).then((ended) => {
    if (!ended) cutOff(reader, "disconnected: reading on when the engine answers");
  }).catch((error) => {
    if (error.name === "AbortError") return;
    cutOff(reader, `not readable (${error.message}): trying again`);
  });
}

function cutOff(reader, why) {
  if (reader.controller.signal.aborted) return;
  reader.cut = true;
  reader.state.textContent = why;
  reader.state.className = "stream-state error";
}
