#!/usr/bin/env bash
# `fusee replica` as an operator meets it (docs/cli.md):
# - init makes a directory a replica, and refuses one that already is;
# - inspect reads it without changing a byte, says what a lost or damaged
#   one would do at recovery, and lists its batches; `fusee inspect` reads
#   its log (the shared log's segments) as well;
# - run refuses wrong arguments (exit 2), a missing directory and another
#   cluster's (exit 1), each with a reason;
# - a second `run` on a directory in use is refused, and so is a rebuild;
# - rebuild refuses wrong arguments (exit 2), another cluster's directory
#   and a local engine's (exit 1), and with no primary to fetch the run
#   store from says so, the directory unchanged;
# - `status` of a running cluster names its primary and what each backup
#   holds, and a replica that is down.
# Usage: cli_replica.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: cli_replica.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: cli_replica.sh SOURCE_DIR BUILD_DIR}
build=$(cd "$build" && pwd)
fusee="$build/cli/fusee"
scratch=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do { kill -9 "$p"; wait "$p"; } 2>/dev/null || true; done; rm -rf "$scratch"' EXIT
fail() { echo "cli_replica: $*" >&2; exit 1; }
expect_exit() {  # CODE PATTERN COMMAND...: exits CODE, stderr matches PATTERN
  local code=$1 pattern=$2; shift 2
  set +e
  "$@" >"$scratch/out" 2>"$scratch/err"
  local got=$?
  set -e
  [ "$got" = "$code" ] || fail "'$*' exited $got, not $code: $(cat "$scratch/err")"
  grep -q -- "$pattern" "$scratch/err" || fail "'$*' did not say '$pattern': $(cat "$scratch/err")"
}

"$fusee" replica init --dir "$scratch/r0" --cluster blue | grep "is a replica of cluster blue" >/dev/null || fail "init"
expect_exit 1 "already a replica" "$fusee" replica init --dir "$scratch/r0" --cluster blue

snapshot() { (cd "$1" && find . -printf '%p %y %s\n' | sort && find . -type f -exec sha256sum {} + | sort); }
before=$(snapshot "$scratch/r0")
"$fusee" replica inspect --dir "$scratch/r0" --batches >"$scratch/out"
grep -q "a replica of cluster blue" "$scratch/out" || fail "inspect: $(cat "$scratch/out")"
grep -q "log: 0 batches" "$scratch/out" || fail "inspect: $(cat "$scratch/out")"
[ "$before" = "$(snapshot "$scratch/r0")" ] || fail "inspect changed the directory"

# Its log is the shared log's segments: `fusee inspect` reads them too (a
# directory holding a log alone, which no engine opens as it is).
"$fusee" inspect "$scratch/r0" >"$scratch/out" || fail "fusee inspect of a replica: $(cat "$scratch/out")"
grep -q "a replicated log, chain of 0 batches" "$scratch/out" || fail "fusee inspect of a replica: $(cat "$scratch/out")"
"$fusee" inspect "$scratch/r0" segments | grep "segments       1 in" >/dev/null || fail "fusee inspect segments of a replica"
"$fusee" inspect --json "$scratch/r0" >"$scratch/out" || fail "fusee inspect --json of a replica: $(cat "$scratch/out")"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["replica"]; sys.exit(0 if r["cluster"]=="blue" and r["damage"] is None and r["batches"]==0 else 1)' \
  "$scratch/out" || fail "fusee inspect --json of a replica: $(cat "$scratch/out")"
[ "$before" = "$(snapshot "$scratch/r0")" ] || fail "fusee inspect changed the directory"

# A damaged log: inspect names the damage, still changing nothing.
printf 'not a batch, sixty-four bytes or more of it, which no replica writes.' >>"$scratch/r0/wal/0000000001.seg"
before=$(snapshot "$scratch/r0")
"$fusee" replica inspect --dir "$scratch/r0" >"$scratch/out"
grep -q "damage:" "$scratch/out" || fail "inspect did not report damage: $(cat "$scratch/out")"
set +e
"$fusee" inspect "$scratch/r0" >"$scratch/out" 2>&1
got=$?
set -e
[ "$got" = 1 ] || fail "fusee inspect of a damaged replica exited $got: $(cat "$scratch/out")"
grep -q "damage " "$scratch/out" || fail "fusee inspect did not report a replica's damage: $(cat "$scratch/out")"
set +e
"$fusee" inspect --json "$scratch/r0" >"$scratch/out" 2>/dev/null
set -e
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["replica"]; sys.exit(0 if r["damage"] else 1)' \
  "$scratch/out" || fail "fusee inspect --json did not report a replica's damage: $(cat "$scratch/out")"
[ "$before" = "$(snapshot "$scratch/r0")" ] || fail "inspect changed a damaged directory"
mkdir "$scratch/empty"
"$fusee" replica inspect --dir "$scratch/empty" | grep "not a replica of any cluster" >/dev/null || fail "inspect of a lost one"

peers=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3
expect_exit 2 "3, 5, 7" "$fusee" replica run --dir "$scratch/r0" --cluster blue --id 0 --replicas 127.0.0.1:1,127.0.0.1:2
expect_exit 2 "3, 5, 7" "$fusee" replica run --dir "$scratch/r0" --cluster blue --id 3 --replicas "$peers"
expect_exit 2 "address" "$fusee" replica run --dir "$scratch/r0" --cluster blue --id 0 --replicas a,b,c
expect_exit 2 "address" "$fusee" replica run --dir "$scratch/r0" --cluster blue --id 0 --replicas "$peers" --etcd nowhere
expect_exit 1 "no such directory" "$fusee" replica run --dir "$scratch/typo" --cluster blue --id 0 --replicas "$peers"
expect_exit 1 "another cluster" "$fusee" replica run --dir "$scratch/r0" --cluster green --id 0 --replicas "$peers"

# rebuild: wrong arguments exit 2; with no primary to fetch from, exit 1
# saying so, the directory made a rebuilt replica of the cluster (so that a
# second try goes on from there), nothing put in place of a store.
expect_exit 2 "3, 5, 7" "$fusee" replica rebuild --dir "$scratch/lost" --cluster blue --replicas 127.0.0.1:1,127.0.0.1:2
expect_exit 2 "address" "$fusee" replica rebuild --dir "$scratch/lost" --cluster blue --replicas a,b,c
expect_exit 1 "no replica answers as the primary" "$fusee" replica rebuild --dir "$scratch/lost" --cluster blue \
  --replicas "$peers"
"$fusee" replica inspect --dir "$scratch/lost" >"$scratch/out"
grep -q "not a replica of any cluster" "$scratch/out" || fail "a rebuild with no primary changed the directory: $(cat "$scratch/out")"
[ ! -e "$scratch/lost/runs" ] || fail "a failed rebuild put a run store in place"
expect_exit 1 "cluster blue, not green" "$fusee" replica rebuild --dir "$scratch/r0" --cluster green \
  --replicas "$peers"
# A local engine's directory is never taken for a lost replica's.
mkdir "$scratch/local"
echo "not a replica" >"$scratch/local/fusee.meta"
expect_exit 1 "no replica's" "$fusee" replica rebuild --dir "$scratch/local" --cluster blue --replicas "$peers"
[ "$(cat "$scratch/local/fusee.meta")" = "not a replica" ] || fail "a rebuild touched a local engine's directory"
expect_exit 2 "segment-bytes" "$fusee" replica init --dir "$scratch/small" --segment-bytes 4096

# One writer per directory: a second run is refused while the first runs.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
"$fusee" replica init --dir "$scratch/r1" --cluster blue >/dev/null
mine="127.0.0.1:$(port),127.0.0.1:$(port),127.0.0.1:$(port)"
"$fusee" replica run --dir "$scratch/r1" --cluster blue --id 0 --replicas "$mine" --etcd 127.0.0.1:1 --quiet \
  2>"$scratch/first.err" &
pids+=($!)
for _ in $(seq 50); do [ -e "$scratch/r1/replica/lock" ] && break; sleep 0.1; done
sleep 0.3
set +e
"$fusee" replica run --dir "$scratch/r1" --cluster blue --id 0 --replicas "$mine" --etcd 127.0.0.1:1 --quiet \
  >"$scratch/out" 2>"$scratch/err"
got=$?
set -e
[ "$got" = 1 ] || fail "a second run on a directory in use exited $got: $(cat "$scratch/err")"
grep -q "another process runs this replica" "$scratch/err" || fail "a second run did not say why: $(cat "$scratch/err")"
expect_exit 1 "it holds replica/lock): stop it first" "$fusee" replica rebuild --dir "$scratch/r1" --cluster blue \
  --replicas "$mine"
kill -TERM "${pids[0]}"
wait "${pids[0]}" || fail "the first run did not stop cleanly on SIGTERM: $(cat "$scratch/first.err")"
pids=()

# A running cluster as an operator meets it: three replicas and an etcd of
# the test's own. `replica status` names one primary, which says what each
# backup holds and how far it lags; a replica stopped answers nothing, and
# status says so and exits 1.
command -v etcd >/dev/null || fail "etcd is not installed (scripts/install-deps); failing rather than skipping"
client_port=$(port)
peer_port=$(port)
etcd --name t --data-dir "$scratch/etcd" --listen-client-urls "http://127.0.0.1:$client_port" \
  --advertise-client-urls "http://127.0.0.1:$client_port" --listen-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" --initial-cluster "t=http://127.0.0.1:$peer_port" \
  --log-outputs "$scratch/etcd.log" --logger zap >/dev/null 2>&1 &
pids+=($!)
cluster="127.0.0.1:$(port),127.0.0.1:$(port),127.0.0.1:$(port)"
replica_pids=()
for id in 0 1 2; do
  "$fusee" replica init --dir "$scratch/c$id" --cluster green >/dev/null
  "$fusee" replica run --dir "$scratch/c$id" --cluster green --id "$id" --replicas "$cluster" \
    --etcd "127.0.0.1:$client_port" --lease-ttl-s 1 --quiet 2>"$scratch/c$id.err" &
  pids+=($!)
  replica_pids+=($!)
done
for _ in $(seq 150); do
  # One primary serving, and both others its backups (the last may still
  # be starting when the first two have a view).
  if "$fusee" replica status --replicas "$cluster" >"$scratch/status" 2>&1 && grep -q "backups:" "$scratch/status" &&
    [ "$(grep -c ': backup, view' "$scratch/status")" = 2 ]; then
    break
  fi
  sleep 0.2
done
cp "$scratch/status" "$scratch/status.all"
[ "$(grep -c ': primary, view' "$scratch/status")" = 1 ] || fail "status names no one primary: $(cat "$scratch/status")"
[ "$(grep -c ': backup, view' "$scratch/status")" = 2 ] || fail "status names no two backups: $(cat "$scratch/status")"
grep -Eq "^  backups: replica [0-9] holds through [0-9]+ \(lag [0-9]+ batches, [0-9]+ bytes, [0-9]+\.[0-9]{3} s\); replica [0-9] holds through [0-9]+ \(lag [0-9]+ batches, [0-9]+ bytes, [0-9]+\.[0-9]{3} s\)$" \
  "$scratch/status" || fail "the primary does not say what its backups hold: $(cat "$scratch/status")"
primary=$(sed -n 's/^replica \([0-9]\) .*: primary, view.*/\1/p' "$scratch/status")
backup=$(( (primary + 1) % 3 ))
kill -TERM "${replica_pids[$backup]}"
wait "${replica_pids[$backup]}" || fail "a replica did not stop cleanly on SIGTERM: $(cat "$scratch/c$backup.err")"
set +e
"$fusee" replica status --replicas "$cluster" >"$scratch/status" 2>&1
got=$?
set -e
[ "$got" = 1 ] || fail "status with a replica down exited $got: $(cat "$scratch/status")"
grep -q "^replica $backup (.*): no answer" "$scratch/status" || fail "status did not say replica $backup is down: $(cat "$scratch/status")"
grep -q ": primary, view" "$scratch/status" || fail "the primary stopped serving with one backup down: $(cat "$scratch/status")"
[ -z "${CLI_REPLICA_SHOW:-}" ] || cat "$scratch/status.all" "$scratch/status"
echo "cli_replica: ok"
