// Run, the driving of its code: starting and resuming the coroutine, each
// command's position, completion and replay check, a cancel delivered to
// what waits, and the run's end. The commands themselves are in
// run_*.cpp (engine/run_internal.hpp lists them).
#include "engine/run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/run_internal.hpp"
#include "engine/shard.hpp"
#include "wal/errc.hpp"
#include "fusee/limits.hpp"

namespace fusee::engine {

using namespace run_text;

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
  if (auto position = cursor_.recorded_from_next()) {
    const auto& first = cursor_.recorded(*position)->records.front();
    diverge(*position, fmt::format("run '{}': the workflow returned at position {}, but the journal has {} '{}' at {}",
                                   id_, cursor_.next(), command_of(first), first.name, *position));
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
  cursor_.forget();
  mailbox_.clear();
  for (auto& [name, stream] : streams) {
    for (auto& reader : stream.readers) reader.feed->end();
    stream.readers.clear();
  }
  updates.clear_waiting();
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
  // A time, a random value, a patch decision, a step's result: what follows
  // may depend on it, and a life that lost it could choose otherwise.
  if (record.kind != RecordKind::step_started) ahead = false;
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
  return cursor_.begin(completion);
}

bool Run::end_command() { return cursor_.end(); }

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
  if (cursor_.completes_in_call(completion)) return;
  // While the code runs (another command's call) nothing of it can be
  // waiting here: a started command has no awaiter yet.
  if (cursor_.in_command()) return;
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
  const auto* found = cursor_.recorded(position);
  if (found == nullptr) return Replay::none;
  const auto& recorded = *found;
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

}  // namespace fusee::engine
