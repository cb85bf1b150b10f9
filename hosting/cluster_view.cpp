#include "hosting/cluster_view.hpp"

#include <algorithm>
#include <future>

#include "replica/replica_client.hpp"

namespace fusee::hosting {

ReplicaStats replica_stats(const ViewHost* host, std::uint32_t replica_id) {
  ReplicaStats stats;
  stats.enabled = true;
  stats.replica_id = replica_id;
  if (host == nullptr) return stats;
  const auto node = host->node_stats();
  stats.role = replication::role_name(node.status.role);
  stats.view = node.status.promised;
  if (node.known_primary != replication::kNoReplica) stats.primary = node.known_primary;
  stats.commit = node.status.commit;
  stats.log_end = node.status.log_end;
  stats.durable_end = node.status.durable_end;
  stats.suspect = node.status.suspect;
  stats.view_changes = node.view_changes;
  stats.leads = node.leads;
  for (auto holds : node.status.holds) stats.lag_batches.push_back(node.status.log_end - std::min(holds, node.status.log_end));
  stats.lag_bytes = node.status.lag_bytes;
  stats.lag_us = node.status.lag_us;
  stats.retired_through = node.status.retired_through;
  stats.publish_latency_counts = node.publish_latency_counts;
  stats.publish_latency_sum_us = node.publish_latency_sum_us;
  stats.store_applied = host->applier_stats().batches_done;
  stats.last_open_us = host->last_open_us();
  return stats;
}

ClusterView::~ClusterView() {
  std::thread refresher;
  {
    std::lock_guard lock(mu_);
    refresher = std::move(refresher_);
  }
  if (refresher.joinable()) refresher.join();  // not under mu_: a refresh takes it as it ends
}

bool ClusterView::fresh() const { return asked_ && std::chrono::steady_clock::now() - *asked_ < kFresh; }

std::vector<ClusterReplica> ClusterView::cluster(std::chrono::milliseconds timeout) const {
  std::lock_guard asking(asking_);
  {
    std::lock_guard lock(mu_);
    if (fresh()) return answer_;
  }
  auto answer = ask(timeout);
  std::lock_guard lock(mu_);
  keep(std::move(answer));
  return answer_;
}

void ClusterView::keep(std::vector<ClusterReplica> answer) const {
  answer_ = std::move(answer);
  asked_ = std::chrono::steady_clock::now();
}

std::optional<std::vector<ClusterReplica>> ClusterView::latest(std::chrono::milliseconds timeout) const {
  std::lock_guard lock(mu_);
  if (!fresh() && !refreshing_) {
    // The last refresh has ended (it cleared refreshing_ as its last step
    // under mu_), so this join waits for nothing but its thread's exit.
    if (refresher_.joinable()) refresher_.join();
    refreshing_ = true;
    refresher_ = std::thread([this, timeout] {
      auto answer = ask(timeout);
      std::lock_guard done(mu_);
      keep(std::move(answer));
      refreshing_ = false;
    });
  }
  if (!asked_) return std::nullopt;
  return answer_;
}

std::vector<ClusterReplica> ClusterView::ask(std::chrono::milliseconds timeout) const {
  std::vector<std::future<std::optional<replica::ReplicaStatus>>> asked;
  for (std::uint32_t id = 0; id < addresses_.size(); ++id) {
    asked.push_back(std::async(std::launch::async, [addresses = addresses_, id, timeout] {
      replica::ReplicaClient client(addresses);
      return client.status(id, timeout);
    }));
  }
  std::vector<ClusterReplica> replicas;
  std::vector<std::optional<replica::ReplicaStatus>> statuses;
  for (auto& answer : asked) statuses.push_back(answer.get());
  std::optional<replica::ReplicaStatus> primary;
  if (auto id = replica::newest_primary(statuses)) primary = statuses[*id];
  for (std::uint32_t id = 0; id < statuses.size(); ++id) {
    ClusterReplica replica;
    replica.id = id;
    replica.address = addresses_[id];
    if (const auto& status = statuses[id]) {
      replica.answered = true;
      replica.role = replication::role_name(status->role);
      replica.view = status->promised;
      replica.commit = status->commit;
      replica.log_end = status->log_end;
      replica.durable_end = status->durable_end;
      replica.suspect = status->suspect;
      replica.retired_through = status->retired_through;
    }
    if (primary && id < primary->holds.size()) {
      replica.lag_batches = primary->log_end - std::min(primary->holds[id], primary->log_end);
      if (id < primary->lag_bytes.size()) replica.lag_bytes = primary->lag_bytes[id];
      if (id < primary->lag_us.size()) replica.lag_us = primary->lag_us[id];
    }
    replicas.push_back(std::move(replica));
  }
  return replicas;
}

}  // namespace fusee::hosting
