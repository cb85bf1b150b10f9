// NodeStats: what a replica node shows of itself while it runs -- the
// status `fusee replica status` asks for over the wire, and for an
// application's replica its Engine's stats and /metrics
// (fusee::ReplicaStats): role, view, the primary it knows, its log's ends,
// each backup's lag, view changes and leads, and how long a primary's
// batches take from proposal to publication.
//
// The loop thread updates it once a turn (and notes proposals and
// publications as they happen); snapshot() may be called from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>
#include <mutex>

#include "replica/replica_wire.hpp"
#include "replication/replica_core.hpp"
#include "wal/log.hpp"

namespace fusee::replica {

struct NodeStatsSnapshot {
  ReplicaStatus status;
  replication::ReplicaId known_primary = replication::kNoReplica;
  std::uint64_t view_changes = 0;
  std::uint64_t leads = 0;
  std::array<std::uint64_t, wal::kFlushLatencyBoundsUs.size() + 1> publish_latency_counts{};
  std::uint64_t publish_latency_sum_us = 0;
};

// The status as the wire carries it: a primary's holds name each replica's
// durable batches in its view (its own: its durable end).
ReplicaStatus status_of(const replication::ReplicaCore& core, replication::ReplicaId self, std::size_t replicas,
                        std::uint64_t batches_read_back);

class NodeStats {
 public:
  // The loop thread's.
  void proposed(replication::Seq seq);
  void published(replication::Seq through);
  void stopped_serving() {
    proposed_at_.clear();
    sent_at_.clear();
  }
  // Each replica's lag in time, by the status's holds (the loop thread's):
  // how long ago the oldest batch it lacks was proposed, µs.
  std::vector<std::uint64_t> lag_us(const ReplicaStatus& status) const;
  void turn(const replication::ReplicaCore& core, replication::ReplicaId self, std::size_t replicas,
            std::uint64_t batches_read_back);

  NodeStatsSnapshot snapshot() const;

 private:
  std::map<replication::Seq, std::chrono::steady_clock::time_point> proposed_at_;  // not yet published
  // When this lead's batches were proposed, oldest first, while some
  // replica lacks them (at most kSentAtMax: past it the oldest go, and a lag
  // reads as at least their age).
  static constexpr std::size_t kSentAtMax = 1u << 20;
  std::deque<std::pair<replication::Seq, std::chrono::steady_clock::time_point>> sent_at_;
  replication::View last_view_ = 0;
  replication::View last_led_ = 0;

  mutable std::mutex mu_;
  NodeStatsSnapshot snapshot_;
};

}  // namespace fusee::replica
