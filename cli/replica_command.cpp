#include "cli/replica_command.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <thread>

#include "cli/stop_signals.hpp"
#include "fusee/error.hpp"
#include "protocol/address.hpp"
#include "replica/replica_client.hpp"
#include "replica/etcd_members.hpp"
#include "replica/replica_node.hpp"
#include "replica/replica_store.hpp"
#include "cli/table.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/io/read_only_file_system.hpp"

namespace fusee::cli {

int run_replica_init(const ReplicaCommandOptions& options) {
  io::PosixFileSystem fs;
  auto done = replica::ReplicaStore::initialize(fs, options.dir, options.cluster, options.rebuild, options.segment_bytes);
  if (!done) {
    fmt::print(stderr, "fusee replica init: {}: {}\n", options.dir, done.error().message());
    return 1;
  }
  fmt::print("{} is a replica of cluster {}{}\n", options.dir, options.cluster,
             options.rebuild ? " (rebuilt: it counts again once it holds a primary's whole log)" : "");
  return 0;
}

int run_replica(const ReplicaCommandOptions& options) {
  sigset_t stop_signals = block_stop_signals();

  replica::ReplicaNodeOptions node_options;
  node_options.self = options.id;
  node_options.addresses = options.replicas;
  node_options.dir = options.dir;
  node_options.cluster = options.cluster;
  node_options.disk_thread = options.disk_thread;
  node_options.held_bytes_max = options.held_mib << 20;
  try {
    replica::set_etcd_members(options.etcd, "--etcd address", node_options.etcd);
    for (const std::string& address : options.replicas) protocol::parse_address(address, "replica address", false);
  } catch (const Error& error) {
    fmt::print(stderr, "fusee replica run: {}\n", error.what());
    return 2;
  }
  if (options.replicas.size() < 3 || options.replicas.size() % 2 == 0 || options.id >= options.replicas.size()) {
    fmt::print(stderr, "fusee replica run: --replicas names 3, 5, 7... addresses and --id one of them (0-based)\n");
    return 2;
  }
  replica::set_timings_from_lease(node_options, options.lease_ttl_s, options.tick_ms);
  if (!options.quiet) node_options.log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };

  io::PosixFileSystem fs;
  // A directory that is there but no cluster's is a lost disk (the replica
  // comes up wiped and waits for `init --rebuild`); one that is not there at
  // all is more likely a mistyped path.
  if (auto there = fs.exists(options.dir); !there || !*there) {
    fmt::print(stderr, "fusee replica run: {}: no such directory (fusee replica init makes a replica's)\n", options.dir);
    return 1;
  }
  auto node = replica::ReplicaNode::open(fs, node_options);
  if (!node) {
    const bool locked = node.error() == std::errc::operation_would_block;
    fmt::print(stderr, "fusee replica run: {}: {}\n", options.dir,
               locked ? "another process runs this replica (it holds replica/lock)" : node.error().message());
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

int run_replica_inspect(const ReplicaCommandOptions& options) {
  io::PosixFileSystem posix;
  io::ReadOnlyFileSystem fs(posix);
  auto inspection = replica::inspect_store(fs, options.dir);
  if (!inspection) {
    fmt::print(stderr, "fusee replica inspect: {}: {}\n", options.dir, inspection.error().message());
    return 1;
  }
  if (inspection->cluster.empty()) {
    fmt::print("{}: not a replica of any cluster (lost, or never made one: fusee replica init)\n", options.dir);
    return 0;
  }
  const auto& chain = inspection->chain;
  fmt::print("{}: a replica of cluster {}\n", options.dir, inspection->cluster);
  fmt::print("log: {} batches in {} bytes of {} segment(s)", chain.entries.size(), chain.file_bytes,
             chain.segments.size());
  if (!chain.entries.empty()) {
    fmt::print(", views {}..{}, the last acked {}", chain.entries.front().view, chain.entries.back().view,
               chain.entries.back().acked);
  }
  fmt::print("\n");
  if (chain.retired_through() > 0) {
    fmt::print("start: batches through {} retired; the log starts at segment {} (recorded in replica/start)\n",
               chain.retired_through(), chain.start.segment);
  }
  if (!chain.retired_segments.empty()) {
    fmt::print("below the start: {} segment(s) a retirement had not removed yet (recovery removes them)\n",
               chain.retired_segments.size());
  }
  if (chain.damaged) fmt::print("damage: {} (recovery marks the replica suspect and cuts the log there)\n", chain.damage);
  if (!chain.leftover_segments.empty() && !chain.damaged) {
    fmt::print("past the chain: {} segment(s) a crash left behind a roll or a cut (recovery removes them)\n",
               chain.leftover_segments.size());
  }
  if (inspection->suspect_marked) {
    std::string note = inspection->suspect_note;
    while (!note.empty() && note.back() == '\n') note.pop_back();
    fmt::print("suspect: {} -- it counts in seals again once it holds a primary's whole log\n", note);
  }
  if (options.batches) {
    Table table({{"seq", Table::Align::right}, {"view", Table::Align::right}, {"acked", Table::Align::right},
                 {"bytes", Table::Align::right}});
    for (const auto& entry : chain.entries) {
      table.add({std::to_string(entry.seq), std::to_string(entry.view), std::to_string(entry.acked),
                 std::to_string(entry.payload.size())});
    }
    table.print(stdout);
  }
  return 0;
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
    fmt::print("replica {} ({}): {}, view {}, log {}..{} (durable {}), published through {}{}; payloads held "
               "from batch {}, {} batches read back from the segments\n",
               id, options.replicas[id], replication::role_name(status->role), status->promised,
               status->retired_through + 1, status->log_end, status->durable_end, status->commit,
               status->suspect ? ", suspect" : "", status->held_from, status->batches_read_back);
    if (!status->holds.empty()) {
      // The primary's word on each backup: what it holds durably in this
      // view, and how many batches it lags.
      std::string backups;
      for (replication::ReplicaId other = 0; other < status->holds.size(); ++other) {
        if (other == id) continue;
        const replication::Seq holds = status->holds[other];
        backups += fmt::format("{}replica {} holds through {} (lag {} batches, {} bytes, {:.3f} s)",
                               backups.empty() ? "" : "; ", other, holds, status->log_end - std::min(holds, status->log_end),
                               other < status->lag_bytes.size() ? status->lag_bytes[other] : 0,
                               other < status->lag_us.size() ? static_cast<double>(status->lag_us[other]) / 1e6 : 0.0);
      }
      fmt::print("  backups: {}\n", backups);
    }
  }
  return unreachable == 0 ? 0 : 1;
}

}  // namespace fusee::cli
