#!/usr/bin/env bash
# `fusee disk-check`: the table and the floor line, the JSON lines, and
# wrong arguments answered with a short error, the usage and exit code 2.
set -uo pipefail
top=${1:?usage: cli_disk_check.sh TOP BUILD}
build=${2:?usage: cli_disk_check.sh TOP BUILD}
fusee="$build/cli/fusee"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "cli_disk_check: $*" >&2; exit 1; }

out=$("$fusee" disk-check "$dir" --iterations 50) || fail "disk-check failed: $out"
grep -q '^write path  *p50 us  *p99 us' <<<"$out" || fail "no table header in: $out"
grep -Eq '^(direct \+ RWF_DSYNC|buffered \+ fdatasync) +[0-9]+\.[0-9]' <<<"$out" || fail "no measured path in: $out"
grep -Eq '^floor for a sequential durable step: [0-9]+\.[0-9] us' <<<"$out" || fail "no floor line in: $out"

json=$("$fusee" disk-check "$dir" --iterations 50 --json) || fail "disk-check --json failed"
[ "$(grep -c '^{"bench":"disk_check","path":' <<<"$json")" -eq 2 ] || fail "expected two JSON lines: $json"
grep -q '"floor":true' <<<"$json" || fail "no path marked as the floor: $json"
[ -z "$(ls -A "$dir")" ] || fail "disk-check left files in $dir"

for args in "disk-check --bogus" "disk-check /nonexistent/dir" "disk-check $dir --iterations 0" "no-such-command" ""; do
  # shellcheck disable=SC2086
  err=$("$fusee" $args 2>&1 >/dev/null)
  status=$?
  [ "$status" -eq 2 ] || fail "'fusee $args' exited $status, not 2"
  grep -q 'Usage:' <<<"$err" || fail "'fusee $args' printed no usage: $err"
done
exit 0
