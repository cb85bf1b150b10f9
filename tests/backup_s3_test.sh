#!/usr/bin/env bash
# The continuous backup to S3-compatible object storage (docs/backup.md,
# "S3"), against a real server in its own process: s3rver from npm
# (tests/s3/, installed by scripts/install-deps) with every request's SigV4
# signature checked in front of it (tests/s3/server.mjs). Then:
#  - fusee_tests -ts=s3: objects round-trip, listings page, and a directory
#    backed up, wiped, restored resumes its waiting workflows;
#  - `fusee demo --backup s3://...` with SIGKILLs while uploading every
#    50 ms, restoring the latest into DIR-restored and checking it with the
#    demo's ledger;
#  - `fusee backup status` of it, a restore to a moment before its newest
#    batch (fewer batches, and a directory that opens), and the refusals: a
#    wrong secret, an unknown key, a bucket that does not exist, a prefix
#    with no backup, no credentials, a server that does not answer.
set -euo pipefail
top=${1:?usage: backup_s3_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
fusee="$build/cli/fusee"
scratch=$(mktemp -d)
server_pid=
cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "backup_s3_test: $*" >&2; exit 1; }

[ -d "$top/tests/s3/node_modules/s3rver" ] || fail "tests/s3/node_modules is missing: run scripts/install-deps"
secret="fusee-$RANDOM$RANDOM"
mkdir "$scratch/objects"
# s3rver makes its continuation tokens with DES, which Node's OpenSSL 3
# offers only through its legacy provider.
node --openssl-legacy-provider "$top/tests/s3/server.mjs" "$scratch/objects" fusee-backup "$secret" \
  >"$scratch/server.out" 2>&1 &
server_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/^listening //p' "$scratch/server.out")
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$scratch/server.out"; fail "the S3 server did not start"; }
  sleep 0.1
done
[ -n "$port" ] || fail "the S3 server did not say its port"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=$secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$port

out=$(FUSEE_TEST_S3=s3://fusee-backup/unit "$build/tests/fusee_tests" -ts=s3 2>&1) || { echo "$out"; fail "fusee_tests -ts=s3 failed"; }
grep -q "test cases: *2 | *2 passed | 0 failed" <<<"$out" || { echo "$out"; fail "the s3 suite did not run its 2 cases"; }

"$fusee" demo --dir "$scratch/data" --backup s3://fusee-backup/demo --kills 8 --orders 100 >"$scratch/demo.out" 2>&1 ||
  { cat "$scratch/demo.out"; fail "the demo with an S3 backup failed"; }
grep -q "^restored: the latest of s3://fusee-backup/demo" "$scratch/demo.out" || { cat "$scratch/demo.out"; fail "no restored check"; }
grep "^fusee demo:" "$scratch/demo.out" | tail -1
grep -q " 0 violations" "$scratch/demo.out" || fail "violations"
checked=$(grep -c "^  backup: the backup" "$scratch/demo.out" || true)
[ "$checked" -eq 8 ] || { cat "$scratch/demo.out"; fail "$checked restores after a kill, not 8"; }

status=$("$fusee" backup status --dir "$scratch/data" --json)
python3 - "$status" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
assert s["target"] == "s3://fusee-backup/demo", s
assert s["pending_batches"] == 0 and s["covered_sequence"] == s["log_last_sequence"] > 0, s
PY

# A point in time from S3: half a second before the newest batch, fewer
# batches than the latest, and a directory that opens (inspect exits 0 only
# when recovery would open it).
covered_at=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["covered_at_ms"])' "$status")
latest=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["covered_sequence"])' "$status")
out=$("$fusee" restore --from s3://fusee-backup/demo --to $((covered_at - 500)) --dir "$scratch/earlier")
earlier=$(sed -nE 's/^fusee restore: ([0-9]+) batches.*/\1/p' <<<"$out")
[ -n "$earlier" ] && [ "$earlier" -gt 0 ] && [ "$earlier" -lt "$latest" ] || fail "a restore to a moment: $out"
"$fusee" inspect "$scratch/earlier" >"$scratch/inspect.out" || { cat "$scratch/inspect.out"; fail "the restored moment does not open"; }

refused() {
  local why=$1; shift
  if out=$("$@" 2>&1); then fail "accepted: $*"; fi
  grep -q -- "$why" <<<"$out" || fail "for '$*' expected '$why', got: $out"
}
refused "SignatureDoesNotMatch" env AWS_SECRET_ACCESS_KEY=wrong "$fusee" restore --from s3://fusee-backup/demo --to latest --dir "$scratch/r1"
refused "InvalidAccessKeyId" env AWS_ACCESS_KEY_ID=NOBODY "$fusee" backup status --dir "$scratch/data"
refused "NoSuchBucket" "$fusee" restore --from s3://no-such-bucket/demo --to latest --dir "$scratch/r2"
refused "holds no backup" "$fusee" restore --from s3://fusee-backup/nothing-here --to latest --dir "$scratch/r3"
refused "set AWS_ACCESS_KEY_ID" env -u AWS_ACCESS_KEY_ID "$fusee" restore --from s3://fusee-backup/demo --to latest --dir "$scratch/r4"
refused "connect" env AWS_ENDPOINT_URL=http://127.0.0.1:1 "$fusee" restore --from s3://fusee-backup/demo --to latest --dir "$scratch/r5"
echo "backup_s3_test: the s3 suite, a demo with 8 kills restored from S3 and checked, status, a restore to a moment ($earlier of $latest batches) and six refusals"
