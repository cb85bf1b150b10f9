// Run: one workflow run on its shard — its journal for replay, its position,
// its mailbox and streams, and the coroutine running its code. Implements
// the Ctx commands (RunPort): each command at position p either replays the
// journal's entry at p (checking kind and name: another is nondeterminism)
// or runs live and appends its records.
//
// Not thread-safe: a Run is touched only on its shard's thread. Callbacks
// that outlive a command (timers, durable waits, coroutine steps) hold a
// shared_ptr and check that the run still waits at that position.
#pragma once

#include <boost/json.hpp>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/command_cursor.hpp"
#include "engine/journal_record.hpp"
#include "engine/kept_journal.hpp"
#include "engine/outcome.hpp"
#include "engine/remembered.hpp"
#include "engine/run_store.hpp"
#include "engine/stream_feed.hpp"
#include "engine/update_table.hpp"
#include "fusee/ctx.hpp"
#include "fusee/engine.hpp"
#include "wal/log_format.hpp"

namespace fusee::engine {

class Shard;

// One stream of a run: every chunk written (durable or not), how many are
// durable (readers see only those), and the readers waiting for more.
struct StreamState {
  std::vector<boost::json::value> chunks;
  std::uint64_t durable_count = 0;
  bool close_written = false;  // stream_closed appended
  bool closed = false;         // ... and durable
  struct Reader {
    std::shared_ptr<detail::StreamFeed> feed;
    std::uint64_t next_offset = 0;
  };
  std::vector<Reader> readers;
};

// The records of one command position, from the journal.
struct StepCall;

class Run final : public detail::RunPort, public std::enable_shared_from_this<Run> {
 public:
  Run(Shard& shard, std::string id, std::uint32_t generation, std::string workflow, std::uint32_t version,
      boost::json::value input, TimePoint started_at, std::optional<TimePoint> deadline);
  ~Run() override;

  // --- Recovery (before the code starts) ---
  // Adds a durable record of this run read from the log. Fails (corrupt)
  // when positions are out of order.
  Result<void> load(const JournalRecord& record, wal::Lsn lsn);

  // --- Shard side ---
  // Starts the workflow code (it replays what the journal holds first).
  void begin(const WorkflowFn& fn);
  bool code_started() const { return code_started_; }
  // A recorded signal (signal_id may be empty): the earliest waiting
  // wait_for of that name takes it, or it waits in the mailbox.
  void deliver_signal(const std::string& name, const std::string& signal_id, boost::json::value value);
  // Engine::cancel, recorded (cancel_requested appended): the commands the
  // code waits for throw Error(errc::cancelled) with the reason -- now, or
  // once it waits, if it waits for none.
  void request_cancel(const std::string& reason);
  bool cancel_requested() const { return cancel_requested_; }
  // Child runs started with a ParentClose other than abandon and not known
  // to have ended, by position; end_run closes them before the terminal
  // record.
  struct OpenChild {
    std::string id;
    ParentClose policy = ParentClose::abandon;
  };
  std::map<std::uint32_t, OpenChild> take_open_children() { return std::exchange(open_children_, {}); }
  // Stops the code for good (cancel, deadline); no record is written here.
  void stop();
  // The terminal record is durable: report the outcome.
  void finish(Outcome outcome, TimePoint finished_at);
  void on_deadline();
  void on_stream_durable(const std::string& name, std::uint64_t count);
  void on_stream_closed_durable(const std::string& name);

  // --- RunPort (Ctx commands) ---
  bool step(std::string_view name, const RetryPolicy& policy, detail::StepBody body,
            detail::Completion& completion) override;
  bool sleep(std::string_view name, std::chrono::milliseconds duration, detail::Completion& completion) override;
  bool sleep_until(std::string_view name, TimePoint due, detail::Completion& completion) override;
  bool wait_for(std::string_view signal, std::optional<std::chrono::milliseconds> timeout,
                detail::Completion& completion) override;
  bool stream_write(std::string_view stream, boost::json::value chunk, detail::Completion& completion) override;
  bool stream_close(std::string_view stream, detail::Completion& completion) override;
  bool now(detail::Completion& completion) override;
  bool random(detail::Completion& completion) override;
  bool child(std::string_view workflow, std::string_view id, boost::json::value input, ParentClose on_parent_close,
             detail::Completion& completion) override;
  bool select(std::span<detail::Completion* const> candidates, detail::Completion& completion) override;
  bool patched(std::string_view id, bool deprecated) override;
  void on_query(std::string name, detail::QueryHandler handler) override;
  void on_update(std::string name, detail::UpdateValidator validator) override;
  bool next_update(std::string_view name, detail::Completion& completion) override;
  bool reply_update(std::string_view name, std::string_view update_id, bool succeeded, boost::json::value value,
                    detail::Completion& completion) override;
  bool awakeable(std::string_view name, detail::Completion& completion) override;
  bool close_run(std::string_view id, std::string_view reason, bool terminate,
                 detail::Completion& completion) override;
  // Engine::query: the handler's answer, or why there is none.
  Result<boost::json::value> answer_query(const std::string& name, const boost::json::value& arg, std::string& why);
  const std::string& run_id() const override { return id_; }

  // --- Updates (the shard accepts them, the code takes and answers them) ---
  // Whether the run takes update `name` with `arg` now: not_found when it
  // declared no such update, rejected when its validator says no (why).
  Result<void> validate_update(const std::string& name, const boost::json::value& arg, std::string& why);
  // An accepted update (its update_accepted appended): the code's earliest
  // waiting next_update of that name takes it, or it waits in the mailbox.
  void deliver_update(const std::string& name, const std::string& update_id, boost::json::value arg);
  UpdateTable updates;  // by update id: accepted, answered, remembered; and those not taken yet
  // Continue-as-new: what the code asked to start the next generation with
  // (Ctx::continue_as_new), once it did; then the signals and updates it
  // had not taken, which the next generation's run_started carries.
  const std::optional<boost::json::value>& continued_input() const { return continued_input_; }
  StartedValue carried_messages() const;
  // The ids this generation and the earlier ones were sent, and their
  // answers, as the window the next generation carries (continue-as-new).
  Remembered remembered(std::int64_t now_ms) const;
  // Takes what an earlier generation remembered, carried by the record at
  // `lsn`: repeats of those ids are answered as before, and an update it
  // answered is taken out of the mailbox (a reset keeps its acceptance).
  void remember(const Remembered& earlier, wal::Lsn lsn);
  // A repeat of an awakeable's completion (by its token's secret) after
  // the awakeable's generation, or the run, ended: its first answer, if the
  // run remembers it.
  std::optional<Remembered::Answer> earlier_awakeable(const std::string& secret) const;
  // What the caller of an update the run ended without answering gets.
  Outcome unanswered_update(const std::string& update_id, const std::string& name) const;
  // Ends every caller's wait this run will never answer: update callers
  // (with `why`, or -- its status running -- "ended before it answered"),
  // and with `why`, completers waiting for their record's durability.
  void fail_callers(const Outcome& why);

  // --- Awakeables ---
  // Completes the awakeable at `position` when `secret` is its own; reply
  // once the completion is durable. A repeat with the same outcome is
  // acknowledged; another gets already_exists.
  void complete_awakeable(std::uint32_t position, const std::string& secret, bool succeeded, boost::json::value value,
                          std::function<void(std::error_code, std::string)> reply);

  // Continuations of commands, called by timers, durable waits and other
  // shards. Each ignores a call for a position the run no longer waits at.
  void run_step_attempt(const std::shared_ptr<StepCall>& call);
  // The outcome of attempt `attempt` (dropped when that attempt was given
  // up already, at its timeout).
  void finish_step_attempt(const std::shared_ptr<StepCall>& call, boost::json::value value,
                           std::exception_ptr error, std::uint32_t attempt);
  // A coroutine step's attempt reached its timeout or the step's deadline.
  void on_attempt_timeout(const std::shared_ptr<StepCall>& call, std::uint32_t attempt);
  void on_sleep_fired(std::uint32_t position, const std::string& name);
  // sleep and sleep_until: a new timer is due at due_if_new().
  bool start_sleep(std::string_view name, const std::function<TimePoint()>& due_if_new, detail::Completion& completion);
  void on_wait_timeout(std::uint32_t position, const std::string& name);
  void on_child_done(std::uint32_t position, const std::string& child_id, const Outcome& outcome);
  void on_run_closed(std::uint32_t position, const std::string& name);

  // --- State, read by the shard ---
  const std::string& id() const { return id_; }
  std::uint32_t generation() const { return generation_; }
  const std::string& workflow() const { return workflow_; }
  std::uint32_t version() const { return version_; }
  // Why the run's code cannot start (its version is not registered); empty
  // clears it. Whether that is news (to warn about).
  bool waiting_for_code(std::string why) {
    bool news = !why.empty() && why != waiting_for_code_;
    waiting_for_code_ = std::move(why);
    return news;
  }
  const boost::json::value& input() const { return input_; }
  // run_started's parent (a child run's), for the next generation's.
  std::string parent;
  TimePoint started_at() const { return started_at_; }
  std::optional<TimePoint> deadline() const { return deadline_; }
  bool finished() const { return finished_; }
  // The code returned or the run was cancelled; the terminal record may not
  // be durable yet.
  bool ending() const { return ending_; }
  const Outcome& outcome() const { return outcome_; }
  std::optional<TimePoint> finished_at() const { return finished_at_; }
  // Nondeterminism: the run stopped without a record; empty when fine.
  const std::string& stuck_error() const { return stuck_error_; }
  RunInfo info() const;
  // A finished run as the run store keeps it, and its streams (JSON:
  // {name: {"chunks": [...], "closed": bool}}).
  FinishedRun summary() const;
  std::string streams_json() const;

  // Parking: whether the run may leave memory now — its one command in
  // flight is a sleep or a wait_for, and nobody is attached (result
  // waiters, stream readers) — and when it wakes by itself.
  bool parkable() const;
  std::optional<TimePoint> wake_at() const;
  TimePoint waiting_since() const;
  ParkedRun parked_summary() const;
  // The commands it waits on now, by position (none once it ends).
  std::vector<PendingCommand> waiting_on() const;

  // The LSN of the run's latest appended record, and appends still waiting
  // for room in the log (their LSN unknown yet).
  wal::Lsn last_lsn = 0;
  std::uint32_t appends_waiting = 0;
  // Why a record of the run was too large to journal; the shard then fails
  // the run and journals nothing else of it (Shard::append).
  std::string refused_record;
  // Step functions waiting for appends_waiting to reach 0.
  std::vector<std::function<void(std::error_code)>> gated;
  wal::Lsn started_lsn = 0;                              // run_started
  // Its first step may run before its start is durable (Shard::handle_start
  // sets it for the turn that starts the run, inside one atomic group of the
  // log): true until the run journals anything but a step's start, since only
  // then is every step input a function of the run's id, input and code.
  bool ahead = false;
  bool end_recorded = false;  // Shard::end_run began: its terminal record is (or will be) appended
  bool superseded = false;    // Engine::reset or continue-as-new replaced it with a new generation
  // ... at this LSN (the new generation's record): until it is durable, a
  // crash keeps this generation, so checkpoints still store its records.
  wal::Lsn superseded_by_lsn = 0;
  // A reset's generation: its run_reset's LSN. Until that is durable the
  // reset is not whole (a crash drops it), so no checkpoint stores this
  // generation's records: they stay in the log (Shard::take_checkpoint).
  wal::Lsn reset_lsn = 0;
  bool continuing = false;    // between continue_as_new and the next generation's start (Shard::continue_run)
  // Where the run store keeps the run's records from earlier checkpoints
  // (none yet), and its parked entry there, if it has one.
  std::optional<JournalPlace> journal_place;
  std::optional<ParkedRun> parked_entry;
  // The shard's checkpoint number that first left this run's records out
  // of the store (0: none yet); the next one copies them.
  std::uint64_t deferred_at = 0;
  // An estimate of the memory the run holds (the parking budget).
  std::size_t memory_bytes = kRunBaseBytes;
  static constexpr std::size_t kRunBaseBytes = 4096;  // Run, Ctx, coroutine frames, maps (measured: ~3.5 KiB)
  // Every record of the run so far, in journal order, when the shard keeps
  // journals of finished runs (Config::keep_finished_journals).
  KeptJournal journal;
  struct SignalSeen {
    wal::Lsn lsn = 0;  // of its record (or of the record that carried the id into this generation)
    std::int64_t at_ms = 0;
  };
  std::unordered_map<std::string, SignalSeen> signal_ids;  // dedup: id -> where and when it came
  std::unordered_set<std::string> cancel_ids;            // dedup: ids of cancel requests recorded
  std::map<std::string, StreamState> streams;
  std::vector<std::function<void(const Outcome&)>> result_waiters;  // internal (children)
  std::vector<std::function<void(const Outcome&)>> external_waiters;

 private:
  enum class Replay { none, matched, settled };
  // Looks up the journal at `position` for a command of `kind` named
  // `name`: none, or matched (out: its records), or settled -- the run is
  // stuck (a mismatch: nondeterminism) or the command was cancelled (it
  // completed with the cancellation error).
  Replay replay(std::uint32_t position, const char* kind, std::string_view name, detail::Completion& completion,
                const RecordedCommand*& out);
  // Cancels every command the code waits for, if a cancel waits to be
  // delivered (request_cancel): one cancel_delivered record lists them,
  // all complete with the error, and only then is anything resumed.
  void deliver_cancel();
  // A child's ParentClose applies (its parent was cancelled or ends).
  void close_child(const OpenChild& child, const std::string& why);
  // Ctx::any: the winner is candidates[index]; journals it and completes.
  void resolve_select(std::uint32_t position, const std::vector<std::uint32_t>& candidates, std::size_t index,
                      detail::Completion& completion);
  // Resolves the pending Ctx::any calls among whose candidates `done` is.
  void resolve_selects(const detail::Completion& done);
  // The code left its journal at `position`: the run is stuck (not journaled).
  void diverge(std::uint32_t position, std::string message);

  // Appends a record of this run (positional fields filled by caller).
  void append(JournalRecord record, std::function<void()> after_durable = {});
  JournalRecord make_record(RecordKind kind, std::uint32_t position, std::string_view name) const;
  // Completes a command: within the command's own call it only marks it (the
  // awaitable does not suspend), else it resumes whoever awaits it (the code,
  // or the awaiters of its Future), after resolving the Ctx::any calls it
  // ends.
  void complete(detail::Completion& completion);
  void resume(std::coroutine_handle<> handle);
  void on_code_returned();
  // Whether the command at `position` is still awaited: never once the run
  // ends (nothing of it is journaled after its last record).
  bool waiting_at(std::uint32_t position) const { return !ending_ && pending_.count(position) > 0; }

  // now() and random(): the recorded value, or a new one from produce().
  bool record_value(std::string_view name, const std::function<boost::json::value()>& produce,
                    detail::Completion& completion);
  void start_child_request(std::uint32_t position, const std::string& workflow, const std::string& child_id,
                           const boost::json::value& input);
  // Begins a command: gives it the next position. end_command says whether
  // it completed within its own call.
  std::uint32_t begin_command(detail::Completion& completion, const char* call);
  // Throws when Ctx is called from anywhere but the workflow's code: a
  // step's function (step_running_), or a coroutine step resumed later or
  // another thread (the code is not running). `call` names the Ctx call.
  void refuse_outside_code(const char* call) const;
  bool end_command();

  Shard& shard_;
  std::string id_;
  std::uint32_t generation_;
  std::string workflow_;
  std::uint32_t version_;
  std::string waiting_for_code_;
  boost::json::value input_;
  TimePoint started_at_;
  std::optional<TimePoint> deadline_;

  CommandCursor cursor_;  // the journal's commands by position, for replay, and the code's next position
  // Signals no wait_for took yet, by name: (signal id, value).
  std::unordered_map<std::string, std::deque<std::pair<std::string, boost::json::value>>> mailbox_;

  std::unique_ptr<Ctx> ctx_;
  Task<boost::json::value> task_;
  bool code_started_ = false;
  // The commands started and not completed, by position (several at once
  // when the code started them with .start()).
  struct Pending {
    detail::Completion* completion = nullptr;
    std::string signal;            // wait_for: the signal's name; empty otherwise
    bool parkable = false;         // a sleep or a wait_for
    TimePoint since;               // parkable: since when it waits
    std::optional<TimePoint> due;  // parkable: when it ends by itself
    const char* command = "";      // as replay names it ("step", "sleep", ...)
    std::string name;
    std::shared_ptr<StepCall> step;  // a step: its attempt is asked to stop on cancel
    std::string update;              // next_update: the update's name
  };
  std::map<std::uint32_t, Pending> pending_;
  // The command at `position` waits for an event (a timer, a signal, a
  // child); its entry, to fill in.
  Pending& park(std::uint32_t position, detail::Completion& completion, const char* command, std::string_view name);
  // Ctx::any calls not resolved yet: their position, their candidates'.
  struct Select {
    std::uint32_t position = 0;
    std::vector<std::uint32_t> candidates;
    detail::Completion* completion = nullptr;
  };
  std::vector<Select> selects_;
  std::uint64_t completions_ = 0;  // commands completed so far (Completion::done_order)

  // Cancellation: requested (recorded); not yet delivered to a wait; the
  // error's text.
  bool cancel_requested_ = false;
  bool cancel_undelivered_ = false;
  std::string cancel_message_;
  // While deliver_cancel completes the commands: what to resume after.
  bool holding_resumes_ = false;
  std::vector<std::pair<detail::Completion*, std::shared_ptr<void>>> held_;
  std::map<std::uint32_t, OpenChild> open_children_;
  std::map<std::string, detail::QueryHandler> queries_;
  std::map<std::string, detail::UpdateValidator> update_validators_;
  struct AwakeableState {
    std::string name;
    std::string secret;
    bool completed = false;  // awakeable_completed appended
    bool durable = false;
    std::int64_t completed_ms = 0;
    Outcome outcome;
    std::vector<std::function<void(std::error_code, std::string)>> waiters;  // completers, until durable
  };
  std::map<std::uint32_t, AwakeableState> awakeables_;  // by position
  std::unordered_map<std::string, Remembered::Answer> earlier_awakeables_;  // earlier generations', by secret
  bool in_query_ = false;  // a query handler runs: it may not start commands
  bool code_running_ = false;  // the workflow's code runs (Run::resume)
  bool code_returned_ = false;  // ... returned, and the run waits for the steps it started and left (on_code_returned)
  std::string step_running_;   // the step whose function runs now (its call, or a coroutine step's first part)
  // Ctx::patched's answer per patch id, decided at its first call.
  std::unordered_map<std::string, bool> patches_;

  bool stopped_ = false;
  bool ending_ = false;
  bool finished_ = false;
  Outcome outcome_;
  std::optional<TimePoint> finished_at_;
  std::string stuck_error_;
  std::uint32_t stuck_position_ = 0;
  std::optional<boost::json::value> continued_input_;
};

// Answers a repeat of an awakeable's completion that a run remembers
// (`first`): the same outcome is acknowledged, another is already_exists.
void answer_awakeable_repeat(const Remembered::Answer& first, bool succeeded, const boost::json::value& value,
                             const std::function<void(std::error_code, std::string)>& reply);

}  // namespace fusee::engine
