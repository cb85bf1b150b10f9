// CheckpointWork: one shard's checkpoint as the shard hands it to the
// checkpointer — the run-store changes that bring the store up to the
// shard's state at `lsn`.
//
// What a checkpoint holds. A run's state is whatever replaying its records
// gives (engine/run.hpp), so a shard's state at LSN L is: the records up to L
// of every run still unfinished at L, and a summary (FinishedRun, streams) of
// every run finished by L. The store keeps the unfinished runs' records
// (added checkpoint by checkpoint, never rewritten), and a finished run's
// records are dropped for its summary. Recovery then loads the store's
// journals and replays only the log past L, and the log may retire every
// batch before keep_from_sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/run_store.hpp"
#include "wal/log_format.hpp"

namespace fusee::engine {

class Run;

struct CheckpointWork {
  std::uint32_t shard = 0;
  wal::Lsn lsn = 0;
  std::uint64_t keep_from_sequence = 0;

  struct JournalCopy {
    std::string id;
    wal::Lsn lsn = 0;
    std::vector<std::byte> bytes;
  };
  // Journals of runs that finished, as the store holds them: erased first.
  std::vector<std::string> erased_journals;
  std::vector<JournalCopy> journal;  // records of unfinished runs, new since the last checkpoint
  std::vector<FinishedRun> finished;
  std::vector<std::pair<std::string, std::string>> streams;  // finished run id -> its streams (JSON)
  // Finished runs the shard unloads once the store holds them. Touched only
  // on the shard's thread.
  std::vector<std::shared_ptr<Run>> unload;
};

}  // namespace fusee::engine
