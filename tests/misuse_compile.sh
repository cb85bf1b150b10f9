#!/usr/bin/env bash
# What the compiler catches in a workflow, against an installed Fusee
# (staged from BUILD_DIR), with g++ and clang++ (tests/compilers/misuse.cpp):
# correct code with a move-only step function compiles and runs; a command
# never awaited, a started Future dropped, and a type Boost.JSON cannot
# convert are each refused with a message that names the mistake.
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
echo "misuse_compile: ok"
