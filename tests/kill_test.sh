#!/usr/bin/env bash
# Kill -9 loop against the shared log alone: `fusee log-demo` appends from
# several threads in a child, SIGKILLs it at random moments, and after each
# kill reopens the log and checks every acknowledged record against its
# ledger (kept outside the data directory). 20 kills with the default writer
# (the io_uring owner where the disk allows), 10 more with the log threads;
# the engine's own kill loop (tests/engine_kill_test.sh) adds 50 more.
# Non-zero exit on any violation.
set -euo pipefail
top=${1:?usage: kill_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$build/cli/fusee" log-demo --dir "$scratch/data" --kills 20 --quiet
FUSEE_LOG_OWNER=0 "$build/cli/fusee" log-demo --dir "$scratch/threads" --kills 10 --quiet
