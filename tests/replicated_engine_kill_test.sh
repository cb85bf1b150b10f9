#!/usr/bin/env bash
# Replicated mode's promise, kill -9 by kill -9: three application processes
# (tests/support/replicated_app.cpp, Engine::open(Config::replicated)) and an
# etcd of the test's own. Each round the test starts runs and signals the
# last round's runs, each call through a replica picked at random (a
# backup's API sends it on to the primary), then finds the primary (by its
# /metrics) and SIGKILLs it, and starts it again as a backup.
# In every other round a backup is SIGKILLed and started again first.
# Then etcd is SIGSTOPped for three leases (the primary must stay), the
# primary SIGSTOPped past its lease (another takes over) and resumed, and a
# backup's directory wiped and rebuilt with `fusee replica rebuild`, each
# under starts. Between them, partitions: every replica-to-replica link and
# each replica's link to etcd passes through a proxy the test cuts
# (tests/support/partition_proxy.cpp): the primary cut from both backups,
# the primary cut from etcd, and a backup cut from everything (a minority
# island), each under starts. The replicas' segments are the smallest (64 KiB), so their
# logs retire all along: every kill lands on a retiring log, and the wiped
# backup can only come back with the primary's run store.
# Every call is sent again until it is acknowledged (through whichever
# replica; the same run id and signal id, which the engine keeps once).
# Before each signal a run gets an update (a bump of 3, answered with the
# bumps' sum: 3 whenever it is sent again). At the end every acknowledged
# start must be a run, every acknowledged signal and update the one its run
# took (go = 7 and one bump, not the last round's 100), every run must finish
# with 2n + go + bumps, and its stream must hold its one chunk; every step
# must have run, and none again once its result was durable (the apps'
# shared step ledger against the acknowledgements). Then every replica's run store
# must hold the checkpoints (they travel in the log, applied by every
# replica), and `fusee inspect` must read each replica's log.
# The console on each replica must show the cluster (tests/console/cluster.mjs).
# Usage: replicated_engine_kill_test.sh SOURCE_DIR BUILD_DIR
# (FUSEE_CRASH_WHOLE=1: 20 kills instead of 6.)
set -euo pipefail
top=${1:?usage: replicated_engine_kill_test.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: replicated_engine_kill_test.sh SOURCE_DIR BUILD_DIR}" && pwd)
app="$build/tests/replicated_app"
fusee="$build/cli/fusee"
scratch=$(mktemp -d)
pids=()
app_pids=(0 0 0)
cleanup() {
  for p in "${app_pids[@]}" "${pids[@]}"; do
    [ "$p" = 0 ] && continue
    { kill -9 "$p"; wait "$p"; } 2>/dev/null || true
  done
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() {
  echo "replicated_engine_kill: $*" >&2
  for id in 0 1 2; do echo "--- replica $id:" >&2; tail -12 "$scratch/app$id.err" >&2 || true; done
  # What the calls met on the way (each 503 or timeout, by replica), and
  # the links' last commands: a liveness failure is read from these.
  echo "--- calls not acknowledged, the last ones:" >&2
  tail -12 "$scratch/refused" >&2 2>/dev/null || true
  echo "--- links:" >&2
  tail -4 "$scratch/links.log" >&2 2>/dev/null || true
  exit 1
}
command -v etcd >/dev/null || fail "etcd is not installed (scripts/install-deps); failing rather than skipping"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rounds=6
[ "${FUSEE_CRASH_WHOLE:-0}" = 1 ] && rounds=20
per_round=5

client_port=$(port)
peer_port=$(port)
etcd --name k --data-dir "$scratch/etcd" --listen-client-urls "http://127.0.0.1:$client_port" \
  --advertise-client-urls "http://127.0.0.1:$client_port" --listen-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" --initial-cluster "k=http://127.0.0.1:$peer_port" \
  --log-outputs "$scratch/etcd.log" --logger zap >/dev/null 2>&1 &
pids+=($!)
listen=("$(port)" "$(port)" "$(port)")
cluster="127.0.0.1:${listen[0]},127.0.0.1:${listen[1]},127.0.0.1:${listen[2]}"
http=("$(port)" "$(port)" "$(port)")
# Every link between the replicas, and each one's way to etcd, passes
# through a proxy the test can cut (tests/support/partition_proxy.cpp):
# "rI-J" carries what replica I sends to J (each replica sends on its own
# connections), "eI" replica I's calls to etcd. So each replica is given
# its own list: its own address, and its peers' proxies.
link_specs=()
for i in 0 1 2; do
  link_specs+=("e$i=127.0.0.1:$client_port")
  for j in 0 1 2; do [ "$i" = "$j" ] || link_specs+=("r$i-$j=127.0.0.1:${listen[$j]}"); done
done
mkfifo "$scratch/links.in"
"$build/tests/partition_proxy" "${link_specs[@]}" <"$scratch/links.in" >"$scratch/links.out" 2>&1 &
pids+=($!)
proxy_pid=$!
exec 7>"$scratch/links.in"  # (the apps are started without it: 7>&-)
for _ in $(seq 100); do grep -qx ready "$scratch/links.out" && break; sleep 0.1; done
grep -qx ready "$scratch/links.out" || fail "the partition proxy did not start: $(cat "$scratch/links.out")"
link_port() { sed -n "s/^$1 //p" "$scratch/links.out"; }
lists=()
for i in 0 1 2; do
  list=""
  for j in 0 1 2; do
    address="127.0.0.1:${listen[$j]}"
    [ "$i" = "$j" ] || address="127.0.0.1:$(link_port "r$i-$j")"
    list="$list${list:+,}$address"
  done
  lists+=("$list")
done
# links COMMAND NAME...: cut, heal or reset links, in place once it returns.
links() {
  local answers now
  kill -0 "$proxy_pid" 2>/dev/null || fail "the partition proxy died: $(tail -3 "$scratch/links.out")"
  answers=$(grep -c -e '^ok$' -e '^error' "$scratch/links.out" || true)
  echo "$*" >&7
  echo "$(date +%T.%N) $*" >>"$scratch/links.log"
  for _ in $(seq 500); do
    now=$(grep -c -e '^ok$' -e '^error' "$scratch/links.out" || true)
    [ "$now" -gt "$answers" ] && break
    sleep 0.02
  done
  [ "$now" = $((answers + 1)) ] || fail "partition proxy: no answer to '$*' within 10 s"
  [ "$(tail -1 "$scratch/links.out")" = ok ] || fail "partition proxy: '$*' answered $(tail -1 "$scratch/links.out")"
}
# Every link between replica $1 and the others, both ways.
peer_links() { for j in 0 1 2; do [ "$1" = "$j" ] || echo "r$1-$j r$j-$1"; done; }
# Replica 1 names a dead etcd member first: it must pass it over for the
# live one every time (Config::etcd lists a cluster's members).
dead_etcd=$(port)
# The app serves HTTP from Engine::open on, and registers its workflows
# after: a call in between is refused `unknown_workflow` (404), so each
# start waits for the app to say it serves.
start_app() {
  local etcd="127.0.0.1:$(link_port "e$1")" served
  [ "$1" = 1 ] && etcd="127.0.0.1:$dead_etcd,$etcd"
  served=$(grep -c "serves HTTP" "$scratch/app$1.err" 2>/dev/null || true)
  "$app" "$scratch/r$1" "$1" "${lists[$1]}" "$etcd" "127.0.0.1:${http[$1]}" "$scratch/steps" \
    2>>"$scratch/app$1.err" 7>&- &
  app_pids[$1]=$!
  for _ in $(seq 300); do
    [ "$(grep -c "serves HTTP" "$scratch/app$1.err" 2>/dev/null || true)" -gt "${served:-0}" ] && return 0
    sleep 0.1
  done
  fail "replica $1's app did not start serving within 30 s"
}
for id in 0 1 2; do
  # The smallest segments: the logs retire all along (each replica's run
  # store allows it once checkpointed), so the kills land on retiring logs.
  "$fusee" replica init --dir "$scratch/r$id" --cluster kill --segment-bytes 65536 >/dev/null
  start_app "$id"
done

# metric ID NAME [SECONDS]: replica ID's gauge NAME (asked for 5 s at most), or nothing.
metric() { { curl -s -m "${3:-5}" "http://127.0.0.1:${http[$1]}/metrics" || true; } | sed -n "s/^$2 //p"; }
# The replica that is primary now (its /metrics says so), within 30 s.
primary() {
  for _ in $(seq 300); do
    for id in 0 1 2; do
      if [ "$(metric "$id" 'fusee_replica_role{role="primary"}' 2)" = 1 ]; then
        echo "$id"
        return 0
      fi
    done
    sleep 0.1
  done
  return 1
}
# POST PATH BODY until it is acknowledged (2xx), within 60 s, each time
# through a replica picked at random: a backup's API sends the call on to
# the primary (503 while it cannot: a failover; 000: that replica is down).
post() {
  local deadline=$((SECONDS + 60)) id code
  while [ $SECONDS -lt $deadline ]; do
    id=$((RANDOM % 3))
    code=$(curl -s -o "$scratch/reply" -w '%{http_code}' -m 10 -X POST -H 'Content-Type: application/json' \
      -d "$2" "http://127.0.0.1:${http[$id]}$1" || true)
    case "$code" in
      2??) return 0 ;;
      503 | 000)
        echo "$(date +%T.%N) $1 through replica $id: $code $([ "$code" = 503 ] && head -c 160 "$scratch/reply")" \
          >>"$scratch/refused"
        sleep 0.05
        ;;
      *) fail "POST $1 $2 through replica $id: $code $(cat "$scratch/reply")" ;;
    esac
  done
  fail "POST $1 $2 was never acknowledged"
}

started=0
backups_killed=0
killed_at=0
failovers_ms=()
for round in $(seq 0 $((rounds - 1))); do
  for n in $(seq $((round * per_round)) $(((round + 1) * per_round - 1))); do
    post /v1/runs "{\"workflow\": \"order\", \"id\": \"order-$n\", \"input\": $n}"
    # From the SIGKILL to the first start the next primary acknowledged.
    if [ "$killed_at" != 0 ]; then
      failovers_ms+=($((($(date +%s%N) - killed_at) / 1000000)))
      killed_at=0
    fi
  done
  started=$(((round + 1) * per_round))
  if [ "$round" -gt 0 ]; then
    for n in $(seq $(((round - 1) * per_round)) $((round * per_round - 1))); do
      # A bump of 3, answered with the sum so far: 3, however often it is
      # sent (the same update id), across every failover.
      post "/v1/runs/order-$n/updates/bump?timeout_ms=20000" "{\"arg\": 3, \"update_id\": \"bump-$n\"}"
      answer=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("status"), r.get("result"))' "$scratch/reply")
      [ "$answer" = "completed 3" ] || fail "order-$n's bump was answered $(cat "$scratch/reply"), not 3"
      # Acknowledged after step a's result was durable: a must not run again.
      echo "a $n $(date +%s%N)" >>"$scratch/durable"
      post "/v1/runs/order-$n/signals/go" "{\"value\": 7, \"signal_id\": \"go-$n\"}"
    done
  fi
  if [ $((round % 2)) = 1 ]; then
    # A backup SIGKILLed too, and started again: it catches up as the runs go on.
    backup=$((($(primary) + 1 + RANDOM % 2) % 3))
    { kill -9 "${app_pids[$backup]}"; wait "${app_pids[$backup]}"; } 2>/dev/null || true
    start_app "$backup"
    backups_killed=$((backups_killed + 1))
    post /v1/runs "{\"workflow\": \"order\", \"id\": \"order-$((started - 1))\", \"input\": $((started - 1))}"
  fi
  victim=$(primary) || fail "no primary in round $round"
  { kill -9 "${app_pids[$victim]}"; killed_at=$(date +%s%N); wait "${app_pids[$victim]}"; } 2>/dev/null || true
  start_app "$victim"
done
# Faults other than a kill, each under starts (every one acknowledged is
# checked at the end with the rest):
more() {  # COUNT: starts of new runs
  for _ in $(seq "$1"); do
    post /v1/runs "{\"workflow\": \"order\", \"id\": \"order-$started\", \"input\": $started}"
    started=$((started + 1))
  done
}
# etcd SIGSTOPped for three leases: no view can change, and none needs to.
before=$(primary) || fail "no primary before etcd's SIGSTOP"
kill -STOP "${pids[0]}"
more 5
sleep 3
more 5
after=$(primary) || fail "no primary during etcd's SIGSTOP"
kill -CONT "${pids[0]}"
[ "$before" = "$after" ] || fail "the primary changed across etcd's SIGSTOP ($before to $after) though none failed"
# The primary SIGSTOPped past its lease: another takes over; resumed, the
# old one must not answer as primary for what it no longer leads.
stopped=$(primary) || fail "no primary to SIGSTOP"
kill -STOP "${app_pids[$stopped]}"
more 5
kill -CONT "${app_pids[$stopped]}"
more 5
# The replicas that say they are primary, within 30 s of a change: all
# three answer, every one but $1 says it is not, and one does (echoes it).
primary_other_than() {
  local leads id role answered
  for _ in $(seq 300); do
    leads=()
    answered=0
    for id in 0 1 2; do
      role=$(metric "$id" 'fusee_replica_role{role="primary"}')
      case "$role" in 1) leads+=("$id") ;& 0) answered=$((answered + 1)) ;; esac
    done
    if [ "$answered" = 3 ] && [ "${#leads[@]}" = 1 ] && [ "${leads[0]}" != "$1" ]; then
      echo "${leads[0]}"
      return 0
    fi
    sleep 0.1
  done
  return 1
}
# Partitions, through the proxies, under starts:
# The primary cut from both backups, etcd still reachable: the two elect
# one of them (a pre-vote first: the old one cannot hold etcd against
# them), and the old one steps down (it hears no quorum). Healed with the
# connections reset, as a TCP timeout would end them.
cut_off=$(primary) || fail "no primary to cut off"
links cut $(peer_links "$cut_off")
more 5
new_primary=$(primary_other_than "$cut_off") ||
  fail "with primary $cut_off cut from the backups, no one other than it alone says it is primary"
links reset $(peer_links "$cut_off")
links heal all
more 5
# The primary cut from etcd for three leases: its backups hear it, so none
# campaigns, and it stays.
# The replica etcd's primary key names (attached to its lease), "none"
# when it holds none, "error" when etcd did not answer a range.
primary_key() {
  curl -s -m 5 -X POST "http://127.0.0.1:$client_port/v3/kv/range" \
    -d "{\"key\": \"$(printf /fusee/kill/primary | base64)\"}" |
    python3 -c 'import base64, json, sys
try:
    reply = json.load(sys.stdin)
except ValueError:
    reply = {}
if "header" not in reply:
    print("error")
elif reply.get("kvs"):
    print(base64.b64decode(reply["kvs"][0]["value"]).decode())
else:
    print("none")'
}
before=$(primary) || fail "no primary before its etcd link is cut"
links cut "e$before"
more 5
# Until its lease has lapsed in etcd (the cut is real), under starts.
lapsed=no
for _ in $(seq 60); do
  [ "$(primary_key)" = none ] && lapsed=yes && break
  more 1
  sleep 0.2
done
[ "$lapsed" = yes ] || fail "with primary $before cut from etcd, its lease did not lapse in etcd"
more 5
after=$(primary_other_than none) || fail "no single primary while the primary is cut from etcd"
links heal all
[ "$before" = "$after" ] || fail "the primary changed ($before to $after) while only its link to etcd was cut"
# Healed, it takes its lease back (the same replica: no failover).
for _ in $(seq 300); do [ "$(primary_key)" = "$before" ] && break; sleep 0.1; done
[ "$(primary_key)" = "$before" ] ||
  fail "healed, primary $before did not take its lease in etcd back: the key names $(primary_key)"
# A minority island: a backup cut from both others and from etcd. It must
# not disturb them (it wins no pre-vote, reaches no etcd), and healed, with
# what waited in the links delivered late, it catches up.
lead=$(primary) || fail "no primary before a backup is cut off"
island=$(((lead + 1 + RANDOM % 2) % 3))
links cut $(peer_links "$island") "e$island"
more 5
sleep 2
# The cut is real: while the primary commits more, the island applies
# nothing (whatever was in flight when it was cut has landed by now).
island_before=$(metric "$island" fusee_replica_store_applied_batches)
commit_before=$(metric "$lead" fusee_replica_commit_batches)
more 5
island_after=$(metric "$island" fusee_replica_store_applied_batches)
commit_after=$(metric "$lead" fusee_replica_commit_batches)
[ -n "$island_before" ] && [ -n "$island_after" ] && [ -n "$commit_before" ] && [ -n "$commit_after" ] ||
  fail "no /metrics from backup $island or primary $lead during the island's cut"
[ "$commit_after" -gt "$commit_before" ] || fail "primary $lead committed nothing ($commit_before) during 5 starts"
[ "$island_after" = "$island_before" ] ||
  fail "backup $island, cut off, applied from $island_before to $island_after while the primary committed to $commit_after"
after=$(primary_other_than "$island") || fail "no single primary while backup $island is cut off"
[ "$after" = "$lead" ] || fail "the primary changed ($lead to $after) while only backup $island was cut off"
links heal all
more 5
committed=$(metric "$lead" fusee_replica_commit_batches)
[ -n "$committed" ] || fail "no /metrics from primary $lead after the island healed"
caught_up=no
for _ in $(seq 300); do
  applied=$(metric "$island" fusee_replica_store_applied_batches)
  [ "${applied:-0}" -ge "$committed" ] && caught_up=yes && break
  sleep 0.1
done
[ "$caught_up" = yes ] ||
  fail "backup $island, healed, applied through batch ${applied:-none}, not the primary's commit $committed, in 30 s"
# A backup's disk lost: its directory wiped and rebuilt (`fusee replica
# rebuild`: the primary's run store, fetched; the log, from the primary's
# start, the logs having retired what came before).
retired_at_wipe=$(metric "$(primary)" fusee_replica_retired_batches)
[ "${retired_at_wipe:-0}" -gt 0 ] ||
  fail "the primary's log retired nothing before the wipe (fusee_replica_retired_batches '${retired_at_wipe:-}')"
wiped=$((($(primary) + 1) % 3))
# Not while its application runs: the rebuild refuses, and touches nothing.
if "$fusee" replica rebuild --dir "$scratch/r$wiped" --cluster kill --replicas "$cluster" \
  >"$scratch/rebuild.out" 2>&1; then
  fail "fusee replica rebuild went ahead on a running replica's directory"
fi
grep "another process holds fusee.lock" "$scratch/rebuild.out" >/dev/null ||
  fail "fusee replica rebuild of a running replica said: $(cat "$scratch/rebuild.out")"
# (its log changes under it: what a rebuild would have made is looked for)
for made in rebuild runs.old; do
  [ ! -e "$scratch/r$wiped/$made" ] || fail "fusee replica rebuild made $made in a running replica's directory"
done
[ -d "$scratch/r$wiped/runs" ] || fail "fusee replica rebuild took a running replica's run store away"
kill -0 "${app_pids[$wiped]}" 2>/dev/null || fail "replica $wiped died when a rebuild was refused"
{ kill -9 "${app_pids[$wiped]}"; wait "${app_pids[$wiped]}"; } 2>/dev/null || true
rm -rf "$scratch/r$wiped"
rebuilt=no
for _ in $(seq 20); do
  # A failover under way: no primary answers yet.
  if "$fusee" replica rebuild --dir "$scratch/r$wiped" --cluster kill --replicas "$cluster" \
    >"$scratch/rebuild.out" 2>&1; then
    rebuilt=yes
    break
  fi
  sleep 0.5
done
[ "$rebuilt" = yes ] || fail "fusee replica rebuild: $(cat "$scratch/rebuild.out")"
grep "is in place" "$scratch/rebuild.out" >/dev/null || fail "fusee replica rebuild said: $(cat "$scratch/rebuild.out")"
start_app "$wiped"
more 5
# The runs started above are signalled with the last round's.
last_from=$(((rounds - 1) * per_round))

# The last round's runs had no signal yet.
for n in $(seq "$last_from" $((started - 1))); do
  post "/v1/runs/order-$n/signals/go" "{\"value\": 100, \"signal_id\": \"last-$n\"}"
done
violations=0
for n in $(seq 0 $((started - 1))); do
  go=10  # 7, and a bump of 3
  [ "$n" -ge "$last_from" ] && go=100
  want=$((2 * n + go))
  got=""
  for _ in $(seq 300); do
    id=$(primary) || fail "no primary at the end"
    id=$(((id + 1 + n % 2) % 3))  # read through a backup: it asks the primary
    curl -s -m 5 "http://127.0.0.1:${http[$id]}/v1/runs/order-$n" >"$scratch/run" || true
    got=$(python3 -c 'import json,sys
try:
  r = json.load(open(sys.argv[1]))
  print(r["result"] if r.get("status") == "completed" else "")
except Exception:
  print("")' "$scratch/run")
    [ -n "$got" ] && break
    sleep 0.1
  done
  if [ "$got" != "$want" ]; then
    echo "replicated_engine_kill: order-$n ended with '$got', not $want: $(cat "$scratch/run")" >&2
    violations=$((violations + 1))
  fi
done
# Every run's stream holds its one chunk, a = 2n, once.
for n in $(seq 0 $((started - 1))); do
  id=$(primary) || fail "no primary at the end"
  id=$(((id + 1 + n % 2) % 3))
  chunks=$(curl -s -m 10 "http://127.0.0.1:${http[$id]}/v1/runs/order-$n/streams/progress" || true)
  if [ "$chunks" != "{\"offset\":0,\"value\":$((2 * n))}" ]; then
    echo "replicated_engine_kill: order-$n's stream holds '$chunks', not its one chunk $((2 * n))" >&2
    violations=$((violations + 1))
  fi
done
# The step ledger: every run's steps ran, and none ran again once durable
# (a step may run twice only when the primary died before its result was).
steps_again=$(python3 -c '
import sys
ran = {}
for line in open(sys.argv[1]):
    step, n, at, pid = line.split()
    ran.setdefault((step, int(n)), []).append(int(at))
bad = []
for line in open(sys.argv[2]):
    step, n, durable_at = line.split()
    late = [at for at in ran.get((step, int(n)), []) if at > int(durable_at)]
    if late:
        bad.append(f"{step} of order-{n} ran {len(late)} time(s) after it was durable")
for n in range(int(sys.argv[3])):
    for step in ("a", "b"):
        if (step, n) not in ran:
            bad.append(f"{step} of order-{n} never ran")
for problem in bad:
    print(problem, file=sys.stderr)
print(sum(len(times) - 1 for times in ran.values()))
sys.exit(1 if bad else 0)' "$scratch/steps" "$scratch/durable" "$started") || violations=$((violations + 1))
[ "$violations" = 0 ] || fail "$violations violations after $rounds kills of the primary"
# Every replica's /metrics shows its part in the cluster, and promtool takes it.
lead=$(primary) || fail "no primary at the end"
for id in 0 1 2; do
  curl -s -m 5 "http://127.0.0.1:${http[$id]}/metrics" >"$scratch/metrics$id" || fail "no /metrics from replica $id"
  promtool check metrics <"$scratch/metrics$id" >/dev/null 2>&1 ||
    fail "promtool check metrics refuses replica $id's /metrics: $(promtool check metrics <"$scratch/metrics$id" 2>&1 | head -5)"
  role=primary
  [ "$id" = "$lead" ] || role=backup
  grep -q "^fusee_replica_role{role=\"$role\"} 1" "$scratch/metrics$id" ||
    fail "replica $id's /metrics does not say $role: $(grep fusee_replica_role "$scratch/metrics$id")"
  # Every log retired, the rebuilt one's too (it restarted at the primary's
  # start), and none is suspect.
  retired=$(sed -n 's/^fusee_replica_retired_batches //p' "$scratch/metrics$id")
  [ "${retired:-0}" -gt 0 ] || fail "replica $id's log retired nothing: '${retired:-}'"
  grep -q "^fusee_replica_suspect 0" "$scratch/metrics$id" ||
    fail "replica $id is suspect at the end: $(grep fusee_replica_suspect "$scratch/metrics$id")"
done
# The console on every replica shows the cluster, and a backup's lists the
# runs (tests/console/cluster.mjs, in headless chromium).
command -v chromium >/dev/null || fail "no chromium (scripts/install-deps installs it)"
[ -d "$top/tests/console/node_modules/puppeteer-core" ] ||
  fail "no puppeteer-core in tests/console (scripts/install-deps runs npm ci there)"
shots=${CONSOLE_SCREENSHOTS:-$build/console-screenshots}
mkdir -p "$shots"
node "$top/tests/console/cluster.mjs" "$shots" "$lead" "http://127.0.0.1:${http[0]}" "http://127.0.0.1:${http[1]}" \
  "http://127.0.0.1:${http[2]}" || fail "the console's cluster view"
# Every replica's run store followed the log (the primary's engine writes it
# through the log, every replica applies it): stopped, each one's holds
# every shard's checkpoint, and `fusee inspect` reads its log, the run
# store's shard in it too.
for id in 0 1 2; do
  kill -TERM "${app_pids[$id]}"
  wait "${app_pids[$id]}" 2>/dev/null || true
  app_pids[$id]=0
done
for id in 0 1 2; do
  "$fusee" inspect "$scratch/r$id" shards --json >"$scratch/shards$id" 2>&1 ||
    fail "fusee inspect of replica $id: $(cat "$scratch/shards$id")"
  python3 -c 'import json,sys
rows = json.load(open(sys.argv[1]))["shards"]
sys.exit(0 if len(rows) == 2 and all(r["checkpoint"] for r in rows) else 1)' "$scratch/shards$id" ||
    fail "replica $id's run store holds no checkpoint of some shard: $(cat "$scratch/shards$id")"
done
sorted=$(printf '%s\n' "${failovers_ms[@]}" | sort -n)
count=$(echo "$sorted" | wc -l)
echo "replicated_engine_kill: ok ($rounds kills of the primary and $backups_killed of a backup, etcd and the primary SIGSTOPped, the primary cut from the backups and from etcd, a backup cut from all, a backup's directory wiped and rebuilt when the logs had retired through batch $retired_at_wipe; $started runs, every acknowledged start, signal and update kept, every stream's chunk once;" \
  "no step run again once durable ($steps_again run again before);" \
  "SIGKILL to the next primary's first acknowledged start: p50 $(echo "$sorted" | sed -n "$(((count + 1) / 2))p") ms," \
  "max $(echo "$sorted" | tail -1) ms over $count failovers)"
