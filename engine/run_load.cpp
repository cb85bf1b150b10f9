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

}  // namespace fusee::engine
