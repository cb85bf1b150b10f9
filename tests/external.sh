#!/usr/bin/env bash
# An application outside the tree builds against an installed Fusee alone
# and runs (examples/external/, docs/install.md). Fusee is installed from
# BUILD_DIR into a staging prefix (meson install --destdir; fusee.pc and the
# CMake package are relocatable), then the application is built from that
# prefix in three ways, warnings as errors, and run in local mode (a step, a
# signal and a stream; it exits 0 only on the expected result):
#   1. pkg-config and a plain compiler (g++): shared, then static with
#      `pkg-config --static` (which must list everything libfusee.a needs);
#   2. meson (clang++);
#   3. CMake's find_package(Fusee) (g++).
# First, every installed header compiles on its own from the prefix with
# both compilers, and includes no Fusee header from outside the prefix.
# Usage: external.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=$(cd "${1:?usage: external.sh SOURCE_DIR BUILD_DIR}" && pwd)
build=$(cd "${2:?usage: external.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# shellcheck source=tests/support/stage_install.sh
. "$top/tests/support/stage_install.sh"
stage_install "$build" "$scratch/stage"
for needed in "$prefix/bin/fusee" "$libdir/libfusee.a" "$libdir/libfusee.so" "$libdir/cmake/Fusee/FuseeConfig.cmake"; do
  [ -e "$needed" ] || { echo "external: the install lacks ${needed#"$scratch/stage"}" >&2; exit 1; }
done
"$prefix/bin/fusee" --version | grep -x "fusee $(pkg-config --modversion fusee)" >/dev/null

# The installed headers, each alone, from the prefix: -MM lists what they
# include; every Fusee header among it must be the prefix's.
for compiler in g++ clang++; do
  for header in "$include_dir"/*.hpp; do
    printf '#include <fusee/%s>\n' "$(basename "$header")" >"$scratch/header.cpp"
    $compiler -std=c++20 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$prefix/include" "$scratch/header.cpp"
    deps=$($compiler -std=c++20 -MM -I"$prefix/include" "$scratch/header.cpp" | tr ' \\' '\n\n' | grep '/fusee/' || true)
    if grep -v "^$prefix/include/fusee/" <<<"$deps" | grep . >/dev/null; then
      echo "external: $(basename "$header") includes a Fusee header from outside the install:" >&2
      grep -v "^$prefix/include/fusee/" <<<"$deps" >&2
      exit 1
    fi
  done
done

# run NAME EXECUTABLE: runs the application on a fresh data directory.
run() {
  local out
  if ! out=$("$2" "$scratch/data-$1" 2>&1); then
    echo "external: the $1 build ran wrong:" >&2
    echo "$out" >&2
    exit 1
  fi
  grep -q '^result: HELLO, world$' <<<"$out"
  grep -q '^length: 12$' <<<"$out"
  echo "external: $1: ${out//$'\n'/; }"
}
# The shared builds must use the staged library, not one installed elsewhere.
uses_staged() {
  # (ldd's output first: grep -q stops reading at its match, and with
  # pipefail the SIGPIPE ldd may then get would fail the check.)
  local libs
  libs=$(ldd "$1")
  grep -q "libfusee.so.* => $libdir/" <<<"$libs" || { echo "external: $1 does not load the staged libfusee" >&2; echo "$libs" >&2; exit 1; }
}

app="$top/examples/external"
flags=(-std=c++20 -Wall -Wextra -Wpedantic -Werror)
# shellcheck disable=SC2046 # pkg-config's words are meant to split
g++ "${flags[@]}" "$app/main.cpp" -o "$scratch/greet-pkg-config" $(pkg-config --cflags --libs fusee)
uses_staged "$scratch/greet-pkg-config"
run pkg-config "$scratch/greet-pkg-config"

read -r -a static_libs <<<"$(pkg-config --static --libs fusee)"
static_libs=("${static_libs[@]/#-lfusee/-l:libfusee.a}")
# shellcheck disable=SC2046
g++ "${flags[@]}" "$app/main.cpp" -o "$scratch/greet-static" $(pkg-config --cflags fusee) "${static_libs[@]}"
static_ldd=$(ldd "$scratch/greet-static")
if grep -q libfusee <<<"$static_ldd"; then
  echo "external: the static build still loads libfusee.so" >&2
  exit 1
fi
run pkg-config-static "$scratch/greet-static"

CXX=clang++ meson setup "$scratch/meson" "$app" >"$scratch/meson.log" 2>&1 || { cat "$scratch/meson.log" >&2; exit 1; }
ninja -C "$scratch/meson" >"$scratch/ninja.log" 2>&1 || { cat "$scratch/ninja.log" >&2; exit 1; }
uses_staged "$scratch/meson/greet"
run meson "$scratch/meson/greet"

cmake -S "$app" -B "$scratch/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER=g++ >"$scratch/cmake.log" 2>&1 ||
  { cat "$scratch/cmake.log" >&2; exit 1; }
cmake --build "$scratch/cmake" >"$scratch/cmake-build.log" 2>&1 || { cat "$scratch/cmake-build.log" >&2; exit 1; }
uses_staged "$scratch/cmake/greet"
run cmake "$scratch/cmake/greet"
