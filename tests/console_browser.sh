#!/usr/bin/env bash
# The web console in headless Chromium (tests/console/e2e.mjs): starts
# examples/http_service on a fresh directory, makes a finished order and two
# waiting ones through the API, and runs the suite against /ui/ (which
# signals, cancels and resets them through the console). Screenshots
# go to $CONSOLE_SCREENSHOTS (default: a directory under the build tree),
# not committed.
# Usage: console_browser.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: console_browser.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: console_browser.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
service=""
trap '[ -n "$service" ] && kill "$service" 2>/dev/null; rm -rf "$scratch"' EXIT
fail() { echo "console_browser: $*" >&2; exit 1; }
command -v chromium >/dev/null || fail "no chromium (scripts/install-deps installs it)"
[ -d "$top/tests/console/node_modules/puppeteer-core" ] ||
  fail "no puppeteer-core in tests/console (scripts/install-deps runs npm ci there)"
shots=${CONSOLE_SCREENSHOTS:-$build/console-screenshots}
mkdir -p "$shots"

"$build/examples/http_service" "$scratch/data" 127.0.0.1:0 >"$scratch/out" &
service=$!
for _ in $(seq 100); do
  grep -q "listening on" "$scratch/out" 2>/dev/null && break
  sleep 0.05
done
endpoint=$(sed -n 's/^listening on //p' "$scratch/out")
[ -n "$endpoint" ] || fail "the service did not start"
curl -s -X POST "$endpoint/v1/runs" -d '{"workflow":"order","id":"order-1","input":3}' >/dev/null
curl -s -X POST "$endpoint/v1/runs/order-1/signals/approval" -d '{"value":10}' >/dev/null
curl -s -X POST "$endpoint/v1/runs" -d '{"workflow":"order","id":"order-2","input":1}' >/dev/null
curl -s -X POST "$endpoint/v1/runs" -d '{"workflow":"order","id":"order-3","input":2}' >/dev/null
for _ in $(seq 100); do
  curl -s "$endpoint/v1/runs/order-1" | grep -q '"status":"completed"' && break
  sleep 0.05
done
timeout 120 node "$top/tests/console/e2e.mjs" "http://$endpoint" "$shots"
