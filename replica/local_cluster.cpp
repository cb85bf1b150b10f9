#include "replica/local_cluster.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "replica/local_etcd.hpp"
#include "replica/replica_store.hpp"

extern char** environ;

namespace fusee::replica {

using replication::ReplicaId;
using replication::Role;

LocalCluster::LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {
  for (ReplicaId id = 0; id < options_.replicas; ++id) {
    addresses_.push_back("127.0.0.1:" + std::to_string(free_loopback_port()));
  }
  pids_.assign(options_.replicas, 0);
}

LocalCluster::~LocalCluster() {
  for (ReplicaId id = 0; id < options_.replicas; ++id) kill_and_reap(id, SIGKILL);
}

std::string LocalCluster::replica_dir(ReplicaId id) const {
  return options_.dir + "/replica-" + std::to_string(id);
}

Result<void> LocalCluster::initialize(io::FileSystem& fs) {
  for (ReplicaId id = 0; id < options_.replicas; ++id) {
    FUSEE_TRY_VOID(ReplicaStore::initialize(fs, replica_dir(id), options_.cluster, false));
  }
  return ok();
}

bool LocalCluster::start(ReplicaId id) {
  std::string replicas;
  for (const std::string& address : addresses_) replicas += (replicas.empty() ? "" : ",") + address;
  std::vector<std::string> args = options_.command;
  args.insert(args.end(), {"--dir", replica_dir(id), "--cluster", options_.cluster, "--id", std::to_string(id), "--replicas", replicas,
                           "--etcd", "127.0.0.1:" + std::to_string(options_.etcd_port), "--lease-ttl-s",
                           std::to_string(options_.lease_ttl_s), "--tick-ms", std::to_string(options_.tick_ms),
                           "--held-mib", std::to_string(options_.held_mib)});
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string log = replica_dir(id) + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  const int spawned = posix_spawn(&pids_[id], argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) pids_[id] = 0;
  return spawned == 0;
}

void LocalCluster::kill_and_reap(ReplicaId id, int signal) {
  if (pids_[id] == 0) return;
  ::kill(pids_[id], SIGCONT);
  ::kill(pids_[id], signal);
  int status = 0;
  ::waitpid(pids_[id], &status, 0);
  pids_[id] = 0;
}

void LocalCluster::signal(ReplicaId id, int signal) {
  if (pids_[id] != 0) ::kill(pids_[id], signal);
}

std::optional<ReplicaId> LocalCluster::exited() {
  for (ReplicaId id = 0; id < options_.replicas; ++id) {
    int status = 0;
    if (pids_[id] != 0 && ::waitpid(pids_[id], &status, WNOHANG) == pids_[id]) {
      pids_[id] = 0;
      return id;
    }
  }
  return std::nullopt;
}

std::optional<ClusterHealth> cluster_health(ReplicaClient& client, std::uint32_t replicas) {
  ClusterHealth health;
  for (ReplicaId id = 0; id < replicas; ++id) {
    health.statuses.push_back(client.status(id, std::chrono::milliseconds(300)));
  }
  replication::View view = 0;
  for (ReplicaId id = 0; id < replicas; ++id) {
    const auto& s = health.statuses[id];
    if (!s) return std::nullopt;
    if (s->role != Role::primary) continue;
    // Two that believe they serve: one was deposed and has not noticed yet.
    if (health.primary != replication::kNoReplica) return std::nullopt;
    health.primary = id;
    view = s->lead;
  }
  if (health.primary == replication::kNoReplica) return std::nullopt;
  for (const auto& s : health.statuses) {
    if (s->role != Role::primary && (s->role != Role::backup || s->promised != view)) return std::nullopt;
  }
  return health;
}

}  // namespace fusee::replica
