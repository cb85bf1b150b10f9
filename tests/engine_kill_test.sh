#!/usr/bin/env bash
# Kill -9 loop against the engine: `fusee demo` runs 100 order workflows
# (steps, a signal with a timeout, a progress stream) in a worker process,
# SIGKILLs it 50 times at random moments and restarts it; every restart
# reopens the engine, which replays the unfinished runs. The demo's ledger,
# kept outside the data directory, then checks that every acknowledged start,
# signal and chunk survived, that no step ran again once its result was
# durable, and that every run finished with the one result it may have.
# Kills land at random times and right behind random acknowledgements (a
# start, a step, a signal, a chunk), where a too-early acknowledgement would
# be lost. Non-zero exit on any violation. The summary prints the seed:
# --seed replays the same orders and kill plan (the interleaving with the
# disk differs from run to run).
set -euo pipefail
top=${1:?usage: engine_kill_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$build/cli/fusee" demo --dir "$scratch/data" --kills 50 --orders 100 --quiet
