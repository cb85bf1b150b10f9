#!/usr/bin/env bash
# The examples run and succeed, twice on one data directory (the second run
# attaches to the finished run instead of starting it again).
# Usage: examples.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
build=${2:?usage: examples.sh SOURCE_DIR BUILD_DIR}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$build/examples/approval" "$scratch/data" >/dev/null
"$build/examples/approval" "$scratch/data" >/dev/null
