// The Fusee web console: plain JavaScript modules over the engine's public
// HTTP API (docs/http-api.md), served by the same listener at /ui/
// (docs/console.md). This file routes the hash (#runs, #run/<id>, #engine)
// to its page and refreshes the page while it is live.
import { setToken } from "./api.js";
import { el } from "./dom.js";
import { showRuns } from "./runs.js";
import { showRun } from "./run.js";
import { showEngine } from "./engine.js";
import { stopStreams } from "./streams.js";

const view = document.getElementById("view");
const statusLine = document.getElementById("status");
let refreshTimer = null;

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
  const hash = decodeURIComponent(location.hash.slice(1));
  const isRun = hash.startsWith("run/");
  if (!isRun) {
    delete view.dataset.run;
    stopStreams();
  }
  if (isRun || hash === "engine") delete view.dataset.page;
  try {
    const refreshMs = isRun ? await showRun(view, hash.slice(4), render)
      : hash === "engine" ? await showEngine(view)
      : await showRuns(view, render);
    statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (refreshMs) refreshTimer = setTimeout(render, refreshMs);  // live
  } catch (error) {
    showError(error);
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
