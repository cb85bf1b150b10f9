#!/usr/bin/env bash
# `fusee server --http` passes each call to the worker holding the run's
# shard: a worker (examples/http_service in remote mode) serves the API and
# announces it; calls made to the server start, signal and read runs, streams
# included; the worker is SIGKILLed, another takes the shards over, and the
# server's calls reach the new one, which has every run. With no worker, a
# call gets 503. SIGTERM stops the server cleanly.
set -euo pipefail
top=${1:?usage: server_http_test.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: server_http_test.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$scratch"' EXIT
fail() { echo "server_http_test: $*"; exit 1; }
wait_for() {  # FILE PATTERN
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return; sleep 0.02; done
  fail "no '$2' in $1: $(cat "$1")"
}
# Addresses: one that is not one, and TCP off loopback without a token, are
# refused before anything starts.
set +e
"$build/cli/fusee" server --dir "$scratch/bad" --listen 127.0.0.1:99999 >"$scratch/bad.out" 2>&1
code=$?
"$build/cli/fusee" server --dir "$scratch/bad" --listen 0.0.0.0:0 >>"$scratch/bad.out" 2>&1
code2=$?
set -e
[ "$code" = 2 ] && [ "$code2" = 2 ] || fail "bad addresses: exit codes $code and $code2: $(cat "$scratch/bad.out")"
grep -q "the port must be 0 to 65535" "$scratch/bad.out" || fail "no port refusal: $(cat "$scratch/bad.out")"
grep -q "(not loopback) needs --token-file" "$scratch/bad.out" || fail "no token refusal: $(cat "$scratch/bad.out")"

"$build/cli/fusee" server --dir "$scratch/log" --listen "unix:$scratch/s.sock" --shards 2 --http 127.0.0.1:0 \
  >"$scratch/server.out" 2>&1 &
server=$!
pids+=("$server")
wait_for "$scratch/server.out" "HTTP on"
api=$(sed -n 's/.*HTTP on //p' "$scratch/server.out")

# No worker yet: 503, and it says so.
code=$(curl -s -o "$scratch/body" -w '%{http_code}' "$api/v1/runs/order-1")
[ "$code" = 503 ] && grep -q no_worker "$scratch/body" || fail "no worker: $code $(cat "$scratch/body")"
curl -s "$api/healthz" | grep -q '"status":"ok"' || fail "healthz"

start_worker() {
  "$build/examples/http_service" --remote "unix:$scratch/s.sock" 127.0.0.1:0 >"$scratch/worker$1.out" 2>&1 &
  worker=$!
  pids+=("$worker")
  wait_for "$scratch/worker$1.out" "listening on"
  # The announce follows the leases; wait until the server passes calls on.
  for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$api/v1/runs")" = 200 ] && return
    sleep 0.02
  done
  fail "the server never reached worker $1"
}
start_worker 1
curl -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-1","input":2}' | grep -q '"outcome":"started"' ||
  fail "start through the server"
curl -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-2","input":4}' >/dev/null
curl -s -X POST "$api/v1/runs/order-1/signals/approval" -d '{"value":5,"signal_id":"a1"}' | grep -q accepted ||
  fail "signal through the server"
result=$(curl -s "$api/v1/runs/order-1")
echo "$result" | grep -q '"result":55' || fail "order-1: $result"
stream=$(curl -s "$api/v1/runs/order-1/streams/progress")
[ "$stream" = $'{"offset":0,"value":50}\n{"offset":1,"value":55}' ] || fail "stream: $stream"
metrics=$(curl -s "$api/metrics")
echo "$metrics" | grep -q 'fusee_shards_leased 2' || fail "metrics: $metrics"
for name in fusee_records_per_flush fusee_checkpoints_total fusee_segments_retired_total fusee_wal_segments \
  fusee_run_store_bytes; do
  echo "$metrics" | grep -q "^$name " || fail "no $name in the server's metrics"
done
appends=$(echo "$metrics" | sed -n 's/^fusee_append_latency_us_count //p')
[ "${appends:-0}" -gt 0 ] || fail "no append latencies: $metrics"
echo "$metrics" | grep -q '^fusee_flush_latency_us_bucket{le="+Inf"} [1-9]' || fail "no flush latencies: $metrics"

# The worker dies; another takes over and the server's calls reach it.
kill -9 "$worker"; wait "$worker" 2>/dev/null || true
start_worker 2
curl -s -X POST "$api/v1/runs/order-2/signals/approval" -d '{"value":1,"signal_id":"a2"}' >/dev/null
result=$(curl -s "$api/v1/runs/order-2")
echo "$result" | grep -q '"result":101' || fail "order-2 after the takeover: $result"
curl -s "$api/v1/runs/order-1" | grep -q '"result":55' || fail "order-1 after the takeover"
events=$(curl -s -N -H 'Accept: text/event-stream' -H 'Last-Event-ID: 0' "$api/v1/runs/order-2/streams/progress")
echo "$events" | grep -q 'data: 101' || fail "SSE through the server: $events"

# A stream that stays open (order-3 waits for its approval) does not hold
# up the server's clean stop.
curl -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-3","input":1}' >/dev/null
curl -s -N -H 'Accept: text/event-stream' "$api/v1/runs/order-3/streams/progress" >"$scratch/open-stream" &
pids+=($!)
for _ in $(seq 300); do grep -q 'data: 25' "$scratch/open-stream" && break; sleep 0.02; done
grep -q 'data: 25' "$scratch/open-stream" || fail "the open stream showed nothing"
kill -TERM "$server"
for _ in $(seq 500); do kill -0 "$server" 2>/dev/null || break; sleep 0.02; done
if kill -0 "$server" 2>/dev/null; then fail "the server did not stop within 10 s with a stream open"; fi
wait "$server" || fail "the server did not stop cleanly"
grep -q "closed cleanly" "$scratch/server.out" || fail "no clean close: $(cat "$scratch/server.out")"
kill -9 "$worker"; wait "$worker" 2>/dev/null || true
