// The engine's public HTTP API (docs/http-api.md), from the page's own
// origin only. A bearer token, when the engine wants one, is kept in this
// tab's sessionStorage and sent with every call.
const tokenKey = "fusee.token";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function setToken(token) {
  sessionStorage.setItem(tokenKey, token);
}

function headers(extra = {}) {
  const out = { ...extra };
  const token = sessionStorage.getItem(tokenKey);
  if (token) out.Authorization = `Bearer ${token}`;
  return out;
}

async function refused(response) {
  if (response.status === 401) {
    document.getElementById("login").hidden = false;
    return new ApiError(401, "unauthorized", "This engine wants a token: enter it above.");
  }
  const body = await response.json().catch(() => null);
  return new ApiError(response.status, body?.error ?? "error", body?.message ?? `HTTP ${response.status}`);
}

// Whether an error says the engine is away for now (stopped, restarting,
// shutting down, its shard's worker not there yet) rather than that the
// call is wrong: the console then keeps polling, and reads on when it is
// back.
export function unreachable(error) {
  return error instanceof ApiError && (error.status === 0 || error.status === 502 || error.status === 503 || error.status === 504);
}

// fetch, with a failure to connect as an ApiError of status 0 (fetch's own
// TypeError says only "Failed to fetch").
async function call(path, options) {
  try {
    return await fetch(path, options);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "unreachable", "The engine does not answer (stopped or restarting?)");
  }
}

// A call: its JSON, or an ApiError saying what went wrong.
// Every POST says its body is JSON: the API refuses any other (a browser
// cannot send that cross-site without asking first, docs/http-api.md).
export async function api(path, options = {}) {
  const extra = options.method === "POST" ? { "Content-Type": "application/json", ...options.headers } : options.headers;
  const response = await call(path, { ...options, headers: headers(extra) });
  if (!response.ok) throw await refused(response);
  return response.json();
}

// A POST of `body` as JSON.
export function post(path, body = {}) {
  return api(path, { method: "POST", body: JSON.stringify(body) });
}

// A stream's chunks as server-sent events (GET .../streams/{name}, Accept:
// text/event-stream), read with fetch rather than EventSource so the token
// goes along. Calls onChunk(offset, value) for each, onEnd() when the stream
// ends; stops when `signal` aborts. Resolves to whether the stream ended
// (false: the connection closed first). Throws an ApiError when refused.
export async function readStream(path, { onChunk, onEnd, signal }) {
  const response = await call(path, { headers: headers({ Accept: "text/event-stream" }), signal });
  if (!response.ok) throw await refused(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffered += value;
    let cut;
    while ((cut = buffered.indexOf("\n\n")) >= 0) {
      const event = { id: null, data: "", type: "message" };
      for (const line of buffered.slice(0, cut).split("\n")) {
        if (line.startsWith(":")) continue;  // a keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "id") event.id = text;
        else if (field === "data") event.data += text;
        else if (field === "event") event.type = text;
      }
      buffered = buffered.slice(cut + 2);
      if (event.type === "end") {
        onEnd();
        return true;
      }
      if (event.id !== null) onChunk(Number(event.id), JSON.parse(event.data));
    }
  }
}
