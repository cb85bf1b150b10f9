// What a run shows: its summary for the run store, its streams, whether it
// may park and until when, what it waits on, and its RunInfo.
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
  for (const auto& [update_id, update] : updates.all()) {
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
  if (updates.has_callers()) return false;
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

}  // namespace fusee::engine
