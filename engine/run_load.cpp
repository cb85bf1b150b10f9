// Run::load: a journal record read back (recovery, unparking, a reset's
// kept records) brought into the run's state, for its code to replay.
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

Result<void> Run::load(const JournalRecord& record, wal::Lsn lsn) {
  last_lsn = std::max(last_lsn, lsn);
  if (is_positional(record.kind)) {
    if (auto filed = cursor_.file(record.position, record); !filed) return filed;
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
      for (auto& update : started->updates) updates.accept(update.name, update.id, std::move(update.arg));
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
      updates.accept(record.name, record.detail, record.value);
      break;
    case RecordKind::update_taken:
      updates.taken(record.name, record.detail);
      break;
    case RecordKind::update_answered:
      updates.answer(record.detail, record.name, answer_of(record.flag, record.value, "update", record.name),
                     record.at_ms, true);
      break;
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
        auto marker = record;
        marker.position = position;
        marker.name = name;
        marker.detail = command;
        marker.value = record.detail;
        if (auto filed = cursor_.file(position, std::move(marker)); !filed) return filed;
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

}  // namespace fusee::engine
