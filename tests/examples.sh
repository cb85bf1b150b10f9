#!/usr/bin/env bash
# The examples run and succeed. approval: twice on one data directory (the
# second run attaches to the finished run instead of starting it again).
# tutorial: every C++ snippet of docs/tutorial.md is in examples/tutorial.cpp
# (or, for its part 8, in examples/parallel.cpp) verbatim; a run to the end; a run SIGKILLed inside its charge step, then a
# second run that resumes it (the quote step is not run again, the charge step
# runs again under the same idempotency key) and ends with the same result as
# the uninterrupted run; a third run that only reads the result. parallel:
# confirmed in time, silent until its timeout, and cancelled. versioning: an
# order from before a patch keeps the old path, a new one takes the new.
# talking: a query, updates (a repeat by id, a refusal) and an awakeable.
# nightly: a schedule, a queue and a step limit together.
# Usage: examples.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: examples.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: examples.sh SOURCE_DIR BUILD_DIR}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "examples: $*" >&2; exit 1; }

"$build/examples/approval" "$scratch/data" >/dev/null
"$build/examples/approval" "$scratch/data" >/dev/null

out=$("$build/examples/parallel" "$scratch/parallel") || fail "parallel exited $?: $out"
[[ "$out" == "Ada: flight booked "*"car booked "*"total 690, confirmed" ]] || fail "parallel: $out"
out=$("$build/examples/parallel" "$scratch/parallel-silent" --silent) || fail "parallel --silent exited $?: $out"
[[ "$out" == *"total 690, not confirmed within the hour" ]] || fail "parallel --silent: $out"
out=$("$build/examples/parallel" "$scratch/parallel-cancel" --cancel) || fail "parallel --cancel exited $?: $out"
[[ "$out" == "cancelled: run 'trip-1' was cancelled: plans changed" ]] || fail "parallel --cancel: $out"
out=$("$build/examples/versioning" "$scratch/versioning" old) || fail "versioning old exited $?: $out"
out=$("$build/examples/versioning" "$scratch/versioning" new) || fail "versioning new exited $?: $out"
[[ "$out" == $'order-1: 200\norder-2: 180' ]] || fail "versioning: $out"
out=$("$build/examples/talking" "$scratch/talking") || fail "talking exited $?: $out"
[[ "$out" == $'seats: 4\nagain: 4\nrefused: run \'booking-1\' rejected update \'change_seats\': book 1 to 8 seats\nasked: 4 seats\nbooking-1: 4 seats, paid with card-4242' ]] || fail "talking: $out"
out=$("$build/examples/nightly" "$scratch/nightly") || fail "nightly exited $?: $out"
[[ "$out" == $'sent to ada\nsent to grace\nsent to alan\nsent to edsger\nsent to barbara\ndigest: 2 runs, 2 ids' ]] || fail "nightly: $out"

# --- The tutorial's snippets are the program's code: each ```cpp block of
# docs/tutorial.md is in examples/tutorial.cpp or examples/parallel.cpp,
# each ```meson block in examples/meson.build, verbatim.
cpp_text=$(<"$top/examples/tutorial.cpp")$'\n'$(<"$top/examples/parallel.cpp")$'\n'$(<"$top/examples/versioning.cpp")$'\n'$(<"$top/examples/talking.cpp")
meson_text=$(<"$top/examples/meson.build")
snippets=0
block=""
kind=""
while IFS= read -r line || [ -n "$line" ]; do
  if [ -z "$kind" ] && { [ "$line" = '```cpp' ] || [ "$line" = '```meson' ]; }; then
    kind=${line#\`\`\`}
    block=""
  elif [ -n "$kind" ] && [ "$line" = '```' ]; then
    snippets=$((snippets + 1))
    if [ "$kind" = cpp ]; then text=$cpp_text; file="examples/tutorial.cpp, parallel.cpp, versioning.cpp or talking.cpp"; else text=$meson_text; file=examples/meson.build; fi
    [[ "$text" == *"$block"* ]] ||
      fail "docs/tutorial.md snippet $snippets ($kind) is not in $file verbatim:"$'\n'"$block"
    kind=""
  elif [ -n "$kind" ]; then
    block+="${block:+$'\n'}$line"
  fi
done <"$top/docs/tutorial.md"
[ -z "$kind" ] || fail "docs/tutorial.md: a \`\`\`$kind block is not closed"
[ "$snippets" -ge 8 ] || fail "docs/tutorial.md quotes $snippets snippets of the program, expected at least 8"

# --- The tutorial runs: to the end, then crashed and resumed.
tutorial="$build/examples/tutorial"
expected='result: shipped, receipt order-1/1/1/charge'
key_line='charge: 75, idempotency key order-1/1/1/charge'

out=$("$tutorial" "$scratch/fresh") || fail "tutorial exited $? on a fresh directory: $out"
grep -qx "$expected" <<<"$out" || fail "fresh run: no '$expected' in: $out"
grep -qx 'start: started' <<<"$out" || fail "fresh run did not start order-1: $out"

status=0
{ "$tutorial" "$scratch/crash" --crash-in-charge >"$scratch/crash.out" 2>&1; } 2>/dev/null || status=$?
out=$(<"$scratch/crash.out")
[ "$status" -eq 137 ] || fail "--crash-in-charge exited $status, not 137 (SIGKILL): $out"
grep -qx 'quote: 3 x 25 = 75' <<<"$out" || fail "crashed run: no quote line in: $out"
grep -qx "$key_line" <<<"$out" || fail "crashed run: no '$key_line' in: $out"
if grep -q '^result:' <<<"$out"; then fail "crashed run printed a result: $out"; fi

out=$("$tutorial" "$scratch/crash") || fail "tutorial exited $? resuming after the crash: $out"
grep -qx "$expected" <<<"$out" || fail "resumed run: no '$expected' in: $out"
grep -qx 'start: attached to the existing run' <<<"$out" || fail "resumed run started order-1 anew: $out"
grep -qx "$key_line" <<<"$out" || fail "resumed run: the charge step did not run again with the same key: $out"
if grep -q '^quote:' <<<"$out"; then fail "resumed run ran the quote step again: $out"; fi

out=$("$tutorial" "$scratch/crash") || fail "tutorial exited $? on a finished order: $out"
grep -qx "$expected" <<<"$out" || fail "third run: no '$expected' in: $out"
if grep -Eq '^(quote|charge|ship):' <<<"$out"; then fail "third run ran a step of a finished order: $out"; fi

status=0
"$tutorial" >/dev/null 2>&1 || status=$?
[ "$status" -eq 2 ] || fail "tutorial without arguments exited $status, not 2"
exit 0
