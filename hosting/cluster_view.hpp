// ClusterView: what a replica shows of its cluster, for an application's
// engine (Engine::stats().replica, Engine::cluster) and for `fusee server
// --replicated`'s front (/metrics, GET /v1/cluster) alike.
//
// `replica_stats` is this replica's own part, read from its view host;
// `cluster` asks every replica for its status over the replica wire, each on
// a client of its own (a stopped one answers nothing, and holds up no
// other), and takes the lags from the newest primary's answer.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fusee/engine.hpp"
#include "hosting/view_host.hpp"

namespace fusee::hosting {

// This replica's part in its cluster; `host` null: only the id is known.
ReplicaStats replica_stats(const ViewHost* host, std::uint32_t replica_id);

class ClusterView {
 public:
  explicit ClusterView(std::vector<std::string> addresses) : addresses_(std::move(addresses)) {}
  ~ClusterView();  // waits for a refresh under way (at most its timeout)
  ClusterView(const ClusterView&) = delete;
  ClusterView& operator=(const ClusterView&) = delete;

  // Every replica as it answers now, or as it answered within kFresh: a
  // flood of callers costs the replicas a few status requests a second, and
  // ties up no more threads than one asking. Blocks up to `timeout`.
  std::vector<ClusterReplica> cluster(std::chrono::milliseconds timeout) const;
  // Never blocks, for a caller on a thread that must not (an HTTP front's
  // router): the last answer, and a refresh on a thread of its own when it
  // is older than kFresh; none before the first refresh ends.
  std::optional<std::vector<ClusterReplica>> latest(std::chrono::milliseconds timeout) const;
  static constexpr std::chrono::milliseconds kFresh{250};

 private:
  std::vector<ClusterReplica> ask(std::chrono::milliseconds timeout) const;
  bool fresh() const;                                  // under mu_
  void keep(std::vector<ClusterReplica> answer) const;  // under mu_: the answer, asked now

  std::vector<std::string> addresses_;
  mutable std::mutex asking_;  // one cluster() asking at a time
  mutable std::mutex mu_;      // what follows
  mutable std::optional<std::chrono::steady_clock::time_point> asked_;
  mutable std::vector<ClusterReplica> answer_;
  mutable bool refreshing_ = false;
  mutable std::thread refresher_;  // latest()'s, joined before the next
};

}  // namespace fusee::hosting
