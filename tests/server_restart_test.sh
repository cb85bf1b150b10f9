#!/usr/bin/env bash
# The server itself is SIGKILLed and restarted under load: `fusee server`
# runs on a Unix socket, `fusee demo --server` runs its workers against it
# (one at a time, each SIGKILLed; 10 kills), and meanwhile this script
# SIGKILLs the server 8 times and starts it again on the same directory.
# Workers reconnect, check that the server kept every record it
# acknowledged, send again what it had not made durable, and carry on (the
# run store's calls too: the workers checkpoint every 100 ms); the demo's
# ledger checks that nothing acknowledged was lost. Then a SIGTERM stops the
# server cleanly and `fusee inspect` finds every run finished in its
# directory. A second round does the same with the shards split between a
# partner worker and the killed ones (`fusee demo --split`).
set -euo pipefail
top=${1:?usage: server_restart_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
fusee="$build/cli/fusee"
scratch=$(mktemp -d)
server=""
demo=""
cleanup() {
  [ -n "$demo" ] && kill -9 "$demo" 2>/dev/null || true
  [ -n "$server" ] && kill -9 "$server" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
socket="$scratch/server.sock"
log_dir="$scratch/log"
start_server() {
  "$fusee" server --dir "$log_dir" --listen "unix:$socket" --shards 4 >>"$scratch/server.log" 2>&1 &
  server=$!
  for _ in $(seq 200); do [ -S "$socket" ] && return; sleep 0.01; done
  echo "server_restart_test: the server did not start"; cat "$scratch/server.log"; exit 1
}
# round NAME DEMO_ARGS...: the demo against the server, SIGKILLing and
# restarting the server meanwhile (8 times at most, 3 at least).
round() {
  local name=$1
  shift
  start_server
  "$fusee" demo --server "unix:$socket" --dir "$scratch/$name" --kills 10 --orders 200 --quiet "$@" \
    >"$scratch/$name.out" 2>&1 &
  demo=$!
  local restarts=0
  while kill -0 "$demo" 2>/dev/null && [ "$restarts" -lt 8 ]; do
    sleep "0.$(( (RANDOM % 6) + 2 ))"
    kill -0 "$demo" 2>/dev/null || break
    kill -9 "$server"
    wait "$server" 2>/dev/null || true
    rm -f "$socket"
    start_server
    restarts=$((restarts + 1))
  done
  local status=0
  wait "$demo" || status=$?
  demo=""
  cat "$scratch/$name.out"
  echo "server_restart_test: $name: the server was SIGKILLed and restarted $restarts times"
  [ "$status" = 0 ] || { echo "server_restart_test: $name failed ($status)"; tail -20 "$scratch/server.log"; exit 1; }
  [ "$restarts" -ge 3 ] || { echo "server_restart_test: only $restarts server restarts happened during $name"; exit 1; }
  grep -q " 0 violations" "$scratch/$name.out"
}
round demo
# SIGTERM: the server closes cleanly, and its directory (a local engine's
# layout) is what `fusee inspect` reads: every order and every pack
# finished, in the run store its workers checkpointed into; only the
# packing queue's own run goes on.
kill -TERM "$server"
wait "$server" || { echo "server_restart_test: the server's SIGTERM exit was not 0"; exit 1; }
server=""
tail -1 "$scratch/server.log" | grep "closed cleanly" >/dev/null || { echo "server_restart_test: no clean close"; exit 1; }
"$fusee" inspect "$scratch/log" runs --json --limit 100000 >"$scratch/runs.json"
python3 - "$scratch/runs.json" <<'PY'
import collections, json, sys
runs = json.load(open(sys.argv[1]))["runs"]
finished = collections.Counter(r["workflow"] for r in runs if r["status"] in ("completed", "failed", "cancelled"))
running = [r["id"] for r in runs if r["status"] not in ("completed", "failed", "cancelled")]
assert finished["order"] == 200 and finished["pack"] == 200, f"server_restart_test: inspect found finished {dict(finished)}"
assert running == ["queue:packing"], f"server_restart_test: inspect found running {running}"
PY
echo "server_restart_test: the stopped server's directory has every run finished (fusee inspect)"

# Again with the shards split (--split): a partner worker holds half of them
# through every life while the other half's workers are SIGKILLed; at each
# server restart both reconnect and take back the shards they held.
log_dir="$scratch/log-split"
rm -f "$socket"
round demo-split --split
kill -TERM "$server"
wait "$server" || { echo "server_restart_test: the server's SIGTERM exit was not 0 (split)"; exit 1; }
server=""
