// Steps: a step's start journaled before its function may run, its
// attempts, their timeouts and retries, and its result or failure.
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

}  // namespace

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
  // The step's outside effects wait for every earlier record of the run,
  // or, for the first step in the turn that starts the run, for nothing:
  // the start and the step's start are in one atomic group of the log, so
  // a crash keeps both or loses the run whole, never acknowledged, and a
  // resent start runs the step again with the same key and input
  // (docs/durability.md, "Running ahead").
  auto attempt_now = [self = shared_from_this(), call](std::error_code error) {
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
  };
  if (shard_.may_run_ahead(*this)) {
    shard_.count_step_run_ahead();
    attempt_now({});
  } else {
    shard_.after_run_durable(*this, std::move(attempt_now));
  }
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

}  // namespace fusee::engine
