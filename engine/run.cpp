#include "engine/run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/shard.hpp"
#include "wal/errc.hpp"
#include "fusee/limits.hpp"

namespace fusee::engine {

// A step being tried: lives in the callbacks of its attempts.
struct StepCall {
  std::uint32_t position = 0;
  std::string name;
  RetryPolicy policy;
  detail::StepBody body;
  std::uint32_t attempt = 1;
  detail::Completion* completion = nullptr;
  // RetryPolicy::deadline as a time: set at the first attempt, journaled
  // with each failed attempt so a replay keeps it.
  std::optional<TimePoint> deadline;
  // The attempt under way: whether its outcome is still awaited, and how
  // it is asked to stop (attempt timeout, deadline).
  bool attempt_open = false;
  std::shared_ptr<std::stop_source> stop;
  // When the attempt under way began (monotonic: its running time is
  // journaled as took_us, whatever the engine clock does).
  std::chrono::steady_clock::time_point attempt_began;
  // StepAwaitable::limit: the permit the next (or current) attempt holds.
  std::shared_ptr<StepLimits::Permit> permit;
};

namespace {

std::uint64_t microseconds_since(std::chrono::steady_clock::time_point began) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began).count());
}

// Runs a coroutine step to its end, wherever it resumes, then hands the
// outcome to `done`. Starts at once and frees itself.
struct DetachedTask {
  struct promise_type {
    DetachedTask get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

DetachedTask drive_coroutine_step(std::function<Task<boost::json::value>(StepContext&)> body, StepContext step,
                                  std::function<void(boost::json::value, std::exception_ptr)> done) {
  boost::json::value value;
  std::exception_ptr error;
  try {
    value = co_await body(step);
  } catch (...) {
    error = std::current_exception();
  }
  done(std::move(value), error);
}

std::string describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// The command a record belongs to, as nondeterminism messages name it (a
// cancel_delivered record stands for the command it lists).
const char* command_of(const JournalRecord& record) {
  return record.kind == RecordKind::cancel_delivered ? record.detail.c_str() : command_name(record.kind);
}

// The message a failure record carries (its value is a JSON string).
std::string text_of(const boost::json::value& value) {
  return value.is_string() ? std::string(value.get_string()) : std::string();
}

// The error a cancelled command throws.
std::string cancel_text(const std::string& id, const std::string& reason) {
  return fmt::format("run '{}' was cancelled: {}", id, reason);
}

// A reply's or a completion's record, as its caller sees it.
Outcome answer_of(bool succeeded, const boost::json::value& value, const char* what, const std::string& name) {
  if (succeeded) return Outcome{RunStatus::completed, value, errc::failed, {}};
  return Outcome{RunStatus::failed, {}, errc::failed, fmt::format("{} '{}' failed: {}", what, name, text_of(value))};
}

// An outcome in the {"ok", ...} form repeats are answered from
// (Remembered, FinishedRun's answers).
boost::json::object answer_json_of(const Outcome& outcome) {
  return answer_json(outcome.status == RunStatus::completed, outcome.value, errc_name(outcome.code), outcome.message);
}

}  // namespace

errc errc_from_name(const std::string& name) {
  for (int code = 1; code <= static_cast<int>(kErrcLast); ++code) {
    if (name == errc_name(static_cast<errc>(code))) return static_cast<errc>(code);
  }
  return errc::failed;
}

Run::Run(Shard& shard, std::string id, std::uint32_t generation, std::string workflow, std::uint32_t version,
         boost::json::value input, TimePoint started_at, std::optional<TimePoint> deadline)
    : shard_(shard),
      id_(std::move(id)),
      generation_(generation),
      workflow_(std::move(workflow)),
      version_(version),
      input_(std::move(input)),
      started_at_(started_at),
      deadline_(deadline) {}

// A run dropped while commands are in flight (at shutdown): their Futures
// hold their own state through the engine (Completion::keep_alive) until
// released here.
Run::~Run() {
  if (!stopped_) stop();
}

FinishedRun Run::summary() const {
  FinishedRun run;
  run.id = id_;
  run.generation = generation_;
  run.workflow = workflow_;
  run.version = version_;
  run.input = input_;
  run.status = outcome_.status;
  if (outcome_.status == RunStatus::completed) {
    run.result = outcome_.value;
  } else {
    run.error_code = errc_name(outcome_.code);
    run.message = outcome_.message;
  }
  run.started_ms = to_ms(started_at_);
  run.finished_ms = finished_at_ ? to_ms(*finished_at_) : 0;
  for (const auto& [signal_id, lsn] : signal_ids) run.signal_ids.push_back(signal_id);
  std::sort(run.signal_ids.begin(), run.signal_ids.end());
  for (const auto& [position, awakeable] : awakeables_) {
    if (!awakeable.completed) continue;
    auto answer = answer_json_of(awakeable.outcome);
    answer["name"] = awakeable.name;  // a failure's message names it
    run.awakeable_answers[awakeable.secret] = std::move(answer);
  }
  for (const auto& [secret, earlier] : earlier_awakeables_) {
    auto answer = earlier.answer;
    answer["name"] = earlier.name;
    run.awakeable_answers[secret] = std::move(answer);
  }
  for (const auto& [update_id, update] : updates) {
    run.update_answers[update_id] = answer_json_of(update.answered ? update.answer : unanswered_update(update_id, update.name));
  }
  return run;
}

std::string Run::streams_json() const {
  boost::json::object out;
  for (const auto& [name, stream] : streams) {
    boost::json::array chunks;
    for (std::uint64_t offset = 0; offset < stream.durable_count; ++offset) chunks.push_back(stream.chunks[offset]);
    out[name] = boost::json::object{{"chunks", std::move(chunks)}, {"closed", stream.closed}};
  }
  return boost::json::serialize(out);
}

bool Run::parkable() const {
  if (!code_started_ || stopped_ || ending_) return false;
  if (pending_.size() != 1 || !pending_.begin()->second.parkable || !selects_.empty()) return false;
  if (appends_waiting > 0 || !gated.empty() || !external_waiters.empty() || !result_waiters.empty()) return false;
  if (!stuck_error_.empty()) return false;
  // A caller waiting for an update's answer, or a completion for its
  // record's durability, is held by this Run.
  for (const auto& [update_id, update] : updates) {
    if (!update.waiters.empty()) return false;
  }
  for (const auto& [position, awakeable] : awakeables_) {
    if (!awakeable.waiters.empty()) return false;
  }
  // A reader whose StreamReader is gone holds the only other reference.
  return std::all_of(streams.begin(), streams.end(), [](const auto& entry) {
    const auto& readers = entry.second.readers;
    return std::all_of(readers.begin(), readers.end(), [](const auto& reader) { return reader.feed.use_count() == 1; });
  });
}

TimePoint Run::waiting_since() const { return pending_.empty() ? TimePoint{} : pending_.begin()->second.since; }

std::optional<TimePoint> Run::wake_at() const {
  std::optional<TimePoint> wake;
  if (pending_.size() == 1) wake = pending_.begin()->second.due;
  if (deadline_ && (!wake || *deadline_ < *wake)) wake = deadline_;
  return wake;
}

ParkedRun Run::parked_summary() const {
  ParkedRun run;
  run.id = id_;
  run.workflow = workflow_;
  run.generation = generation_;
  run.started_ms = to_ms(started_at_);
  if (auto wake = wake_at()) run.wake_ms = to_ms(*wake);
  run.version = version_;
  run.waiting = waiting_on();
  return run;
}

std::vector<PendingCommand> Run::waiting_on() const {
  std::vector<PendingCommand> waiting;
  if (finished_ || ending_) return waiting;
  for (const auto& [position, pending] : pending_) {
    waiting.push_back(PendingCommand{position, pending.command, pending.name, pending.due});
  }
  return waiting;
}

RunInfo Run::info() const {
  RunInfo info;
  info.id = id_;
  info.workflow = workflow_;
  info.status = finished_                                               ? outcome_.status
                : stuck_error_.empty() && waiting_for_code_.empty() ? RunStatus::running
                                                                    : RunStatus::stuck;
  info.version = version_;
  info.generation = generation_;
  info.started_at = started_at_;
  info.finished_at = finished_at_;
  if (finished_ && outcome_.status != RunStatus::completed) info.error = outcome_.message;
  // A stuck run that was ended (cancelled, terminated) says why it ended,
  // not the divergence it had.
  if (!finished_ && !stuck_error_.empty()) {
    info.error = stuck_error_;
    info.stuck_position = stuck_position_;
  }
  if (!finished_ && !waiting_for_code_.empty()) info.error = waiting_for_code_;
  if (info.status == RunStatus::running) info.waiting_on = waiting_on();
  return info;
}

Result<void> Run::load(const JournalRecord& record, wal::Lsn lsn) {
  last_lsn = std::max(last_lsn, lsn);
  if (is_positional(record.kind)) {
    // Commands started together complete in any order, so a position may
    // have records before an earlier one does (a command still in flight
    // has none yet). A position far past every recorded one is damage.
    if (record.position >= journal_.size() + kPositionsAheadMax) return make_error_code(wal::errc::corrupt);
    if (record.position >= journal_.size()) journal_.resize(record.position + 1);
    journal_[record.position].records.push_back(record);
  }
  switch (record.kind) {
    case RecordKind::run_started: {
      // A generation continued as new takes over what the last one had not
      // taken (its input the Run was made with).
      auto started = read_started(record);
      if (!started) return started.error();
      for (auto& signal : started->signals) {
        if (!signal.id.empty()) signal_ids[signal.id] = SignalSeen{lsn, record.at_ms};
        mailbox_[signal.name].emplace_back(signal.id, std::move(signal.value));
      }
      for (auto& update : started->updates) {
        updates[update.id].name = update.name;
        update_mailbox_[update.name].emplace_back(update.id, std::move(update.arg));
      }
      parent = record.parent;
      if (!started->remembered.is_null()) {
        auto earlier = Remembered::from_json(started->remembered);
        if (!earlier) return earlier.error();
        remember(*earlier, lsn);
      }
      break;
    }
    case RecordKind::run_reset:
      // What the replaced generation was sent past the cut (Shard::handle_reset).
      if (const auto* object = record.value.if_object(); object != nullptr && object->contains("remembered")) {
        auto earlier = Remembered::from_json(object->at("remembered"));
        if (!earlier) return earlier.error();
        remember(*earlier, lsn);
      }
      break;
    case RecordKind::signal_received:
      mailbox_[record.name].emplace_back(record.detail, record.value);
      if (!record.detail.empty()) signal_ids[record.detail] = SignalSeen{lsn, record.at_ms};
      break;
    case RecordKind::wait_completed:
      if (record.flag) {
        auto& queue = mailbox_[record.name];
        if (!queue.empty()) queue.pop_front();
      }
      break;
    case RecordKind::update_accepted:
      update_mailbox_[record.name].emplace_back(record.detail, record.value);
      updates[record.detail].name = record.name;
      break;
    case RecordKind::update_taken: {
      auto& queue = update_mailbox_[record.name];
      auto taken = std::find_if(queue.begin(), queue.end(), [&](const auto& entry) { return entry.first == record.detail; });
      if (taken != queue.end()) queue.erase(taken);
      break;
    }
    case RecordKind::update_answered: {
      auto& update = updates[record.detail];
      update.name = record.name;
      update.answered = true;
      update.durable = true;
      update.earlier = false;
      update.answered_ms = record.at_ms;
      update.answer = answer_of(record.flag, record.value, "update", record.name);
      break;
    }
    case RecordKind::awakeable_created:
      awakeables_[record.position] = AwakeableState{record.name, record.detail};
      break;
    case RecordKind::awakeable_completed: {
      auto& awakeable = awakeables_[record.position];
      awakeable.completed = true;
      awakeable.durable = true;
      awakeable.completed_ms = record.at_ms;
      awakeable.outcome = answer_of(record.flag, record.value, "awakeable", record.name);
      break;
    }
    case RecordKind::stream_chunk: {
      auto& stream = streams[record.name];
      if (record.number != stream.chunks.size()) return make_error_code(wal::errc::corrupt);
      stream.chunks.push_back(record.value);
      stream.durable_count = stream.chunks.size();
      break;
    }
    case RecordKind::stream_closed:
      streams[record.name].close_written = true;
      streams[record.name].closed = true;
      break;
    case RecordKind::child_started:
      if (record.number != 0) {
        open_children_[record.position] = OpenChild{record.name, static_cast<ParentClose>(record.number)};
      }
      break;
    case RecordKind::child_completed:
      open_children_.erase(record.position);
      break;
    case RecordKind::cancel_requested:
      cancel_requested_ = true;
      cancel_undelivered_ = true;
      cancel_message_ = cancel_text(id_, text_of(record.value));
      if (!record.detail.empty()) cancel_ids.insert(record.detail);
      break;
    case RecordKind::cancel_delivered: {
      // One record for all the commands cancelled together; replay finds it
      // at each one's position.
      cancel_undelivered_ = false;
      if (!record.value.is_array()) return make_error_code(wal::errc::corrupt);
      for (const auto& entry : record.value.get_array()) {
        auto listed = boost::json::try_value_to<std::tuple<std::uint32_t, std::string, std::string>>(entry);
        if (!listed) return make_error_code(wal::errc::corrupt);
        auto& [position, command, name] = *listed;
        if (position >= journal_.size() + kPositionsAheadMax) return make_error_code(wal::errc::corrupt);
        if (position >= journal_.size()) journal_.resize(position + 1);
        auto marker = record;
        marker.position = position;
        marker.name = name;
        marker.detail = command;
        marker.value = record.detail;
        journal_[position].records.push_back(std::move(marker));
      }
      break;
    }
    case RecordKind::run_completed:
      ending_ = true;
      finish(Outcome{RunStatus::completed, record.value, errc::failed, {}}, from_ms(record.time_ms));
      break;
    case RecordKind::run_failed:
      ending_ = true;
      finish(Outcome{RunStatus::failed, {}, errc_from_name(record.detail),
                     text_of(record.value)},
             from_ms(record.time_ms));
      break;
    case RecordKind::run_cancelled:
      ending_ = true;
      finish(Outcome{RunStatus::cancelled, {}, errc::cancelled,
                     text_of(record.value)},
             from_ms(record.time_ms));
      break;
    default:
      break;
  }
  return ok();
}

void Run::begin(const WorkflowFn& fn) {
  FUSEE_ASSERT(!code_started_, "a run's code starts once");
  if (ending_ || stopped_) return;
  code_started_ = true;
  ctx_ = std::make_unique<Ctx>(*this);
  task_ = fn(*ctx_, input_);
  resume(task_.handle());
  // A cancel recorded before the code ran (its workflow was not registered),
  // or before a crash took its delivery: the code has replayed what the
  // journal holds and waits now.
  deliver_cancel();
}

void Run::resume(std::coroutine_handle<> handle) {
  if (stopped_) return;
  // The workflow's code runs only from here (Ctx calls check it).
  const bool was_running = std::exchange(code_running_, true);
  handle.resume();
  code_running_ = was_running;
  if (!stopped_ && !ending_ && task_.handle() && task_.handle().done()) on_code_returned();
}

void Run::on_code_returned() {
  for (std::uint32_t position = position_; position < journal_.size(); ++position) {
    if (journal_[position].records.empty()) continue;
    const auto& first = journal_[position].records.front();
    diverge(position, fmt::format("run '{}': the workflow returned at position {}, but the journal has {} '{}' at {}", id_,
                        position_, command_of(first), first.name, position));
    return;
  }
  // A step the code started and never awaited (its Future dropped) is
  // awaited here: the run ends once it has, so a step that began runs to
  // its end exactly once, before the run's last record, also across a crash
  // (docs/engine.md, "A started command nobody awaits"). Other commands --
  // timers, waits, Ctx::any, next_update, awakeables -- are let go; a child
  // follows its ParentClose.
  code_returned_ = std::any_of(pending_.begin(), pending_.end(), [](const auto& entry) { return entry.second.step != nullptr; });
  if (code_returned_) return;
  ending_ = true;
  Outcome outcome;
  try {
    outcome.value = task_.handle().promise().take();
    outcome.status = RunStatus::completed;
  } catch (ContinueAsNew& next) {
    continued_input_ = std::move(next.input);
    shard_.continue_run(*this);
    return;
  } catch (const Error& e) {
    // A cancellation the code let escape ends the run cancelled.
    outcome.status = e.error() == errc::cancelled ? RunStatus::cancelled : RunStatus::failed;
    outcome.code = e.error();
    outcome.message = e.what();
  } catch (...) {
    outcome.status = RunStatus::failed;
    outcome.code = errc::failed;
    outcome.message = fmt::format("workflow '{}' run '{}' failed: {}", workflow_, id_,
                                  describe_error(std::current_exception()));
  }
  shard_.end_run(*this, std::move(outcome));
}

void Run::stop() {
  if (stopped_) return;
  stopped_ = true;
  ending_ = true;
  // The started commands' Futures hold their state through the engine while
  // they are in flight; let go of it once the frames are gone.
  std::vector<std::shared_ptr<void>> started;
  for (auto& [position, pending] : pending_) {
    started.push_back(std::move(pending.completion->keep_alive));
    if (pending.step && pending.step->stop) pending.step->stop->request_stop();  // its result is not wanted
    // Its permit goes back now, as at an attempt's timeout (a coroutine may
    // still run on).
    if (pending.step) pending.step->permit.reset();
  }
  for (auto& select : selects_) started.push_back(std::move(select.completion->keep_alive));
  pending_.clear();
  selects_.clear();
  queries_.clear();  // they read the frames' locals
  update_validators_.clear();
  // Destroys the code's frames; callbacks still pending find stopped_.
  task_ = Task<boost::json::value>();
  ctx_.reset();
  started.clear();
}

void Run::finish(Outcome outcome, TimePoint finished_at) {
  finished_ = true;
  ending_ = true;
  outcome_ = std::move(outcome);
  finished_at_ = finished_at;
  shard_.note_finished(shared_from_this());
  stop();
  journal_.clear();
  journal_.shrink_to_fit();
  mailbox_.clear();
  for (auto& [name, stream] : streams) {
    for (auto& reader : stream.readers) reader.feed->end();
    stream.readers.clear();
  }
  update_mailbox_.clear();
  fail_callers({});
  auto internal = std::move(result_waiters);
  auto external = std::move(external_waiters);
  for (auto& waiter : internal) waiter(outcome_);
  for (auto& waiter : external) waiter(outcome_);
}

void Run::diverge(std::uint32_t position, std::string message) {
  stuck_error_ = std::move(message);
  stuck_position_ = position;
  shard_.index_run(*this);
  shard_.core().warn_operator(fmt::format("{} -- the run is stuck until code that matches its journal is "
                                          "registered and the engine reopened, or it is cancelled",
                                          stuck_error_));
  stop();
  // Not journaled: with the workflow's code fixed, the next open replays on.
  auto external = std::move(external_waiters);
  Outcome outcome{RunStatus::failed, {}, errc::nondeterminism, stuck_error_};
  for (auto& waiter : external) waiter(outcome);
  fail_callers(outcome);
}

void Run::on_deadline() {
  if (ending_) return;
  auto message = fmt::format("run '{}' of workflow '{}' passed its deadline", id_, workflow_);
  stop();
  shard_.end_run(*this, Outcome{RunStatus::failed, {}, errc::timed_out, message});
}

JournalRecord Run::make_record(RecordKind kind, std::uint32_t position, std::string_view name) const {
  JournalRecord record;
  record.kind = kind;
  record.run_id = id_;
  record.generation = generation_;
  record.position = position;
  record.name = std::string(name);
  return record;
}

void Run::append(JournalRecord record, std::function<void()> after_durable) {
  shard_.append(*this, std::move(record), std::move(after_durable));
}

void Run::refuse_outside_code(const char* call) const {
  if (!shard_.on_own_thread()) {
    // Nothing of the run may be read from here: say what we can.
    throw Error(errc::invalid_argument,
                fmt::format("run '{}': ctx.{} was called from another thread than its shard's -- from a coroutine "
                            "step resumed there, say -- and only the workflow's code may use its Ctx (a step "
                            "function's records would land at positions that depend on timing)",
                            id_, call));
  }
  if (!step_running_.empty()) {
    throw Error(errc::invalid_argument,
                fmt::format("run '{}': step '{}' called ctx.{}, and a step function may not use the workflow's Ctx: "
                            "what it journals would land at a position that depends on when the step runs, and a "
                            "replay would not find it there. Return what the step found and make the call from the "
                            "workflow's code, after the step",
                            id_, step_running_, call));
  }
  if (!code_running_) {
    std::string steps;
    for (const auto& [position, pending] : pending_) {
      if (pending.step) steps += fmt::format("{}'{}'", steps.empty() ? "" : ", ", pending.name);
    }
    throw Error(errc::invalid_argument,
                fmt::format("run '{}': ctx.{} was called outside the workflow's code -- from a coroutine step after "
                            "it suspended{}, or from another thread -- and only the workflow's code may use its Ctx "
                            "(a step function's records would land at positions that depend on timing)",
                            id_, call, steps.empty() ? std::string() : " (steps in flight: " + steps + ")"));
  }
}

std::uint32_t Run::begin_command(detail::Completion& completion, const char* call) {
  if (in_query_) {
    throw Error(errc::invalid_argument, fmt::format("run '{}': a query handler cannot start commands (it reads the "
                                                    "run's state; change it with a signal)",
                                                    id_));
  }
  refuse_outside_code(call);
  FUSEE_ASSERT(!in_command_, "a command's own call does not start another");
  in_command_ = true;
  completed_at_once_ = false;
  current_ = &completion;
  completion.position = position_;
  return position_++;
}

bool Run::end_command() {
  in_command_ = false;
  current_ = nullptr;
  return std::exchange(completed_at_once_, false);
}

void Run::complete(detail::Completion& completion) {
  // A started command's Future state lives at least until this returns.
  auto keep = std::move(completion.keep_alive);
  if (auto found = pending_.find(completion.position);
      found != pending_.end() && found->second.completion == &completion) {
    pending_.erase(found);
  }
  completion.done = true;
  completion.done_order = ++completions_;
  resolve_selects(completion);
  if (code_returned_) {
    // The code has returned and waits for the steps it left (nothing of it
    // awaits this one): the run ends after the last.
    on_code_returned();
    return;
  }
  if (in_command_ && &completion == current_) {
    completed_at_once_ = true;
    return;
  }
  // While the code runs (another command's call) nothing of it can be
  // waiting here: a started command has no awaiter yet.
  if (in_command_) return;
  if (holding_resumes_) {
    held_.emplace_back(&completion, std::move(keep));
    return;
  }
  if (completion.waiter) {
    resume(completion.waiter);
    return;
  }
  auto waiters = std::move(completion.waiters);
  for (auto waiter : waiters) resume(waiter);
}

Run::Pending& Run::park(std::uint32_t position, detail::Completion& completion, const char* command,
                        std::string_view name) {
  auto& pending = pending_[position] = Pending{};
  pending.completion = &completion;
  pending.command = command;
  pending.name = std::string(name);
  return pending;
}

void Run::request_cancel(const std::string& reason) {
  cancel_requested_ = true;
  cancel_undelivered_ = true;
  cancel_message_ = cancel_text(id_, reason);
  deliver_cancel();
}

void Run::deliver_cancel() {
  if (!cancel_undelivered_ || !code_started_ || stopped_ || ending_ || pending_.empty()) return;
  cancel_undelivered_ = false;
  auto record = make_record(RecordKind::cancel_delivered, 0, "");
  record.detail = cancel_message_;
  boost::json::array listed;
  std::vector<std::pair<std::uint32_t, detail::Completion*>> cancelled;
  // An undecided Ctx::any throws too (rather than naming a cancelled
  // command as its winner); it goes first, so cancelling its candidates
  // decides nothing.
  for (auto& select : std::exchange(selects_, {})) {
    listed.push_back(boost::json::array{select.position, "any", "any"});
    cancelled.emplace_back(select.position, select.completion);
  }
  for (auto& [position, pending] : pending_) {
    listed.push_back(boost::json::array{position, pending.command, pending.name});
    cancelled.emplace_back(position, pending.completion);
    // A coroutine step's attempt is asked to stop; whatever it returns is
    // dropped, as the step no longer waits.
    if (pending.step && pending.step->stop) pending.step->stop->request_stop();
  }
  record.value = std::move(listed);
  append(std::move(record));
  // Every command completes before any code runs, so all of the cancel is
  // journaled ahead of the clean-up's records.
  holding_resumes_ = true;
  for (auto& [position, completion] : cancelled) {
    if (auto child = open_children_.find(position); child != open_children_.end()) {
      close_child(child->second, fmt::format("its parent run '{}' was cancelled", id_));
    }
    completion->error = std::make_exception_ptr(Error(errc::cancelled, cancel_message_));
    complete(*completion);
  }
  holding_resumes_ = false;
  auto held = std::move(held_);
  held_.clear();
  std::vector<std::coroutine_handle<>> handles;
  for (auto& [completion, keep] : held) {
    if (completion->waiter) handles.push_back(std::exchange(completion->waiter, nullptr));
    for (auto waiter : completion->waiters) handles.push_back(waiter);
    completion->waiters.clear();
  }
  // (The code is suspended at one place, so one handle is resumed; past
  // its end the others' frames would be gone.)
  for (auto handle : handles) {
    if (ending_) break;
    resume(handle);
  }
}

void Run::close_child(const OpenChild& child, const std::string& why) {
  auto mode = close_mode(child.policy);
  // After the child's start, which waits for the same records (the shard
  // handles the two requests in the order they are sent).
  shard_.after_run_durable(*this, [&core = shard_.core(), id = child.id, why, mode](std::error_code error) {
    if (!error) core.close_child(id, why, mode, [] {});
  });
}

Run::Replay Run::replay(std::uint32_t position, const char* kind, std::string_view name,
                        detail::Completion& completion, const RecordedCommand*& out) {
  if (position >= journal_.size() || journal_[position].records.empty()) return Replay::none;
  const auto& recorded = journal_[position];
  const auto& first = recorded.records.front();
  std::string_view recorded_kind = command_of(first);
  if (recorded_kind != kind || first.name != name) {
    diverge(position, fmt::format("run '{}': nondeterminism at position {}: the journal has {} '{}' but the workflow asked "
                        "for {} '{}'",
                        id_, position, recorded_kind, first.name, kind, name));
    return Replay::settled;
  }
  if (const auto& last = recorded.records.back(); last.kind == RecordKind::cancel_delivered) {
    if (first.kind == RecordKind::child_started) {
      // A crash may have taken the child's start or its close: both are
      // idempotent, so they are sent again.
      start_child_request(position, first.detail, first.name, first.value);
      if (auto child = open_children_.find(position); child != open_children_.end()) {
        close_child(child->second, fmt::format("its parent run '{}' was cancelled", id_));
      }
    }
    completion.error = std::make_exception_ptr(Error(errc::cancelled, text_of(last.value)));
    complete(completion);
    return Replay::settled;
  }
  out = &recorded;
  return Replay::matched;
}

// --- Steps ---

bool Run::step(std::string_view name, const RetryPolicy& policy, detail::StepBody body,
               detail::Completion& completion) {
  auto position = begin_command(completion, "step");
  auto call = std::make_shared<StepCall>();
  call->position = position;
  call->name = std::string(name);
  call->policy = policy;
  call->body = std::move(body);
  call->completion = &completion;
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "step", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched: {
      const auto& last = recorded->records.back();
      if (last.kind == RecordKind::step_completed) {
        completion.value = last.value;
        complete(completion);
        return end_command();
      }
      if (last.kind == RecordKind::step_failed) {
        completion.error = std::make_exception_ptr(
            Error(errc::step_failed, text_of(last.value)));
        complete(completion);
        return end_command();
      }
      // Begun (step_started: its first attempt runs now) or failed attempts
      // so far (the next one runs at its recorded time). Either way at the
      // position the journal gave it, so its key is the one it had.
      call->attempt = last.kind == RecordKind::step_started ? 1 : static_cast<std::uint32_t>(last.number) + 1;
      // The step's deadline, journaled as milliseconds (none when empty).
      std::int64_t deadline_ms = 0;
      const auto& text = last.detail;
      if (!text.empty() &&
          std::from_chars(text.data(), text.data() + text.size(), deadline_ms).ec == std::errc{}) {
        call->deadline = from_ms(deadline_ms);
      }
      park(position, completion, "step", name).step = call;
      shard_.add_timer(from_ms(last.time_ms), this, [self = shared_from_this(), call] { self->run_step_attempt(call); });
      return end_command();
    }
    case Replay::none:
      break;
  }
  if (policy.deadline.count() > 0) call->deadline = shard_.now() + policy.deadline;
  // The step's start is journaled before its function may run (that waits
  // for every earlier record of the run): a step that began keeps its
  // position -- and so its key -- through a restart and a code change, and
  // Ctx::patched finds the old code went past here (Temporal journals an
  // activity's scheduling for the same reason).
  auto started = make_record(RecordKind::step_started, position, name);
  if (call->deadline) started.detail = std::to_string(to_ms(*call->deadline));
  append(std::move(started));
  park(position, completion, "step", name).step = call;
  run_step_attempt(call);
  return end_command();
}

void Run::run_step_attempt(const std::shared_ptr<StepCall>& call) {
  if (stopped_ || !waiting_at(call->position)) return;
  // The step's outside effects wait for every earlier record of the run.
  shard_.after_run_durable(*this, [self = shared_from_this(), call](std::error_code error) {
    if (error || self->stopped_ || !self->waiting_at(call->position)) return;
    const auto attempt = call->attempt;
    if (!call->body.limit.empty() && !call->permit) {
      // The attempt waits for a permit first: not an attempt yet, and
      // nothing journaled (a replay asks again).
      auto& core = self->shard_.core();
      auto shard_id = self->shard_.id();
      bool known = core.limiter().acquire(call->body.limit, [self, call, attempt, shard_id, &core](
                                                                 std::shared_ptr<StepLimits::Permit> permit) {
        core.post_to_shard(shard_id, [self, call, attempt, permit = std::move(permit)]() mutable {
          // A run that stopped, or moved on, lets the permit go at once.
          if (self->stopped_ || !self->waiting_at(call->position) || call->attempt != attempt) return;
          call->permit = std::move(permit);
          self->run_step_attempt(call);
        });
      });
      if (!known) {
        // It waits until the application sets the limit (a recovered run
        // may get here first); a misspelt name would wait for ever, so say so.
        core.warn_operator(fmt::format("run '{}': step '{}' waits for limit '{}', which is not set on this engine "
                                       "(Engine::limit)",
                                       self->id_, call->name, call->body.limit));
      }
      return;
    }
    call->attempt_open = true;
    call->attempt_began = std::chrono::steady_clock::now();
    if (call->deadline && self->shard_.now() >= *call->deadline) {
      self->finish_step_attempt(
          call, {}, std::make_exception_ptr(Error(errc::timed_out, "the step's deadline passed before it")), attempt);
      return;
    }
    call->stop = std::make_shared<std::stop_source>();
    StepContext step(fmt::format("{}/{}/{}/{}", self->id_, self->generation_, call->position, call->name), attempt,
                     call->stop->get_token());
    if (call->body.plain) {
      boost::json::value value;
      std::exception_ptr error;
      self->step_running_ = call->name;
      try {
        value = call->body.plain(step);
      } catch (...) {
        error = std::current_exception();
      }
      self->step_running_.clear();
      self->finish_step_attempt(call, std::move(value), error, attempt);
      return;
    }
    // A coroutine step's attempt ends at its timeout or the step's deadline,
    // whichever is first, if it has not ended before.
    std::optional<TimePoint> until;
    if (call->policy.attempt_timeout.count() > 0) until = self->shard_.now() + call->policy.attempt_timeout;
    if (call->deadline && (!until || *call->deadline < *until)) until = call->deadline;
    if (until) {
      self->shard_.add_timer(*until, self.get(), [self, call, attempt] { self->on_attempt_timeout(call, attempt); });
    }
    auto shard_id = self->shard_.id();
    auto& core = self->shard_.core();
    // Its first part runs here, at once: as a plain step's function.
    self->step_running_ = call->name;
    drive_coroutine_step(call->body.coroutine, std::move(step),
                         [self, call, attempt, shard_id, &core](boost::json::value value, std::exception_ptr error) {
                           core.post_to_shard(shard_id,
                                              [self, call, attempt, value = std::move(value), error]() mutable {
                                                self->finish_step_attempt(call, std::move(value), error, attempt);
                                              });
                         });
    self->step_running_.clear();
  });
}

void Run::on_attempt_timeout(const std::shared_ptr<StepCall>& call, std::uint32_t attempt) {
  if (stopped_ || !waiting_at(call->position) || call->attempt != attempt || !call->attempt_open) return;
  if (call->stop) call->stop->request_stop();
  bool deadline = call->deadline && shard_.now() >= *call->deadline;
  auto text = deadline ? std::string("the step's deadline passed during the attempt")
                       : fmt::format("the attempt took longer than its {} ms", call->policy.attempt_timeout.count());
  finish_step_attempt(call, {}, std::make_exception_ptr(Error(errc::timed_out, text)), attempt);
}

void Run::finish_step_attempt(const std::shared_ptr<StepCall>& call, boost::json::value value,
                              std::exception_ptr error, std::uint32_t attempt) {
  // An attempt abandoned at its timeout may still finish: dropped.
  if (stopped_ || !waiting_at(call->position) || attempt != call->attempt || !call->attempt_open) return;
  call->attempt_open = false;
  call->permit.reset();  // the attempt is over (one abandoned at its timeout may still run)
  const auto took_us = microseconds_since(call->attempt_began);
  auto& completion = *call->completion;
  if (!error) {
    auto record = make_record(RecordKind::step_completed, call->position, call->name);
    record.took_us = took_us;
    record.value = value;
    append(std::move(record));
    completion.value = std::move(value);
    complete(completion);
    return;
  }
  bool retryable = call->attempt < call->policy.attempts;
  try {
    std::rethrow_exception(error);
  } catch (const TerminalError&) {
    retryable = false;
  } catch (const std::exception& e) {
    if (retryable && call->policy.non_retryable && call->policy.non_retryable(e)) retryable = false;
  } catch (...) {
  }
  auto message = describe_error(error);
  TimePoint retry_at{};
  bool deadline_passed = call->deadline && shard_.now() >= *call->deadline;
  if (retryable) {
    double backoff_ms = static_cast<double>(call->policy.initial_backoff.count()) *
                        std::pow(call->policy.multiplier, static_cast<double>(call->attempt - 1));
    backoff_ms = std::min(backoff_ms, static_cast<double>(call->policy.maximum_backoff.count()));
    retry_at = shard_.now() + std::chrono::milliseconds(static_cast<std::int64_t>(std::max(0.0, backoff_ms)));
    // No attempt starts past the step's deadline.
    if (call->deadline && retry_at >= *call->deadline) deadline_passed = true;
    if (deadline_passed) retryable = false;
  }
  if (retryable) {
    auto record = make_record(RecordKind::step_attempt_failed, call->position, call->name);
    if (call->deadline) record.detail = std::to_string(to_ms(*call->deadline));
    record.number = call->attempt;
    record.time_ms = to_ms(retry_at);
    record.took_us = took_us;
    record.value = message;
    append(std::move(record));
    call->attempt++;
    shard_.add_timer(retry_at, this, [self = shared_from_this(), call] { self->run_step_attempt(call); });
    return;
  }
  auto text = fmt::format("step '{}' of run '{}' failed after {} attempt{}: {}", call->name, id_, call->attempt,
                          call->attempt == 1 ? "" : "s", message);
  if (deadline_passed) text += " (its deadline passed)";
  auto record = make_record(RecordKind::step_failed, call->position, call->name);
  record.number = call->attempt;
  record.took_us = took_us;
  record.value = text;
  append(std::move(record));
  completion.error = std::make_exception_ptr(Error(errc::step_failed, text));
  complete(completion);
}

// --- Timers ---

bool Run::sleep(std::string_view name, std::chrono::milliseconds duration, detail::Completion& completion) {
  return start_sleep(name, [this, duration] { return shard_.now() + duration; }, completion);
}

bool Run::sleep_until(std::string_view name, TimePoint due, detail::Completion& completion) {
  return start_sleep(name, [due] { return due; }, completion);
}

bool Run::start_sleep(std::string_view name, const std::function<TimePoint()>& due_if_new,
                      detail::Completion& completion) {
  auto position = begin_command(completion, "sleep");
  const RecordedCommand* recorded = nullptr;
  TimePoint due;
  switch (replay(position, "sleep", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      if (recorded->records.back().kind == RecordKind::sleep_fired) {
        complete(completion);
        return end_command();
      }
      due = from_ms(recorded->records.front().time_ms);
      break;
    case Replay::none: {
      due = due_if_new();
      auto record = make_record(RecordKind::sleep_started, position, name);
      record.time_ms = to_ms(due);
      append(std::move(record));
      break;
    }
  }
  auto& pending = park(position, completion, "sleep", name);
  pending.parkable = true;
  pending.since = shard_.now();
  pending.due = due;
  shard_.add_timer(due, this, [self = shared_from_this(), position, name = std::string(name)] {
    self->on_sleep_fired(position, name);
  });
  return end_command();
}

void Run::on_sleep_fired(std::uint32_t position, const std::string& name) {
  if (stopped_ || !waiting_at(position)) return;
  append(make_record(RecordKind::sleep_fired, position, name));
  complete(*pending_[position].completion);
}

// --- Signals ---

bool Run::wait_for(std::string_view signal, std::optional<std::chrono::milliseconds> timeout,
                   detail::Completion& completion) {
  auto position = begin_command(completion, "wait_for");
  const RecordedCommand* recorded = nullptr;
  std::optional<TimePoint> deadline;
  bool started = false;
  switch (replay(position, "wait_for", signal, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched: {
      const auto& last = recorded->records.back();
      if (last.kind == RecordKind::wait_completed) {
        completion.empty = !last.flag;
        completion.value = last.value;
        complete(completion);
        return end_command();
      }
      started = true;
      if (last.time_ms >= 0) deadline = from_ms(last.time_ms);
      break;
    }
    case Replay::none:
      if (timeout) deadline = shard_.now() + *timeout;
      break;
  }
  auto queued = mailbox_.find(std::string(signal));
  if (queued != mailbox_.end() && !queued->second.empty()) {
    auto value = std::move(queued->second.front().second);
    queued->second.pop_front();
    auto record = make_record(RecordKind::wait_completed, position, signal);
    record.flag = true;
    record.value = value;
    append(std::move(record));
    completion.value = std::move(value);
    complete(completion);
    return end_command();
  }
  if (!started) {
    auto record = make_record(RecordKind::wait_started, position, signal);
    record.time_ms = deadline ? to_ms(*deadline) : -1;
    append(std::move(record));
  }
  auto& pending = park(position, completion, "wait_for", signal);
  pending.signal = std::string(signal);
  pending.parkable = true;
  pending.since = shard_.now();
  pending.due = deadline;
  if (deadline) {
    shard_.add_timer(*deadline, this, [self = shared_from_this(), position, name = std::string(signal)] {
      self->on_wait_timeout(position, name);
    });
  }
  return end_command();
}

void Run::deliver_signal(const std::string& name, const std::string& signal_id, boost::json::value value) {
  // The earliest started wait for this signal takes it (positions are the
  // order the code started them in, so a replay agrees).
  if (!stopped_) {
    for (auto& [position, pending] : pending_) {
      if (pending.signal != name) continue;
      auto record = make_record(RecordKind::wait_completed, position, name);
      record.flag = true;
      record.value = value;
      append(std::move(record));
      auto& completion = *pending.completion;
      completion.value = std::move(value);
      complete(completion);
      return;
    }
  }
  mailbox_[name].emplace_back(signal_id, std::move(value));
}

StartedValue Run::carried_messages() const {
  StartedValue carried;
  if (continued_input_) carried.input = *continued_input_;
  // By name, then arrival: a wait_for takes the earliest of its name, and
  // the order across names is not observable.
  using Queue = std::deque<std::pair<std::string, boost::json::value>>;
  std::map<std::string, const Queue*> signals;
  for (const auto& [name, queue] : mailbox_) signals[name] = &queue;
  for (const auto& [name, queue] : signals) {
    for (const auto& [id, value] : *queue) carried.signals.push_back(CarriedSignal{name, id, value});
  }
  std::map<std::string, const Queue*> updates_by_name;
  for (const auto& [name, queue] : update_mailbox_) updates_by_name[name] = &queue;
  for (const auto& [name, queue] : updates_by_name) {
    for (const auto& [id, arg] : *queue) carried.updates.push_back(CarriedUpdate{name, id, arg});
  }
  return carried;
}

Remembered Run::remembered(std::int64_t now_ms) const {
  Remembered window;
  for (const auto& [signal_id, seen] : signal_ids) window.signals.push_back(Remembered::Signal{signal_id, seen.at_ms});
  std::unordered_set<std::string> waiting;  // accepted, not taken: carried as updates, not remembered
  for (const auto& [name, queue] : update_mailbox_) {
    for (const auto& [update_id, arg] : queue) waiting.insert(update_id);
  }
  for (const auto& [update_id, update] : updates) {
    if (waiting.contains(update_id)) continue;
    // Taken and not answered: it fails for its caller as the generation
    // ends, and a repeat gets that failure.
    auto answer = update.answered ? update.answer : unanswered_update(update_id, update.name);
    window.updates.push_back(Remembered::Answer{
        update_id, update.name,
        answer_json_of(answer),
        update.answered ? update.answered_ms : now_ms});
  }
  for (const auto& [position, awakeable] : awakeables_) {
    if (!awakeable.completed) continue;
    const auto& outcome = awakeable.outcome;
    window.awakeables.push_back(Remembered::Answer{
        awakeable.secret, awakeable.name,
        answer_json_of(outcome),
        awakeable.completed_ms});
  }
  for (const auto& [secret, answer] : earlier_awakeables_) window.awakeables.push_back(answer);
  window.bound(now_ms);
  return window;
}

void Run::remember(const Remembered& earlier, wal::Lsn lsn) {
  for (const auto& signal : earlier.signals) signal_ids.try_emplace(signal.id, SignalSeen{lsn, signal.at_ms});
  for (const auto& answer : earlier.updates) {
    auto& update = updates[answer.key];
    if (update.answered && !update.earlier) continue;  // this generation's own answer stands
    update.name = answer.name;
    update.answered = true;
    update.durable = true;
    update.earlier = true;
    update.answered_ms = answer.at_ms;
    const auto& fields = answer.answer;
    if (fields.at("ok").as_bool()) {
      update.answer = Outcome{RunStatus::completed, fields.contains("value") ? fields.at("value") : nullptr,
                              errc::failed, {}};
    } else {
      auto text = [&](const char* key) {
        const auto* found = fields.if_contains(key);
        return found != nullptr && found->is_string() ? std::string(found->get_string()) : std::string();
      };
      update.answer = Outcome{RunStatus::failed, {}, errc_from_name(text("code")), text("message")};
    }
    // Answered already: the new code does not take it again.
    auto& queue = update_mailbox_[answer.name];
    std::erase_if(queue, [&](const auto& entry) { return entry.first == answer.key; });
  }
  for (const auto& answer : earlier.awakeables) earlier_awakeables_.insert_or_assign(answer.key, answer);
}

std::optional<Remembered::Answer> Run::earlier_awakeable(const std::string& secret) const {
  for (const auto& [position, awakeable] : awakeables_) {
    if (!awakeable.completed || !same_secret(awakeable.secret, secret)) continue;
    const auto& outcome = awakeable.outcome;
    return Remembered::Answer{awakeable.secret, awakeable.name,
                              answer_json_of(outcome),
                              awakeable.completed_ms};
  }
  auto found = earlier_awakeables_.find(secret);
  if (found == earlier_awakeables_.end()) return std::nullopt;
  return found->second;
}

std::unordered_map<std::string, Run::UpdateState> Run::take_carried_updates() {
  std::unordered_map<std::string, UpdateState> carried;
  for (const auto& [name, queue] : update_mailbox_) {
    for (const auto& [id, arg] : queue) {
      if (auto found = updates.find(id); found != updates.end()) {
        carried.emplace(id, std::move(found->second));
        updates.erase(found);
      }
    }
  }
  return carried;
}

void Run::on_wait_timeout(std::uint32_t position, const std::string& name) {
  if (stopped_ || !waiting_at(position) || pending_[position].signal.empty()) return;
  auto record = make_record(RecordKind::wait_completed, position, name);
  record.flag = false;
  append(std::move(record));
  auto& completion = *pending_[position].completion;
  completion.empty = true;
  complete(completion);
}

// --- Streams ---

bool Run::stream_write(std::string_view name, boost::json::value chunk, detail::Completion& completion) {
  auto position = begin_command(completion, "stream(...).write");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "stream write", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      completion.value = recorded->records.front().number;
      complete(completion);
      return end_command();
    case Replay::none:
      break;
  }
  auto& stream = streams[std::string(name)];
  if (stream.close_written) {
    completion.error = std::make_exception_ptr(
        Error(errc::invalid_argument, fmt::format("run '{}': stream '{}' is closed", id_, name)));
    complete(completion);
    return end_command();
  }
  std::uint64_t offset = stream.chunks.size();
  stream.chunks.push_back(chunk);
  auto record = make_record(RecordKind::stream_chunk, position, name);
  record.number = offset;
  record.value = std::move(chunk);
  append(std::move(record), [self = shared_from_this(), name = std::string(name), offset] {
    self->on_stream_durable(name, offset + 1);
  });
  completion.value = offset;
  complete(completion);
  return end_command();
}

bool Run::stream_close(std::string_view name, detail::Completion& completion) {
  auto position = begin_command(completion, "stream(...).close");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "stream close", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      complete(completion);
      return end_command();
    case Replay::none:
      break;
  }
  auto& stream = streams[std::string(name)];
  if (!stream.close_written) {
    stream.close_written = true;
    append(make_record(RecordKind::stream_closed, position, name),
           [self = shared_from_this(), name = std::string(name)] { self->on_stream_closed_durable(name); });
  } else {
    // Closing twice is harmless but still takes its position, so replay
    // sees the same sequence.
    append(make_record(RecordKind::stream_closed, position, name));
  }
  complete(completion);
  return end_command();
}

void Run::on_stream_durable(const std::string& name, std::uint64_t count) {
  auto& stream = streams[name];
  if (count <= stream.durable_count) return;
  stream.durable_count = count;
  for (auto& reader : stream.readers) {
    while (reader.next_offset < stream.durable_count) {
      reader.feed->push(StreamChunk{reader.next_offset, stream.chunks[reader.next_offset]});
      reader.next_offset++;
    }
  }
}

void Run::on_stream_closed_durable(const std::string& name) {
  auto& stream = streams[name];
  stream.closed = true;
  for (auto& reader : stream.readers) reader.feed->end();
  stream.readers.clear();
}

// --- Journaled values ---

bool Run::now(detail::Completion& completion) {
  return record_value("now", [this] { return boost::json::value(to_ms(shard_.now())); }, completion);
}

bool Run::random(detail::Completion& completion) {
  return record_value("random", [this] { return boost::json::value(shard_.core().random()); }, completion);
}

bool Run::record_value(std::string_view name, const std::function<boost::json::value()>& produce,
                       detail::Completion& completion) {
  auto position = begin_command(completion, "now/random");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "value", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      completion.value = recorded->records.front().value;
      complete(completion);
      return end_command();
    case Replay::none:
      break;
  }
  auto record = make_record(RecordKind::value_recorded, position, name);
  record.value = produce();
  completion.value = record.value;
  append(std::move(record));
  complete(completion);
  return end_command();
}

// --- Children ---

bool Run::child(std::string_view workflow, std::string_view child_id, boost::json::value input,
                ParentClose on_parent_close, detail::Completion& completion) {
  auto position = begin_command(completion, "child");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "child", child_id, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched: {
      const auto& last = recorded->records.back();
      if (last.kind == RecordKind::child_completed) {
        if (last.flag) {
          completion.value = last.value;
        } else {
          completion.error = std::make_exception_ptr(
              Error(errc::failed, text_of(last.value)));
        }
        complete(completion);
        return end_command();
      }
      park(position, completion, "child", child_id);
      start_child_request(position, last.detail, std::string(child_id), last.value);
      return end_command();
    }
    case Replay::none:
      break;
  }
  // Refused before anything is journaled, so a replay refuses it the same.
  if (auto why = run_id_problem(child_id, "child run id")) {
    completion.error = std::make_exception_ptr(Error(errc::invalid_argument, fmt::format("run '{}': {}", id_, *why)));
    complete(completion);
    return end_command();
  }
  auto record = make_record(RecordKind::child_started, position, child_id);
  record.detail = std::string(workflow);
  record.value = input;
  record.number = static_cast<std::uint64_t>(on_parent_close);
  append(std::move(record));
  if (on_parent_close != ParentClose::abandon) {
    open_children_[position] = OpenChild{std::string(child_id), on_parent_close};
  }
  park(position, completion, "child", child_id);
  start_child_request(position, std::string(workflow), std::string(child_id), input);
  return end_command();
}

void Run::start_child_request(std::uint32_t position, const std::string& workflow, const std::string& child_id,
                              const boost::json::value& input) {
  // Starting a child is an effect outside the run: it waits for every
  // earlier record of the run to be durable, like a step's function, so a
  // crash cannot take back the decision that started it (a Ctx::any's
  // winner, a step's result) and replay start another child instead.
  // It starts even when the parent no longer waits for it (cancelled,
  // terminated, ended): the journal says it started, and its ParentClose,
  // sent after this, decides what becomes of it.
  shard_.after_run_durable(*this, [self = shared_from_this(), position, workflow, child_id,
                                   input](std::error_code error) {
    if (error) return;
    auto& core = self->shard_.core();
    auto parent_shard = self->shard_.id();
    // Starting is idempotent (attach), so a replay asks again safely.
    StartRequest request{workflow, child_id, input, StartOptions{IfRunning::attach, IfFinished::attach, {}}, self->id_};
    core.start_child(std::move(request), [self, position, child_id, parent_shard, &core](const Outcome& outcome) {
      core.post_to_shard(parent_shard,
                         [self, position, child_id, outcome] { self->on_child_done(position, child_id, outcome); });
    });
  });
}

void Run::on_child_done(std::uint32_t position, const std::string& child_id, const Outcome& outcome) {
  if (stopped_ || !waiting_at(position)) return;
  open_children_.erase(position);
  auto& completion = *pending_[position].completion;
  auto record = make_record(RecordKind::child_completed, position, child_id);
  record.flag = outcome.status == RunStatus::completed;
  if (record.flag) {
    record.value = outcome.value;
    completion.value = outcome.value;
  } else {
    auto text = fmt::format("child run '{}' failed: {}", child_id, outcome.message);
    record.detail = errc_name(outcome.code);
    record.value = text;
    completion.error = std::make_exception_ptr(Error(errc::failed, text));
  }
  append(std::move(record));
  complete(completion);
}

// --- Ctx::cancel_run / terminate_run ---

bool Run::close_run(std::string_view other, std::string_view reason, bool terminate, detail::Completion& completion) {
  auto name = fmt::format("{} run {}", terminate ? "terminate" : "cancel", other);
  auto position = begin_command(completion, "cancel_run/terminate_run");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "step", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      if (recorded->records.back().kind == RecordKind::step_completed) {
        complete(completion);
        return end_command();
      }
      break;
    case Replay::none:
      append(make_record(RecordKind::step_started, position, name));  // as a step's (Run::step)
      break;
  }
  park(position, completion, "step", name);
  // An effect outside the run, like a child's start: sent once what the run
  // journaled before is durable, so a crash cannot take back the decision.
  // A cancel goes as a ParentClose one, which never escalates: the replay
  // after a crash may send it again.
  auto mode = terminate ? CancelMode::terminate : CancelMode::parent_close;
  shard_.after_run_durable(*this, [self = shared_from_this(), position, name, other = std::string(other),
                                   reason = std::string(reason), mode](std::error_code error) {
    if (error) return;
    auto& core = self->shard_.core();
    auto shard = self->shard_.id();
    core.close_child(other, reason, mode, [self, position, name, shard, &core] {
      core.post_to_shard(shard, [self, position, name] { self->on_run_closed(position, name); });
    });
  });
  return end_command();
}

void Run::on_run_closed(std::uint32_t position, const std::string& name) {
  if (stopped_ || !waiting_at(position)) return;
  append(make_record(RecordKind::step_completed, position, name));
  complete(*pending_[position].completion);
}

// --- Ctx::patched ---

bool Run::patched(std::string_view id, bool deprecated) {
  if (in_query_) {
    throw Error(errc::invalid_argument,
                fmt::format("run '{}': a query handler cannot ask ctx.patched (it would journal)", id_));
  }
  refuse_outside_code("patched");
  const bool marker_here = position_ < journal_.size() && !journal_[position_].records.empty() &&
                           journal_[position_].records.front().kind == RecordKind::patch_marked &&
                           journal_[position_].records.front().name == id;
  // One answer per patch id per run (Temporal Go's GetVersion): the first
  // call decides, every later one -- in a loop, say -- repeats it, so a run
  // never mixes the old path and the new one. (A journal an older engine
  // wrote has a marker at every call that took the new path: read past it.)
  if (auto known = patches_.find(std::string(id)); known != patches_.end()) {
    if (known->second && marker_here) ++position_;
    return known->second;
  }
  bool answer = true;
  if (marker_here) {
    ++position_;  // the run took the new path here before
  } else if (position_ < journal_.size()) {
    // The journal goes on past here without the marker: the old code went
    // past this point (every command journals its start, so one in flight
    // counts), and the run keeps to the old path (nothing is recorded).
    answer = false;
  } else if (!deprecated) {
    // Live: the run reaches the change with the new code. A deprecated
    // patch records nothing (its marker is only read, for runs that have it).
    append(make_record(RecordKind::patch_marked, position_, id));
    ++position_;
  }
  patches_.emplace(std::string(id), answer);
  return answer;
}

// --- Ctx::on_query ---

void Run::on_query(std::string name, detail::QueryHandler handler) {
  refuse_outside_code("on_query");
  queries_[std::move(name)] = std::move(handler);
}

Result<boost::json::value> Run::answer_query(const std::string& name, const boost::json::value& arg, std::string& why) {
  auto found = queries_.find(name);
  if (found == queries_.end()) {
    std::string names;
    for (const auto& [known, handler] : queries_) names += (names.empty() ? "'" : ", '") + known + "'";
    why = fmt::format("run '{}' has no query '{}' ({})", id_, name,
                      names.empty() ? std::string("it registered none") : "it answers " + names);
    return make_error_code(errc::not_found);
  }
  in_query_ = true;
  try {
    auto answer = found->second(arg);
    in_query_ = false;
    return answer;
  } catch (const Error& error) {
    in_query_ = false;
    why = error.what();
    return make_error_code(error.error());
  } catch (const std::exception& error) {
    in_query_ = false;
    why = fmt::format("run '{}': query '{}' failed: {}", id_, name, error.what());
    return make_error_code(errc::failed);
  } catch (...) {
    // A handler may throw anything (`throw "not ready";`); on the shard's
    // thread an escaping one ends the process, and any client can ask.
    in_query_ = false;
    why = fmt::format("run '{}': query '{}' failed: it threw something that is not a std::exception", id_, name);
    return make_error_code(errc::failed);
  }
}

// --- Ctx::any ---

bool Run::select(std::span<detail::Completion* const> candidates, detail::Completion& completion) {
  auto position = begin_command(completion, "any");
  std::vector<std::uint32_t> positions;
  positions.reserve(candidates.size());
  for (const auto* candidate : candidates) positions.push_back(candidate->position);
  auto listed = [](const std::vector<std::uint32_t>& list) { return fmt::format("{}", fmt::join(list, ", ")); };
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "any", "any", completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched: {
      const auto& record = recorded->records.front();
      auto chosen = boost::json::try_value_to<std::vector<std::uint32_t>>(record.value);
      if (!chosen || *chosen != positions) {
        diverge(position, fmt::format("run '{}': nondeterminism at position {}: the journal's any chose among the commands "
                            "at positions [{}] but the workflow waits for [{}]",
                            id_, position, chosen ? listed(*chosen) : std::string("?"), listed(positions)));
        return end_command();
      }
      auto winner = std::find(positions.begin(), positions.end(), record.number);
      if (winner == positions.end() || !candidates[winner - positions.begin()]->done) {
        diverge(position, fmt::format("run '{}': the journal's any at position {} chose position {}, which has not completed",
                            id_, position, record.number));
        return end_command();
      }
      completion.value = static_cast<std::uint64_t>(winner - positions.begin());
      complete(completion);
      return end_command();
    }
    case Replay::none:
      break;
  }
  if (candidates.empty()) {
    completion.error =
        std::make_exception_ptr(Error(errc::invalid_argument, fmt::format("run '{}': any of no futures", id_)));
    complete(completion);
    return end_command();
  }
  // The candidate that completed first, if one has.
  std::optional<std::size_t> first;
  for (std::size_t index = 0; index < candidates.size(); ++index) {
    if (candidates[index]->done && (!first || candidates[index]->done_order < candidates[*first]->done_order))
      first = index;
  }
  if (first) {
    resolve_select(position, positions, *first, completion);
    return end_command();
  }
  selects_.push_back(Select{position, std::move(positions), &completion});
  return end_command();
}

void Run::resolve_select(std::uint32_t position, const std::vector<std::uint32_t>& candidates, std::size_t index,
                         detail::Completion& completion) {
  auto record = make_record(RecordKind::any_resolved, position, "any");
  boost::json::array listed;
  for (auto candidate : candidates) listed.push_back(candidate);
  record.value = std::move(listed);
  record.number = candidates[index];
  append(std::move(record));
  completion.value = static_cast<std::uint64_t>(index);
  complete(completion);
}

void Run::resolve_selects(const detail::Completion& done) {
  if (selects_.empty()) return;
  std::vector<Select> resolved;
  for (auto it = selects_.begin(); it != selects_.end();) {
    if (std::find(it->candidates.begin(), it->candidates.end(), done.position) != it->candidates.end()) {
      resolved.push_back(std::move(*it));
      it = selects_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& select : resolved) {
    auto index = static_cast<std::size_t>(
        std::find(select.candidates.begin(), select.candidates.end(), done.position) - select.candidates.begin());
    resolve_select(select.position, select.candidates, index, *select.completion);
  }
}

// --- Updates ---

void Run::on_update(std::string name, detail::UpdateValidator validator) {
  refuse_outside_code("on_update");
  update_validators_[std::move(name)] = std::move(validator);
}

Result<void> Run::validate_update(const std::string& name, const boost::json::value& arg, std::string& why) {
  auto found = update_validators_.find(name);
  if (found == update_validators_.end()) {
    std::string names;
    for (const auto& [known, validator] : update_validators_) names += (names.empty() ? "'" : ", '") + known + "'";
    why = fmt::format("run '{}' takes no update '{}' ({})", id_, name,
                      names.empty() ? std::string("it declared none") : "it takes " + names);
    return make_error_code(errc::not_found);
  }
  // Like a query, the validator reads: it may not start commands.
  in_query_ = true;
  try {
    auto refused = found->second(arg);
    in_query_ = false;
    if (refused.empty()) return ok();
    why = fmt::format("run '{}' rejected update '{}': {}", id_, name, refused);
    return make_error_code(errc::rejected);
  } catch (const Error& error) {
    in_query_ = false;
    why = fmt::format("run '{}': the validator of update '{}' failed: {}", id_, name, error.what());
    return make_error_code(error.error() == errc::invalid_argument ? errc::invalid_argument : errc::rejected);
  } catch (const std::exception& error) {
    in_query_ = false;
    why = fmt::format("run '{}': the validator of update '{}' failed: {}", id_, name, error.what());
    return make_error_code(errc::rejected);
  } catch (...) {
    in_query_ = false;  // as a query handler: anything thrown is caught here
    why = fmt::format("run '{}': the validator of update '{}' failed: it threw something that is not a "
                      "std::exception",
                      id_, name);
    return make_error_code(errc::rejected);
  }
}

void Run::deliver_update(const std::string& name, const std::string& update_id, boost::json::value arg) {
  // The earliest started next_update of this name takes it (positions are
  // the order the code started them in, so a replay agrees).
  if (!stopped_) {
    for (auto& [position, pending] : pending_) {
      if (pending.update != name) continue;
      auto record = make_record(RecordKind::update_taken, position, name);
      record.detail = update_id;
      record.value = arg;
      append(std::move(record));
      auto& completion = *pending.completion;
      completion.value = boost::json::object{{"id", update_id}, {"arg", std::move(arg)}};
      complete(completion);
      return;
    }
  }
  update_mailbox_[name].emplace_back(update_id, std::move(arg));
}

bool Run::next_update(std::string_view name, detail::Completion& completion) {
  auto position = begin_command(completion, "next_update");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "next_update", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched: {
      const auto& taken = recorded->records.front();
      completion.value = boost::json::object{{"id", taken.detail}, {"arg", taken.value}};
      complete(completion);
      return end_command();
    }
    case Replay::none:
      break;
  }
  auto queued = update_mailbox_.find(std::string(name));
  if (queued != update_mailbox_.end() && !queued->second.empty()) {
    auto [update_id, arg] = std::move(queued->second.front());
    queued->second.pop_front();
    auto record = make_record(RecordKind::update_taken, position, name);
    record.detail = update_id;
    record.value = arg;
    append(std::move(record));
    completion.value = boost::json::object{{"id", std::move(update_id)}, {"arg", std::move(arg)}};
    complete(completion);
    return end_command();
  }
  auto& pending = park(position, completion, "next_update", name);
  pending.update = std::string(name);
  pending.parkable = true;
  pending.since = shard_.now();
  return end_command();
}

bool Run::reply_update(std::string_view name, std::string_view update_id, bool succeeded, boost::json::value value,
                       detail::Completion& completion) {
  auto position = begin_command(completion, "reply");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "reply", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      if (recorded->records.front().detail != update_id) {
        diverge(position, fmt::format("run '{}': nondeterminism at position {}: the journal answers update '{}' id '{}' but "
                            "the workflow answered id '{}'",
                            id_, position, name, recorded->records.front().detail, update_id));
        return end_command();
      }
      complete(completion);
      return end_command();
    case Replay::none:
      break;
  }
  auto found = updates.find(std::string(update_id));
  if (found != updates.end() && found->second.earlier) {
    // Answered in the generation a reset replaced: the code that took it
    // again answers again (journaled, so a replay agrees), and callers keep
    // the answer they were given then.
    auto record = make_record(RecordKind::update_answered, position, name);
    record.detail = std::string(update_id);
    record.flag = succeeded;
    record.value = std::move(value);
    append(std::move(record));
    complete(completion);
    return end_command();
  }
  if (found == updates.end() || found->second.answered) {
    // Nothing recorded: a replay reaches the same refusal.
    completion.error = std::make_exception_ptr(
        Error(errc::invalid_argument,
              found == updates.end()
                  ? fmt::format("run '{}': no update '{}' with id '{}' was accepted", id_, name, update_id)
                  : fmt::format("run '{}': update '{}' id '{}' was answered already", id_, name, update_id)));
    complete(completion);
    return end_command();
  }
  auto& update = found->second;
  update.answered = true;
  update.answered_ms = to_ms(shard_.now());
  update.answer = answer_of(succeeded, value, "update", update.name);
  auto record = make_record(RecordKind::update_answered, position, name);
  record.detail = std::string(update_id);
  record.flag = succeeded;
  record.value = std::move(value);
  // The caller hears the answer once it is durable, never before.
  append(std::move(record), [self = shared_from_this(), id = std::string(update_id)] {
    auto answered = self->updates.find(id);
    if (answered == self->updates.end()) return;
    answered->second.durable = true;
    auto waiters = std::move(answered->second.waiters);
    answered->second.waiters.clear();
    for (auto& waiter : waiters) waiter(answered->second.answer);
  });
  complete(completion);
  return end_command();
}

Outcome Run::unanswered_update(const std::string& update_id, const std::string& name) const {
  return Outcome{RunStatus::failed, {}, errc::failed,
                 fmt::format("run '{}' ended before it answered update '{}' (id '{}')", id_, name, update_id)};
}

void Run::fail_callers(const Outcome& why) {
  for (auto& [update_id, update] : updates) {
    if (update.waiters.empty() || (update.answered && update.durable)) continue;
    auto outcome = why.status != RunStatus::running ? why : unanswered_update(update_id, update.name);
    auto waiters = std::move(update.waiters);
    update.waiters.clear();
    for (auto& waiter : waiters) waiter(outcome);
  }
  if (why.status == RunStatus::running) return;
  for (auto& [position, awakeable] : awakeables_) {
    auto waiters = std::move(awakeable.waiters);
    awakeable.waiters.clear();
    for (auto& waiter : waiters) waiter(make_error_code(why.code), why.message);
  }
}

// --- Awakeables ---

bool Run::awakeable(std::string_view name, detail::Completion& completion) {
  auto position = begin_command(completion, "awakeable");
  if (auto known = awakeables_.find(position); known != awakeables_.end()) {
    completion.token = format_token(AwakeableToken{id_, position, known->second.secret});
  }
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "awakeable", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched: {
      auto& state = awakeables_[position];
      if (state.completed) {
        if (state.outcome.status == RunStatus::completed) {
          completion.value = state.outcome.value;
        } else {
          completion.error = std::make_exception_ptr(Error(state.outcome.code, state.outcome.message));
        }
        complete(completion);
        return end_command();
      }
      break;
    }
    case Replay::none: {
      AwakeableState state{std::string(name), new_secret()};
      auto record = make_record(RecordKind::awakeable_created, position, name);
      record.detail = state.secret;
      append(std::move(record));
      completion.token = format_token(AwakeableToken{id_, position, state.secret});
      awakeables_[position] = std::move(state);
      break;
    }
  }
  auto& pending = park(position, completion, "awakeable", name);
  pending.parkable = true;
  pending.since = shard_.now();
  return end_command();
}

void answer_awakeable_repeat(const Remembered::Answer& first, bool succeeded, const boost::json::value& value,
                             const std::function<void(std::error_code, std::string)>& reply) {
  auto outcome = answer_of(succeeded, value, "awakeable", first.name);
  const auto* ok = first.answer.if_contains("ok");
  const auto* first_value = first.answer.if_contains("value");
  const auto* first_message = first.answer.if_contains("message");
  bool same = ok != nullptr && ok->is_bool() && ok->get_bool() == succeeded &&
              (succeeded ? first_value != nullptr && *first_value == outcome.value
                         : first_message != nullptr && first_message->is_string() &&
                               first_message->get_string() == outcome.message);
  if (same) {
    reply({}, {});  // a repeat of the completion: acknowledged, nothing recorded again
    return;
  }
  reply(make_error_code(errc::already_exists),
        fmt::format("awakeable '{}' was already completed, with another {}", first.name,
                    first.answer.at("ok").as_bool() ? "value" : "failure"));
}

void Run::complete_awakeable(std::uint32_t position, const std::string& secret, bool succeeded,
                             boost::json::value value, std::function<void(std::error_code, std::string)> reply) {
  auto found = awakeables_.find(position);
  if (found == awakeables_.end() || !same_secret(found->second.secret, secret)) {
    // An earlier generation's (continue-as-new, reset), completed then: a
    // repeat is answered as the first was.
    if (auto earlier = earlier_awakeable(secret)) {
      answer_awakeable_repeat(*earlier, succeeded, value, reply);
      return;
    }
    // The same answer for a wrong secret as for no awakeable: a guess learns nothing.
    reply(make_error_code(errc::not_found), fmt::format("run '{}' has no awakeable with this token", id_));
    return;
  }
  auto& state = found->second;
  auto outcome = answer_of(succeeded, value, "awakeable", state.name);
  if (state.completed) {
    bool same = state.outcome.status == outcome.status &&
                (outcome.status == RunStatus::completed ? state.outcome.value == outcome.value
                                                        : state.outcome.message == outcome.message);
    if (!same) {
      reply(make_error_code(errc::already_exists),
            fmt::format("awakeable '{}' of run '{}' was already completed, with another {}", state.name, id_,
                        state.outcome.status == RunStatus::completed ? "value" : "failure"));
    } else if (state.durable) {
      reply({}, {});  // a repeat of the completion: acknowledged, nothing recorded again
    } else {
      state.waiters.push_back(std::move(reply));
    }
    return;
  }
  if (!waiting_at(position)) {
    reply(make_error_code(errc::not_found),
          fmt::format("awakeable '{}' of run '{}' no longer waits (the run was cancelled, or is ending)", state.name, id_));
    return;
  }
  state.completed = true;
  state.completed_ms = to_ms(shard_.now());
  state.outcome = outcome;
  state.waiters.push_back(std::move(reply));
  auto record = make_record(RecordKind::awakeable_completed, position, state.name);
  record.flag = succeeded;
  record.value = std::move(value);
  append(std::move(record), [self = shared_from_this(), position] {
    auto completed = self->awakeables_.find(position);
    if (completed == self->awakeables_.end()) return;
    completed->second.durable = true;
    auto waiters = std::move(completed->second.waiters);
    completed->second.waiters.clear();
    for (auto& waiter : waiters) waiter({}, {});
  });
  auto& completion = *pending_[position].completion;
  if (outcome.status == RunStatus::completed) {
    completion.value = outcome.value;
  } else {
    completion.error = std::make_exception_ptr(Error(outcome.code, outcome.message));
  }
  complete(completion);
}

}  // namespace fusee::engine
