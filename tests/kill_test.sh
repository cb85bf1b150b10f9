#!/usr/bin/env bash
# Kill -9 loop against a real process: `fusee demo` appends from several
# threads in a child, SIGKILLs it at random moments, and after each kill
# reopens the log and checks every acknowledged record against its ledger
# (kept outside the data directory). 50 kills with the default writer (the
# io_uring owner where the disk allows), 25 more with the log threads.
# Non-zero exit on any violation.
set -euo pipefail
top=${1:?usage: kill_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$build/cli/fusee" demo --dir "$scratch/data" --kills 50 --quiet
FUSEE_LOG_OWNER=0 "$build/cli/fusee" demo --dir "$scratch/threads" --kills 25 --quiet
