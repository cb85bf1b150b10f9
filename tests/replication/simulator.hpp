// The replication simulator: one seeded, single-threaded run of 3-5 replica
// cores (replication/replica_core.hpp) over the fault file system, a network
// that drops, delays, duplicates, reorders and partitions each link one way,
// processes stopped and resumed (SIGSTOP past a lease, then SIGCONT), and a
// coordinator that is etcd's linearizable register with leases on the
// simulated clock and outages. It crashes replicas with every outcome of
// their writes in flight, loses a replica's disk, damages an acknowledged
// batch, and after every event checks the invariants of
// spec/FuseeReplicated.tla against the real data:
//   - AckedNeverLost: every published batch is in the log of every primary
//     of its view or a later one;
//   - LogMatching: two logs holding the same batch hold the same batches
//     before it;
//   - AgreeBelowCommit: a replica in a primary's view agrees with it at and
//     below its commit, once cut by the history;
//   - OnePublisherPerView;
//   - what a replica believes durable is on its disk at every crash.
// Then it heals every fault and requires progress: one primary, every
// replica holding its whole log, repaired, every acknowledged batch kept.
//
// The same seed replays the same run, event for event.
#pragma once

#include <cstdint>
#include <string>

#include "replication/replica_core.hpp"

namespace fusee::testing::replication_sim {

struct SimOptions {
  std::uint64_t seed = 1;
  std::uint32_t replicas = 3;
  std::uint64_t fault_ms = 1500;   // faults happen during [0, fault_ms)
  std::uint64_t settle_ms = 1500;  // then none: the cluster must make progress
  std::uint64_t proposal_gap_us_max = 4000;
  // A scenario instead of random faults: at 300 ms the primary is cut from
  // every other replica (both ways; etcd still reachable) for this long.
  // The others must elect a primary and publish meanwhile.
  std::uint64_t isolate_primary_ms = 0;
  // A scenario instead of random faults: at this time every replica loses
  // power at once (writes in flight torn). When too few replicas vouch to
  // start a view, the operator accepts the loss on the suspect ones 300 ms
  // later; the cluster must serve again, losing nothing acknowledged.
  std::uint64_t power_loss_at_ms = 0;
  // A scenario instead of random faults: from 300 ms on, for this long,
  // every write of every replica takes slow_disk_us (an fdatasync that
  // stalls under load), longer than a primary's lease. Nothing else fails:
  // the primary must keep its view, and publish meanwhile.
  std::uint64_t slow_disks_ms = 0;
  std::uint64_t slow_disk_us = 40'000;
  // One rule disabled in every replica (the checks' own test).
  replication::Weakening weakening = replication::Weakening::none;
};

struct SimReport {
  bool ok = true;
  std::string failure;  // the violation, the seed and the last events
  std::uint64_t events = 0;
  std::uint64_t proposals = 0;
  std::uint64_t acknowledged = 0;  // proposals published by their own primary
  std::uint64_t views = 0;         // the coordinator's view at the end
  std::uint64_t crashes = 0;
  std::uint64_t torn_crashes = 0;
  std::uint64_t damages = 0;
  std::uint64_t disk_losses = 0;
  std::uint64_t partitions = 0;
  std::uint64_t outages = 0;
  std::uint64_t pauses = 0;
  std::uint64_t stale_primaries = 0;  // resumed as primary of a view etcd has moved past
  std::uint64_t read_back = 0;        // batches sent elided and read back from a disk
  std::uint64_t retired = 0;          // the most batches one replica retired
  std::uint64_t restarts = 0;         // suspect replicas that started their log at a primary's start
  // isolate_primary_ms: proposals acknowledged by another primary while the
  // isolated one was cut off.
  std::uint64_t acknowledged_while_isolated = 0;
  // slow_disks_ms: proposals acknowledged while the disks were slow.
  std::uint64_t acknowledged_while_slow = 0;
  // power_loss_at_ms: replicas suspect after it, and whether the operator
  // had to accept the loss.
  std::uint64_t suspect_after_power_loss = 0;
  bool loss_accepted = false;
  // Sums the counts of several runs (not ok, failure or the scenarios').
  SimReport& operator+=(const SimReport& other);
  std::string summary() const;
};

SimReport run_simulation(const SimOptions& options);

}  // namespace fusee::testing::replication_sim
