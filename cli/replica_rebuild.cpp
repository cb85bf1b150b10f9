// `fusee replica rebuild`: a replica whose disk was lost, or whose log must
// restart where the primary's starts, made whole again from the primary
// (docs/replication.md, "Rebuilding a replica's run store"). With the
// replica stopped: a directory that is no cluster's becomes a rebuilt
// replica (as `init --rebuild`); then the primary's run store is fetched
// (replica/store_transfer.hpp), checked, and put in place of the replica's
// own. Started again, the replica's log restarts where the primary's starts
// and its store applies on from where the fetched one stands.
#include <fmt/format.h>

#include <chrono>

#include "cli/replica_command.hpp"
#include "engine/run_store.hpp"
#include "fusee/error.hpp"
#include "protocol/address.hpp"
#include "replica/replica_client.hpp"
#include "replica/replica_store.hpp"
#include "replica/store_errc.hpp"
#include "replica/store_transfer.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {

namespace {

// The primary of the newest lead among the replicas that answer, if any.
std::optional<replication::ReplicaId> find_primary(const std::vector<std::string>& replicas) {
  replica::ReplicaClient client(replicas);
  std::optional<replication::ReplicaId> primary;
  replication::View lead = 0;
  for (replication::ReplicaId id = 0; id < replicas.size(); ++id) {
    auto status = client.status(id, std::chrono::milliseconds(1000));
    if (status && status->role == replication::Role::primary && (!primary || status->lead > lead)) {
      primary = id;
      lead = status->lead;
    }
  }
  return primary;
}

}  // namespace

int run_replica_rebuild(const ReplicaCommandOptions& options) {
  try {
    for (const std::string& address : options.replicas) protocol::parse_address(address, "replica address", false);
  } catch (const Error& error) {
    fmt::print(stderr, "fusee replica rebuild: {}\n", error.what());
    return 2;
  }
  if (options.replicas.size() < 3 || options.replicas.size() % 2 == 0) {
    fmt::print(stderr, "fusee replica rebuild: --replicas names 3, 5, 7... addresses\n");
    return 2;
  }
  io::PosixFileSystem fs;
  auto fail = [&](const std::string& why) {
    fmt::print(stderr, "fusee replica rebuild: {}: {}\n", options.dir, why);
    return 1;
  };
  if (auto made = fs.create_dir(options.dir); !made) return fail(made.error().message());
  // The engine's side of the directory: an application's replica holds it
  // while it runs.
  auto engine_lock = fs.lock_exclusive(io::join_path(options.dir, "fusee.lock"));
  if (!engine_lock) {
    return fail(engine_lock.error() == std::errc::operation_would_block
                    ? "an application runs this replica (it holds fusee.lock): stop it first"
                    : engine_lock.error().message());
  }
  // A lost directory is made a rebuilt replica first (it counts in seals
  // again only once it holds a primary's whole log); a replica's own is
  // kept: its log restarts at the primary's start by itself.
  bool remade = false;
  if (auto made = replica::ReplicaStore::initialize(fs, options.dir, options.cluster, true, options.segment_bytes);
      made) {
    remade = true;
  } else if (made.error() != make_error_code(replica::StoreErrc::already_initialized)) {
    return fail(made.error() == std::errc::operation_would_block ? "another process runs this replica (it holds "
                                                                   "replica/lock): stop it first"
                                                                 : made.error().message());
  }
  auto replica_lock = fs.lock_exclusive(io::join_path(io::join_path(options.dir, "replica"), "lock"));
  if (!replica_lock) return fail("another process runs this replica (it holds replica/lock): stop it first");
  auto inspection = replica::inspect_store(fs, options.dir);
  if (inspection && !inspection->cluster.empty() && inspection->cluster != options.cluster) {
    return fail(fmt::format("it is a replica of cluster {}, not {}", inspection->cluster, options.cluster));
  }

  const auto primary = find_primary(options.replicas);
  if (!primary) return fail("no replica answers as the primary (is a majority running, and etcd?)");
  const std::string rebuild = io::join_path(options.dir, replica::kRebuildDir);
  if (auto removed = io::remove_tree(fs, rebuild); !removed) return fail(removed.error().message());
  if (auto made = fs.create_dir(rebuild); !made) return fail(made.error().message());
  std::string problem;
  auto fetched = replica::fetch_store(
      fs, replica::transfer_call_to(options.replicas, *primary, std::chrono::milliseconds(30000)), options.cluster,
      io::join_path(rebuild, "runs"), &problem);
  if (!fetched) {
    return fail(fmt::format("the run store from replica {} ({}): {}", *primary, options.replicas[*primary],
                            problem.empty() ? fetched.error().message() : problem));
  }
  // The store as RocksDB reads it, without changing a byte: it opens, and
  // it stands where the sender said, or past it.
  {
    std::string error_text;
    auto store = engine::RunStore::open_read_only(rebuild, fs, &error_text);
    if (!store) return fail("the fetched run store does not open: " + (error_text.empty() ? store.error().message() : error_text));
    auto applied = (*store)->replica_applied();
    if (!applied || applied->seq < fetched->applied) {
      return fail(fmt::format("the fetched run store stands before batch {}, where the sender said it stood",
                              fetched->applied));
    }
  }
  if (auto installed = replica::install_fetched_store(fs, options.dir); !installed) {
    return fail("putting the fetched run store in place: " + installed.error().message());
  }
  fmt::print("{}: {}the run store of replica {} ({}: {} files, {} bytes, applied through batch {}) is in place; start "
             "the replica: its log restarts where the primary's starts\n",
             options.dir, remade ? "a replica of cluster " + options.cluster + " again (rebuilt); " : "", *primary,
             options.replicas[*primary], fetched->files, fetched->bytes,
             fetched->applied == 0 ? 0 : fetched->applied - 1);
  return 0;
}

}  // namespace fusee::cli
