#!/usr/bin/env bash
# A hostile page on another origin cannot change anything through the HTTP
# API (http/request_guard.cpp): headless Chromium (tests/console/hostile.mjs)
# opens a page served from http://localhost:OTHER_PORT, a different host name
# and port than the API's 127.0.0.1:PORT, so another site, and the page
# posts forms (urlencoded, and text/plain shaped as JSON), no-cors fetches, a
# preflighted and a simple cors fetch, and beacons, at /v1/runs and at a
# waiting run's cancel and signal. Then curl, not the page, says whether
# anything changed: no new run, the waiting run still waiting, its journal
# without a signal or a cancel.
# The page runs three times: first against a recorder (a few lines of
# Python that log every request and accept every POST, as the API did before
# the guard), which shows the browser really sends each write (else this
# test would pass with a browser that sends nothing); then against the
# service as 127.0.0.1 (another site to the page) and as localhost (the
# page's site, another port).
# Controls: the console's own kind of request (JSON, its own Origin) does
# start and signal a run, and a DNS-rebinding-shaped Host gets 421.
# Usage: cross_site_browser.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: cross_site_browser.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: cross_site_browser.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$scratch"' EXIT
fail() { echo "cross_site_browser: $*" >&2; exit 1; }
command -v chromium >/dev/null || fail "no chromium (scripts/install-deps installs it)"
command -v python3 >/dev/null || fail "no python3"
[ -d "$top/tests/console/node_modules/puppeteer-core" ] ||
  fail "no puppeteer-core in tests/console (scripts/install-deps runs npm ci there)"
wait_for() {  # FILE PATTERN
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return; sleep 0.02; done
  fail "no '$2' in $1: $(cat "$1")"
}
json_post() {  # URL BODY [CURL_ARGS...]: prints the status, the answer goes to $scratch/answer
  local url=$1 body=$2
  shift 2
  curl -s -o "$scratch/answer" -w '%{http_code}' -H "Content-Type: application/json" "$@" -X POST "$url" -d "$body"
}
run_ids() {  # API: the ids GET /v1/runs lists, one a line, sorted
  curl -s "$1/v1/runs?limit=1000" | grep -o '"id":"[^"]*"' | sed 's/"id":"\(.*\)"/\1/' | sort
}

# The hostile page. It starts nothing on load: hostile.mjs calls attack()
# once it listens to the network. The API comes in the query string, so the
# same page serves against the recorder and against the service. Every
# attempt settles: a form's frame loads whatever the answer (the page may
# not read it), a fetch resolves or rejects, a beacon is queued or not
# (hostile.mjs then waits for the browser to have sent it).
mkdir "$scratch/site"
cat >"$scratch/site/hostile.html" <<'EOF'
<!doctype html>
<meta charset="utf-8">
<title>Not the console</title>
<body>
<script>
window.attack = async (limit) => {
  const api = new URLSearchParams(location.search).get("api");
  let frames = 0;
  let beacons = 0;
  const bounded = (name, promise) => Promise.race([
    promise.then((outcome) => ({ name, outcome }), (error) => ({ name, outcome: `rejected (${error.message ?? error})` })),
    new Promise((resolve) => setTimeout(() => resolve({ name, outcome: `unsettled after ${limit} ms` }), limit)),
  ]);
  // A form posted into a frame of its own, so the page stays; the frame's
  // load is the answer having come. The frame is in the document before the
  // listener, so its first, empty document's load does not count.
  const form = (path, enctype, fields) => new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.name = `frame-${++frames}`;
    document.body.append(frame);
    frame.addEventListener("load", () => resolve("the answer loaded in the form's frame (unreadable here)"), { once: true });
    const element = document.createElement("form");
    Object.assign(element, { method: "post", action: api + path, enctype, target: frame.name });
    for (const [name, value] of fields) {
      const input = document.createElement("input");
      Object.assign(input, { type: "hidden", name, value });
      element.append(input);
    }
    document.body.append(element);
    element.submit();
  });
  const noCors = (path, init) => fetch(api + path, { method: "POST", mode: "no-cors", ...init })
    .then((response) => response.type === "opaque" ? "an opaque answer (status and body hidden)"
      : `readable: ${response.status}`);
  const cors = (path, init) => fetch(api + path, { method: "POST", ...init })
    .then(async (response) => `readable: ${response.status} ${await response.text()}`);
  const beacon = (path, data) => new Promise((resolve) => {
    try {
      const queued = navigator.sendBeacon(api + path, data);
      if (queued) beacons += 1;
      resolve(queued ? "queued" : "refused by the browser");
    } catch (error) {
      resolve(`thrown by the browser (${error.message})`);
    }
  });
  const json = (value) => JSON.stringify(value);
  const attempts = [
    bounded("form POST /v1/runs, urlencoded",
      form("/v1/runs", "application/x-www-form-urlencoded", [["workflow", "order"], ["id", "evil-form-url"], ["input", "1"]])),
    // text/plain sends name=value: JSON with the '=' inside a string. The
    // API refuses unknown fields, so the second form hides it in the id,
    // which the API took before the guard.
    bounded("form POST /v1/runs, text/plain shaped as JSON, the '=' in a field x",
      form("/v1/runs", "text/plain", [['{"workflow":"order","id":"evil-form","input":1,"x":"', '1"}']])),
    bounded("form POST /v1/runs, text/plain shaped as JSON, the '=' in the id",
      form("/v1/runs", "text/plain", [['{"workflow":"order","input":1,"id":"evil-form', '"}']])),
    bounded("form POST /v1/runs/order-1/signals/approval, text/plain shaped as JSON",
      form("/v1/runs/order-1/signals/approval", "text/plain", [['{"value":10,"signal_id":"evil-form', '"}']])),
    bounded("form POST /v1/runs/order-1/cancel, empty",
      form("/v1/runs/order-1/cancel", "application/x-www-form-urlencoded", [])),
    bounded("no-cors fetch POST /v1/runs, JSON as text/plain",
      noCors("/v1/runs", { body: json({ workflow: "order", id: "evil-fetch", input: 1 }) })),
    // A no-cors request may not carry a JSON content type: the browser drops it.
    bounded("no-cors fetch POST /v1/runs, claiming application/json",
      noCors("/v1/runs", { headers: { "Content-Type": "application/json" }, body: json({ workflow: "order", id: "evil-fetch-json", input: 1 }) })),
    bounded("no-cors fetch POST /v1/runs/order-1/cancel, empty", noCors("/v1/runs/order-1/cancel", {})),
    bounded("no-cors fetch POST /v1/runs/order-1/signals/approval, empty", noCors("/v1/runs/order-1/signals/approval", {})),
    bounded("no-cors fetch POST /v1/runs/order-1/signals/approval, {\"value\":10} as text/plain",
      noCors("/v1/runs/order-1/signals/approval", { body: json({ value: 10 }) })),
    bounded("cors fetch POST /v1/runs, application/json (preflighted)",
      cors("/v1/runs", { headers: { "Content-Type": "application/json" }, body: json({ workflow: "order", id: "evil-cors", input: 1 }) })),
    bounded("cors fetch POST /v1/runs, text/plain (no preflight)",
      cors("/v1/runs", { body: json({ workflow: "order", id: "evil-cors-simple", input: 1 }) })),
    bounded("beacon POST /v1/runs, JSON as text/plain",
      beacon("/v1/runs", json({ workflow: "order", id: "evil-beacon", input: 1 }))),
    bounded("beacon POST /v1/runs, a Blob typed application/json",
      beacon("/v1/runs", new Blob([json({ workflow: "order", id: "evil-beacon-json", input: 1 })], { type: "application/json" }))),
    bounded("beacon POST /v1/runs/order-1/cancel, empty", beacon("/v1/runs/order-1/cancel")),
  ];
  return { attempts: await Promise.all(attempts), beacons };
};
</script>
EOF

# The page's own server: another host name (localhost, not 127.0.0.1) and
# port, so the page is another site to the browser, as an attacker's is.
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$scratch/site" >"$scratch/site.out" 2>&1 &
pids+=($!)
wait_for "$scratch/site.out" "Serving HTTP"
page=http://localhost:$(sed -n 's/.* port \([0-9]*\).*/\1/p' "$scratch/site.out" | head -1)
page_origin=$page

# The recorder: every request, one a line; POST answered 202 as the API
# did before the guard, OPTIONS refused as the API does (no CORS headers).
cat >"$scratch/recorder.py" <<'EOF'
import http.server, sys, threading
log = open(sys.argv[1], "a", buffering=1)
lock = threading.Lock()
class Recorder(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def record(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        header = lambda name: self.headers.get(name, "-")
        with lock:
            log.write(f"{self.command} {self.path} origin={header('Origin')} site={header('Sec-Fetch-Site')} "
                      f"acrh={header('Access-Control-Request-Headers')} type={header('Content-Type')} "
                      f"body={body.replace(chr(13), '<CR>').replace(chr(10), '<LF>')}\n")
    def answer(self, status, headers={}):
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": "2", **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(b"{}")
    def do_POST(self): self.record(); self.answer(202)
    def do_OPTIONS(self): self.record(); self.answer(405, {"Allow": "GET, POST"})
    def do_GET(self): self.record(); self.answer(200)
    def log_message(self, *args): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
print(f"recording on 127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
EOF
: >"$scratch/recorded"
python3 -u "$scratch/recorder.py" "$scratch/recorded" >"$scratch/recorder.out" 2>&1 &
pids+=($!)
wait_for "$scratch/recorder.out" "recording on"
recorder=http://$(sed -n 's/^recording on //p' "$scratch/recorder.out")

echo "== against a recorder that accepts everything ($recorder)"
timeout 50 node "$top/tests/console/hostile.mjs" "$recorder" "$page" ||
  fail "hostile.mjs against the recorder failed (the recorder got: $(cat "$scratch/recorded"))"
sent() {  # WHAT FRAGMENT...: some line of the recorder's log holds every fragment
  local what=$1 lines
  shift
  lines=$(cat "$scratch/recorded")
  for fragment in "$@"; do lines=$(grep -F -- "$fragment" <<<"$lines" || true); done
  [ -n "$lines" ] || fail "the browser never sent $what; the recorder got:"$'\n'"$(cat "$scratch/recorded")"
}
sent "the urlencoded form" "POST /v1/runs " "type=application/x-www-form-urlencoded" "body=workflow=order&id=evil-form-url&input=1"
sent "the text/plain form (x)" "POST /v1/runs " 'body={"workflow":"order","id":"evil-form","input":1,"x":"=1"}'
sent "the text/plain form (id)" "POST /v1/runs " 'body={"workflow":"order","input":1,"id":"evil-form="}'
sent "the signal form" "POST /v1/runs/order-1/signals/approval " 'body={"value":10,"signal_id":"evil-form="}'
sent "the cancel form" "POST /v1/runs/order-1/cancel " "type=application/x-www-form-urlencoded"
sent "the no-cors fetch" "POST /v1/runs " 'body={"workflow":"order","id":"evil-fetch","input":1}'
sent "the no-cors fetch claiming JSON" "POST /v1/runs " '"id":"evil-fetch-json"'
sent "the no-cors signal with a value" "POST /v1/runs/order-1/signals/approval " 'body={"value":10}'
sent "the empty no-cors signal" "POST /v1/runs/order-1/signals/approval " "type=- body="
# The empty cancels by fetch and by beacon look alike here: the three
# cancels (form, fetch, beacon) are counted instead.
[ "$(grep -cF "POST /v1/runs/order-1/cancel " "$scratch/recorded")" -ge 3 ] ||
  fail "the browser sent fewer than 3 cancels (form, fetch, beacon):"$'\n'"$(cat "$scratch/recorded")"
sent "the preflight of the JSON cors fetch" "OPTIONS /v1/runs " "acrh=content-type"
sent "the simple cors fetch" "POST /v1/runs " '"id":"evil-cors-simple"'
sent "the text/plain beacon" "POST /v1/runs " 'body={"workflow":"order","id":"evil-beacon","input":1}'
# What the guard relies on: no cross-site POST says it is JSON (the
# preflighted fetch and the JSON-typed beacon asked first, were refused,
# and never went), and every write names its origin and site.
for id in evil-cors evil-beacon-json; do
  if grep -F "\"id\":\"$id\"" "$scratch/recorded"; then fail "the browser sent $id without a preflight"; fi
done
[ "$(grep -c '^OPTIONS ' "$scratch/recorded")" -ge 2 ] ||
  fail "no preflight for the JSON-typed cors fetch and beacon:"$'\n'"$(cat "$scratch/recorded")"
if grep -E '^POST .* type=application/json' "$scratch/recorded"; then
  fail "the browser sent a cross-site POST typed application/json, without asking first"
fi
if grep -vF "origin=$page_origin site=cross-site " "$scratch/recorded"; then
  fail "a request above came without Origin: $page_origin and Sec-Fetch-Site: cross-site"
fi
echo "the recorder got:"
sed 's/^/  /' "$scratch/recorded"

# The service, with a run waiting for its approval.
"$build/examples/http_service" "$scratch/data" 127.0.0.1:0 >"$scratch/out" 2>&1 &
pids+=($!)
wait_for "$scratch/out" "listening on"
address=$(sed -n 's/^listening on //p' "$scratch/out")
api=http://$address
code=$(json_post "$api/v1/runs" '{"workflow":"order","id":"order-1","input":3}')
[ "$code" = 201 ] || fail "order-1 did not start: $code $(cat "$scratch/answer")"
# The run must be at its wait before the page, so that its journal now is
# what it must still be after.
for _ in $(seq 300); do
  curl -s "$api/v1/runs/order-1/journal" | grep '"kind":"wait_started"' >/dev/null && break
  sleep 0.02
done
kinds() { curl -s "$api/v1/runs/order-1/journal" | grep -o '"kind":"[a-z_]*"' | tr '\n' ' '; }
before=$(kinds)
case $before in *wait_started*) ;; *) fail "order-1 never reached its wait: $before" ;; esac

echo "== against the service ($api), cross-site"
timeout 50 node "$top/tests/console/hostile.mjs" "$api" "$page" || fail "hostile.mjs against the service failed"
# The same page against the service named localhost: then the page is of
# the same site, another port (any other local web server the browser
# visits), which the guard refuses too (Sec-Fetch-Site: same-site, and an
# Origin that is not the Host).
echo "== against the service (http://localhost:${address##*:}), same-site"
timeout 50 node "$top/tests/console/hostile.mjs" "http://localhost:${address##*:}" "$page" ||
  fail "hostile.mjs against the service as localhost failed"

# What changed, asked with curl.
ids=$(run_ids "$api" | tr '\n' ' ')
[ "$ids" = "order-1 " ] || fail "runs after the page: $ids (only order-1 was wanted)"
status=$(curl -s "$api/v1/runs/order-1" | grep -o '"status":"[a-z]*"')
[ "$status" = '"status":"running"' ] || fail "order-1 after the page: $status, not running"
after=$(kinds)
[ "$after" = "$before" ] || fail "order-1's journal changed: before [$before], after [$after]"
case $after in *signal*|*cancel*) fail "order-1's journal holds a signal or a cancel: $after" ;; esac

# Controls. A request of the console's kind (JSON, the service's own
# Origin, same-origin) starts and signals a run: the service was up and
# taking writes all along, and the guard does not refuse every Origin.
code=$(json_post "$api/v1/runs" '{"workflow":"order","id":"control-1","input":1}' -H "Origin: $api" -H "Sec-Fetch-Site: same-origin")
[ "$code" = 201 ] || fail "the console-like start of control-1 got $code: $(cat "$scratch/answer")"
code=$(json_post "$api/v1/runs/control-1/signals/approval" '{"value":1}' -H "Origin: $api" -H "Sec-Fetch-Site: same-origin")
[[ $code == 2?? ]] || fail "the console-like signal of control-1 got $code: $(cat "$scratch/answer")"
for _ in $(seq 300); do
  curl -s "$api/v1/runs/control-1" | grep '"status":"completed"' >/dev/null && break
  sleep 0.02
done
curl -s "$api/v1/runs/control-1" | grep '"status":"completed"' >/dev/null ||
  fail "control-1 did not complete: $(curl -s "$api/v1/runs/control-1")"
# DNS rebinding: a page of evil.example whose name now points at 127.0.0.1
# sends Host: evil.example (and is same-origin to itself); refused for the
# name, reads included.
port=${address##*:}
code=$(curl -s -o "$scratch/answer" -w '%{http_code}' -H "Host: evil.example:$port" "$api/v1/runs")
[ "$code" = 421 ] || fail "GET with Host: evil.example:$port got $code, not 421: $(cat "$scratch/answer")"
code=$(json_post "$api/v1/runs" '{"workflow":"order","id":"evil-rebind","input":1}' -H "Host: evil.example:$port" -H "Origin: http://evil.example:$port")
[ "$code" = 421 ] || fail "POST with Host: evil.example:$port got $code, not 421: $(cat "$scratch/answer")"
ids=$(run_ids "$api" | tr '\n' ' ')
[ "$ids" = "control-1 order-1 " ] || fail "runs at the end: $ids (control-1 and order-1 were wanted)"
echo "cross_site_browser: ok"
