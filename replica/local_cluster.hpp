// A replicated log's replicas as local processes, for the log demo and the
// benchmark: each `fusee replica run` (or whatever `command` names) in a
// directory of its own, on a loopback port the kernel picked, against one
// etcd (replica/local_etcd.hpp); started, killed, stopped and resumed by
// signal. Not thread-safe: one thread drives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/result.hpp"
#include "replica/replica_client.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::replica {

struct LocalClusterOptions {
  std::string dir;                   // replica-N/ and replica-N.log (its stderr) under it
  std::string cluster = "local";
  std::uint32_t replicas = 3;
  std::uint16_t etcd_port = 0;
  std::uint32_t lease_ttl_s = 1;
  std::uint32_t tick_ms = 5;
  std::uint64_t held_mib = 64;       // `replica run --held-mib`
  std::vector<std::string> command;  // argv before the replica's flags, e.g. {"/proc/self/exe", "replica", "run"}
};

class LocalCluster {
 public:
  explicit LocalCluster(LocalClusterOptions options);
  ~LocalCluster();  // SIGKILLs whatever still runs
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  const std::vector<std::string>& addresses() const { return addresses_; }
  std::string replica_dir(replication::ReplicaId id) const;
  std::uint32_t size() const { return options_.replicas; }

  // Makes every replica's directory the cluster's.
  Result<void> initialize(io::FileSystem& fs);
  bool start(replication::ReplicaId id);
  // Sends `signal` (after SIGCONT, so a stopped one takes it) and waits for the exit.
  void kill_and_reap(replication::ReplicaId id, int signal);
  void signal(replication::ReplicaId id, int signal);
  // A replica that exited on its own (a failed disk, a refused directory).
  std::optional<replication::ReplicaId> exited();

 private:
  LocalClusterOptions options_;
  std::vector<std::string> addresses_;
  std::vector<pid_t> pids_;
};

// One primary and every other replica a backup that promised its view: the
// cluster can lose any one replica. Each replica's status as it answered.
struct ClusterHealth {
  replication::ReplicaId primary = replication::kNoReplica;
  std::vector<std::optional<ReplicaStatus>> statuses;
};
std::optional<ClusterHealth> cluster_health(ReplicaClient& client, std::uint32_t replicas);

// Polls `check` every 10 ms until it holds (true) or `within` passes (false).
template <typename Check>
bool wait_for(std::chrono::milliseconds within, Check check) {
  const auto give_up_at = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < give_up_at) {
    if (check()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace fusee::replica
