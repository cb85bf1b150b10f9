#!/usr/bin/env bash
# The replicated log under the faults a cluster meets (docs/replication.md,
# "The log demo"): `fusee log-demo --replicated` runs three `fusee replica`
# processes and an etcd of its own, SIGKILLs the primary 30 times and a
# backup 10 times under load (each restarted), stops the primary past its
# lease and etcd for three leases, wipes a backup's directory and rebuilds
# it, then reads every directory offline: every published append must be in
# every replica's log, byte for byte, at its sequence. Non-zero exit on any
# violation. `make test-long` runs it with five replicas as well. Needs etcd
# (scripts/install-deps installs Debian's etcd-server).
set -euo pipefail
top=${1:?usage: replicated_kill_test.sh SOURCE_DIR BUILD_DIR}
build=${2:-$top/build}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if ! command -v etcd >/dev/null; then
  echo "replicated_kill_test: etcd is not installed (scripts/install-deps); failing rather than skipping" >&2
  exit 1
fi
run() {  # REPLICAS
  "$build/cli/fusee" log-demo --replicated --replicas "$1" --dir "$scratch/data-$1" --quiet || {
    for log in "$scratch/data-$1"/replica-*.log; do echo "== $log"; tail -n 40 "$log"; done
    exit 1
  }
}
run 3
# make test-long: five replicas too (about a minute more).
if [ "${FUSEE_CRASH_WHOLE:-0}" = 1 ]; then run 5; fi
