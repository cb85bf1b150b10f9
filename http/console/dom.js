// Building the page: elements with text children only (never HTML, so a
// run id or a value cannot inject markup), SVG for the charts, and how
// times and durations read.

// An element with attributes and children (strings become text).
export function el(tag, attributes = {}, ...children) {
  return fill(document.createElement(tag), attributes, children);
}

// An SVG element, the same way (the timeline's bars, the latency chart).
export function svg(tag, attributes = {}, ...children) {
  return fill(document.createElementNS("http://www.w3.org/2000/svg", tag), attributes, children);
}

function fill(node, attributes, children) {
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined) continue;
    if (name === "class") node.setAttribute("class", value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// A time in milliseconds since the epoch, as UTC text; "" for none.
export function time(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "";
}

// A duration: µs below a millisecond, ms below a second, then s, min, h.
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  if (ms < 1) return `${Math.round(ms * 1000)} µs`;
  if (ms < 1000) return `${+ms.toFixed(ms < 10 ? 2 : 0)} ms`;
  if (ms < 60_000) return `${+(ms / 1000).toFixed(2)} s`;
  if (ms < 3_600_000) return `${+(ms / 60_000).toFixed(1)} min`;
  return `${+(ms / 3_600_000).toFixed(1)} h`;
}

// A JSON value as compact text for a table cell.
export function json(value) {
  return value === undefined ? "" : JSON.stringify(value);
}
