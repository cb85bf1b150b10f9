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

struct Primary {
  replication::ReplicaId id = 0;
  replica::ReplicaStatus status;
};

// The primary of the newest lead among the replicas that answer, if any.
std::optional<Primary> find_primary(const std::vector<std::string>& replicas) {
  replica::ReplicaClient client(replicas);
  std::vector<std::optional<replica::ReplicaStatus>> statuses;
  for (replication::ReplicaId id = 0; id < replicas.size(); ++id) {
    statuses.push_back(client.status(id, std::chrono::milliseconds(1000)));
  }
  const auto id = replica::newest_primary(statuses);
  if (!id) return std::nullopt;
  return Primary{*id, *statuses[*id]};
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
                    ? "another process holds fusee.lock (an application running this replica, or another "
                      "rebuild): stop it first"
                    : engine_lock.error().message());
  }
  auto inspection = replica::inspect_store(fs, options.dir);
  if (!inspection) return fail("cannot read it: " + inspection.error().message());
  if (!inspection->cluster.empty() && inspection->cluster != options.cluster) {
    return fail(fmt::format("it is a replica of cluster {}, not {}", inspection->cluster, options.cluster));
  }
  // A local engine's directory is never taken for a lost replica's: a
  // rebuild would remove its log and put another store in place of its own.
  auto meta = fs.exists(io::join_path(options.dir, "fusee.meta"));
  if (inspection->cluster.empty() && meta && *meta) {
    return fail("it holds an engine's data but is no replica's (a local engine's directory?): a rebuild makes only "
                "a lost replica's directory, or a replica's, whole");
  }

  // A replica's own: refused at once while a process runs it.
  auto lock_replica = [&]() -> Result<std::unique_ptr<io::FileSystem::Lock>> {
    return fs.lock_exclusive(io::join_path(io::join_path(options.dir, "replica"), "lock"));
  };
  Result<std::unique_ptr<io::FileSystem::Lock>> replica_lock = std::unique_ptr<io::FileSystem::Lock>();
  if (!inspection->cluster.empty()) {
    replica_lock = lock_replica();
    if (!replica_lock) return fail("another process runs this replica (it holds replica/lock): stop it first");
  }

  auto primary = find_primary(options.replicas);
  if (!primary) return fail("no replica answers as the primary (is a majority running, and etcd?)");
  // A lost directory is made a rebuilt replica first, its segments the
  // cluster's size (it counts in seals again only once it holds a
  // primary's whole log); a replica's own log is kept: it restarts at the
  // primary's start by itself.
  bool remade = false;
  if (inspection->cluster.empty()) {
    const std::uint64_t segment_bytes =
        primary->status.segment_bytes > 0 ? primary->status.segment_bytes : options.segment_bytes;
    auto made = replica::ReplicaStore::initialize(fs, options.dir, options.cluster, true, segment_bytes);
    if (!made) {
      return fail(made.error() == std::errc::operation_would_block
                      ? "another process runs this replica (it holds replica/lock): stop it first"
                      : made.error().message());
    }
    remade = true;
    replica_lock = lock_replica();
    if (!replica_lock) return fail("another process runs this replica (it holds replica/lock): stop it first");
  }

  // The store must stand at or past where the primary's log starts when
  // the replica's restarts there: the primary holds its retirement back
  // while it sends (StoreSender::hold_below), and a primary that moved on
  // meanwhile (another took over) is asked again.
  const std::string rebuild = io::join_path(options.dir, replica::kRebuildDir);
  std::optional<replica::FetchedStore> fetched;
  std::string problem;
  for (int attempt = 0; attempt < 3 && !fetched; ++attempt) {
    if (attempt > 0) primary = find_primary(options.replicas);
    if (!primary) return fail("no replica answers as the primary (is a majority running, and etcd?)");
    if (auto removed = io::remove_tree(fs, rebuild); !removed) return fail(removed.error().message());
    if (auto made = fs.create_dir(rebuild); !made) return fail(made.error().message());
    auto got = replica::fetch_store(fs, replica::transfer_call_to(options.replicas, primary->id,
                                                                  std::chrono::milliseconds(30000)),
                                    options.cluster, io::join_path(rebuild, "runs"), &problem);
    if (!got) {
      return fail(fmt::format("the run store from replica {} ({}): {}", primary->id, options.replicas[primary->id],
                              problem.empty() ? got.error().message() : problem));
    }
    auto now = replica::ReplicaClient(options.replicas).status(primary->id, std::chrono::milliseconds(1000));
    if (now && now->role == replication::Role::primary && now->retired_through + 1 > got->applied) {
      problem = fmt::format("the primary's log starts after batch {}, past the store it sent (batch {})",
                            now->retired_through, got->applied);
      continue;
    }
    fetched = *got;
  }
  if (!fetched) return fail(problem);
  // The store as RocksDB reads it, without changing a byte: it opens, and
  // it stands where the sender said, or past it.
  {
    std::string error_text;
    auto store = engine::RunStore::open_read_only(rebuild, fs, &error_text);
    if (!store) {
      return fail("the fetched run store does not open: " + (error_text.empty() ? store.error().message() : error_text));
    }
    auto applied = (*store)->replica_applied();
    if (!applied) return fail("where the fetched run store stands does not read: " + applied.error().message());
    if (applied->seq < fetched->applied) {
      return fail(fmt::format("the fetched run store stands at batch {}, before batch {}, where the sender said",
                              applied->seq, fetched->applied));
    }
  }
  if (auto installed = replica::install_fetched_store(fs, options.dir); !installed) {
    return fail("putting the fetched run store in place: " + installed.error().message());
  }
  fmt::print("{}: {}the run store of replica {} ({}: {} files, {} bytes, standing at batch {}) is in place; start "
             "the replica: its log restarts where the primary's starts\n",
             options.dir, remade ? "a replica of cluster " + options.cluster + " again (rebuilt); " : "",
             primary->id, options.replicas[primary->id], fetched->files, fetched->bytes, fetched->applied);
  return 0;
}

}  // namespace fusee::cli
