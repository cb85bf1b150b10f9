// Awakeables: a token made and journaled, then completed from outside
// (Engine::complete_awakeable), once; a repeat answered as the first.
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
