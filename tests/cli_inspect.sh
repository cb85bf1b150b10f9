#!/usr/bin/env bash
# `fusee inspect` and `fusee reshard` on a real directory (made by
# tests/support/sample_dir.cpp):
# - inspect is read-only: every view, human and JSON, leaves every file's
#   bytes and every name as they were, and works on a read-only copy read by
#   an unprivileged user;
# - its JSON parses and has the documented keys (docs/cli.md);
# - a damaged directory is explained, with exit code 1;
# - reshard refuses a directory in use, moves the runs 2 -> 3 -> 1, and they
#   finish with their results; wrong arguments exit 2 with the usage;
# - the examples in docs/cli.md print what the doc says.
# Usage: cli_inspect.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: cli_inspect.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: cli_inspect.sh SOURCE_DIR BUILD_DIR}
build=$(cd "$build" && pwd)
fusee="$build/cli/fusee"
sample="$build/tests/sample_dir"
scratch=$(mktemp -d)
trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
fail() { echo "cli_inspect: $*" >&2; exit 1; }

"$sample" "$scratch/data" make >/dev/null

snapshot() {  # every name and every file's bytes under $1
  (cd "$1" && find . -printf '%p %y %s\n' | sort && find . -type f -exec sha256sum {} + | sort)
}
views=("" "segments" "batches" "shards" "blobs" "runs" "runs --status completed" "runs --workflow order --limit 2"
       "run order-2" "run order-4" "run greet-ada" "stream order-2 progress" "stream order-1 progress")

# --- read-only, every view ---
before=$(snapshot "$scratch/data")
for view in "${views[@]}"; do
  # shellcheck disable=SC2086
  "$fusee" inspect "$scratch/data" $view >"$scratch/out" || fail "inspect $view exited $?"
  [ -s "$scratch/out" ] || fail "inspect $view printed nothing"
  # shellcheck disable=SC2086
  "$fusee" inspect "$scratch/data" $view --json >"$scratch/out.json" || fail "inspect $view --json exited $?"
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$scratch/out.json" || fail "inspect $view --json: not JSON"
done
after=$(snapshot "$scratch/data")
[ "$before" = "$after" ] || fail "inspect changed the directory: $(diff <(echo "$before") <(echo "$after") | head -5)"

# --- what the views say ---
"$fusee" inspect "$scratch/data" >"$scratch/summary"
grep -q "recovery       opens; chain of" "$scratch/summary" || fail "summary: no recovery line"
grep -q "no close marker (the last life crashed)" "$scratch/summary" || fail "summary: the crash is not shown"
grep -qE "runs +2 running \(1 of them parked\), 4 completed, 1 failed, 1 cancelled" "$scratch/summary" ||
  fail "summary: wrong run counts: $(grep '^runs' "$scratch/summary")"
"$fusee" inspect "$scratch/data" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
for key in ("dir", "root", "meta", "recovery", "segments", "shards", "blobs", "runs"):
    assert key in d, key
assert d["meta"] == {"format": 1, "shards": 2, "layout": 0}, d["meta"]
assert d["recovery"]["opens"] is True and d["recovery"]["refusal"] is None
assert d["runs"] == {"running": 2, "parked": 1, "completed": 4, "failed": 1, "cancelled": 1}, d["runs"]
assert d["blobs"]["blob_records"] >= 1, d["blobs"]
for segment in d["segments"]:
    for key in ("number", "path", "bytes", "header", "first_sequence", "last_sequence", "chain_batches", "state"):
        assert key in segment, key
for shard in d["shards"]:
    for key in ("shard", "log_first_lsn", "log_last_lsn", "checkpoint"):
        assert key in shard, key
' || fail "summary --json does not match its schema"
"$fusee" inspect "$scratch/data" run order-2 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["found"] and d["journal"]["where"] == "parked", d
kinds = [r["kind"] for r in d["journal"]["records"]]
assert kinds[:3] == ["run_started", "step_started", "step_completed"], kinds
assert "wait_started" in kinds, kinds
for r in d["journal"]["records"]:
    for key in ("source", "lsn", "kind", "generation", "position", "name", "detail", "number", "time_ms", "at_ms",
                "took_us", "parent", "flag", "value"):
        assert key in r, key
    assert r["at_ms"] > 0, r  # every record says when it was made
' || fail "run order-2 --json"
"$fusee" inspect "$scratch/data" batches --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["batches"], d
seqs = [b["sequence"] for b in d["batches"]]
assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
' || fail "batches --json"
if "$fusee" inspect "$scratch/data" run no-such-run >/dev/null; then fail "an unknown run exits 0"; fi

# --- a read-only copy, read by nobody ---
cp -a "$scratch/data" "$scratch/ro"
cp "$fusee" "$scratch/fusee"
chmod -R a-w "$scratch/ro"
chmod 755 "$scratch"
as_user=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
ro_before=$(snapshot "$scratch/ro")
for view in "${views[@]}"; do
  # shellcheck disable=SC2086
  "${as_user[@]}" "$scratch/fusee" inspect "$scratch/ro" $view --json >/dev/null ||
    fail "inspect $view on a read-only copy exited $?"
done
[ "$ro_before" = "$(snapshot "$scratch/ro")" ] || fail "inspect changed the read-only copy"
chmod -R u+w "$scratch/ro"

# --- a damaged copy: refused, explained, exit 1 ---
cp -a "$scratch/data" "$scratch/bad"
segment=$(ls "$scratch/bad/wal"/*.seg | head -1)
# Byte 100 of the first batch (at 4096): inside a sealed, acknowledged batch.
printf '\xff\xff\xff\xff' | dd of="$segment" bs=1 seek=$((4096 + 100)) conv=notrunc status=none
set +e
"$fusee" inspect "$scratch/bad" >"$scratch/bad.out" 2>&1; status=$?
set -e
[ "$status" = 1 ] || fail "a damaged directory: exit $status, not 1"
grep -q "REFUSES TO OPEN" "$scratch/bad.out" || fail "a damaged directory: no refusal shown"
grep -q "segments" "$scratch/bad.out" || fail "a damaged directory: segments not shown"
set +e
"$fusee" inspect "$scratch/bad" runs >"$scratch/bad.out" 2>&1; status=$?
set -e
[ "$status" = 1 ] && grep -q "cannot show the runs" "$scratch/bad.out" || fail "runs of a damaged directory"
set +e
"$fusee" reshard "$scratch/bad" --shards 3 >"$scratch/bad.out" 2>&1; status=$?
set -e
[ "$status" = 1 ] && grep -q "does not open, so it cannot be resharded" "$scratch/bad.out" || fail "reshard of a damaged directory"

# --- reshard ---
set +e
"$fusee" reshard "$scratch/data" >"$scratch/usage" 2>&1; status=$?
set -e
[ "$status" = 2 ] && grep -q "Usage" "$scratch/usage" || fail "reshard without --shards: exit $status"
set +e
"$fusee" reshard "$scratch/data" --shards 0 >"$scratch/usage" 2>&1; status=$?
set -e
[ "$status" = 2 ] || fail "reshard --shards 0: exit $status"
flock -o "$scratch/data/fusee.lock" sleep 30 &  # -o: only flock holds it, so killing flock frees it
holder=$!
sleep 0.3
set +e
"$fusee" reshard "$scratch/data" --shards 3 >"$scratch/busy" 2>&1; status=$?
set -e
kill "$holder"; wait "$holder" 2>/dev/null || true
[ "$status" = 1 ] && grep -q "is in use" "$scratch/busy" || fail "reshard of a directory in use: exit $status"

"$fusee" reshard "$scratch/data" --shards 3 >"$scratch/reshard.out" 2>"$scratch/reshard.err" || fail "reshard to 3"
grep -q "resharded .*: 2 -> 3 shards (layout 0 -> 1); moved 2 unfinished runs (1 parked" "$scratch/reshard.out" ||
  fail "reshard said: $(cat "$scratch/reshard.out")"
grep -q "reshard: shard 2 of 2 moved" "$scratch/reshard.err" || fail "no progress lines: $(cat "$scratch/reshard.err")"
"$fusee" inspect "$scratch/data" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["meta"] == {"format": 1, "shards": 3, "layout": 1}, d["meta"]
assert d["runs"] == {"running": 2, "parked": 1, "completed": 4, "failed": 1, "cancelled": 1}, d["runs"]
' || fail "after reshard to 3"
[ ! -e "$scratch/data/wal" ] && [ ! -e "$scratch/data/runs" ] || fail "the old layout was left behind"
"$fusee" reshard "$scratch/data" --shards 3 | grep "already has 3 shards" >/dev/null || fail "a reshard to the same count"
"$sample" "$scratch/data" finish >"$scratch/finish"
grep -qx "shards 3" "$scratch/finish" || fail "finish: $(cat "$scratch/finish")"
for line in "greet-ada hello, Ada" "big-1 4096" "order-1 15" "order-2 27" "order-4 49" "broken-1 step_failed" \
            "order-3 cancelled"; do
  grep -qx "$line" "$scratch/finish" || fail "finish: no '$line' in $(cat "$scratch/finish")"
done
"$fusee" reshard "$scratch/data" --shards 1 --quiet >/dev/null || fail "reshard to 1"
"$fusee" inspect "$scratch/data" runs | grep "runs: 0 running (0 parked), 6 completed, 1 failed, 1 cancelled" >/dev/null ||
  fail "after reshard to 1: $("$fusee" inspect "$scratch/data" runs | head -1)"

# --- the examples in docs/cli.md ---
# Each "$ fusee inspect data ..." block of docs/cli.md marked <!-- checked -->
# prints exactly what follows it, on a fresh sample directory.
rm -rf "$scratch/docs" && mkdir "$scratch/docs"
"$sample" "$scratch/docs/data" make >/dev/null
python3 - "$top/docs/cli.md" "$fusee" "$scratch/docs" <<'PY'
import re, subprocess, sys
doc, fusee, cwd = sys.argv[1:]
text = open(doc).read()
blocks = re.findall(r"<!-- checked -->\n```console\n(.*?)```", text, re.S)
assert blocks, "docs/cli.md has no checked examples"
for block in blocks:
    lines = block.splitlines()
    assert lines[0].startswith("$ fusee "), lines[0]
    args = lines[0][len("$ fusee "):].split()
    expected = "\n".join(lines[1:]).rstrip()
    got = subprocess.run([fusee] + args, cwd=cwd, capture_output=True, text=True).stdout.rstrip()
    if got != expected:
        sys.exit(f"docs/cli.md: `{lines[0]}` printed:\n{got}\n--- but the doc says:\n{expected}")
print(f"{len(blocks)} examples checked")
PY
