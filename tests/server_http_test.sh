#!/usr/bin/env bash
# `fusee server --http` passes each call to the worker holding the run's
# shard: a worker (examples/http_service in remote mode) serves the API and
# announces it; calls made to the server start, signal, update and read
# runs, streams included, and complete an awakeable by its token; the worker is SIGKILLed, another takes the shards over, and the
# server's calls reach the new one, which has every run. With no worker, a
# call gets 503. SIGTERM stops the server cleanly. Then two workers split
# another server's shards, each answering for the other's runs, and a
# standby takes the half of the one SIGKILLed.
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
  --http-allowed-host api.example >"$scratch/server.out" 2>&1 &
server=$!
pids+=("$server")
wait_for "$scratch/server.out" "HTTP on"
api=$(sed -n 's/.*HTTP on //p' "$scratch/server.out")

# No worker yet: 503, and it says so.
code=$(curl -s -o "$scratch/body" -w '%{http_code}' "$api/v1/runs/order-1")
[ "$code" = 503 ] && grep -q no_worker "$scratch/body" || fail "no worker: $code $(cat "$scratch/body")"
curl -s "$api/healthz" | grep '"status":"ok"' >/dev/null || fail "healthz"
# Host: loopback's names and the one it was given; any other is 421.
port=${api##*:}
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Host: api.example:$port" "$api/healthz")" = 200 ] ||
  fail "--http-allowed-host api.example is not answered"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Host: evil.example:$port" "$api/healthz")" = 421 ] ||
  fail "Host: evil.example is answered"
# The console's files come from the server itself, worker or not.
curl -s "$api/ui/" | grep '<script type="module" src="/ui/console.js">' >/dev/null || fail "no console at $api/ui/"
[ "$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' "$api/")" = "302 http://$api/ui/" ] || fail "/ does not lead to /ui/"

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
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-1","input":2}' | grep '"outcome":"started"' >/dev/null ||
  fail "start through the server"
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-2","input":4}' >/dev/null
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs/order-1/signals/approval" -d '{"value":5,"signal_id":"a1"}' | grep accepted >/dev/null ||
  fail "signal through the server"
result=$(curl -s "$api/v1/runs/order-1")
echo "$result" | grep '"result":55' >/dev/null || fail "order-1: $result"
stream=$(curl -s "$api/v1/runs/order-1/streams/progress")
[ "$stream" = $'{"offset":0,"value":50}\n{"offset":1,"value":55}' ] || fail "stream: $stream"
# The console's engine page: the server's shards and holders (its own), the
# worker's figures (passed on, as a listing is).
curl -s "$api/v1/server" | python3 -c '
import json, sys
server = json.load(sys.stdin)
assert server["server"] is True and server["shards"] == 2, server
assert [h["shard"] for h in server["holders"]] == [0, 1], server
assert all(h["worker"] and h["http"] for h in server["holders"]), server
assert server["records_written"] > 0 and sum(server["flush_latency"]["counts"]) > 0, server
' || fail "GET /v1/server: $(curl -s "$api/v1/server")"
curl -s "$api/v1/stats" | grep '"shards_held":2' >/dev/null || fail "GET /v1/stats through the server: $(curl -s "$api/v1/stats")"
[ "$(curl -H "Content-Type: application/json" -s -o /dev/null -w '%{http_code}' -X POST "$api/v1/server")" = 405 ] || fail "POST /v1/server is not 405"
# The front is no replica: its cluster is empty, as a local engine's.
[ "$(curl -s "$api/v1/cluster")" = '{"replicated":false,"replicas":[]}' ] || fail "GET /v1/cluster: $(curl -s "$api/v1/cluster")"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$api/v1/cluster")" = 405 ] || fail "DELETE /v1/cluster is not 405"
metrics=$(curl -s "$api/metrics")
echo "$metrics" | grep 'fusee_shards_leased 2' >/dev/null || fail "metrics: $metrics"
for name in fusee_records_per_flush fusee_checkpoints_total fusee_segments_retired_total fusee_wal_segments \
  fusee_run_store_bytes; do
  echo "$metrics" | grep "^$name " >/dev/null || fail "no $name in the server's metrics"
done
appends=$(echo "$metrics" | sed -n 's/^fusee_append_duration_seconds_count //p')
[ "${appends:-0}" -gt 0 ] || fail "no append latencies: $metrics"
echo "$metrics" | grep '^fusee_flush_duration_seconds_bucket{le="+Inf"} [1-9]' >/dev/null || fail "no flush latencies: $metrics"
# Prometheus's own linter takes the server's exposition as it is.
echo "$metrics" | promtool check metrics || fail "promtool check metrics refuses the server's /metrics"

# An update-with-start through the server; the payment's awakeable token,
# read through a query, is completed after the takeover below.
answer=$(curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs/pay-1/updates/add_tip" \
  -d '{"arg":5,"update_id":"tip-1","start":{"workflow":"payment","input":100}}')
echo "$answer" | grep '"result":105' >/dev/null || fail "update-with-start through the server: $answer"
token=$(curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs/pay-1/queries/token" | sed 's/.*"answer":"\([^"]*\)".*/\1/')
[[ "$token" == awk1.* ]] || fail "no awakeable token through the server: $token"

# The worker dies; another takes over and the server's calls reach it.
kill -9 "$worker"; wait "$worker" 2>/dev/null || true
start_worker 2
answer=$(curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs/pay-1/updates/add_tip" -d '{"arg":9,"update_id":"tip-1"}')
echo "$answer" | grep '"result":105' >/dev/null || fail "the same update id after the takeover: $answer"
answer=$(curl -H "Content-Type: application/json" -s -X POST "$api/v1/awakeables/$token/complete" -d '{"value":105}')
echo "$answer" | grep '"status":"completed"' >/dev/null || fail "completing the awakeable through the server: $answer"
curl -s "$api/v1/runs/pay-1" | grep '"result":105' >/dev/null || fail "pay-1 after its awakeable: $(curl -s "$api/v1/runs/pay-1")"
code=$(curl -H "Content-Type: application/json" -s -o "$scratch/body" -w '%{http_code}' -X POST "$api/v1/awakeables/nonsense/complete" -d '{}')
[ "$code" = 400 ] || fail "a malformed token through the server: $code $(cat "$scratch/body")"
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs/order-2/signals/approval" -d '{"value":1,"signal_id":"a2"}' >/dev/null
result=$(curl -s "$api/v1/runs/order-2")
echo "$result" | grep '"result":101' >/dev/null || fail "order-2 after the takeover: $result"
curl -s "$api/v1/runs/order-1" | grep '"result":55' >/dev/null || fail "order-1 after the takeover"
events=$(curl -s -N -H 'Accept: text/event-stream' -H 'Last-Event-ID: 0' "$api/v1/runs/order-2/streams/progress")
echo "$events" | grep 'data: 101' >/dev/null || fail "SSE through the server: $events"

# A stream that stays open (order-3 waits for its approval) does not hold
# up the server's clean stop.
curl -H "Content-Type: application/json" -s -X POST "$api/v1/runs" -d '{"workflow":"order","id":"order-3","input":1}' >/dev/null
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

# Two workers split the shards of another server (at most 2 of 4 each): the
# server passes each call to the worker of the run's shard, and a worker's
# own API answers for the other's runs too. One is SIGKILLed; a standby
# holding nothing takes its half over.
"$build/cli/fusee" server --dir "$scratch/split" --listen "unix:$scratch/split.sock" --shards 4 \
  --http 127.0.0.1:0 >"$scratch/split.out" 2>&1 &
split_server=$!
pids+=("$split_server")
wait_for "$scratch/split.out" "HTTP on"
split_api=$(sed -n 's/.*HTTP on //p' "$scratch/split.out")
split_worker() {  # N: starts worker N with at most 2 shards; its API in split_worker_api
  "$build/examples/http_service" --remote "unix:$scratch/split.sock" 127.0.0.1:0 2 >"$scratch/split$1.out" 2>&1 &
  split_pid=$!
  pids+=("$split_pid")
  wait_for "$scratch/split$1.out" "listening on"
  split_worker_api=http://$(sed -n 's/.*listening on //p' "$scratch/split$1.out")
}
leased() {  # N: waits until the server has N shards leased
  for _ in $(seq 500); do
    curl -s "$split_api/metrics" | grep "^fusee_shards_leased $1\$" >/dev/null && return
    sleep 0.02
  done
  fail "the split server never had $1 shards leased: $(curl -s "$split_api/metrics" | grep leased)"
}
split_worker 1; first_pid=$split_pid; first_api=$split_worker_api
split_worker 2; second_pid=$split_pid; second_api=$split_worker_api
leased 4
split_worker 3; standby_pid=$split_pid
for n in 1 2 3 4 5 6 7 8; do
  curl -H "Content-Type: application/json" -s -X POST "$split_api/v1/runs" -d "{\"workflow\":\"order\",\"id\":\"split-$n\",\"input\":$n}" |
    grep '"outcome":"started"' >/dev/null || fail "split-$n: start through the server"
done
# Every run answered by each worker's own API, half of them forwarded.
for n in 1 2 3 4 5 6 7 8; do
  for api_of in "$first_api" "$second_api"; do
    curl -s "$api_of/v1/runs/split-$n" | grep '"status":"running"' >/dev/null || fail "split-$n through $api_of"
  done
done
count=$(curl -s "$first_api/v1/runs?status=running" | grep -o '"id":"split-' | wc -l)
[ "$count" = 8 ] || fail "the first worker lists $count of the 8 runs"
kill -9 "$first_pid"; wait "$first_pid" 2>/dev/null || true
leased 4  # the standby took the first worker's half
for n in 1 2 3 4 5 6 7 8; do
  curl -H "Content-Type: application/json" -s -X POST "$second_api/v1/runs/split-$n/signals/approval" -d "{\"value\":1000,\"signal_id\":\"s$n\"}" |
    grep accepted >/dev/null || fail "split-$n: signal through the second worker after the kill"
done
for n in 1 2 3 4 5 6 7 8; do
  want=$((n * 25 + 1000))
  curl -s "$split_api/v1/runs/split-$n" | grep "\"result\":$want" >/dev/null || fail "split-$n: no result $want"
  stream=$(curl -s "$second_api/v1/runs/split-$n/streams/progress")
  [ "$stream" = $'{"offset":0,"value":'$((n * 25))$'}\n{"offset":1,"value":'$want'}' ] ||
    fail "split-$n: stream through the second worker: $stream"
done
kill -TERM "$split_server"
wait "$split_server" || fail "the split server did not stop cleanly"
for p in "$second_pid" "$standby_pid"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
