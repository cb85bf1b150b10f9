#!/usr/bin/env bash
# The compiler rule the public headers enforce (sdk/include/fusee/compiler.hpp,
# docs/compilers.md), with this machine's g++ (Debian 12's GCC 12.2, which
# destroys an aggregate temporary inside co_await twice) and clang++, against
# an installed Fusee (staged from BUILD_DIR):
#  - each form GCC miscompiles (tests/compilers/gcc_rule.cpp, FORM 1-3) is
#    refused by g++ with the SDK's message saying what to write instead, and
#    compiles with clang++;
#  - with the rule switched off in a copy of the headers, GCC 12 builds each
#    of those forms into a program that AddressSanitizer catches freeing
#    memory twice: the rule refuses what this compiler really miscompiles
#    (a later GCC that runs them correctly is reported, not failed);
#  - the named form (FORM 0) compiles with g++ and runs correctly under
#    AddressSanitizer; and it compiles and runs with clang++ too.
# Usage: compilers.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=$(cd "${1:?usage: compilers.sh SOURCE_DIR BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: compilers.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# shellcheck source=tests/support/stage_install.sh
. "$top/tests/support/stage_install.sh"
stage_install "$build" "$scratch/stage"

source="$top/tests/compilers/gcc_rule.cpp"
flags=(-std=c++20 -Wall -Wextra -Wpedantic -Werror)
read -r -a cflags <<<"$(pkg-config --cflags fusee)"
read -r -a static_libs <<<"$(pkg-config --static --libs fusee)"
static_libs=("${static_libs[@]/#-lfusee/-l:libfusee.a}")

gcc_major=$(g++ -dumpversion | cut -d. -f1)
expect=(
  ""
  "a step function written inside co_await must not capture anything with a destructor"
  "a child's input written as a braced temporary inside co_await"
  "a stream chunk written as a braced temporary inside co_await"
)
for form in 1 2 3; do
  if g++ "${flags[@]}" "${cflags[@]}" -DFORM=$form -fsyntax-only "$source" 2>"$scratch/gcc.log"; then
    echo "compilers: g++ accepted form $form, which GCC miscompiles" >&2
    exit 1
  fi
  if ! grep -qF "${expect[$form]}" "$scratch/gcc.log"; then
    echo "compilers: g++ refused form $form without the SDK's message:" >&2
    cat "$scratch/gcc.log" >&2
    exit 1
  fi
  clang++ "${flags[@]}" "${cflags[@]}" -DFORM=$form -fsyntax-only "$source"
done

cp -r "$prefix/include" "$scratch/rule-off"
sed -i 's/^#define FUSEE_REFUSE_BRACED_TEMPORARIES 1$/#define FUSEE_REFUSE_BRACED_TEMPORARIES 0/' "$scratch/rule-off/fusee/compiler.hpp"
grep -q '^#define FUSEE_REFUSE_BRACED_TEMPORARIES 0$' "$scratch/rule-off/fusee/compiler.hpp"
for form in 1 2 3; do
  g++ -std=c++20 -g -fsanitize=address -I"$scratch/rule-off" -DFORM=$form "$source" -o "$scratch/gcc-form" \
    "${static_libs[@]}"
  if ASAN_OPTIONS=detect_leaks=0 "$scratch/gcc-form" >"$scratch/form.log" 2>&1; then
    if [ "$gcc_major" = 12 ]; then
      echo "compilers: without the rule, form $form ran correctly with GCC 12, which miscompiles it" >&2
      exit 1
    fi
    echo "compilers: GCC $gcc_major runs form $form correctly: the rule may be lifted for it (docs/compilers.md)"
    continue
  fi
  grep -qE 'AddressSanitizer: attempting (double-free|free on address which was not malloc)' "$scratch/form.log" || {
    echo "compilers: without the rule, form $form failed, but not as a double free:" >&2
    head -20 "$scratch/form.log" >&2
    exit 1
  }
done

g++ "${flags[@]}" "${cflags[@]}" -DFORM=0 -g -fsanitize=address -fno-omit-frame-pointer "$source" \
  -o "$scratch/gcc-named" "${static_libs[@]}"
ASAN_OPTIONS=detect_leaks=0 "$scratch/gcc-named"
clang++ "${flags[@]}" "${cflags[@]}" -DFORM=0 "$source" -o "$scratch/clang-named" "${static_libs[@]}"
"$scratch/clang-named"
