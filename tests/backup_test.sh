#!/usr/bin/env bash
# Continuous backup end to end (docs/backup.md): `fusee demo --backup` runs
# the order demo with the worker's engine backing up to a directory every
# 50 ms while it is SIGKILLed 15 times (an upload resumes after each kill
# from the last manifest and the log). After each kill the demo restores the
# latest and checks that every approval and result acknowledged before its
# newest batch is there; after the final life the demo
# restores the latest into DIR-restored and a last worker re-reads every
# stream, result and run there, which the demo's ledger holds to the same
# checks as the original. Then `fusee backup status` on the original, a
# restore to a moment before anything, and the refusals: a target that is
# not one, a time that is not one, a directory that is not empty.
set -euo pipefail
top=${1:?usage: backup_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
fusee="$build/cli/fusee"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "backup_test: $*" >&2; exit 1; }

"$fusee" demo --dir "$scratch/data" --backup "$scratch/target" --kills 15 --orders 100 >"$scratch/demo.out" 2>&1 ||
  { cat "$scratch/demo.out"; fail "the demo with a backup failed"; }
grep -q "^restored: the latest of $scratch/target" "$scratch/demo.out" || { cat "$scratch/demo.out"; fail "no restored check"; }
grep "^fusee demo:" "$scratch/demo.out" | tail -1
grep -q " 0 violations" "$scratch/demo.out" || fail "violations"
# After each kill the demo restored the backup's latest and found every
# approval and result acknowledged before its newest batch.
checked=$(grep -c "^  backup: the backup" "$scratch/demo.out" || true)
[ "$checked" -eq 15 ] || { cat "$scratch/demo.out"; fail "$checked restores after a kill, not 15"; }

status=$("$fusee" backup status "$scratch/data" --json)
python3 - "$status" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
assert s["pending_batches"] == 0 and s["covered_sequence"] == s["log_last_sequence"] > 0, s
PY
# (Output captured first: grep -q stops at its match, and with pipefail
# the writer's SIGPIPE would fail the pipeline.)
out=$("$fusee" backup status "$scratch/data")
grep -q "everything is on the target" <<<"$out" || fail "backup status: $out"

# A moment before anything: at most a batch or two with no journal record of
# their own, published by a killed first life before its first upload (they
# take the time before them, the epoch; docs/backup.md, "The loss window"),
# far fewer than the latest.
# With none, the restore is refused: there is nothing to restore to then.
latest=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["covered_sequence"])' "$status")
if out=$("$fusee" restore --from "$scratch/target" --to 1970-01-01T00:00:01Z --dir "$scratch/early" 2>&1); then
  early=$(sed -nE 's/^fusee restore: ([0-9]+) batches.*/\1/p' <<<"$out")
  [ -n "$early" ] && [ "$early" -gt 0 ] && [ "$early" -lt "$latest" ] || fail "a restore to before the backup: $out"
else
  grep -q "before the first batch" <<<"$out" || fail "a restore to before the backup: $out"
  [ ! -e "$scratch/early" ] || fail "a refused restore left $scratch/early"
  "$fusee" restore --from "$scratch/target" --to latest --dir "$scratch/early" >/dev/null
fi

# backup verify: every way to restore the target checked, nothing written;
# a metrics file on success; one byte changed in a chunk names it, exit 1.
out=$("$fusee" backup verify --from "$scratch/target" --metrics-file "$scratch/verify.prom") ||
  fail "verify of a sound target failed: $out"
grep -q "every way to restore it holds" <<<"$out" || fail "verify: $out"
grep -q "^fusee_backup_verify_last_success_timestamp_seconds [0-9]" "$scratch/verify.prom" || fail "no verify metric"
cp -r "$scratch/target" "$scratch/damaged-target"
chunk=$(ls "$scratch/damaged-target" | grep '^chunk-' | tail -1)
printf '\x01' | dd of="$scratch/damaged-target/$chunk" bs=1 seek=20 conv=notrunc 2>/dev/null
if out=$("$fusee" backup verify --from "$scratch/damaged-target" 2>&1); then fail "verify passed a damaged chunk: $out"; fi
grep -q "$chunk" <<<"$out" || fail "verify did not name $chunk: $out"

# A restore drill: restored into a scratch directory under TMPDIR, opened
# read-only with every journal assembled, removed.
mkdir "$scratch/tmp"
out=$(TMPDIR="$scratch/tmp" "$fusee" restore --from "$scratch/target" --check) || fail "the drill failed: $out"
grep -q "^fusee restore --check: it opens: [0-9]* runs" <<<"$out" || fail "the drill: $out"
[ -z "$(ls -A "$scratch/tmp")" ] || fail "the drill left $(ls "$scratch/tmp")"
# A drill of a target that cannot restore fails, and leaves nothing either.
mkdir "$scratch/empty-target"
if out=$(TMPDIR="$scratch/tmp" "$fusee" restore --from "$scratch/empty-target" --check 2>&1); then
  fail "a drill of an empty target passed: $out"
fi
[ -z "$(ls -A "$scratch/tmp")" ] || fail "the failed drill left $(ls "$scratch/tmp")"

# Refusals, each with its reason and exit status 1.
refused() {
  local why=$1; shift
  if out=$("$fusee" "$@" 2>&1); then fail "accepted: $*"; fi
  grep -q -- "$why" <<<"$out" || fail "for '$*' expected '$why', got: $out"
}
refused "holds no backup" restore --from "$scratch/data" --to latest --dir "$scratch/none"
refused "not a time" restore --from "$scratch/target" --to yesterday --dir "$scratch/none"
refused "is not empty" restore --from "$scratch/target" --to latest --dir "$scratch/data"
# Epoch seconds where ms are wanted: said so, not read as 1970.
refused "a bare number is milliseconds" restore --from "$scratch/target" --to 1796287082 --dir "$scratch/none"
refused "$scratch/missing does not exist" restore --from "$scratch/target" --to latest --dir "$scratch/missing/sub"
refused "has no backup" backup status "$scratch/early"
echo "backup_test: demo with 15 kills restored and checked; status, an early restore, backup verify (sound and damaged), a restore drill and five refusals"
