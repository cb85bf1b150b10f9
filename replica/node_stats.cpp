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
  status.retired_through = core.log().retired_through();
  if (core.role() == Role::primary) {
    const auto& log = core.log();
    for (ReplicaId r = 0; r < replicas; ++r) {
      const Seq holds = r == self ? core.durable_end() : core.match_of(r);
      status.holds.push_back(holds);
      // (A replica behind the start lacks bytes no longer counted.)
      status.lag_bytes.push_back(log.bytes_through(log.end()) -
                                 log.bytes_through(std::clamp(holds, log.retired_through(), log.end())));
    }
  }
  return status;
}

void NodeStats::proposed(Seq seq) {
  const auto now = std::chrono::steady_clock::now();
  proposed_at_.emplace(seq, now);
  sent_at_.emplace_back(seq, now);
  if (sent_at_.size() > kSentAtMax) sent_at_.pop_front();
}

std::vector<std::uint64_t> NodeStats::lag_us(const ReplicaStatus& status) const {
  std::vector<std::uint64_t> lags;
  const auto now = std::chrono::steady_clock::now();
  for (const Seq holds : status.holds) {
    std::uint64_t lag = 0;
    if (holds < status.log_end && !sent_at_.empty()) {
      // The oldest batch it lacks, or (proposed before what is recorded)
      // the oldest recorded: a lower bound.
      auto at = std::lower_bound(sent_at_.begin(), sent_at_.end(), holds + 1,
                                 [](const auto& sent, Seq seq) { return sent.first < seq; });
      if (at == sent_at_.end()) at = std::prev(sent_at_.end());
      if (at->first > holds + 1) at = sent_at_.begin();
      lag = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - at->second).count());
    }
    lags.push_back(lag);
  }
  return lags;
}

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
  status.lag_us = lag_us(status);
  // What every replica holds is no replica's lag any more.
  if (!status.holds.empty()) {
    const Seq held = *std::min_element(status.holds.begin(), status.holds.end());
    while (!sent_at_.empty() && sent_at_.front().first <= held) sent_at_.pop_front();
  }
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
