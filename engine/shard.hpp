// Shard: one thread with its own event loop that owns its runs outright. It
// takes requests from other threads through a bounded inbox, appends its
// runs' records to the journal sink, releases what waits for durability as
// the sink reports progress, and fires timers by the injected clock.
//
// Thread-safety: post() and notify() from any thread; everything else only on
// the shard's thread (or before start() / after join()).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <climits>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/checkpoint_work.hpp"
#include "engine/engine_core.hpp"
#include "engine/journal_record.hpp"
#include "engine/journal_sink.hpp"
#include "engine/run.hpp"
#include "engine/run_store.hpp"
#include "engine/timer_queue.hpp"

namespace fusee::engine {

// Called with an empty code once the record is durable, or with the error
// that means it never will be (storage, shut_down).
using DurableCallback = std::function<void(std::error_code)>;

class Shard {
 public:
  Shard(EngineCore& core, ShardId id, JournalSink& sink, std::size_t queue_max);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // --- Any thread ---
  // Queues fn for the shard's thread. An external request is refused (false)
  // when the queue holds queue_max of them; nothing else is ever refused
  // while the shard runs. false too once the shard stopped.
  bool post(std::function<void()> fn, bool external);
  // Wakes the loop: durable progress, poison, the clock moved.
  void notify();
  void start();
  // Stops the loop after the requests already queued; joins the thread.
  void stop();
  // After stop() and the sink's close: releases what became durable and
  // fails everything still waiting with `error`.
  void fail_waiters(std::error_code error);

  // Local mode: where finished runs and checkpoints go. Set before load().
  void set_store(RunStore* store) { store_ = store; }
  // Config::keep_finished_journals. Set before load().
  void set_keep_history(bool keep) { keep_history_ = keep; }
  // Config::first_step_ahead. Set before load().
  void set_first_step_ahead(bool ahead) { first_step_ahead_ = ahead; }
  // Parking (local mode): a run waiting at a sleep or wait_for longer than
  // park_after leaves memory at the next checkpoint; past the memory budget
  // (bytes, 0: none) the longest-waiting go early, and the shard asks for
  // that checkpoint through request_checkpoint. Set before start().
  void set_parking(std::chrono::milliseconds park_after, std::size_t memory_budget_bytes,
                   std::function<void()> request_checkpoint) {
    park_after_ = park_after;
    memory_budget_bytes_ = memory_budget_bytes;
    request_checkpoint_ = std::move(request_checkpoint);
  }
  struct Stats {
    std::atomic<std::uint64_t> runs_parked{0};
    std::atomic<std::uint64_t> runs_woken{0};
    // Journaled by this shard since it started (not its recovery; a
    // reset's copies of earlier records count nothing).
    std::atomic<std::uint64_t> runs_started{0};
    std::atomic<std::uint64_t> runs_finished{0};  // completed, failed or cancelled
    std::atomic<std::uint64_t> runs_failed{0};
    std::atomic<std::uint64_t> steps_completed{0};
    std::atomic<std::uint64_t> steps_run_ahead{0};  // began before their run's start was durable
  };
  const Stats& stats() const { return stats_; }

  // --- Before start(): recovery ---
  // A durable record, from the run store's journals (`stored`) or from the
  // log past the shard's checkpoint.
  // `covered`: the shard's checkpoint LSN; a log record at or below it is
  // skipped when the run store already holds its run.
  Result<void> load(const JournalRecord& record, Lsn lsn, std::span<const std::byte> bytes,
                    std::optional<JournalPlace> stored, Lsn covered = 0);
  // A reset's generation is several records (run_started marked
  // kResetStartMarker, the kept records, run_reset) and a crash may keep a
  // prefix: load() holds them aside until the run_reset comes, and the
  // older generation stands if it never does (finish_loading drops them).
  Result<void> load_record(const JournalRecord& record, Lsn lsn, std::span<const std::byte> bytes,
                           std::optional<JournalPlace> stored, Lsn covered);
  // After every record is loaded: arms deadlines and timers of loaded runs.
  void finish_loading();

  // Whether the calling thread is a shard's (a workflow's code, a plain
  // step): a blocking Engine call there would wait on a shard, maybe its own.
  static bool on_shard_thread() noexcept;
  // For tests only, unset otherwise: called on the shard's thread inside a
  // reset, once the new generation's first records are appended (up to
  // `appended`) and before its run_reset is. A test waits there for them to
  // be durable and holds the next sync, so that checkpoints land in the
  // window where the reset is durable in part (reset_recovery_test.cpp).
  static inline std::function<void(Shard& shard, wal::Lsn appended)> reset_window_hook_for_tests;
  wal::Lsn durable_lsn() const;
  // Whether the calling thread is this shard's.
  bool on_own_thread() const noexcept;

  // --- Shard thread ---
  ShardId id() const { return id_; }
  EngineCore& core() { return core_; }
  TimePoint now() const { return core_.now(); }

  // Appends a record of `run`; if the log is full it waits in order with the
  // shard's other appends (never refused).
  void append(Run& run, JournalRecord record, std::function<void()> after_durable);
  // A request's first record: refused with errc::busy when the log or the
  // shard's waiting appends are full, and then nothing is recorded.
  Result<Lsn> append_external(Run& run, JournalRecord record);
  // Sets when the record was made (JournalRecord::at_ms), unless it has one.
  void stamp(JournalRecord& record) const;
  // Counts a record this shard journals for the first time (Stats).
  void count(RecordKind kind);
  std::string oversize_message(const JournalRecord& record, std::size_t bytes) const;
  // Why a request's first record (append_external) was refused: busy, too
  // large, or the log's error. what: "signal 'x'", "update 'y'".
  std::string refused_append_message(std::error_code error, const std::string& what, const std::string& run_id) const;
  // "shard 3 is busy", with why when append_external said (busy_reason_).
  std::string busy_text() const;
  void after_durable(Lsn lsn, DurableCallback callback);
  // callback runs once every record `run` appended so far is durable.
  void after_run_durable(Run& run, DurableCallback callback);
  // Whether run's step may start now, before its records are durable: it is
  // the run's first (Run::ahead), in the turn that started the run, and
  // that turn's records, the start among them, are still one atomic group
  // of the log (so a crash keeps them all, or loses the run whole).
  bool may_run_ahead(const Run& run) const;
  void count_step_run_ahead() { stats_.steps_run_ahead.fetch_add(1, std::memory_order_relaxed); }
  // owner: the run the timer belongs to (its timers go when it is parked).
  void add_timer(TimePoint due, const void* owner, std::function<void()> fire) {
    timers_.add(due, owner, std::move(fire));
  }
  // A run ends (its code returned, it was terminated, its deadline passed):
  // its open children are closed by their ParentClose first, then the
  // outcome is recorded; the run finishes once that is durable, and then
  // on_durable runs (or with the error that means it never will be).
  void end_run(Run& run, Outcome outcome, DurableCallback on_durable = {});
  // The run's code asked to continue as new (Ctx::continue_as_new): its
  // open children are closed as when it ends, then the next generation
  // starts with one record (run_started, continued) that carries what the
  // old one had not taken, and takes over the id and its waiters.
  void continue_run(Run& run);

  // Requests (run on the shard thread through post()).
  using Reply = std::function<void(std::error_code, std::string message)>;
  // first_step_ahead false: the run's first step waits for its start even
  // where it could run ahead (an update-with-start, whose update is
  // appended after the start and must reach the run before its first step).
  void handle_start(StartRequest request, bool internal,
                    std::function<void(std::error_code, std::string message, StartOutcome)> reply,
                    bool first_step_ahead = true);
  void handle_signal(const std::string& id, const std::string& signal, boost::json::value value,
                     const std::string& signal_id, Reply reply);
  // request_id (may be empty): a repeat of a recorded request is
  // acknowledged and changes nothing.
  void handle_cancel(const std::string& id, const std::string& reason, CancelMode mode, const std::string& request_id,
                     Reply reply);
  void handle_result(const std::string& id, std::function<void(const Outcome&)> reply);
  void handle_read_stream(const std::string& id, const std::string& stream, StreamFrom from,
                          std::shared_ptr<detail::StreamFeed> feed, Reply reply);
  void handle_list(const RunFilter& filter, std::vector<RunInfo>& out);
  // What each of these runs (this shard's) that is in memory waits on now;
  // the others (parked, or gone) are left out: the caller reads a parked
  // one's from the run store, off this thread.
  void handle_waits(const std::vector<std::string>& ids, std::map<std::string, std::vector<PendingCommand>>& out);
  // A parked run as list_runs and get_run show it.
  static RunInfo parked_info(const ParkedRun& run);
  // One run by id, wherever it is (loaded, parked, or finished in the run
  // store), without loading it. Nothing when there is no such run.
  std::optional<RunInfo> handle_get(const std::string& id, RunInfo (*from_finished)(const FinishedRun&));
  void handle_registered(const std::string& workflow);
  // A run's journal as JSON (engine/journal_json.hpp), wherever it is;
  // not_found when there is none (an unknown run, or a finished one whose
  // journal was not kept).
  void handle_journal(const std::string& id, std::function<void(std::error_code, std::string)> reply);
  void handle_reset(const std::string& id, const ResetPoint& point, const std::string& reason, Reply reply);
  // Engine::query: the answer (JSON text), or the error and why.
  void handle_query(const std::string& id, const std::string& name, const boost::json::value& arg,
                    std::function<void(std::error_code, std::string)> reply);
  // Engine::update: validates, journals and delivers the update (update_id
  // not empty), answering once the code's answer is durable; a known
  // update_id gets its update's answer, also after the run ended. With
  // `start` (update-with-start), the run is started first.
  void handle_update(std::optional<StartRequest> start, const std::string& id, const std::string& name,
                     const boost::json::value& arg, const std::string& update_id,
                     std::function<void(const Outcome&)> reply);
  // Engine::complete_awakeable / fail_awakeable, once durable.
  void handle_awakeable(const std::string& token, bool succeeded, boost::json::value value, Reply reply);
  // Subscribes to a run's end (children): fn runs on this shard's thread.
  void subscribe_end(const std::string& id, std::function<void(const Outcome&)> fn);
  // A child run's start, for its parent (on this worker or another):
  // on_end(error, outcome) once the start failed (error set; the outcome
  // says why) or the child ended (no error). A workflow not registered yet
  // is waited for, not failed: a parent replayed at open may ask before the
  // application has registered its workflows, and a failed child would be
  // a failure for good (a queue would lose the run it admitted).
  using ChildEnd = std::function<void(std::error_code, const Outcome&)>;
  void start_child(StartRequest request, ChildEnd on_end);

  std::error_code storage_error() const { return storage_error_; }

  // --- Checkpoints (engine/checkpointer.hpp) ---
  // The shard's state at its durable LSN as run-store changes, taking what
  // is new since the last call. On the shard's thread, or after stop().
  // defer: leave the records of runs the store does not hold yet out for
  // one checkpoint (off for the last one at shutdown).
  CheckpointWork take_checkpoint(bool defer = true);
  // The store holds a checkpoint at `lsn`: its finished and parked runs
  // leave memory (a parked run that woke meanwhile stays).
  void checkpoint_written(const CheckpointWork& work);
  // Checkpoints failed for this open: stop keeping records for them.
  void checkpoints_stopped();
  // Run::finish calls it: the next checkpoint stores the run's summary.
  // The run's summary to the engine's run index, if it is the id's current
  // run (a superseded generation ending late does not speak for the id).
  void index_run(const Run& run);
  void note_finished(std::shared_ptr<Run> run) {
    index_run(*run);
    // Memory mode has no store and takes no checkpoint: nothing to keep.
    if (!keep_for_checkpoints_ || store_ == nullptr) return;
    finished_since_checkpoint_.push_back(std::move(run));
    // Checkpoint work grows with the runs finished since the last one, and
    // taking it and unloading after it are turns of this thread: bounded
    // here, a busy shard checkpoints more often in small steps instead of
    // stalling its runs for a long turn every Config::checkpoint_interval.
    if (finished_since_checkpoint_.size() >= kCheckpointFinishedRunsMax) want_checkpoint();
  }
  static constexpr std::size_t kCheckpointFinishedRunsMax = 256;

 private:
  void loop();
  void drain_durable();
  void retry_waiting_appends();
  void fire_timers();
  void start_code(Run& run);
  void assigned(Run& run, Lsn lsn, std::span<const std::byte> bytes, std::function<void()> after_durable);
  // A run that finished and left memory, from the run store (local mode);
  // empty when there is none. An error reads as errc::storage.
  Result<std::optional<FinishedRun>> stored_run(const std::string& id);
  // A run by id, woken from the store if it was parked; null when it is not
  // loaded or parked (error set when the store failed).
  std::shared_ptr<Run> find_run(const std::string& id, std::error_code& error);
  // Loads a parked run back by replaying its stored journal; start: arm its
  // timers and run its code (not during recovery). Null when not parked.
  Result<std::shared_ptr<Run>> unpark(const std::string& id, bool start);
  // Wakes parked runs whose timer is due, a batch at a time.
  void wake_parked(TimePoint now);
  std::vector<std::shared_ptr<Run>> runs_to_park(Lsn lsn);
  void want_checkpoint();
  // Recovery: whether the run store holds the run a log record belongs to
  // (loaded from its journals, parked, or finished).
  Result<bool> store_holds(const JournalRecord& record);
  void note_loaded_bytes(Run& run, std::size_t bytes);
  // How a run no longer in memory ended (not_found when it never ran).
  Outcome finished_outcome(const std::string& id);
  void read_stored_stream(const std::string& id, const std::string& stream, StreamFrom from,
                          detail::StreamFeed& feed, const Reply& reply);
  void arm_deadline(const std::shared_ptr<Run>& run);
  void fail_storage(std::error_code error);
  void append_terminal(Run& run, Outcome outcome, DurableCallback on_durable);
  // Closes the run's open children by their ParentClose (`why` they are
  // closed), then calls then (with the error that stopped it, if any).
  void close_children_then(Run& run, const std::string& why, std::function<void(std::error_code)> then);
  void start_continued(const std::shared_ptr<Run>& old);
  // A request to a run between two generations (it continues as new): held,
  // retried once the next generation has started (true), or not (false).
  bool hold_if_continuing(const std::string& id, std::function<void()> retry);
  void release_held(const std::string& id);

  EngineCore& core_;
  ShardId id_;
  JournalSink& sink_;
  std::size_t queue_max_;

  std::mutex mu_;
  std::condition_variable cv_;
  struct Message {
    std::function<void()> fn;
    bool external = false;
  };
  std::vector<Message> inbox_;
  std::size_t external_queued_ = 0;
  bool woken_ = false;
  bool sleeping_ = false;  // the loop waits on cv_: only then is a wake-up needed
  bool stopping_ = false;
  std::thread thread_;

  std::unordered_map<std::string, std::shared_ptr<Run>> runs_;
  Lsn durable_ = 0;
  Lsn appended_ = 0;
  struct DurableWait {
    Lsn lsn;
    std::uint64_t order;
    DurableCallback callback;
    bool operator>(const DurableWait& other) const {
      return lsn != other.lsn ? lsn > other.lsn : order > other.order;
    }
  };
  std::priority_queue<DurableWait, std::vector<DurableWait>, std::greater<>> durable_waits_;
  std::uint64_t durable_order_ = 0;
  struct WaitingAppend {
    std::shared_ptr<Run> run;
    std::vector<std::byte> bytes;
    std::function<void()> after_durable;
  };
  std::deque<WaitingAppend> waiting_appends_;
  TimerQueue timers_;
  std::error_code storage_error_;
  std::vector<std::byte> scratch_;
  std::string oversize_message_;  // why append_external last refused a record as too large
  std::string busy_reason_;  // why append_external last refused a record as busy, beyond a full log (empty: that)

  RunStore* store_ = nullptr;
  bool keep_history_ = true;
  bool first_step_ahead_ = true;
  bool group_open_ = false;  // this turn's records go to the log as one atomic group
  bool keep_for_checkpoints_ = true;  // false once checkpoints stopped
  // Records appended (or replayed from the log) since the last checkpoint,
  // in LSN order, with their bytes: the next checkpoint stores those of
  // unfinished runs. Local mode only.
  struct SinceCheckpoint {
    std::shared_ptr<Run> run;
    Lsn lsn;
    std::vector<std::byte> bytes;
  };
  std::deque<SinceCheckpoint> since_checkpoint_;
  std::vector<std::shared_ptr<Run>> finished_since_checkpoint_;
  // Generations a later one replaced (a reset, continue-as-new, or a later
  // generation in the log at recovery) whose records the store may hold: a
  // checkpoint erases them once the replacing record is durable (at or
  // below it: Run::superseded_by_lsn), for until then a crash keeps them.
  std::vector<std::shared_ptr<Run>> superseded_;
  // Recovery: a reset's records, by run id, until its run_reset is loaded.
  struct HeldRecord {
    JournalRecord record;
    Lsn lsn = 0;
    std::vector<std::byte> bytes;
    std::optional<JournalPlace> stored;
    Lsn covered = 0;
  };
  std::unordered_map<std::string, std::vector<HeldRecord>> held_resets_;
  std::unordered_map<std::string, std::vector<std::function<void()>>> held_for_continue_;  // by run id
  // Child starts waiting for their workflow to be registered, by workflow.
  std::unordered_map<std::string, std::vector<std::function<void()>>> children_awaiting_code_;
  std::uint64_t checkpoints_taken_ = 0;
  std::map<std::pair<std::string, std::uint32_t>, bool> held_by_store_;  // recovery's store_holds answers, by id and generation
  // Parking.
  static constexpr std::size_t kWakeBatchRuns = 1000;  // parked runs woken per loop turn
  std::chrono::milliseconds park_after_ = std::chrono::milliseconds::max();
  std::size_t memory_budget_bytes_ = 0;
  std::function<void()> request_checkpoint_;
  bool checkpoint_wanted_ = false;
  std::size_t loaded_bytes_ = 0;  // Run::memory_bytes of the runs in runs_
  std::vector<std::shared_ptr<Run>> revived_since_checkpoint_;  // woken from the store
  std::optional<TimePoint> next_parked_wake_;
  std::int64_t wake_scan_from_ms_ = INT64_MIN;  // parked runs due before were woken
  Stats stats_;
};

}  // namespace fusee::engine
