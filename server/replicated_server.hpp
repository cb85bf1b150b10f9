// ReplicatedServer: `fusee server --replicated` (docs/replication.md, "Server
// mode on three replicas"). N servers, each a replica of the replicated log
// (hosting/view_host.hpp); the one that leads a view opens a log service
// (log_service.hpp) over that view's log and listens for workers, and stops
// it when the view ends. Workers name every server's address and connect to
// whichever listens (remote/remote_sink.cpp): to a worker, a failover is a
// server restart -- it reconnects, takes its leases again (the new view's
// epochs beat every earlier view's), checks every acknowledged record was
// kept and resends the rest.
//
// A backup listens for nobody: a worker that reaches it is refused at
// connect and tries the next address. The run store the workers checkpoint
// into travels in the log, so the next primary holds every checkpoint the
// last one acknowledged.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "hosting/cluster_view.hpp"
#include "hosting/view_host.hpp"
#include "server/log_service.hpp"

namespace fusee::server {

struct ReplicatedServerOptions {
  // The workers' side, as `fusee server`'s (dir, shards and the log's
  // options are the replica's instead).
  LogServiceOptions service;
  std::uint32_t shards = 0;  // required: the same on every server of the cluster
  // The replica: self, addresses, dir, cluster, etcd, timings, log.
  replica::ReplicaNodeOptions node;
  io::FileSystem* file_system = nullptr;  // null: the real disk
};

class ReplicatedServer {
 public:
  // Opens the replica (throws fusee::Error); it serves workers whenever it
  // leads.
  explicit ReplicatedServer(ReplicatedServerOptions options);
  ~ReplicatedServer();  // stop()
  ReplicatedServer(const ReplicatedServer&) = delete;
  ReplicatedServer& operator=(const ReplicatedServer&) = delete;

  std::uint32_t shard_count() const { return host_->shard_count(); }
  // Where the view's service listens now; empty while this server leads none.
  std::string endpoint() const;
  replica::NodeStatsSnapshot node_stats() const { return host_->node_stats(); }
  // Stops serving workers and the replica. Idempotent.
  void stop();

  // Leases' epochs in view v start above epoch_floor(v).
  static std::uint64_t epoch_floor(replication::View view) { return view << 40; }

 private:
  void open_service(hosting::ViewOpening opening);
  std::shared_ptr<LogService> take_service();  // the view's, no longer served; null if none

  // GET /v1/cluster waits this long at most for a replica's status.
  static constexpr std::chrono::milliseconds kClusterTimeout{500};

  LogServiceOptions service_options_;
  std::function<void(const std::string&)> say_;
  std::uint32_t replica_id_;
  hosting::ClusterView cluster_view_;
  mutable std::mutex mu_;
  std::shared_ptr<LogService> service_;  // the view's, while it leads one
  std::unique_ptr<hosting::ViewHost> host_;  // last: gone before what its hooks use
};

}  // namespace fusee::server
