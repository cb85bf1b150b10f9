// open_data_dir: claims a data directory for a local engine or `fusee
// server` -- creates it, takes its lock, reads (or writes) fusee.meta and
// checks the shard count, removes what an interrupted reshard left, opens
// the run store, reads each shard's checkpoint and opens the shared log
// from them. One path for both, so both refuse the same things the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/run_store.hpp"
#include "wal/io/file_system.hpp"
#include "wal/log.hpp"

namespace fusee::engine {

// Where each shard's recovery starts, from its checkpoint (none: 0, 1, 1).
struct ShardBases {
  std::vector<wal::Lsn> floors;          // the checkpoint's LSN
  std::vector<wal::Lsn> replay_from;     // the first LSN its recovery reads from the log
  std::vector<std::uint64_t> keep_from;  // where the log must start for it
};
// Reads them from the store (`where` names it in errors). Throws fusee::Error.
ShardBases read_checkpoints(RunStore& store, std::uint32_t shards, const std::string& where);

struct DataDir {
  std::unique_ptr<io::FileSystem::Lock> lock;  // held while the directory is in use
  std::uint32_t shards = 0;
  std::string root;  // the current layout's directory (engine/meta.hpp)
  std::unique_ptr<RunStore> store;
  std::unique_ptr<wal::Log> log;  // open_data_dir's; claim_data_dir leaves it to its caller
  ShardBases bases;
};

// Whose the directory may be.
enum class DirOwner {
  local,       // a local engine or `fusee server`: a replica's directory is refused
  replicated,  // a replica's engine (docs/replication.md): layout 0 only, the log the replica's
};

// `shards` 0: the directory's (a new one gets `new_shards`, 0: CPUs).
// `log_options` gives everything but dir, shard_count and the recovery
// bases, which come from the directory. `store_on_fs`: RocksDB's files go
// through `fs` too (tests' simulated disks). Throws fusee::Error saying what is wrong.
DataDir open_data_dir(io::FileSystem& fs, const std::string& dir, std::uint32_t shards, wal::LogOptions log_options,
                      bool store_on_fs);

// open_data_dir's first part: the directory claimed (created, locked, its
// fusee.meta read or written, leftovers removed) and its run store open,
// with each shard's checkpoint read; no log. Throws fusee::Error.
DataDir claim_data_dir(io::FileSystem& fs, const std::string& dir, std::uint32_t shards, bool store_on_fs,
                       DirOwner owner);

// The options' dir, shard_count and recovery bases: a directory's log
// under `root`, recovering from `bases`.
void set_log_base(const std::string& root, std::uint32_t shards, const ShardBases& bases, wal::LogOptions& options);

}  // namespace fusee::engine
