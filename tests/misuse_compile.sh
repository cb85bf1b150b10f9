#!/usr/bin/env bash
# What the compiler catches in a workflow, against an installed Fusee
# (staged from BUILD_DIR), with g++ and clang++ (tests/compilers/misuse.cpp):
# correct code with a move-only step function compiles and runs; a command
# never awaited, a started Future dropped, and a type Boost.JSON cannot
# convert are each refused with a message that names the mistake; a step
# reading a dead local is caught by AddressSanitizer.
# Usage: misuse_compile.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=$(cd "${1:?usage: misuse_compile.sh SOURCE_DIR BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: misuse_compile.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# shellcheck source=tests/support/stage_install.sh
. "$top/tests/support/stage_install.sh"
stage_install "$build" "$scratch/stage"

source="$top/tests/compilers/misuse.cpp"
flags=(-std=c++20 -Wall -Wextra -Wpedantic -Werror)
read -r -a cflags <<<"$(pkg-config --cflags fusee)"
read -r -a libs <<<"$(pkg-config --libs fusee)"
fail() { echo "misuse_compile: $*" >&2; exit 1; }

# The message each form must be refused with (any of the compilers' words
# for an ignored [[nodiscard]] value, or the SDK's static_assert).
expect=(
  ""
  "nodiscard|unused-result|ignoring return value"
  "nodiscard|unused-result|ignoring return value"
  "nodiscard|unused-result|ignoring return value"
  "a step's result type must convert to and from JSON"
  "a signal's value type must convert to and from JSON"
  "nodiscard|unused-result|ignoring return value"
  "this step function cannot be copied"
)
# Every form with g++ (Debian's default); clang++ gets the correct form
# and one [[nodiscard]] form (each compile takes seconds on two cores).
for compiler in g++ clang++; do
  forms=(1 2 3 4 5 6 7)
  [ "$compiler" = clang++ ] && forms=(3)
  "$compiler" "${flags[@]}" "${cflags[@]}" -DMISUSE=0 "$source" -o "$scratch/ok" "${libs[@]}" 2>"$scratch/ok.log" ||
    { cat "$scratch/ok.log" >&2; fail "$compiler refused the correct form"; }
  "$scratch/ok" || fail "the correct form built by $compiler did not run"
  for form in "${forms[@]}"; do
    if "$compiler" "${flags[@]}" "${cflags[@]}" -DMISUSE=$form -fsyntax-only "$source" 2>"$scratch/form.log"; then
      fail "$compiler accepted misuse form $form"
    fi
    grep -qE "${expect[$form]}" "$scratch/form.log" || {
      cat "$scratch/form.log" >&2
      fail "$compiler refused form $form without saying why (expected: ${expect[$form]})"
    }
  done
done
# A step that captures a dead local by reference: what an AddressSanitizer
# build of the application's tests catches (docs/tutorial.md's rule).
read -r -a static_libs <<<"$(pkg-config --static --libs fusee)"
static_libs=("${static_libs[@]/#-lfusee/-l:libfusee.a}")
g++ -std=c++20 -g -fsanitize=address "${cflags[@]}" "$top/tests/compilers/dangling.cpp" -o "$scratch/dangling" \
  "${static_libs[@]}"
if ASAN_OPTIONS=detect_leaks=0:detect_stack_use_after_return=1 "$scratch/dangling" >"$scratch/dangling.log" 2>&1; then
  fail "AddressSanitizer did not catch a step reading a dead local"
fi
grep -qE "AddressSanitizer: (stack-use-after-return|heap-use-after-free|stack-use-after-scope)" "$scratch/dangling.log" || {
  cat "$scratch/dangling.log" >&2
  fail "the dangling step failed without AddressSanitizer's report"
}
echo "misuse_compile: ok"
