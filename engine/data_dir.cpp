#include "engine/data_dir.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "engine/meta.hpp"
#include "fusee/error.hpp"

namespace fusee::engine {
namespace {

// Creates dir and its missing parents.
Result<void> create_dirs(io::FileSystem& fs, const std::string& dir) {
  if (dir.empty() || dir == "/" || dir == ".") return ok();
  auto exists = FUSEE_TRY(fs.exists(dir));
  if (exists) return ok();
  auto parent = io::parent_path(dir);
  if (!parent.empty() && parent != dir) FUSEE_TRY_VOID(create_dirs(fs, parent));
  FUSEE_TRY_VOID(fs.create_dir(dir));
  // Until its parent is synced, a new directory (and all it will hold) can
  // vanish in a power loss.
  return fs.sync_dir(parent.empty() ? "." : parent);
}

}  // namespace

ShardBases read_checkpoints(RunStore& store, std::uint32_t shards, const std::string& where) {
  ShardBases bases;
  bases.floors.assign(shards, 0);
  bases.replay_from.assign(shards, 1);
  bases.keep_from.assign(shards, 1);
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    auto checkpoint = store.checkpoint(shard);
    if (!checkpoint) {
      throw Error(errc::storage, fmt::format("cannot read shard {}'s checkpoint from {}: {}", shard, where,
                                             checkpoint.error().message()));
    }
    if (*checkpoint) {
      bases.floors[shard] = (*checkpoint)->lsn;
      bases.keep_from[shard] = (*checkpoint)->keep_from_sequence;
      bases.replay_from[shard] = (*checkpoint)->replay_from > 0 ? (*checkpoint)->replay_from : bases.floors[shard] + 1;
    }
  }
  return bases;
}

DataDir claim_data_dir(io::FileSystem& fs, const std::string& dir, std::uint32_t shards, bool store_on_fs,
                       DirOwner owner) {
  DataDir opened;
  if (auto made = create_dirs(fs, dir); !made) {
    throw Error(errc::storage, fmt::format("cannot create the data directory {}: {}", dir, made.error().message()));
  }
  auto lock = fs.lock_exclusive(io::join_path(dir, "fusee.lock"));
  if (!lock) {
    throw Error(errc::storage,
                lock.error() == std::errc::operation_would_block
                    ? fmt::format("the data directory {} is in use by another engine (it holds {}/fusee.lock)", dir,
                                  dir)
                    : fmt::format("cannot lock the data directory {}: {}", dir, lock.error().message()));
  }
  opened.lock = std::move(*lock);
  // Before anything is written: a replica's directory holds a replicated
  // log, which a local engine's log would refuse only after fusee.meta and
  // runs/ were made beside it.
  auto replica = is_replica_dir(fs, dir);
  if (!replica) {
    throw Error(errc::storage, fmt::format("cannot read the data directory {}: {}", dir, replica.error().message()));
  }
  if (*replica && owner == DirOwner::local) {
    throw Error(errc::invalid_argument,
                fmt::format("the data directory {} is a replica's (it holds {}/{}): run it as a replica (`fusee "
                            "replica`, Config::replicated), not as a local engine's",
                            dir, dir, kReplicaMarker));
  }
  auto meta = read_meta(fs, dir);
  if (!meta) {
    throw Error(errc::storage, fmt::format("cannot read {}/{}: {}", dir, kMetaFileName, meta.error().message()));
  }
  std::uint32_t layout = 0;
  if (*meta) {
    if (shards != 0 && shards != (*meta)->shards) {
      throw Error(errc::wrong_shard_count,
                  fmt::format("the data directory {} has {} shards, not {}: change it offline with `fusee reshard "
                              "{} --shards {}`, or open it with shards = 0 to use {}",
                              dir, (*meta)->shards, shards, dir, shards, (*meta)->shards));
    }
    shards = (*meta)->shards;
    layout = (*meta)->layout;
    if (owner == DirOwner::replicated && layout != 0) {
      throw Error(errc::invalid_argument,
                  fmt::format("the data directory {} was resharded (layout {}): a replica's engine keeps its run "
                              "store beside the replica's log, in layout 0",
                              dir, layout));
    }
    // What an interrupted reshard left: the layout it was writing, or the
    // one it had switched away from.
    auto leftovers = leftover_layouts(fs, dir, **meta);
    if (!leftovers) {
      throw Error(errc::storage,
                  fmt::format("cannot list the data directory {}: {}", dir, leftovers.error().message()));
    }
    for (const auto& leftover : *leftovers) {
      if (auto removed = io::remove_tree(fs, leftover); !removed) {
        throw Error(errc::storage, fmt::format("cannot remove {}, left by an interrupted reshard: {}", leftover,
                                               removed.error().message()));
      }
    }
  } else {
    if (shards == 0) shards = std::max(1u, std::thread::hardware_concurrency());
    if (auto written = write_meta(fs, dir, Meta{kMetaFormat, shards}); !written) {
      throw Error(errc::storage,
                  fmt::format("cannot write {}/{}: {}", dir, kMetaFileName, written.error().message()));
    }
  }
  opened.shards = shards;
  // The run store first: its checkpoints say what the log may have retired.
  opened.root = layout_root(dir, layout);
  const auto& root = opened.root;
  auto runs_dir = io::join_path(root, "runs");
  if (auto made = create_dirs(fs, runs_dir); !made) {
    throw Error(errc::storage, fmt::format("cannot create {}: {}", runs_dir, made.error().message()));
  }
  std::string store_error;
  auto store = RunStore::open(root, &store_error, store_on_fs ? &fs : nullptr);
  if (!store) {
    throw Error(errc::storage, fmt::format("cannot open the run store in {}: {}", runs_dir,
                                           store_error.empty() ? store.error().message() : store_error));
  }
  opened.store = std::move(*store);
  opened.bases = read_checkpoints(*opened.store, shards, runs_dir);
  return opened;
}

void set_log_base(const std::string& root, std::uint32_t shards, const ShardBases& bases, wal::LogOptions& options) {
  options.base.shard_lsn_floors = bases.floors;
  options.base.shard_replay_from = bases.replay_from;
  options.base.first_sequence_max = *std::min_element(bases.keep_from.begin(), bases.keep_from.end());
  options.dir = root;
  options.shard_count = shards;
}

DataDir open_data_dir(io::FileSystem& fs, const std::string& dir, std::uint32_t shards, wal::LogOptions log_options,
                      bool store_on_fs) {
  DataDir opened = claim_data_dir(fs, dir, shards, store_on_fs, DirOwner::local);
  set_log_base(opened.root, opened.shards, opened.bases, log_options);
  const auto& root = opened.root;
  wal::RecoveryPlan plan;
  auto log = wal::Log::open(fs, log_options, &plan);
  if (!log) {
    std::string why = log.error().message();
    if (!plan.refusal.empty()) why = plan.refusal;
    throw Error(errc::storage, fmt::format("cannot open the log in {}/wal: {}", root, why));
  }
  opened.log = std::move(*log);
  return opened;
}

}  // namespace fusee::engine
