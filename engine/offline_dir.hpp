// OfflineDir: a data directory read without opening an engine on it — its
// meta, its run store (read-only), the shards' checkpoints, the log's
// recovery plan, and the runs recovery would load. For `fusee inspect`
// (which reads through a ReadOnlyFileSystem) and `fusee reshard` (which
// holds the directory's lock). Reads only; never changes a byte.
//
// collect_runs assembles each run's journal by the rule Engine::open
// follows (engine/shard_loading.cpp, Shard::load): the store's live journals, then
// the log from the checkpoint's replay_from, skipping below the checkpoint
// the records of runs the store already holds, and loading a parked run's
// journal when the log has records for it past the checkpoint. The reshard
// tests check the two agree: resharded runs finish with the results of runs
// never resharded. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "engine/meta.hpp"
#include "engine/run_store.hpp"
#include "wal/io/file_system.hpp"
#include "wal/recovery.hpp"

namespace fusee::engine {

struct OfflineDir {
  std::string dir;
  std::optional<Meta> meta;
  std::string root;                     // where the current layout's wal/ and runs/ are
  std::vector<std::string> leftovers;   // of an interrupted reshard (the next open removes them)
  std::unique_ptr<RunStore> store;      // null when the directory has none yet
  std::vector<std::optional<Checkpoint>> checkpoints;  // per shard
  wal::RecoveryBase base;
  wal::RecoveryPlan plan;
  bool plan_made = false;
  // Why an engine would refuse to open the directory, in its words; empty
  // when it would open.
  std::string refusal;
};

// Reads what it can. An error result only for a directory that cannot be
// read at all; damage is described in `refusal`, with as much of the rest
// filled in as could be read. `list_batches` fills plan.batches.
Result<OfflineDir> read_offline_dir(io::FileSystem& fs, const std::string& dir, bool list_batches = false);

// Where a record of a run's journal was found.
enum class RecordSource : char { store_live = 'j', store_parked = 'k', log = 'w' };

struct OfflineRecord {
  wal::Lsn lsn = 0;  // in its shard (of the store's key, or of the log)
  RecordSource source = RecordSource::log;
  std::vector<std::byte> bytes;
};

// A run recovery would load (or leave parked), with its journal.
struct OfflineRun {
  std::string id;
  std::uint32_t shard = 0;
  std::uint32_t generation = 1;
  std::string workflow;
  std::uint32_t version = 1;  // the workflow version it started on
  std::int64_t started_ms = 0;
  // Still parked: recovery leaves it in the store until something wakes it.
  std::optional<ParkedRun> parked;
  // Finished in its journal (run_completed, run_failed, run_cancelled) but
  // not yet in the store's finished runs; running otherwise.
  RunStatus status = RunStatus::running;
  std::vector<OfflineRecord> records;
};

// The runs of `shard` recovery would assemble, in id order. errc::corrupt
// (wal) with `problem` set when a record does not decode or does not fit its
// run's journal. Needs a directory whose plan did not refuse.
Result<std::vector<OfflineRun>> collect_runs(io::FileSystem& fs, OfflineDir& offline, std::uint32_t shard,
                                             std::string* problem = nullptr);

}  // namespace fusee::engine
