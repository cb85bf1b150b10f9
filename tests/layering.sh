#!/usr/bin/env bash
# The folders keep drawing the architecture: tests/layering.py checks every
# #include against the table of parts in docs/architecture.md. Then, so that
# the check is known to be able to fail, it runs on a scratch tree with the
# same table: an include the table allows passes, and an engine/ file that
# includes protocol/, a wal/ file that includes engine/, and a file in a
# folder the table does not name are each refused, by file and line.
# Usage: layering.sh SOURCE_DIR
set -euo pipefail
top=${1:?usage: layering.sh SOURCE_DIR}
check="$top/tests/layering.py"
python3 "$check" "$top"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch"/{docs,engine,protocol,wal}
cp "$top/docs/architecture.md" "$scratch/docs/"
printf '#pragma once\n' >"$scratch/protocol/frame.hpp"
printf '#pragma once\n' >"$scratch/wal/log.hpp"
printf '#pragma once\n#include <vector>\n\n#include "wal/log.hpp"\n' >"$scratch/engine/shard.hpp"
python3 "$check" "$scratch" >/dev/null

# refused SETUP EXPECTED: after SETUP, the check must fail and say EXPECTED.
refused() {
  eval "$1"
  if out=$(python3 "$check" "$scratch" 2>&1); then
    echo "layering: the check passed a tree where it should refuse: $2" >&2
    exit 1
  fi
  if ! grep -qF "$2" <<<"$out"; then
    echo "layering: the check failed without saying '$2':" >&2
    echo "$out" >&2
    exit 1
  fi
}
refused 'printf "#include \"protocol/frame.hpp\"\n" >>"$scratch/engine/shard.hpp"' \
  'engine/shard.hpp:5: includes protocol/frame.hpp: engine/ may not include protocol/'
printf '#pragma once\n' >"$scratch/engine/shard.hpp"
refused 'printf "#include \"engine/shard.hpp\"\n" >"$scratch/wal/log.cpp"' \
  'wal/log.cpp:1: includes engine/shard.hpp: wal/ may not include engine/'
rm "$scratch/wal/log.cpp"
refused 'mkdir -p "$scratch/stray" && printf "int x;\n" >"$scratch/stray/x.cpp"' \
  'stray/x.cpp: in no part of the table'
rm -r "$scratch/stray"
refused 'for _ in $(seq 801); do echo "// a line"; done >"$scratch/engine/big.cpp"' \
  'engine/big.cpp: 801 lines, over 800: split it by concern'
sed -i 's#<!-- size-exceptions -->#<!-- size-exceptions -->\n- `engine/big.cpp`: a test of the list#' "$scratch/docs/architecture.md"
python3 "$check" "$scratch" >/dev/null || { echo "layering: a listed size exception was refused" >&2; exit 1; }
refused 'printf "int x;\n" >"$scratch/engine/big.cpp"' \
  'engine/big.cpp: 1 lines, within 800: take it off the size exceptions'
rm "$scratch/engine/big.cpp"
