// Child runs (Ctx::child) and closing other runs (Ctx::cancel_run,
// Ctx::terminate_run).
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

}  // namespace fusee::engine
