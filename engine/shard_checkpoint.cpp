// Parking and checkpoints: which waiting runs leave memory, what a
// checkpoint stores (finished runs, journals of runs going on, parks) and
// what leaves memory once it is written.
#include "engine/shard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/parking_policy.hpp"
#include "engine/shard_internal.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"

namespace fusee::engine {

using namespace shard_text;

void Shard::wake_parked(TimePoint now) {
  if (store_ == nullptr || !next_parked_wake_ || *next_parked_wake_ > now) return;
  if (memory_budget_bytes_ > 0 && loaded_bytes_ >= memory_budget_bytes_) {
    // Full: the next checkpoint parks or unloads runs first.
    want_checkpoint();
    return;
  }
  auto now_ms = to_ms(now);
  std::vector<std::string> due;
  std::optional<TimePoint> next;
  auto scanned = store_->parked_by_wake(id_, wake_scan_from_ms_, [&](const ParkedRun& run) {
    if (runs_.contains(run.id)) return true;  // woken already; its entry goes at the next checkpoint
    if (*run.wake_ms > now_ms || due.size() >= kWakeBatchRuns) {
      next = from_ms(*run.wake_ms);
      return false;
    }
    wake_scan_from_ms_ = *run.wake_ms;
    due.push_back(run.id);
    return true;
  });
  if (!scanned) {
    fail_storage(scanned.error());
    return;
  }
  next_parked_wake_ = next;
  for (const auto& id : due) {
    if (auto woken = unpark(id, /*start=*/true); !woken) {
      fail_storage(woken.error());
      return;
    }
  }
}

void Shard::want_checkpoint() {
  if (checkpoint_wanted_ || !request_checkpoint_) return;
  checkpoint_wanted_ = true;
  request_checkpoint_();
}

void Shard::note_loaded_bytes(Run& run, std::size_t bytes) {
  run.memory_bytes += bytes;
  loaded_bytes_ += bytes;
  if (memory_budget_bytes_ > 0 && loaded_bytes_ > memory_budget_bytes_) want_checkpoint();
}

std::vector<std::shared_ptr<Run>> Shard::runs_to_park(Lsn lsn) {
  std::vector<std::shared_ptr<Run>> candidates;
  std::vector<ParkingPolicy::Candidate> seen;
  for (auto& [id, run] : runs_) {
    if (!run->parkable() || run->last_lsn > lsn) continue;  // only what waits, all of it durable
    candidates.push_back(run);
    seen.push_back({run->waiting_since(), run->memory_bytes});
  }
  std::vector<std::shared_ptr<Run>> parking;
  for (auto index : ParkingPolicy(park_after_, memory_budget_bytes_).choose(seen, core_.now(), loaded_bytes_)) {
    parking.push_back(candidates[index]);
  }
  return parking;
}

CheckpointWork Shard::take_checkpoint(bool defer) {
  CheckpointWork work;
  work.shard = id_;
  checkpoint_wanted_ = false;
  // Everything up to the durable position, and nothing past it: the store
  // must never hold a record the log could still lose.
  work.lsn = sink_.durable_at_once() ? appended_ : sink_.durable_lsn(id_);
  // A run finishes only once its terminal record is durable, so every run
  // finished so far finished at or before work.lsn.
  for (auto& run : finished_since_checkpoint_) {
    if (run->journal_place || run->parked_entry) {
      work.erased.push_back({run->id(), run->journal_place, run->parked_entry});
    }
    work.finished.push_back(run->summary());
    if (!run->streams.empty()) work.streams.emplace_back(run->id(), run->streams_json());
    if (keep_history_ && !run->journal.empty()) work.journals.emplace_back(run->id(), run->journal.stored());
    work.unload_finished.push_back(std::move(run));
  }
  finished_since_checkpoint_.clear();
  // An older generation leaves the store only once the start of the one
  // that replaced it is durable: a crash before then keeps the older one
  // (and its records since are stored meanwhile, below). Both places go:
  // a revived run's records may be in either.
  std::erase_if(superseded_, [&](const std::shared_ptr<Run>& old) {
    if (old->superseded_by_lsn > work.lsn) return false;
    if (old->journal_place || old->parked_entry) {
      work.erased.push_back({old->id(), JournalPlace::live, old->parked_entry});
      work.erased.push_back({old->id(), JournalPlace::parked, std::nullopt});
    }
    return true;
  });
  // Waiting runs whose records are all durable leave memory (parking).
  std::unordered_set<const Run*> parking;
  if (store_ != nullptr) {
    for (auto& run : runs_to_park(work.lsn)) {
      parking.insert(run.get());
      work.parks.push_back({{run->id(), run->journal_place, run->parked_entry}, run->parked_summary()});
      work.unload_parked.push_back(std::move(run));
    }
  }
  for (auto& run : revived_since_checkpoint_) {
    if (run->finished() || parking.contains(run.get())) continue;
    auto found = runs_.find(run->id());
    if (found == runs_.end() || found->second != run) continue;
    work.revived.push_back({run->id(), run->journal_place, run->parked_entry});
    run->journal_place = JournalPlace::live;
    run->parked_entry.reset();
  }
  revived_since_checkpoint_.clear();
  // A run the store does not hold yet stays out of it for one checkpoint:
  // most runs finish by the next one, and then only their summary is
  // written. The log keeps its records meanwhile (replay_from).
  ++checkpoints_taken_;
  std::deque<SinceCheckpoint> deferred;
  while (!since_checkpoint_.empty() && since_checkpoint_.front().lsn <= work.lsn) {
    auto& entry = since_checkpoint_.front();
    auto& run = *entry.run;
    // A generation replaced by one whose start is durable is erased by now
    // (superseded_, above); one replaced by a start not yet durable is
    // what a crash would keep, so its records are stored as before.
    const bool replaced = run.superseded && run.superseded_by_lsn <= work.lsn;
    if (!run.finished() && !replaced) {
      bool parks = parking.contains(&run);
      // A reset whose run_reset is not durable yet is not whole: its first
      // records stay in the log. Stored now, they would sit beside the
      // generation it replaces, which leaves the store by its id once the
      // run_reset is durable -- taking them along (and a crash before then
      // drops the reset whole, so the store must not hold it in part).
      const bool reset_in_part = run.reset_lsn > work.lsn;
      bool leave_out = reset_in_part || (defer && !parks && !run.journal_place &&
                                         (run.deferred_at == 0 || run.deferred_at == checkpoints_taken_));
      if (leave_out) {
        run.deferred_at = checkpoints_taken_;
        deferred.push_back(std::move(entry));
      } else {
        auto place = parks ? JournalPlace::parked : JournalPlace::live;
        run.journal_place = place;
        work.journal.push_back({run.id(), entry.lsn, std::move(entry.bytes), place});
      }
    }
    since_checkpoint_.pop_front();
  }
  work.replay_from = deferred.empty() ? work.lsn + 1 : deferred.front().lsn;
  work.keep_from_sequence = sink_.keep_from_sequence(id_, work.replay_from - 1);
  while (!deferred.empty()) {
    since_checkpoint_.push_front(std::move(deferred.back()));
    deferred.pop_back();
  }
  for (const auto& park : work.parks) {
    auto& run = *runs_.at(park.parked.id);
    run.journal_place = JournalPlace::parked;
    run.parked_entry = park.parked;
  }
  return work;
}

void Shard::checkpoints_stopped() {
  keep_for_checkpoints_ = false;
  since_checkpoint_.clear();
  finished_since_checkpoint_.clear();
  revived_since_checkpoint_.clear();
  memory_budget_bytes_ = 0;  // nothing parks any more
}

void Shard::checkpoint_written(const CheckpointWork& work) {
  std::unordered_set<const void*> gone;
  auto unload = [&](const std::shared_ptr<Run>& run) {
    gone.insert(run.get());
    loaded_bytes_ -= run->memory_bytes;
    runs_.erase(run->id());
  };
  auto loaded = [&](const std::shared_ptr<Run>& run) {
    auto found = runs_.find(run->id());
    return found != runs_.end() && found->second == run;
  };
  for (const auto& run : work.unload_finished) {
    if (loaded(run)) unload(run);
  }
  for (const auto& run : work.unload_parked) {
    if (!loaded(run)) continue;
    if (!run->parkable() || run->last_lsn > work.lsn) {
      // It woke while the checkpoint was written: it stays. If it goes on,
      // the next checkpoint brings its records back among the live ones;
      // if it finished, the next one stores its summary and drops the rest.
      if (!run->finished()) revived_since_checkpoint_.push_back(run);
      continue;
    }
    if (auto wake = run->wake_at()) {
      if (!next_parked_wake_ || *wake < *next_parked_wake_) next_parked_wake_ = *wake;
      wake_scan_from_ms_ = std::min(wake_scan_from_ms_, to_ms(*wake));
    }
    ++stats_.runs_parked;
    run->stop();  // its code's frames go; the store holds what replay needs
    unload(run);
  }
  timers_.remove_owned(gone);
}

}  // namespace fusee::engine
