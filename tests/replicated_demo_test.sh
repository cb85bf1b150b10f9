#!/usr/bin/env bash
# `fusee demo --replicated`: the order demo on three replicas and an etcd of
# its own (demo/replicated_order_demo.hpp). The primary is SIGKILLed 30
# times, at random moments and right behind random acknowledgements, and
# each time started again as a backup once another leads; once it hangs
# first (SIGSTOPped until another leads); in every other life a backup is
# SIGKILLed first and started again at once; halfway, the backups are
# restarted with the patched code (a rolling deploy). The
# demo's ledger, which reads every replica's reports, then checks what it
# checks for the local demo: every acknowledged start, signal, update and
# chunk survived, no step ran again once durable, every run finished with
# the one result it may have, the patch never flipped, the queue's bound
# held. Then what a user may get wrong: flags that do not go with it, and
# no etcd on the PATH, each refused with a reason and nothing run.
set -euo pipefail
top=${1:?usage: replicated_demo_test.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:-$top/build}" && pwd)
fusee="$build/cli/fusee"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() {
  echo "replicated_demo_test: $*" >&2
  exit 1
}
command -v etcd >/dev/null || fail "etcd is not installed (scripts/install-deps); failing rather than skipping"

"$fusee" demo --replicated --dir "$scratch/data" --kills 30 --orders 300 --quiet >"$scratch/out" 2>&1 ||
  fail "the demo found violations or could not run: $(tail -20 "$scratch/out")"
grep -E ' 30 kills, .* 0 violations' "$scratch/out" >/dev/null || fail "unexpected summary: $(tail -5 "$scratch/out")"
# (The hang is skipped when a slow machine's primary was replaced by itself
# in that life already.)
grep -E '^replicas: the primary SIGKILLed 30 times \(([01]) of them SIGSTOPped first until another led, ([0-9]+) replaced before by themselves\), a backup [1-9][0-9]* times' \
  "$scratch/out" >/dev/null || fail "no backup was SIGKILLed: $(tail -5 "$scratch/out")"
for id in 0 1 2; do
  [ -d "$scratch/data/replica-$id/replica" ] || fail "no replica $id in the demo's directory"
done
tail -2 "$scratch/out"

for flags in "--remote" "--split --remote" "--server unix:$scratch/none.sock" "--backup $scratch/backup"; do
  # shellcheck disable=SC2086 # the flags are words
  if "$fusee" demo --replicated $flags --dir "$scratch/other" >"$scratch/refused" 2>&1; then
    fail "fusee demo --replicated $flags ran"
  fi
  grep "takes none of" "$scratch/refused" >/dev/null || fail "--replicated $flags said: $(cat "$scratch/refused")"
  [ ! -e "$scratch/other" ] || fail "--replicated $flags made its directory"
done

# No etcd: a clear reason, exit status 2.
status=0
PATH=/usr/bin/nonexistent "$fusee" demo --replicated --dir "$scratch/no-etcd" >"$scratch/no-etcd.out" 2>&1 || status=$?
[ "$status" = 2 ] || fail "without etcd the demo exited $status: $(cat "$scratch/no-etcd.out")"
grep "cannot start etcd" "$scratch/no-etcd.out" >/dev/null || fail "without etcd the demo said: $(cat "$scratch/no-etcd.out")"
echo "replicated_demo_test: ok"
