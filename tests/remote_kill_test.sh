#!/usr/bin/env bash
# Kill -9 loop in remote mode: `fusee demo --remote` runs a log service (the
# server's side) in the parent and its workers as remote engines. While one
# worker holds every shard's lease, a standby worker is connected and waits
# for the leases; each SIGKILL of the holder drops its connection, the
# standby takes every shard with a higher epoch, recovers the runs from the
# server's log and carries on. 25 kills; the demo's ledger checks that every
# acknowledged start, signal and chunk survived, that no durable step ran
# again, and that every run finished with the one result it may have.
set -euo pipefail
top=${1:?usage: remote_kill_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$build/cli/fusee" demo --remote --dir "$scratch/data" --kills 25 --orders 200 --quiet
