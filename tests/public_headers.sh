#!/usr/bin/env bash
# Every public header (sdk/include/fusee/) compiles on its own, with nothing
# but the SDK include directory and the system headers: an application needs
# nothing from engine/ or wal/ to include one. Usage: public_headers.sh SOURCE_DIR
set -euo pipefail
top=${1:?usage: public_headers.sh SOURCE_DIR [BUILD_DIR]}
cxx=${CXX_FOR_HEADERS:-$(command -v clang++ || command -v c++)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for header in "$top"/sdk/include/fusee/*.hpp; do
  name=$(basename "$header")
  printf '#include "fusee/%s"\n#include "fusee/%s"\n' "$name" "$name" >"$scratch/check.cpp"
  if ! $cxx -std=c++20 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$top/sdk/include" "$scratch/check.cpp"; then
    echo "public_headers: fusee/$name does not compile on its own" >&2
    failed=1
  fi
done
exit $failed
