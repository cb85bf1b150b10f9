// Checkpointer: writes each shard's checkpoint into the run store, off the
// step path, and retires the log segments the checkpoints cover
// (DESIGN.md §3, "Checkpoints and retirement").
//
// A shard checkpoints on the interval, when a segment roll asks (only the
// shards whose oldest needed record sits in the segment that retires next),
// and on checkpoint_all(). For each, the checkpointer posts to the shard,
// which takes its CheckpointWork on its own thread (moving out what is new
// since the last one); the checkpointer's thread writes it to the store in
// one synced batch, tells the shard (which unloads the finished runs), and
// retires every segment below the lowest keep_from_sequence of all shards.
//
// A failed store write stops checkpoints and retirement for the rest of this
// open (the records it carried were taken from the shard): the log keeps
// everything from the last good checkpoints, so the next open recovers all.
//
// Thread-safety: every public method may be called from any thread; the
// roll hook calls request_lagging() from the log's sealing thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.hpp"
#include "engine/checkpoint_work.hpp"
#include "engine/journal_sink.hpp"
#include "engine/run_store.hpp"

namespace fusee::engine {

class Shard;

struct CheckpointerOptions {
  std::chrono::milliseconds interval{5000};  // zero: only when asked
  std::chrono::milliseconds finished_retention{std::chrono::hours(24 * 7)};
  std::function<std::int64_t()> now_ms;       // the engine's clock, for retention
  // The runs finished before this (ms) left the run store: they leave the
  // run index too.
  std::function<void(std::int64_t before_ms)> expired;
  std::function<void(const std::string&)> warn;
  // The highest keep_from_sequence retirement may use (a backup that has
  // not copied the log past it yet); none: the checkpoints alone decide.
  std::function<std::uint64_t()> retire_bound;
};

struct CheckpointerStats {
  std::uint64_t checkpoints = 0;
  std::uint64_t segments_retired = 0;
  std::uint64_t blob_files_retired = 0;
  std::uint64_t finished_expired = 0;
  std::uint64_t store_bytes = 0;  // the run store's size, as RocksDB estimates it
  std::string error;              // why checkpoints stopped; empty while they run
};

class Checkpointer {
 public:
  // keep_from: each shard's keep_from_sequence from its checkpoint in the
  // store at open (1 for a shard without one).
  // held: the shards this engine runs (remote mode with the shards split
  // among workers; empty: all); the others are left alone until adopt().
  Checkpointer(std::vector<Shard*> shards, JournalSink& sink, RunStore& store, CheckpointerOptions options,
               std::vector<std::uint64_t> keep_from, std::vector<bool> held = {});
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  void start();
  // Stops the thread; a checkpoint being written is finished first.
  void stop();
  // Checkpoints every shard now, retires what that allows and expires
  // finished runs past their retention; returns once done (or failed), and
  // once every shard has let go of the runs those checkpoints unload.
  Result<void> checkpoint_all();
  // After the shards stopped and the log closed: one last checkpoint of
  // every shard on the calling thread, so the next open reads little log.
  Result<void> final_checkpoint();
  // A segment roll: checkpoint the shards that keep the oldest segment.
  void request_lagging(std::uint64_t retires_at);
  // A shard over its memory budget asks for a checkpoint (which parks).
  void request(std::uint32_t shard);
  // A shard this engine took over (remote mode): checkpointed from now on.
  void adopt(std::uint32_t shard, std::uint64_t keep_from);
  CheckpointerStats stats() const;

 private:
  void loop();
  // Posts take_checkpoint to the shard; the work comes back through done_.
  void ask(std::uint32_t shard);
  // Writes one shard's work and retires; false once checkpoints stopped.
  // unload: the shard then unloads what the work lets go, and the store
  // write is not synced (the log backs it: the store is synced only
  // before a segment retires). Without: the last checkpoints at shutdown,
  // synced.
  bool write(CheckpointWork work, bool unload);
  void expire_finished();
  // Adds to batch the moves of run id's stored records from one place to
  // the other; false (and checkpoints stop) when the store cannot be read.
  // Puts work.journal into batch, one chunk per run.
  static void put_journal_chunks(RunStore::Batch& batch, const CheckpointWork& work);
  bool move_journal(RunStore::Batch& batch, std::uint32_t shard, const std::string& id, JournalPlace from,
                    JournalPlace to);
  void fail(const std::string& why);

  std::vector<Shard*> shards_;
  JournalSink& sink_;
  RunStore& store_;
  CheckpointerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // requests, works to write, stop
  std::condition_variable done_cv_;  // a checkpoint written (checkpoint_all waits)
  std::vector<std::uint64_t> keep_from_;  // per shard, from its latest checkpoint
  std::vector<bool> held_;                // the shards checkpointed here
  std::vector<bool> requested_;
  std::vector<bool> asked_;               // a work is on its way from the shard
  std::vector<std::uint64_t> written_;    // checkpoints written, per shard
  std::vector<std::chrono::steady_clock::time_point> next_due_;
  std::deque<CheckpointWork> works_;
  bool stopping_ = false;
  bool writing_ = false;  // the thread is writing a work (not under mu_)
  CheckpointerStats stats_;
  std::mutex write_mu_;   // one store write and retirement at a time
  std::thread thread_;
};

}  // namespace fusee::engine
