// The commands that wait: timers (sleep, sleep_until), signals (wait_for,
// with its timeout) and Ctx::any's select over commands in flight.
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

void Run::on_wait_timeout(std::uint32_t position, const std::string& name) {
  if (stopped_ || !waiting_at(position) || pending_[position].signal.empty()) return;
  auto record = make_record(RecordKind::wait_completed, position, name);
  record.flag = false;
  append(std::move(record));
  auto& completion = *pending_[position].completion;
  completion.empty = true;
  complete(completion);
}

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

}  // namespace fusee::engine
