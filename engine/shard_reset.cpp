// Reset: a run started again from a point of its journal on the code
// registered now, as a new generation that keeps the commands before it.
#include "engine/shard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/journal_json.hpp"
#include "engine/kept_journal.hpp"
#include "engine/shard_internal.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"

namespace fusee::engine {

using namespace shard_text;

void Shard::handle_reset(const std::string& id, const ResetPoint& point, const std::string& reason, Reply reply) {
  if (hold_if_continuing(id, [=, this] { handle_reset(id, point, reason, reply); })) return;
  std::error_code store_error;
  auto existing = find_run(id, store_error);  // wakes a parked run
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  std::vector<JournalRecord> old;
  if (existing) {
    if (existing->ending() && !existing->finished() && existing->stuck_error().empty()) {
      reply(make_error_code(errc::busy), fmt::format("run '{}' is ending: reset it once it has ended", id));
      return;
    }
    auto records = existing->journal.records();
    if (!records) {
      reply(make_error_code(errc::storage), fmt::format("run '{}': its journal does not decode", id));
      return;
    }
    old = std::move(*records);
  } else if (store_ != nullptr) {
    auto stored = store_->journal_of_finished(id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(id, stored.error()));
      return;
    }
    if (*stored) {
      auto records = records_of_kept_journal(**stored);
      if (!records) {
        reply(make_error_code(errc::storage), fmt::format("run '{}': its kept journal does not decode", id));
        return;
      }
      old = std::move(*records);
    } else if (auto finished = stored_run(id); !finished || !*finished) {
      reply(make_error_code(errc::not_found), fmt::format("reset: no run '{}'", id));
      return;
    }
  } else {
    reply(make_error_code(errc::not_found), fmt::format("reset: no run '{}'", id));
    return;
  }
  if (old.empty() || old.front().kind != RecordKind::run_started) {
    reply(make_error_code(errc::invalid_argument),
          fmt::format("reset: run '{}' has no journal kept (Config::keep_finished_journals)", id));
    return;
  }
  const auto& started = old.front();
  // The cut: commands before `cut` are kept.
  std::uint32_t cut = 0;
  if (point.position) {
    cut = *point.position;
    // Past the journal's end the reset would keep everything and replay
    // nothing, yet start a generation: refused (issue 36). At the end it
    // keeps every command and the new code goes on from there.
    std::uint32_t end = 0;
    for (const auto& record : old) {
      if (is_positional(record.kind)) end = std::max(end, record.position + 1);
    }
    if (cut > end) {
      reply(make_error_code(errc::invalid_argument),
            fmt::format("reset: run '{}' has commands at positions 0 to {}; position {} is past its end", id,
                        end == 0 ? 0 : end - 1, cut));
      return;
    }
  } else if (point.after_step) {
    bool found = false;
    for (const auto& record : old) {
      if (record.kind == RecordKind::step_completed && record.name == *point.after_step) {
        cut = std::max(cut, record.position + 1);
        found = true;
      }
    }
    if (!found) {
      reply(make_error_code(errc::invalid_argument),
            fmt::format("reset: run '{}' has no completed step '{}'", id, *point.after_step));
      return;
    }
  } else {
    reply(make_error_code(errc::invalid_argument), "reset: a position or a step to reset after is needed");
    return;
  }
  // A cancellation is kept only whole: when every command it reached is.
  bool keep_cancel = true;
  for (const auto& record : old) {
    if (record.kind != RecordKind::cancel_delivered || !record.value.is_array()) continue;
    for (const auto& listed : record.value.as_array()) {
      if (listed.is_array() && !listed.as_array().empty() && listed.as_array()[0].is_number() &&
          listed.as_array()[0].to_number<std::uint32_t>() >= cut) {
        keep_cancel = false;
      }
    }
  }
  std::vector<JournalRecord> kept;
  boost::json::array dropped;
  for (const auto& record : old) {
    bool keep = false;
    switch (record.kind) {
      case RecordKind::run_started:
      case RecordKind::run_completed:
      case RecordKind::run_failed:
      case RecordKind::run_cancelled:
      case RecordKind::run_reset:
        break;
      case RecordKind::signal_received:
      case RecordKind::update_accepted:
        keep = true;  // every signal and update: those the kept commands took, and the rest for the new code
        break;
      case RecordKind::cancel_requested:
      case RecordKind::cancel_delivered:
        keep = keep_cancel;
        break;
      default:
        keep = is_positional(record.kind) && record.position < cut;
        break;
    }
    if (keep) {
      kept.push_back(record);
    } else if (record.kind != RecordKind::run_started) {
      dropped.push_back(record_json(record));
    }
  }
  auto version = core_.newest_version(started.name);
  if (!version) {
    reply(make_error_code(errc::unknown_workflow),
          fmt::format("reset: no code of workflow '{}' is registered (run '{}')", started.name, id));
    return;
  }
  std::uint32_t generation = started.generation + 1;
  auto now = core_.now();
  auto started_parts = read_started(started);
  if (!started_parts) {
    reply(make_error_code(errc::storage), fmt::format("reset: run '{}''s run_started record is damaged", id));
    return;
  }
  // Every run option stays as the run was started with (docs/engine.md,
  // "Reset"): its input, parent and deadline -- the same instant, so a
  // reset is no way around a deadline.
  std::optional<TimePoint> deadline;
  if (started.number != 0) deadline = from_ms(static_cast<std::int64_t>(started.number));
  JournalRecord record = started;  // keeps the deadline (number) and what a continued start carries
  record.run_id = id;
  record.generation = generation;
  record.detail = std::to_string(*version);
  record.time_ms = to_ms(now);
  record.at_ms = to_ms(now);  // the new generation's start, not the old one's
  record.position = kResetStartMarker;  // whole once its run_reset is read too (Shard::load)
  for (auto& copy : kept) {
    copy.run_id = id;
    copy.generation = generation;
  }
  {
    // The new generation must take every kept record before any is
    // journaled: one refused halfway would leave the reset's first records
    // in the log with no run_reset (dropped at the next open, with a
    // warning) and a generation in the making that no shard holds.
    Run trial(*this, id, generation, started.name, *version, started_parts->input, now, deadline);
    wal::Lsn trial_lsn = 0;
    auto taken = trial.load(record, ++trial_lsn);
    for (std::size_t i = 0; taken && i < kept.size(); ++i) taken = trial.load(kept[i], ++trial_lsn);
    if (!taken) {
      reply(make_error_code(errc::storage),
            fmt::format("reset: run '{}''s journal does not replay ({}); nothing was reset", id, taken.error().message()));
      return;
    }
  }
  auto run = std::make_shared<Run>(*this, id, generation, started.name, *version, std::move(started_parts->input), now,
                                   deadline);
  run->parent = started.parent;
  auto lsn = append_external(*run, record);
  if (!lsn) {
    reply(lsn.error(), lsn.error() == make_error_code(errc::busy)
                           ? fmt::format("{}: run '{}' was not reset, try again", busy_text(), id)
                           : lsn.error().message());
    return;
  }
  run->started_lsn = *lsn;
  (void)run->load(record, *lsn);
  for (const auto& copy : kept) {
    append(*run, copy, {});
    (void)run->load(copy, run->last_lsn);  // the trial above took each
  }
  if (reset_window_hook_for_tests) reset_window_hook_for_tests(*this, run->last_lsn);
  JournalRecord reset_record;
  reset_record.kind = RecordKind::run_reset;
  reset_record.run_id = id;
  reset_record.generation = generation;
  reset_record.detail = reason;
  reset_record.number = started.generation;
  reset_record.time_ms = to_ms(now);
  // Updates answered and awakeables completed past the cut keep their
  // answers for repeats (the new code does not take those updates again),
  // with the window the old generation carried.
  auto remembered = remembered_of_records(old, cut);
  remembered.bound(to_ms(now));
  // started_ms: when the generation it ends began (the console lists each
  // generation with its start; an older one's is in the dropped run_reset).
  const auto old_started_ms = static_cast<std::int64_t>(started.time_ms);
  reset_record.value = boost::json::object{{"position", cut}, {"started_ms", old_started_ms}, {"dropped", dropped}};
  if (!remembered.empty()) reset_record.value.as_object()["remembered"] = remembered.to_json();
  if (encode_record(reset_record).size() > wal::kRecordBytesMax / 2) {
    // Too much to journal again: the count says what went.
    reset_record.value =
        boost::json::object{{"position", cut}, {"started_ms", old_started_ms}, {"dropped_count", dropped.size()}};
    if (!remembered.empty()) reset_record.value.as_object()["remembered"] = remembered.to_json();
  }
  append(*run, reset_record, {});
  run->reset_lsn = run->last_lsn;
  (void)run->load(reset_record, run->last_lsn);  // takes what it remembers, as a replay will
  if (existing) {
    if (!existing->finished()) {
      // The old generation stops here; whoever waited for the id's result
      // waits for the new one.
      existing->superseded = true;
      existing->superseded_by_lsn = run->last_lsn;
      existing->stop();
      run->external_waiters = std::move(existing->external_waiters);
      run->result_waiters = std::move(existing->result_waiters);
      if (store_ != nullptr) superseded_.push_back(existing);
    }
    loaded_bytes_ -= existing->memory_bytes;
  }
  loaded_bytes_ += run->memory_bytes;
  runs_[id] = run;
  after_run_durable(*run, [reply](std::error_code error) {
    reply(error, error ? "the reset is not durable: " + error.message() : "");
  });
  arm_deadline(run);
  start_code(*run);
  core_.run_index().put(run->info());
}

}  // namespace fusee::engine
