#!/usr/bin/env bash
# Every public header (sdk/include/fusee/, and fusee/version.hpp made in the
# build) compiles on its own, twice included, with nothing but the SDK's
# include directories and the system headers, under -Wall -Wextra -Wpedantic
# -Werror, with both clang++ and g++: an application needs nothing from
# engine/ or wal/ to include one, whichever supported compiler it uses
# (docs/compilers.md). Usage: public_headers.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: public_headers.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: public_headers.sh SOURCE_DIR BUILD_DIR}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for compiler in clang++ g++; do
  for header in "$top"/sdk/include/fusee/*.hpp "$build"/sdk/include/fusee/version.hpp; do
    name=$(basename "$header")
    printf '#include "fusee/%s"\n#include "fusee/%s"\n' "$name" "$name" >"$scratch/check.cpp"
    if ! $compiler -std=c++20 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$top/sdk/include" \
      -I"$build/sdk/include" "$scratch/check.cpp"; then
      echo "public_headers: fusee/$name does not compile on its own with $compiler" >&2
      failed=1
    fi
  done
done
exit $failed
