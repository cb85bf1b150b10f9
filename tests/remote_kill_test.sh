#!/usr/bin/env bash
# Kill -9 loops in remote mode: `fusee demo --remote` runs a log service (the
# server's side) in the parent and its workers as remote engines.
#
# First, 25 kills with one worker holding every shard's lease while a
# standby worker is connected and waits for the leases; each SIGKILL of the
# holder drops its connection, the standby takes every shard with a higher
# epoch, recovers the runs from the server and carries on.
#
# Then 20 kills with the shards split (--split): a partner worker holds half
# of them through every life and answers the other worker's calls for its
# runs; the killed worker's standby, connected with nothing to hold, takes
# the freed half at runtime, recovers it and resumes its runs, while calls
# between the two halves go through the server.
#
# Each time the demo's ledger checks that every acknowledged start, signal
# and chunk survived, that no durable step ran again, and that every run
# finished with the one result it may have.
set -euo pipefail
top=${1:?usage: remote_kill_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$build/cli/fusee" demo --remote --dir "$scratch/data" --kills 25 --orders 200 --quiet
rm -rf "$scratch/data"
"$build/cli/fusee" demo --remote --split --dir "$scratch/data" --kills 20 --orders 200 --quiet
