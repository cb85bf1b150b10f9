#include "replica/node_stats.hpp"

#include <algorithm>

namespace fusee::replica {

using replication::ReplicaId;
using replication::Role;
using replication::Seq;

ReplicaStatus status_of(const replication::ReplicaCore& core, ReplicaId self, std::size_t replicas,
                        std::uint64_t batches_read_back) {
  // What it knows committed, whatever its role (a backup's commit() is 0).
  ReplicaStatus status{self,         core.role(),   core.promised(),   core.lead(),     core.known_committed(),
                       core.log().end(), core.durable_end(), core.suspect(), core.held_from(), batches_read_back};
  if (core.role() == Role::primary) {
    for (ReplicaId r = 0; r < replicas; ++r) status.holds.push_back(r == self ? core.durable_end() : core.match_of(r));
  }
  return status;
}

void NodeStats::proposed(Seq seq) { proposed_at_.emplace(seq, std::chrono::steady_clock::now()); }

void NodeStats::published(Seq through) {
  const auto now = std::chrono::steady_clock::now();
  const auto end = proposed_at_.upper_bound(through);
  std::lock_guard lock(mu_);
  for (auto it = proposed_at_.begin(); it != end; ++it) {
    const auto us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(now - it->second).count());
    const auto bucket = std::lower_bound(wal::kFlushLatencyBoundsUs.begin(), wal::kFlushLatencyBoundsUs.end(), us) -
                        wal::kFlushLatencyBoundsUs.begin();
    ++snapshot_.publish_latency_counts[bucket];
    snapshot_.publish_latency_sum_us += us;
  }
  proposed_at_.erase(proposed_at_.begin(), end);
}

void NodeStats::turn(const replication::ReplicaCore& core, ReplicaId self, std::size_t replicas,
                     std::uint64_t batches_read_back) {
  auto status = status_of(core, self, replicas, batches_read_back);
  std::lock_guard lock(mu_);
  if (core.promised() != last_view_) {
    last_view_ = core.promised();
    ++snapshot_.view_changes;
  }
  if (core.role() == Role::primary && core.lead() != last_led_) {
    last_led_ = core.lead();
    ++snapshot_.leads;
  }
  snapshot_.status = std::move(status);
  snapshot_.known_primary = core.known_primary();
}

NodeStatsSnapshot NodeStats::snapshot() const {
  std::lock_guard lock(mu_);
  return snapshot_;
}

}  // namespace fusee::replica
