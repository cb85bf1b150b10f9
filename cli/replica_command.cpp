#include "cli/replica_command.hpp"

#include <fmt/format.h>

#include <csignal>
#include <thread>

#include "fusee/error.hpp"
#include "protocol/address.hpp"
#include "replica/replica_client.hpp"
#include "replica/replica_node.hpp"
#include "replica/replica_store.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {

int run_replica_init(const ReplicaCommandOptions& options) {
  io::PosixFileSystem fs;
  auto done = replica::ReplicaStore::initialize(fs, options.dir, options.cluster, options.rebuild);
  if (!done) {
    fmt::print(stderr, "fusee replica init: {}: {}\n", options.dir, done.error().message());
    return 1;
  }
  fmt::print("{} is a replica of cluster {}{}\n", options.dir, options.cluster,
             options.rebuild ? " (rebuilt: it counts again once it holds a primary's whole log)" : "");
  return 0;
}

int run_replica(const ReplicaCommandOptions& options) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  replica::ReplicaNodeOptions node_options;
  node_options.self = options.id;
  node_options.addresses = options.replicas;
  node_options.dir = options.dir;
  node_options.cluster = options.cluster;
  node_options.tick = std::chrono::milliseconds(options.tick_ms);
  node_options.etcd.lease_ttl_seconds = options.lease_ttl_s;
  node_options.disk_thread = options.disk_thread;
  try {
    const auto etcd = protocol::parse_address(options.etcd, "--etcd address", false);
    node_options.etcd.host = etcd.tcp.address().to_string();
    node_options.etcd.port = etcd.tcp.port();
    for (const std::string& address : options.replicas) protocol::parse_address(address, "replica address", false);
  } catch (const Error& error) {
    fmt::print(stderr, "fusee replica run: {}\n", error.what());
    return 2;
  }
  if (options.replicas.size() < 3 || options.replicas.size() % 2 == 0 || options.id >= options.replicas.size()) {
    fmt::print(stderr, "fusee replica run: --replicas names 3, 5, 7... addresses and --id one of them (0-based)\n");
    return 2;
  }
  // Timings in ticks, from the lease: a primary that cannot renew steps down
  // after half the TTL, well before etcd lets another replica take over.
  const std::uint32_t lease_ms = options.lease_ttl_s * 1000;
  node_options.lease_ticks = std::max<std::uint32_t>(2, lease_ms / 2 / options.tick_ms);
  node_options.election_ticks = std::max<std::uint32_t>(4, lease_ms / 4 / options.tick_ms);
  node_options.heartbeat_ticks = std::max<std::uint32_t>(1, 50 / options.tick_ms);
  node_options.candidacy_ticks = std::max<std::uint32_t>(10, lease_ms * 2 / options.tick_ms);
  if (!options.quiet) node_options.log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };

  io::PosixFileSystem fs;
  auto node = replica::ReplicaNode::open(fs, node_options);
  if (!node) {
    fmt::print(stderr, "fusee replica run: {}: {}\n", options.dir, node.error().message());
    return 1;
  }
  std::thread waiter([&] {
    int received = 0;
    sigwait(&stop_signals, &received);
    (*node)->stop();
  });
  auto served = (*node)->run();
  // The waiter ends only on a signal: after a failure, send it one.
  if (!served) {
    fmt::print(stderr, "fusee replica run: stopped: {}\n", served.error().message());
    pthread_kill(waiter.native_handle(), SIGTERM);
  }
  waiter.join();
  return served ? 0 : 1;
}

int run_replica_status(const ReplicaCommandOptions& options) {
  replica::ReplicaClient client(options.replicas);
  int unreachable = 0;
  for (replication::ReplicaId id = 0; id < options.replicas.size(); ++id) {
    auto status = client.status(id, std::chrono::milliseconds(1000));
    if (!status) {
      fmt::print("replica {} ({}): no answer\n", id, options.replicas[id]);
      ++unreachable;
      continue;
    }
    fmt::print("replica {} ({}): {}, view {}, log through {} (durable {}), published through {}{}\n", id,
               options.replicas[id], replication::role_name(status->role), status->promised, status->log_end,
               status->durable_end, status->commit, status->suspect ? ", suspect" : "");
  }
  return unreachable == 0 ? 0 : 1;
}

}  // namespace fusee::cli
