// Engine: the embedded workflow engine. Open one per data directory,
// register workflows, then start, signal, cancel and read runs from any
// thread. Every call here is thread-safe. Calls that wait (execute, result,
// and the synchronous acknowledgements of start, signal and cancel) must not
// be made from inside a workflow or a step: they would wait on their own
// shard.
//
// Durability (local mode): start, signal and cancel return once their record
// is durable; result() and stream chunks are released only once the records
// they depend on are durable. After a crash, open() replays every unfinished
// run as soon as its workflow is registered.
#pragma once

#include <array>
#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "fusee/config.hpp"
#include "fusee/ctx.hpp"
#include "fusee/error.hpp"
#include "fusee/queue.hpp"
#include "fusee/refs.hpp"
#include "fusee/schedule.hpp"
#include "fusee/task.hpp"

namespace fusee {

namespace detail {
template <typename T>
class Settle;  // sdk/facade/settle.hpp
}  // namespace detail

// What start() does when the id is taken. The defaults make start
// idempotent (as in DBOS and Restate): starting an id again attaches to it.
enum class IfRunning { reject, attach };
enum class IfFinished { reject, attach, start_anew };
// When the id's run (running, or finished and attached to) has another
// input than the start gives: attach and say so
// (StartOutcome::attached_other_input), or refuse (errc::conflict).
enum class IfInputDiffers { report, reject };

struct StartOptions {
  IfRunning if_running = IfRunning::attach;
  IfFinished if_finished = IfFinished::attach;
  IfInputDiffers if_input_differs = IfInputDiffers::report;
  // The run fails with errc::timed_out if it has not finished by then
  // (measured from its start, on the engine clock, across restarts).
  std::optional<std::chrono::milliseconds> deadline;
};

// An update to send (Engine::update_json_async and _then). update_id: the
// same id sent again gets the same answer (empty: the engine makes one up,
// so the call is sent at most once). With `start`, the run is started first
// when it is not running -- update-with-start, one call.
struct UpdateStart {
  std::string workflow;
  boost::json::value input;
  StartOptions options;
};
struct UpdateCall {
  std::string run_id;
  std::string update;
  boost::json::value arg;
  std::string update_id;
  std::optional<UpdateStart> start;
};

// attached_other_input: attached to a run of the id whose input differs
// from the one given (which is not used).
enum class StartOutcome { started, attached, attached_other_input };
const char* start_outcome_name(StartOutcome outcome) noexcept;

// stuck: the run's code asked for other commands than its journal holds
// (nondeterminism; RunInfo::error names both and their position). It waits
// for fixed code (the next open replays it) or a cancel or terminate, which
// end it.
enum class RunStatus { running, completed, failed, cancelled, stuck };
inline constexpr std::array<RunStatus, 5> kRunStatuses = {RunStatus::running, RunStatus::completed, RunStatus::failed,
                                                          RunStatus::cancelled, RunStatus::stuck};
const char* run_status_name(RunStatus status) noexcept;

// A command a running run waits on now: a step under way, a sleep, a
// wait_for (name: the signal), a child (name: its id), a next_update (name:
// the update) or an awakeable.
struct PendingCommand {
  std::uint32_t position = 0;
  std::string command;           // "step", "sleep", "wait_for", "child", "next_update", "awakeable"
  std::string name;
  std::optional<TimePoint> due;  // when it ends by itself: a sleep's due time, a wait_for's timeout
  friend bool operator==(const PendingCommand&, const PendingCommand&) = default;
};

struct RunInfo {
  std::string id;
  std::string workflow;
  RunStatus status = RunStatus::running;
  std::uint32_t generation = 0;  // 1 for the first run of an id, +1 per start_anew
  std::uint32_t version = 0;     // the workflow version it runs (0: not known)
  TimePoint started_at;
  std::optional<TimePoint> finished_at;
  std::string error;  // failed, cancelled or stuck: why
  // A stuck run: the position where its code left its journal (none when
  // no code is registered for its version).
  std::optional<std::uint32_t> stuck_position;
  // A running run: what it waits on now, by position (get_run, list_runs
  // and query_runs fill it; empty while its code runs between commands).
  std::vector<PendingCommand> waiting_on;
};

// Where Engine::reset cuts a run's journal: before a command position, or
// right after the last completion of a named step.
struct ResetPoint {
  std::optional<std::uint32_t> position;
  std::optional<std::string> after_step;
  static ResetPoint before_position(std::uint32_t position) { return {position, std::nullopt}; }
  static ResetPoint after(std::string step) { return {std::nullopt, std::move(step)}; }
};

struct RunFilter {
  std::optional<std::string> workflow;
  std::optional<RunStatus> status;
  // Finished runs only: finished at or after `finished_from`, before
  // `finished_to`. A running run matches when neither is set.
  std::optional<TimePoint> finished_from;
  std::optional<TimePoint> finished_to;
};

// One page of finished runs, earliest finish first (ties by id).
struct RunPage {
  std::vector<RunInfo> runs;
  std::string next_cursor;  // pass it for the next page; empty: no more
};

// Engine::query_runs: which runs, in what order, from where.
struct RunListQuery {
  std::optional<RunStatus> status;
  std::string workflow_prefix;  // case-insensitive; empty: any
  std::string id_prefix;        // empty: any
  std::optional<TimePoint> started_from;  // started at or after
  std::optional<TimePoint> started_to;    // started before
  enum class Order { newest, oldest, id };
  Order order = Order::newest;  // by start time (ties by id), or by id
  std::size_t limit = 100;
  // A page's next_cursor (onward) or previous_cursor (back); empty: the
  // first page. A cursor works with the query (and order) that gave it.
  std::string cursor;
};

struct RunListPage {
  std::vector<RunInfo> runs;    // in the query's order
  std::string next_cursor;      // empty: no more
  std::string previous_cursor;  // empty: the first page
  std::uint64_t total = 0;      // runs that match
  // false: `total` is a lower bound (an id prefix or a time range over
  // more than 100,000 runs is counted only that far).
  bool total_exact = true;
};

// Where a stream read starts.
struct StreamFrom {
  enum class Kind { earliest, latest, offset };
  Kind kind = Kind::earliest;
  std::uint64_t offset = 0;
  static StreamFrom earliest() { return {Kind::earliest, 0}; }
  // The next chunk written (nothing already there).
  static StreamFrom latest() { return {Kind::latest, 0}; }
  static StreamFrom at(std::uint64_t offset) { return {Kind::offset, offset}; }
};

struct StreamChunk {
  std::uint64_t offset = 0;
  boost::json::value value;
};

// Durable writes by how long they took: flush_latency_counts[i] counts the
// writes of at most kFlushLatencyBoundsUs[i] microseconds (and more than the
// bound before); the last count, those slower than every bound.
inline constexpr std::array<std::uint64_t, 9> kFlushLatencyBoundsUs = {50,   100,  200,   500,  1000,
                                                                       2000, 5000, 10000, 50000};

// Counters of the journal under the engine (all zero in memory mode).
// A named limit on steps that call a scarce outside service (Engine::limit;
// a step takes it with ctx.step(...).limit(name)). Each attempt of such a
// step holds a permit while it runs.
struct StepLimit {
  std::uint32_t concurrent = 0;  // permits held at once; 0: no bound
  double per_second = 0;         // permits granted per second, on average; 0: no bound
};

// One limit's figures since the engine opened.
struct LimitStats {
  std::string name;
  StepLimit limit;
  std::uint64_t in_use = 0;     // permits held now
  std::uint64_t waiting = 0;    // attempts waiting for one now
  std::uint64_t granted = 0;    // permits granted
  std::uint64_t waited_us = 0;  // time attempts spent waiting for theirs (steady clock), in all
};

// A local engine's continuous backup (Config::backup_target, docs/backup.md).
struct BackupStats {
  bool enabled = false;
  std::uint64_t uploads = 0;           // manifests written since open
  std::uint64_t chunks = 0;            // chunks of segment bytes uploaded since open
  std::uint64_t bytes = 0;             // their bytes, blob packs' and snapshots'
  std::uint64_t failures = 0;          // uploads and snapshots that failed (each tried again)
  std::uint64_t snapshots = 0;         // of the run store, taken since open
  std::uint64_t snapshot_sequence = 0;  // the newest snapshot on the target covers the log to here (0: none)
  TimePoint snapshot_at;               // when it was taken
  std::uint64_t retired_objects = 0;   // deleted from the target by Config::backup_retention since open
  std::uint64_t covered_sequence = 0;  // every log batch up to it is on the target
  TimePoint covered_at;                // when the newest batch on the target was published
  std::uint64_t pending_batches = 0;   // published, not yet uploaded: lost with the disk now
  std::uint64_t blobs = 0;             // large records (the blob area's) uploaded since open
  std::uint64_t backlog_bytes = 0;     // log bytes not on the target, as of the last failed upload
  bool backlog_full = false;           // past Config::backup_backlog_bytes_max: new requests are busy
  bool connected = false;              // the target answered and is this directory's
  bool stopped = false;                // for good: the target is another directory's (see error)
  // From a batch's publication to the end of the upload covering it, over
  // the last 8192 batches uploaded.
  std::chrono::milliseconds upload_lag_p50{0};
  std::chrono::milliseconds upload_lag_p99{0};
  std::chrono::milliseconds upload_lag_max{0};
  // What losing the disk now would lose, as a span of time: from the newest
  // batch on the target (or the open, before any upload) to now, while the
  // log holds batches past it; 0 when it holds none.
  std::chrono::milliseconds loss_window{0};
  std::string error;                   // the last upload's failure; empty once one succeeded
};

// Replicated mode (Config::replicated): this replica's part in its cluster
// (docs/replication.md, "Operating it"), whatever its role. Counts since
// this Engine opened.
struct ReplicaStats {
  bool enabled = false;
  std::uint32_t replica_id = 0;
  std::string role;                       // booting, wiped, backup, candidate, primary
  std::uint64_t view = 0;                 // the view it promised
  std::optional<std::uint32_t> primary;   // that view's primary, when it knows it
  std::uint64_t commit = 0;               // batches it knows committed (a quorum's)
  std::uint64_t log_end = 0;              // batches in its log
  std::uint64_t durable_end = 0;          // of those, durable on its disk
  bool suspect = false;                   // it lost a write it had acknowledged: it vouches for nothing
  std::uint64_t view_changes = 0;         // views it moved to
  std::uint64_t leads = 0;                // views it led (an engine opened for each)
  std::uint64_t store_applied = 0;        // committed batches its run store has applied through
  // The last view it led: from its log's opening to its engine's (the log
  // read, its run store caught up, the runs recovered as after a crash), µs;
  // 0 before it led one.
  std::uint64_t last_open_us = 0;
  // A primary's: each replica's batches behind its log's end, by id (its
  // own: what is not yet durable here). Empty on a replica not primary.
  std::vector<std::uint64_t> lag_batches;
  // A primary's too, by id: the payload bytes each replica lacks of its log,
  // and how long ago the oldest batch it lacks was proposed, µs (0: it lacks
  // none; a batch proposed before this view's lead counts from the lead's
  // first proposal, a lower bound).
  std::vector<std::uint64_t> lag_bytes;
  std::vector<std::uint64_t> lag_us;
  std::uint64_t retired_through = 0;      // the last batch its log retired (0: none)
  // A primary's batches from proposal to publication (a quorum's durability),
  // as flush_latency_counts are kept.
  std::array<std::uint64_t, kFlushLatencyBoundsUs.size() + 1> publish_latency_counts{};
  std::uint64_t publish_latency_sum_us = 0;
};

// Replicated mode: one replica of the cluster as it answers for itself
// (Engine::cluster), asked over its replica address.
struct ClusterReplica {
  std::uint32_t id = 0;
  std::string address;          // its replica address (Config::replicas)
  bool answered = false;        // false: it did not answer in time (down, stopped, cut off)
  std::string role;             // booting, wiped, backup, candidate, primary
  std::uint64_t view = 0;       // the view it promised
  std::uint64_t commit = 0;     // batches it knows committed
  std::uint64_t log_end = 0;    // batches in its log
  std::uint64_t durable_end = 0;  // of those, durable on its disk
  bool suspect = false;         // it lost a write it had acknowledged
  // Batches it lacks, as the replica that answered as primary counts them
  // (that primary's log end less what this one holds durably); absent when
  // none answered as primary.
  std::optional<std::uint64_t> lag_batches;
  std::optional<std::uint64_t> lag_bytes;  // as lag_batches, in payload bytes
  std::optional<std::uint64_t> lag_us;     // as lag_batches: the oldest batch it lacks, proposed this long ago
  std::uint64_t retired_through = 0;       // the last batch its log retired (0: none)
};

struct EngineStats {
  std::uint64_t records_written = 0;  // journal records made durable
  std::uint64_t batches_written = 0;  // log batches (each one durable write)
  std::uint64_t inline_writes = 0;    // batches a shard wrote itself instead of handing off
  bool direct_io = false;             // O_DIRECT + RWF_DSYNC (else buffered + fdatasync)
  // Local mode: checkpoints and retirement.
  std::uint64_t checkpoints = 0;       // shard checkpoints written to the run store
  std::uint64_t segments_retired = 0;  // log segments retired since open
  std::uint64_t wal_segments = 0;      // live log segments
  std::uint64_t wal_bytes = 0;         // their size on disk
  std::uint64_t run_store_bytes = 0;   // the run store's size (RocksDB's estimate)
  std::string checkpoint_error;        // why checkpoints stopped; empty while they run
  std::uint64_t runs_parked = 0;       // runs that left memory while waiting, since open
  std::uint64_t runs_woken = 0;        // parked runs loaded back, since open
  // Since open, as journaled by this engine's shards (a reset and a
  // continue-as-new start a run; replay at open counts nothing).
  std::uint64_t runs_started = 0;
  std::uint64_t runs_finished = 0;  // completed, failed or cancelled
  std::uint64_t runs_failed = 0;    // of those, failed
  std::uint64_t steps_completed = 0;
  // Of the steps begun, those that ran before their run's start was durable
  // (a run's first step, in the turn that started it: Config::first_step_ahead).
  std::uint64_t steps_run_ahead = 0;
  // Why the journal failed (a write or flush error poisoned the log, in
  // every mode but memory); empty while it works. Also sent to Config::warn.
  std::string log_error;
  std::array<std::uint64_t, kFlushLatencyBoundsUs.size() + 1> flush_latency_counts{};  // local mode
  std::uint64_t flush_latency_sum_us = 0;
  std::uint64_t staged_bytes = 0;  // appended, not yet durable, not yet in a write
  // The shards this engine runs: all of them, but in remote mode with
  // Config::server_shards_max (the others' runs are other workers').
  std::uint32_t shards_held = 0;
  std::vector<LimitStats> limits;  // by name
  BackupStats backup;
  ReplicaStats replica;
};

// One interval (about a second) of an engine's work: Engine::activity, GET
// /v1/stats/activity, the console's engine charts. Counts, not rates:
// divide by `interval`.
struct ActivitySample {
  TimePoint at;  // the interval's end
  std::chrono::milliseconds interval{0};
  std::uint64_t runs_started = 0;
  std::uint64_t runs_finished = 0;  // completed, failed or cancelled
  std::uint64_t runs_failed = 0;
  std::uint64_t steps_completed = 0;
  std::uint64_t flushes = 0;  // durable writes of the log (local mode)
  // Over the interval's flushes (0: none): the mean, and the histogram
  // bound (kFlushLatencyBoundsUs) at or under which half and 99% took.
  std::uint64_t flush_mean_us = 0;
  std::uint64_t flush_p50_us = 0;
  std::uint64_t flush_p99_us = 0;
};

namespace detail {
class StreamFeed;
}

// A stream subscription: history, then live chunks, in offset order with no
// gap and no duplicate, each only once durable. Ends (nullopt) when the
// stream is closed or its run finished. One reader per thread.
class StreamReader {
 public:
  explicit StreamReader(std::shared_ptr<detail::StreamFeed> feed);
  ~StreamReader();
  StreamReader(StreamReader&&) noexcept;
  StreamReader& operator=(StreamReader&&) noexcept;
  // Blocks for the next chunk; nullopt at the end (the stream closed or its run finished). Throws Error: shut_down
  // when the engine shuts down first, unavailable when its replica stops leading (read on through the new primary),
  // storage when its log fails, wrong_thread on a shard's thread.
  std::optional<StreamChunk> next();
  // The next chunk if one is there now.
  std::optional<StreamChunk> try_next();
  // Whether the stream ended and every chunk was read.
  bool ended() const;

 private:
  std::shared_ptr<detail::StreamFeed> feed_;
};

using WorkflowFn = std::function<Task<boost::json::value>(Ctx&, boost::json::value)>;
// Whether an input fits a workflow: empty when it does, else why not. A
// start whose input does not fit is refused (errc::invalid_argument) before
// anything is recorded.
using InputCheck = std::function<std::string(const boost::json::value&)>;

// What register_workflow_json takes besides the code.
struct WorkflowRegistration {
  std::uint32_t version = 1;  // 1 and up
  InputCheck input;           // empty: any input
  // The signals the workflow takes and a check of each one's value; empty:
  // any signal.
  std::vector<std::pair<std::string, InputCheck>> signals;
};

namespace detail {
template <typename In, typename Out, typename F>
Task<boost::json::value> adapt_workflow(F fn, Ctx& ctx, boost::json::value input) {
  if constexpr (std::is_void_v<Out>) {
    co_await fn(ctx, boost::json::value_to<In>(input));
    co_return boost::json::value{};
  } else {
    co_return boost::json::value_from(co_await fn(ctx, boost::json::value_to<In>(input)));
  }
}
}  // namespace detail

class Engine {
 public:
  // Opens the engine: memory mode, or local mode on config.dir (created if
  // absent; a recovered log's unfinished runs wait for their workflow to be
  // registered). Throws Error: storage, wrong_shard_count, invalid_argument.
  static std::unique_ptr<Engine> open(Config config);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Registers a workflow; unfinished runs of it resume now. fn(Ctx&, In)
  // returns Task<Out>. Registering a name and version twice is an error.
  //
  // signals: the signals the workflow takes, declared with their types. A
  // signal of another name, or whose value does not fit its type, is then
  // refused (errc::invalid_argument) before anything is recorded. A
  // workflow that declares none takes any.
  //
  // version (1 without one): each run records the version it started
  // with and replays on that version's code; a new run takes the newest
  // registered. A run whose version has no code registered while another
  // version has is `stuck` (and warned about) until that code is
  // registered. See docs/engine.md, "Changing a workflow's code".
  template <typename In, typename Out, typename F, typename... S>
  void register_workflow(const WorkflowRef<In, Out>& ref, F fn, const Signal<S>&... signals) {
    register_workflow(ref, 1, std::move(fn), signals...);
  }
  template <typename In, typename Out, typename F, typename... S>
  void register_workflow(const WorkflowRef<In, Out>& ref, std::uint32_t version, F fn, const Signal<S>&... signals) {
    WorkflowRegistration registration;
    registration.version = version;
    registration.input = [](const boost::json::value& input) -> std::string {
      auto converted = boost::json::try_value_to<In>(input);
      return converted ? std::string() : converted.error().message();
    };
    (registration.signals.emplace_back(signals.name,
                                       [](const boost::json::value& value) -> std::string {
                                         auto converted = boost::json::try_value_to<S>(value);
                                         return converted ? std::string() : converted.error().message();
                                       }),
     ...);
    register_workflow_json(
        ref.name,
        [fn = std::move(fn)](Ctx& ctx, boost::json::value input) {
          return detail::adapt_workflow<In, Out>(fn, ctx, std::move(input));
        },
        std::move(registration));
  }

  template <typename In, typename Out>
  StartOutcome start(const WorkflowRef<In, Out>& ref, const std::string& id, const In& input,
                     const StartOptions& options = {}) {
    return start_json(ref.name, id, boost::json::value_from(input), options);
  }

  // The run's result, waiting for it; throws the run's failure.
  template <typename In, typename Out>
  Out result(const WorkflowRef<In, Out>& ref, const std::string& id) {
    (void)ref;
    return detail::from_json<Out>(result_json(id));
  }

  template <typename In, typename Out>
  Out execute(const WorkflowRef<In, Out>& ref, const std::string& id, const In& input,
              const StartOptions& options = {}) {
    return detail::from_json<Out>(execute_json(ref.name, id, boost::json::value_from(input), options));
  }

  // The same without waiting: the future holds the outcome (or the Error).
  // Many requests in flight from one thread cost far less than one thread
  // per request, as a shard handles its queue in batches.
  template <typename In, typename Out>
  std::future<StartOutcome> start_async(const WorkflowRef<In, Out>& ref, const std::string& id, const In& input,
                                        const StartOptions& options = {}) {
    return start_json_async(ref.name, id, boost::json::value_from(input), options);
  }
  // The result converts to Out when get() is called.
  template <typename In, typename Out>
  std::future<Out> result_async(const WorkflowRef<In, Out>& ref, const std::string& id) {
    (void)ref;
    return std::async(std::launch::deferred,
                      [json = result_json_async(id)]() mutable { return detail::from_json<Out>(json.get()); });
  }

  // Delivers a value to the run's next wait_for(signal). Returns once durable.
  // With a signal_id, a second delivery of the same id is acknowledged and
  // dropped. Throws not_found for an unknown or finished run.
  template <typename T>
  void signal(const std::string& id, const Signal<T>& signal, const T& value, const std::string& signal_id = {}) {
    signal_json(id, signal.name, boost::json::value_from(value), signal_id);
  }

  // Asks the run to stop: every command its code waits for throws
  // Error(errc::cancelled) with the reason, once (the next one it waits for,
  // if it waits for none). The code may clean up; the run ends `cancelled`
  // when that error escapes it (or as its code ends otherwise). A second
  // cancel terminates the run. Returns once the request is durable, not
  // when the run has ended (result() waits for that). No effect on a
  // finished run; not_found for an unknown one.
  void cancel(const std::string& id, const std::string& reason);
  // Stops the run at once: it ends `cancelled` with the reason, and no more
  // of its code runs (no clean-up). Returns once its end is durable. No
  // effect on a finished run.
  void terminate(const std::string& id, const std::string& reason);

  StreamReader read_stream(const std::string& id, const std::string& stream, StreamFrom from = StreamFrom::earliest());

  // Starts a new generation of the run that keeps its journal before the
  // point (and every signal it received) and runs the rest on the code
  // registered now -- its newest version (Temporal's reset). For a running,
  // stuck, parked or finished run whose journal is kept
  // (Config::keep_finished_journals); the old generation's records past
  // the point stay readable in the new one's run_reset record. Returns once
  // the new generation's start is durable. Throws not_found,
  // invalid_argument (no such point; no journal kept), busy.
  void reset(const std::string& id, const ResetPoint& point, const std::string& reason);

  // Sends update `ref` to run `id` and waits for the answer the run's code
  // gives it (Ctx::next_update, Ctx::reply), which is durable when it comes
  // back. The run's validator (Ctx::on_update) decides first: a refused
  // update throws rejected and nothing is recorded. The same update_id sent
  // again -- after a lost answer, a crash, or the run's end -- gets the same
  // answer without running again. Throws not_found (no such run, the run
  // finished, or it takes no such update), rejected, invalid_argument (an
  // argument that does not fit), failed (the code answered with
  // reply_error, or the run ended without answering), unavailable,
  // nondeterminism, busy.
  template <typename A, typename O>
  O update(const std::string& id, const Update<A, O>& ref, const A& arg, const std::string& update_id = {}) {
    return detail::from_json<O>(update_json(UpdateCall{id, ref.name, boost::json::value_from(arg), update_id, {}}));
  }
  // The same, starting the run first if it is not running (options decide
  // what an existing run means, as for start).
  template <typename In, typename Out, typename A, typename O>
  O update_with_start(const WorkflowRef<In, Out>& workflow, const std::string& id, const In& input,
                      const Update<A, O>& ref, const A& arg, const std::string& update_id = {},
                      const StartOptions& options = {}) {
    return detail::from_json<O>(update_json(UpdateCall{id, ref.name, boost::json::value_from(arg), update_id,
                                                       UpdateStart{workflow.name, boost::json::value_from(input),
                                                                   options}}));
  }
  boost::json::value update_json(UpdateCall call);
  std::future<boost::json::value> update_json_async(UpdateCall call);

  // Completes the awakeable a run made (Ctx::awakeable) with a value, or
  // fails it (its Future throws Error(failed) with the message); returns
  // once durable. A token completes once: the same completion again is
  // acknowledged, another throws already_exists. Throws invalid_argument
  // (not a token), not_found (a wrong token, a finished run, a cancelled
  // awakeable), unavailable, busy.
  template <typename T>
  void complete_awakeable(const std::string& token, const T& value) {
    complete_awakeable_json(token, true, boost::json::value_from(value));
  }
  void complete_awakeable(const std::string& token) { complete_awakeable_json(token, true, nullptr); }
  void fail_awakeable(const std::string& token, const std::string& message) {
    complete_awakeable_json(token, false, boost::json::value(message));
  }
  void complete_awakeable_json(const std::string& token, bool succeeded, boost::json::value value);

  // Asks a running run's query handler (Ctx::on_query): its answer, from
  // the run's current state; nothing is journaled. A parked run is brought
  // back to answer. Throws not_found (no such run or query, or the run
  // finished), invalid_argument (an argument that does not fit, a handler
  // that starts a command), unavailable (the run's code is not registered
  // here), nondeterminism (the run is stuck).
  template <typename T>
  T query(const std::string& id, const std::string& name) {
    return boost::json::value_to<T>(query_json(id, name, nullptr));
  }
  template <typename T, typename Arg>
  T query(const std::string& id, const std::string& name, const Arg& arg) {
    return boost::json::value_to<T>(query_json(id, name, boost::json::value_from(arg)));
  }
  boost::json::value query_json(const std::string& id, const std::string& name, boost::json::value arg);

  // The run's journal as JSON -- {"records": [...], "commands": [...]},
  // docs/engine.md "History" -- for a running, parked or finished run (a
  // finished one's while the run store keeps it, with
  // Config::keep_finished_journals). Throws not_found otherwise.
  std::string journal_json(const std::string& id);

  // The engine's clock (Config::clock): what timers and schedules go by.
  TimePoint now() const;

  // One run by id, wherever it is; nothing when there is no such run.
  std::optional<RunInfo> get_run(const std::string& id);
  bool has_workflow(const std::string& name) const;
  // Where the HTTP API listens ("host:port"), when Config::http_listen is set.
  std::string http_endpoint() const;

  // Every run that matches, running (loaded or parked) and finished, by id.
  std::vector<RunInfo> list_runs(const RunFilter& filter = {});
  // Finished runs a page at a time (status, if given, must be a finished
  // one). In local mode this reads the run store's index, which a run joins
  // at its shard's next checkpoint (Config::checkpoint_interval, or
  // checkpoint()); list_runs() sees it at once.
  RunPage list_finished_runs(const RunFilter& filter, std::size_t limit = 100, const std::string& cursor = {});
  // A page of every run that matches -- running, parked, stuck and
  // finished -- from an index the engine keeps as runs change state, so its
  // cost is the page's size, not the number of runs (a filter that matches
  // rarely may give a shorter page, with a cursor to go on). Throws
  // invalid_argument for a cursor it did not give. In remote mode with the
  // shards split between workers, the page is made from list_runs() (a
  // scan of every worker's runs). Each running run on the page says what
  // it waits on (asked of its shard: one hop per shard on the page).
  // Throws wrong_thread from a workflow or a step, as list_runs does.
  RunListPage query_runs(const RunListQuery& query);
  // How many runs have each status (in kRunStatuses' order), from the same
  // index: what /metrics and /v1/stats read.
  std::array<std::uint64_t, kRunStatuses.size()> count_runs();
  // What the engine did each second over the last ten minutes (fewer
  // since open), oldest first: read from EngineStats' totals once a second
  // by a thread of the engine's.
  std::vector<ActivitySample> activity() const;

  // Sets (or changes) step limit `name` for this engine's steps, across all
  // its shards: ctx.step(...).limit(name) waits for a permit before each
  // attempt. Throws invalid_argument for a negative or non-finite rate.
  void limit(const std::string& name, const StepLimit& limit);

  // --- Queues (fusee/queue.hpp; docs/engine.md, "Queues") ---
  // Declares queue `name`, or changes its options: runs enqueued in it wait
  // and start as its limits allow. Idempotent; call it at every start, as
  // with register_workflow.
  void queue(const std::string& name, const QueueOptions& options = {});
  // Puts run `id` of `workflow` in the queue: it starts (with that id) when
  // the queue allows, once; returns once that is durable. A run of that id
  // already waiting or running there is already_queued. Throws not_found
  // for a queue not declared, unknown_workflow, and rejected for a dedup id
  // another run in the queue has.
  template <typename In, typename Out>
  EnqueueOutcome enqueue(const std::string& queue, const WorkflowRef<In, Out>& workflow, const std::string& id,
                         const std::type_identity_t<In>& input, const EnqueueOptions& options = {}) {
    return enqueue_json(queue, workflow.name, id, boost::json::value_from(input), options);
  }
  EnqueueOutcome enqueue_json(const std::string& queue, const std::string& workflow, const std::string& id,
                              boost::json::value input, const EnqueueOptions& options = {});
  // The same without blocking: the future holds the outcome once durable
  // (or the error), so many enqueues may be in flight from one thread.
  std::future<EnqueueOutcome> enqueue_json_async(const std::string& queue, const std::string& workflow,
                                                 const std::string& id, boost::json::value input,
                                                 const EnqueueOptions& options = {});
  // The queue's waiting runs (in the order they will start) and running ones.
  QueueInfo describe_queue(const std::string& name);
  boost::json::value describe_queue_json(const std::string& name);
  std::vector<QueueInfo> list_queues();

  // --- Schedules (fusee/schedule.hpp; docs/engine.md, "Schedules") ---
  // Creates schedule `id`: it starts `workflow` with `input` at each due
  // time of `spec`. Throws invalid_argument for a spec that is not one,
  // unknown_workflow, or already_exists (delete it first to make it anew).
  // Like every call that waits for a run, not from a workflow's code.
  template <typename In, typename Out>
  void schedule(const std::string& id, const ScheduleSpec& spec, const WorkflowRef<In, Out>& workflow,
                const std::type_identity_t<In>& input, const ScheduleOptions& options = {}) {
    schedule_json(id, spec, workflow.name, boost::json::value_from(input), options);
  }
  void schedule_json(const std::string& id, const ScheduleSpec& spec, const std::string& workflow,
                     boost::json::value input, const ScheduleOptions& options = {});
  // Throw not_found for a schedule that does not exist (or was deleted).
  ScheduleInfo describe_schedule(const std::string& id);
  std::vector<ScheduleInfo> list_schedules();
  ScheduleInfo pause_schedule(const std::string& id, const std::string& note = {});
  // Due times while paused pass; it goes on from now.
  ScheduleInfo resume_schedule(const std::string& id);
  // A run now, through the overlap policy: its id (started, or buffered).
  std::vector<std::string> trigger_schedule(const std::string& id);
  // The due times in (from, to], each through the overlap policy (the
  // schedule's, unless given): the run ids started or buffered.
  std::vector<std::string> backfill_schedule(const std::string& id, TimePoint from, TimePoint to,
                                             std::optional<Overlap> overlap = std::nullopt);
  // Replaces the spec, the workflow and input, and the options.
  ScheduleInfo update_schedule(const std::string& id, const ScheduleSpec& spec, const std::string& workflow,
                               boost::json::value input, const ScheduleOptions& options);
  // The schedule's run ends; the runs it started go on.
  void delete_schedule(const std::string& id);
  // The change underneath (schedule/schedule_workflow.hpp; HTTP): the
  // schedule's description after it, JSON.
  boost::json::value change_schedule_json(const std::string& id, boost::json::value change);
  boost::json::value describe_schedule_json(const std::string& id);

  // Local mode: checkpoints every shard into the run store now, retires the
  // log segments that allows and expires finished runs past their
  // retention; returns once written. Shards also do this on their own
  // (Config::checkpoint_interval); a no-op in memory mode.
  void checkpoint();

  // Stops the shards and closes the log cleanly. Unfinished runs resume at
  // the next open. Later calls fail with errc::shut_down. Idempotent.
  void shutdown();

  // The untyped API underneath (JSON in, JSON out), also used by the server.
  void register_workflow_json(const std::string& name, WorkflowFn fn, InputCheck check = {});
  void register_workflow_json(const std::string& name, WorkflowFn fn, WorkflowRegistration registration);
  StartOutcome start_json(const std::string& workflow, const std::string& id, boost::json::value input,
                          const StartOptions& options = {});
  boost::json::value result_json(const std::string& id);
  // start_json, then result_json (throwing the start's failure, or the
  // run's): what execute() does.
  boost::json::value execute_json(const std::string& workflow, const std::string& id, boost::json::value input,
                                  const StartOptions& options = {});
  std::future<StartOutcome> start_json_async(const std::string& workflow, const std::string& id,
                                             boost::json::value input, const StartOptions& options = {});
  std::future<boost::json::value> result_json_async(const std::string& id);

  // The calls an asynchronous server makes (the HTTP server does): as the
  // *_async ones, but the answer -- the value, or the fusee::Error -- goes to
  // `then`, called once, on an engine thread (a shard's, or the one reading a
  // server's answers). `then` must return quickly and must not call the
  // engine's blocking calls. A request refused before it is sent (a bad
  // argument, a shut engine) throws here, as the *_async calls do.
  template <typename T>
  using Then = std::function<void(std::variant<T, Error>)>;
  void start_json_then(const std::string& workflow, const std::string& id, boost::json::value input,
                       const StartOptions& options, Then<StartOutcome> then);
  void result_json_then(const std::string& id, Then<boost::json::value> then);
  // start_json_then, and once the start is acknowledged, result_json_then:
  // `started` gets the start's answer; `ended`, called only after `started`
  // got a StartOutcome, the run's result. Where this engine holds the run's
  // shard both go in one message to it, so the result's request does not
  // travel to the shard and back again after the start's answer.
  void execute_json_then(const std::string& workflow, const std::string& id, boost::json::value input,
                         const StartOptions& options, Then<StartOutcome> started, Then<boost::json::value> ended);
  void update_json_then(UpdateCall call, Then<boost::json::value> then);
  void complete_awakeable_then(const std::string& token, bool succeeded, boost::json::value value,
                               Then<std::monostate> then);

  void signal_json(const std::string& id, const std::string& signal, boost::json::value value,
                   const std::string& signal_id = {});

  std::uint32_t shard_count() const;
  EngineStats stats() const;
  // Replicated mode: every replica of the cluster as it answers now, in id
  // order, each asked over its replica address (all at once, waiting up to
  // `timeout`); empty in every other mode.
  std::vector<ClusterReplica> cluster(std::chrono::milliseconds timeout = std::chrono::milliseconds(500)) const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  void start_to(std::shared_ptr<detail::Settle<StartOutcome>> settle, const std::string& workflow,
                const std::string& id, boost::json::value input, const StartOptions& options);
  void result_to(std::shared_ptr<detail::Settle<boost::json::value>> settle, const std::string& id);
  void execute_to(std::shared_ptr<detail::Settle<StartOutcome>> started,
                  std::shared_ptr<detail::Settle<boost::json::value>> ended, const std::string& workflow,
                  const std::string& id, boost::json::value input, const StartOptions& options);
  void update_to(std::shared_ptr<detail::Settle<boost::json::value>> settle, UpdateCall call);
  void complete_awakeable_to(std::shared_ptr<detail::Settle<void>> settle, const std::string& token, bool succeeded,
                             boost::json::value value);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusee
