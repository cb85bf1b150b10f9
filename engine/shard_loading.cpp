// Loading: records read back into runs at recovery and when a parked run
// wakes -- a reset's records held until its run_reset, what the checkpoint
// stored left out of the log -- and the end of loading.
#include "engine/shard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/journal_json.hpp"
#include "engine/shard_internal.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"

namespace fusee::engine {

using namespace shard_text;

Result<bool> Shard::store_holds(const JournalRecord& record) {
  if (auto found = runs_.find(record.run_id);
      found != runs_.end() && found->second->generation() >= record.generation) {
    return found->second->journal_place.has_value();
  }
  // A newer generation than the one loaded (a reset of a run the store
  // held live, whose first records a checkpoint left in the log): the
  // older one's place says nothing of it. What the store holds is per
  // generation too.
  const auto key = std::pair{record.run_id, record.generation};
  if (auto known = held_by_store_.find(key); known != held_by_store_.end()) return known->second;
  // (Result<bool> cannot take an error_code implicitly: bool would too.)
  auto parked = store_->parked(id_, record.run_id);
  if (!parked) return Result<bool>(boost::system::in_place_error, parked.error());
  bool held = false;
  if (*parked) {
    held = (*parked)->generation >= record.generation;
  } else {
    auto finished = store_->finished(record.run_id);
    if (!finished) return Result<bool>(boost::system::in_place_error, finished.error());
    held = *finished && (*finished)->generation >= record.generation;
  }
  held_by_store_[key] = held;
  return held;
}

Result<void> Shard::load(const JournalRecord& record, Lsn lsn, std::span<const std::byte> bytes,
                         std::optional<JournalPlace> stored, Lsn covered) {
  auto held = held_resets_.find(record.run_id);
  if (record.kind == RecordKind::run_started && record.position == kResetStartMarker) {
    // A reset's start: held until its run_reset (a later reset of the same
    // generation replaces one a crash cut short).
    auto& records = held_resets_[record.run_id];
    records.clear();
    records.push_back(HeldRecord{record, lsn, {bytes.begin(), bytes.end()}, stored, covered});
    return ok();
  }
  if (held != held_resets_.end() && record.generation == held->second.front().record.generation) {
    held->second.push_back(HeldRecord{record, lsn, {bytes.begin(), bytes.end()}, stored, covered});
    if (record.kind != RecordKind::run_reset) return ok();
    // Whole: the generation is loaded as if it had come in one piece.
    auto records = std::move(held->second);
    held_resets_.erase(held);
    for (const auto& item : records) FUSEE_TRY_VOID(load_record(item.record, item.lsn, item.bytes, item.stored, item.covered));
    return ok();
  }
  return load_record(record, lsn, bytes, stored, covered);
}

Result<void> Shard::load_record(const JournalRecord& record, Lsn lsn, std::span<const std::byte> bytes,
                                std::optional<JournalPlace> stored, Lsn covered) {
  if (!stored && store_ != nullptr && lsn <= covered) {
    // Below the checkpoint the log holds only what it left out: the records
    // of runs the store did not hold yet.
    if (FUSEE_TRY(store_holds(record))) return ok();
    // Such a run's records start with its start (all of them were left
    // out, from the first). A record of a run neither stored nor started is
    // a leftover of a generation the checkpoint erased, replaced by a later
    // one further on: replay starts early for another run's sake.
    if (record.kind != RecordKind::run_started && !runs_.contains(record.run_id)) return ok();
  }
  std::shared_ptr<Run> run;
  if (record.kind == RecordKind::run_started) {
    if (!stored && store_ != nullptr && record.generation > 1 && !runs_.contains(record.run_id)) {
      // A later generation of a run parked before it: the parked one is
      // loaded first, so that what the store holds of it goes (below).
      auto woken = unpark(record.run_id, /*start=*/false);
      if (!woken) return woken.error();
    }
    auto& slot = runs_[record.run_id];
    if (slot && slot->generation() >= record.generation) return make_error_code(wal::errc::corrupt);
    if (slot) {
      loaded_bytes_ -= slot->memory_bytes;
      // A later generation (reset, continue-as-new) from the log: what the
      // store holds of the older one goes at the next checkpoint, and the
      // older one's records replayed from the log are not stored.
      slot->superseded = true;
      slot->superseded_by_lsn = lsn;
      // (Both from the store, both generations are there under one key:
      // erasing it would take the newer's records too.)
      if (!stored) superseded_.push_back(slot);
    }
    std::optional<TimePoint> deadline;
    if (record.number != 0) deadline = from_ms(static_cast<std::int64_t>(record.number));
    // The workflow version the run started on (none recorded: version 1,
    // from before versions).
    std::uint32_t version = 1;
    if (!record.detail.empty()) {
      auto parsed = std::from_chars(record.detail.data(), record.detail.data() + record.detail.size(), version);
      if (parsed.ec != std::errc{} || version == 0) return make_error_code(wal::errc::corrupt);
    }
    auto started = read_started(record);
    if (!started) return started.error();
    slot = std::make_shared<Run>(*this, record.run_id, record.generation, record.name, version,
                                 std::move(started->input), from_ms(record.time_ms), deadline);
    slot->started_lsn = lsn;
    loaded_bytes_ += slot->memory_bytes;
    run = slot;
  } else {
    auto found = runs_.find(record.run_id);
    if (found == runs_.end() && !stored && store_ != nullptr) {
      // A record past the checkpoint of a run parked before it.
      auto woken = unpark(record.run_id, /*start=*/false);
      if (!woken) return woken.error();
      found = runs_.find(record.run_id);
    }
    if (found == runs_.end() || found->second->generation() < record.generation) {
      return make_error_code(wal::errc::corrupt);
    }
    if (found->second->generation() > record.generation) return ok();  // an older run of the id
    run = found->second;
  }
  note_loaded_bytes(*run, bytes.size());
  if (stored) {
    run->journal_place = *stored;
  } else if (store_ != nullptr) {
    // Replayed from the log past the checkpoint: the next checkpoint keeps it.
    since_checkpoint_.push_back(SinceCheckpoint{run, lsn, {bytes.begin(), bytes.end()}});
  }
  if (keep_history_) run->journal.add(bytes);
  return run->load(record, lsn);
}

Result<std::shared_ptr<Run>> Shard::unpark(const std::string& id, bool start) {
  auto parked = FUSEE_TRY(store_->parked(id_, id));
  if (!parked) return std::shared_ptr<Run>();
  FUSEE_TRY_VOID(store_->read_journal(
      JournalPlace::parked, id_, id, [&](const std::string&, std::uint64_t lsn, std::span<const std::byte> bytes) {
        auto record = decode_record(bytes);
        if (!record) return Result<void>(make_error_code(wal::errc::corrupt));
        return load(*record, lsn, bytes, JournalPlace::parked);
      }));
  auto found = runs_.find(id);
  if (found == runs_.end()) return make_error_code(wal::errc::corrupt);  // a parked entry without its journal
  auto run = found->second;
  run->parked_entry = *parked;
  if (keep_for_checkpoints_) revived_since_checkpoint_.push_back(run);
  ++stats_.runs_woken;
  if (start) {
    arm_deadline(run);
    start_code(*run);
  }
  return run;
}

std::shared_ptr<Run> Shard::find_run(const std::string& id, std::error_code& error) {
  if (auto found = runs_.find(id); found != runs_.end()) return found->second;
  if (store_ == nullptr) return nullptr;
  auto woken = unpark(id, /*start=*/true);
  if (!woken) {
    error = woken.error();
    return nullptr;
  }
  return *woken;
}

void Shard::finish_loading() {
  held_by_store_.clear();
  // Resets a crash cut short: the generation they began never was (their
  // caller had no answer); the older one goes on.
  for (const auto& [id, records] : std::exchange(held_resets_, {})) {
    core_.warn_operator(fmt::format("run '{}': a reset to generation {} was cut short by a crash before it was "
                                    "durable and is dropped; generation {} goes on (reset it again)",
                                    id, records.front().record.generation, records.front().record.generation - 1));
  }
  // A reset's records were loaded once whole, after later ones of other
  // runs: back in log order, which taking a checkpoint relies on.
  std::stable_sort(since_checkpoint_.begin(), since_checkpoint_.end(),
                   [](const SinceCheckpoint& a, const SinceCheckpoint& b) { return a.lsn < b.lsn; });
  durable_ = sink_.durable_lsn(id_);
  appended_ = durable_;
  for (auto& [id, run] : runs_) {
    arm_deadline(run);
    core_.run_index().put(run->info());
  }
  if (store_ != nullptr) {
    // Parked runs are running too, out of memory.
    auto parked = store_->all_parked(id_, [&](const ParkedRun& run) {
      if (runs_.contains(run.id)) return;
      core_.run_index().put(parked_info(run));
    });
    if (!parked) fail_storage(parked.error());
    // The earliest timer among parked runs (the rest wait in the store).
    auto first = store_->parked_by_wake(id_, INT64_MIN, [&](const ParkedRun& run) {
      if (runs_.contains(run.id)) return true;
      next_parked_wake_ = from_ms(*run.wake_ms);
      return false;
    });
    if (!first) fail_storage(first.error());
  }
}

}  // namespace fusee::engine
