#!/usr/bin/env bash
# The web console in headless Chromium (tests/console/e2e.mjs), twice:
# against examples/http_service's own listener on a fresh directory, with a
# finished order, two waiting ones and a batch of two child orders made
# through the API (the suite signals, cancels and resets through the
# console); then through `fusee server --http`'s front, wanting a token,
# with the service as its worker. Screenshots go to $CONSOLE_SCREENSHOTS (default: a directory
# under the build tree), not committed.
# Usage: console_browser.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: console_browser.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: console_browser.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$scratch"' EXIT
fail() { echo "console_browser: $*" >&2; exit 1; }
command -v chromium >/dev/null || fail "no chromium (scripts/install-deps installs it)"
[ -d "$top/tests/console/node_modules/puppeteer-core" ] ||
  fail "no puppeteer-core in tests/console (scripts/install-deps runs npm ci there)"
shots=${CONSOLE_SCREENSHOTS:-$build/console-screenshots}
mkdir -p "$shots"
wait_for() {  # FILE PATTERN
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return; sleep 0.02; done
  fail "no '$2' in $1: $(cat "$1")"
}
wait_status() {  # API RUN STATUS
  for _ in $(seq 300); do
    curl -s "$1/v1/runs/$2" | grep -q "\"status\":\"$3\"" && return
    sleep 0.02
  done
  fail "run $2 is not $3: $(curl -s "$1/v1/runs/$2")"
}

# A lone engine.
"$build/examples/http_service" "$scratch/data" 127.0.0.1:0 >"$scratch/out" &
pids+=($!)
wait_for "$scratch/out" "listening on"
api=http://$(sed -n 's/^listening on //p' "$scratch/out")
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-1","input":3}' >/dev/null
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs/order-1/signals/approval" -d '{"value":10}' >/dev/null
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-2","input":1}' >/dev/null
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-3","input":2}' >/dev/null
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs" -d '{"workflow":"batch","id":"batch-1","input":2}' >/dev/null
wait_status "$api" order-1 completed
wait_status "$api" batch-1-2 running
timeout 120 node "$top/tests/console/e2e.mjs" "$api" "$shots" local

# fusee server --http with a token, the same service as its worker.
token=console-e2e-token
printf '%s\n' "$token" >"$scratch/token"
"$build/cli/fusee" server --dir "$scratch/log" --listen "unix:$scratch/s.sock" --shards 2 --http 127.0.0.1:0 \
  --token-file "$scratch/token" >"$scratch/server.out" 2>&1 &
pids+=($!)
wait_for "$scratch/server.out" "HTTP on"
front=http://$(sed -n 's/.*HTTP on //p' "$scratch/server.out")
"$build/examples/http_service" --remote "unix:$scratch/s.sock" 127.0.0.1:0 >"$scratch/worker.out" 2>&1 &
pids+=($!)
wait_for "$scratch/worker.out" "listening on"
auth=(-H "Authorization: Bearer $token")
for _ in $(seq 300); do
  [ "$(curl -s "${auth[@]}" -o /dev/null -w '%{http_code}' "$front/v1/runs")" = 200 ] && break
  sleep 0.02
done
curl -H "Content-Type: application/json" -s "${auth[@]}" -X POST "$front/v1/runs" -d '{"workflow":"order","id":"order-s1","input":1}' >/dev/null
curl -H "Content-Type: application/json" -s "${auth[@]}" -X POST "$front/v1/runs/order-s1/signals/approval" -d '{"value":0}' >/dev/null
curl -H "Content-Type: application/json" -s "${auth[@]}" -X POST "$front/v1/runs" -d '{"workflow":"order","id":"order-s2","input":2}' >/dev/null
for _ in $(seq 300); do
  curl -s "${auth[@]}" "$front/v1/runs/order-s1" | grep -q '"status":"completed"' && break
  sleep 0.02
done
FUSEE_TOKEN=$token timeout 120 node "$top/tests/console/e2e.mjs" "$front" "$shots" server
