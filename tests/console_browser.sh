#!/usr/bin/env bash
# The web console in headless Chromium (tests/console/e2e.mjs), twice:
# against examples/http_service's own listener on a fresh directory, with
# runs made through the API -- a finished order, two waiting ones, a batch
# of two child orders, two payments (one with an id full of the characters
# ids may hold) -- and a stuck order-1, which examples/versioning starts with
# its other code before the service opens the directory (the service's
# order writes a stream where that journal waits for a signal). The suite
# signals, queries, updates, cancels and resets through the console, makes
# a schedule and a queue, and kills the service and starts it again on the
# same directory and port (it knows the service by $FUSEE_SERVICE_PID and
# how to start it by $FUSEE_SERVICE; the one it starts is killed below by
# the pid it leaves in $FUSEE_SERVICE_PID_FILE). Then through
# `fusee server --http`'s front, wanting a token, with the service as its
# worker. Screenshots go to $CONSOLE_SCREENSHOTS (default: a directory
# under the build tree), not committed.
# Usage: console_browser.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: console_browser.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: console_browser.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -s "$scratch/service.pid" ] && kill "$(cat "$scratch/service.pid")" 2>/dev/null || true
  rm -rf "$scratch"
}
trap stop EXIT
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
    curl -s "$1/v1/runs/$2" | grep "\"status\":\"$3\"" >/dev/null && return
    sleep 0.02
  done
  fail "run $2 is not $3: $(curl -s "$1/v1/runs/$2")"
}

# A lone engine, with a run its code no longer matches.
[ -x "$build/examples/versioning" ] || fail "no $build/examples/versioning (ninja -C BUILD_DIR examples/versioning)"
"$build/examples/versioning" "$scratch/data" old >/dev/null
"$build/examples/http_service" "$scratch/data" 127.0.0.1:0 >"$scratch/out" 2>&1 &
service=$!
pids+=($service)
disown "$service"  # the suite kills it: no word from the shell about that
wait_for "$scratch/out" "listening on"
address=$(sed -n 's/^listening on //p' "$scratch/out")
api=http://$address
start() { curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs" -d "$1" >/dev/null; }
start '{"workflow":"order","id":"order-4","input":3}'
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs/order-4/signals/approval" -d '{"value":10}' >/dev/null
start '{"workflow":"order","id":"order-2","input":1}'
start '{"workflow":"order","id":"order-3","input":2}'
start '{"workflow":"batch","id":"batch-1","input":2}'
start '{"workflow":"payment","id":"pay-1","input":100}'
start '{"workflow":"payment","id":"odd:id@x~y+z=w,v","input":1}'
wait_status "$api" order-4 completed
wait_status "$api" batch-1-2 running
wait_status "$api" order-1 stuck
FUSEE_SERVICE_PID=$service FUSEE_SERVICE="$build/examples/http_service $scratch/data $address" \
  FUSEE_SERVICE_PID_FILE="$scratch/service.pid" timeout 150 node "$top/tests/console/e2e.mjs" "$api" "$shots" local

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
  curl -s "${auth[@]}" "$front/v1/runs/order-s1" | grep '"status":"completed"' >/dev/null && break
  sleep 0.02
done
FUSEE_TOKEN=$token timeout 120 node "$top/tests/console/e2e.mjs" "$front" "$shots" server
