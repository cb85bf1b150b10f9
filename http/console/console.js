// The Fusee web console: plain JavaScript modules over the engine's public
// HTTP API (docs/http-api.md), served by the same listener at /ui/
// (docs/console.md). This file routes the hash to its page and refreshes
// the page while it is live, through an engine that stops and comes back.
//
// The hash is the page's whole state, so a link to it is shareable and the
// browser's back button goes back: #runs?status=running&cursor=C, #run/<id>,
// #engine, #schedules, #queues, #queue/<name> (ids and names percent-encoded:
// a run id may hold `: @ + = ,`).
import { setToken, unreachable } from "./api.js";
import { el } from "./dom.js";
import { showRuns } from "./runs.js";
import { showRun } from "./run.js";
import { showEngine, showSchedules, showQueues, showQueue } from "./engine.js";
import { stopStreams } from "./streams.js";

const view = document.getElementById("view");
const statusLine = document.getElementById("status");
const retryMs = 2000;
let refreshTimer = null;
let lastUpdated = null;

// The hash as {page, arg, params}: "run/a%3Ab?x=1" is page "run", arg "a:b".
function route() {
  const hash = location.hash.slice(1);
  const cut = hash.indexOf("?");
  const path = cut < 0 ? hash : hash.slice(0, cut);
  const params = new URLSearchParams(cut < 0 ? "" : hash.slice(cut + 1));
  const slash = path.indexOf("/");
  const page = slash < 0 ? path : path.slice(0, slash);
  return { page: page || "runs", arg: slash < 0 ? "" : decodeURIComponent(path.slice(slash + 1)), params };
}

const pages = {
  runs: ({ params }) => showRuns(view, params, render),
  run: ({ arg }) => showRun(view, arg, render),
  engine: () => showEngine(view),
  schedules: () => showSchedules(view, render),
  queues: () => showQueues(view),
  queue: ({ arg }) => showQueue(view, arg),
};

function showError(error) {
  delete view.dataset.run;
  delete view.dataset.page;
  stopStreams();
  view.replaceChildren(el("p", { class: "error" }, error.message));
}

// One render at a time, in order: a refresh, a hash change and an action
// that land together render once more after the one under way, so an older
// answer never paints over a newer page.
let rendering = null;
let renderAgain = false;

async function render() {
  if (rendering) {
    renderAgain = true;
    return rendering;
  }
  rendering = renderOnce();
  try {
    await rendering;
  } finally {
    rendering = null;
    if (renderAgain) {
      renderAgain = false;
      await render();
    }
  }
}

async function renderOnce() {
  clearTimeout(refreshTimer);
  const hash = location.hash;
  const where = route();
  const show = pages[where.page] ?? pages.runs;
  // Each page says which page it shows (view.dataset.page) and replaces
  // only its details while it shows the same one; any other forgets it.
  if (view.dataset.page !== where.page) delete view.dataset.page;
  if (where.page !== "run") {
    delete view.dataset.run;
    stopStreams();
  }
  try {
    const refreshMs = await show(where);
    // What the view shows now: a reader (or a test) that follows the hash
    // knows the page is drawn for it when this equals location.hash.
    view.dataset.shown = hash;
    lastUpdated = new Date();
    statusLine.textContent = `updated ${lastUpdated.toLocaleTimeString()}`;
    statusLine.className = "";
    if (refreshMs) refreshTimer = setTimeout(render, refreshMs);  // live
  } catch (error) {
    if (!unreachable(error)) {
      showError(error);
      return;
    }
    // The engine is away (stopped, restarting): the page keeps what it
    // last showed, says so, and tries again until the engine answers --
    // one failed poll must not end the live refresh.
    statusLine.textContent = `${error.message}: trying again every ${retryMs / 1000} s` +
      (lastUpdated ? ` (shown: as of ${lastUpdated.toLocaleTimeString()})` : "");
    statusLine.className = "stale";
    if (!view.childElementCount) view.replaceChildren(el("p", { class: "error" }, error.message));
    refreshTimer = setTimeout(render, retryMs);
  }
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  setToken(document.getElementById("token").value);
  event.target.hidden = true;
  render();
});
window.addEventListener("hashchange", render);
render();
