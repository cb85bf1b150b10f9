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
#include <optional>
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
  wal::Lsn replay_from = 0;  // the oldest record of a run the store does not hold yet (lsn + 1: none)
  std::uint64_t keep_from_sequence = 0;

  struct JournalCopy {
    std::string id;
    wal::Lsn lsn = 0;
    std::vector<std::byte> bytes;
    JournalPlace place = JournalPlace::live;
  };
  // A run's records and parked entry as the store holds them from earlier
  // checkpoints.
  struct Stored {
    std::string id;
    std::optional<JournalPlace> place;
    std::optional<ParkedRun> parked;
  };
  // Runs that finished: their stored records and parked entry go.
  std::vector<Stored> erased;
  // Runs woken since they were parked and still loaded: their records move
  // back among the live journals and their parked entry goes.
  std::vector<Stored> revived;
  // Runs parked by this checkpoint: their records move among the parked
  // journals (new ones go there directly) and `parked` is their new entry.
  struct Park {
    Stored before;
    ParkedRun parked;
  };
  std::vector<Park> parks;
  std::vector<JournalCopy> journal;  // records of unfinished runs, new since the last checkpoint
  std::vector<FinishedRun> finished;
  std::vector<std::pair<std::string, std::string>> streams;   // finished run id -> its streams (JSON)
  std::vector<std::pair<std::string, std::string>> journals;  // finished run id -> its journal (JSON)
  // Runs the shard unloads once the store holds them: those that finished
  // (their summary is in the store) and those parked (unless they woke
  // meanwhile). Touched only on the shard's thread.
  std::vector<std::shared_ptr<Run>> unload_finished;
  std::vector<std::shared_ptr<Run>> unload_parked;
};

}  // namespace fusee::engine
