#include "engine/shard.hpp"

#include "engine/awakeable_token.hpp"
#include "engine/journal_json.hpp"
#include "wal/limits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "base/assert.hpp"
#include "wal/errc.hpp"

namespace fusee::engine {
namespace {

JournalRecord terminal_record(const Run& run, const Outcome& outcome, TimePoint now) {
  JournalRecord record;
  record.run_id = run.id();
  record.generation = run.generation();
  record.time_ms = to_ms(now);
  switch (outcome.status) {
    case RunStatus::completed:
      record.kind = RecordKind::run_completed;
      record.value = outcome.value;
      break;
    case RunStatus::cancelled:
      record.kind = RecordKind::run_cancelled;
      record.value = outcome.message;
      break;
    default:
      record.kind = RecordKind::run_failed;
      record.detail = errc_name(outcome.code);
      record.value = outcome.message;
      break;
  }
  return record;
}

Outcome outcome_of(const FinishedRun& run) {
  if (run.status == RunStatus::completed) return Outcome{run.status, run.result, errc::failed, {}};
  return Outcome{run.status, {}, errc_from_name(run.error_code), run.message};
}

std::string storage_message(const std::string& id, std::error_code error) {
  return fmt::format("run '{}': cannot read the run store: {}", id, error.message());
}

}  // namespace

namespace {
thread_local const Shard* t_shard = nullptr;  // the shard whose thread this is
}  // namespace

bool Shard::on_shard_thread() noexcept { return t_shard != nullptr; }
bool Shard::on_own_thread() const noexcept { return t_shard == this; }

Shard::Shard(EngineCore& core, ShardId id, JournalSink& sink, std::size_t queue_max)
    : core_(core), id_(id), sink_(sink), queue_max_(queue_max) {}

Shard::~Shard() { stop(); }

bool Shard::post(std::function<void()> fn, bool external) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  if (external) {
    if (external_queued_ >= queue_max_) return false;
    external_queued_++;
  }
  inbox_.push_back(Message{std::move(fn), external});
  if (sleeping_) cv_.notify_one();
  return true;
}

void Shard::notify() {
  std::lock_guard lock(mu_);
  woken_ = true;
  if (sleeping_) cv_.notify_one();
}

void Shard::start() {
  thread_ = std::thread([this] { loop(); });
}

void Shard::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void Shard::loop() {
  t_shard = this;
  std::vector<Message> batch;
  while (true) {
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return !inbox_.empty() || woken_ || stopping_; };
      if (!ready() && !durable_waits_.empty()) {
        // Nothing to do but wait for the disk: write our records ourselves
        // if the log says that is the faster way.
        lock.unlock();
        bool wrote = sink_.write_inline();
        lock.lock();
        if (wrote) woken_ = true;
      }
      if (!ready()) {
        sleeping_ = true;
        auto due = timers_.next_due();
        if (next_parked_wake_ && (!due || *next_parked_wake_ < *due)) due = next_parked_wake_;
        if (!due) {
          cv_.wait(lock, ready);
        } else {
          auto wait = *due - core_.now();
          if (wait > std::chrono::system_clock::duration::zero()) {
            // A manual clock wakes us when it moves; the system clock by the
            // time waited. Either way the timers are looked at again.
            cv_.wait_for(lock, std::min<std::chrono::system_clock::duration>(wait, std::chrono::hours(1)), ready);
          }
        }
        sleeping_ = false;
      }
      woken_ = false;
      batch.swap(inbox_);
      for (const auto& message : batch) {
        if (message.external) external_queued_--;
      }
      if (stopping_ && batch.empty()) return;
    }
    for (auto& message : batch) message.fn();
    batch.clear();
    drain_durable();
    retry_waiting_appends();
    fire_timers();
    drain_durable();
  }
}

void Shard::drain_durable() {
  if (auto poison = sink_.poison()) {
    fail_storage(poison);
    return;
  }
  durable_ = sink_.durable_at_once() ? appended_ : sink_.durable_lsn(id_);
  while (!durable_waits_.empty() && durable_waits_.top().lsn <= durable_) {
    auto callback = std::move(const_cast<DurableWait&>(durable_waits_.top()).callback);
    durable_waits_.pop();
    callback({});
  }
}

void Shard::fire_timers() {
  auto now = core_.now();
  wake_parked(now);
  while (auto fire = timers_.pop_due(now)) fire();
}

void Shard::assigned(Run& run, Lsn lsn, std::span<const std::byte> bytes, std::function<void()> after_durable) {
  run.last_lsn = lsn;
  appended_ = lsn;
  if (store_ != nullptr && keep_for_checkpoints_) {
    since_checkpoint_.push_back(SinceCheckpoint{run.shared_from_this(), lsn, {bytes.begin(), bytes.end()}});
    note_loaded_bytes(run, bytes.size());
  }
  if (sink_.durable_at_once()) durable_ = lsn;
  if (after_durable) {
    this->after_durable(lsn, [after = std::move(after_durable)](std::error_code error) {
      if (!error) after();
    });
  }
}

std::string Shard::oversize_message(const JournalRecord& record, std::size_t bytes) const {
  return fmt::format("run '{}': its {} record ({}{}) would be {} bytes, over the {} MiB a journal record may hold",
                     record.run_id, record_kind_name(record.kind), record.name.empty() ? "" : "'",
                     record.name.empty() ? "" : record.name + "'", bytes, wal::kRecordBytesMax >> 20);
}

void Shard::count(RecordKind kind) {
  switch (kind) {
    case RecordKind::run_started:
      stats_.runs_started.fetch_add(1, std::memory_order_relaxed);
      break;
    case RecordKind::step_completed:
      stats_.steps_completed.fetch_add(1, std::memory_order_relaxed);
      break;
    case RecordKind::run_failed:
      stats_.runs_failed.fetch_add(1, std::memory_order_relaxed);
      [[fallthrough]];
    case RecordKind::run_completed:
    case RecordKind::run_cancelled:
      stats_.runs_finished.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      break;
  }
}

// A record copied from an earlier generation (reset) keeps its time.
void Shard::stamp(JournalRecord& record) const {
  if (record.at_ms == 0) record.at_ms = to_ms(core_.now());
}

void Shard::append(Run& run, JournalRecord record, std::function<void()> after_durable) {
  if (storage_error_) return;
  // After a refused record nothing more of the run is journaled but its
  // failure (below).
  if (!run.refused_record.empty()) return;
  // Not a reset's copy of an earlier record (those keep their time); a
  // run_started is never a copy.
  const bool fresh = record.at_ms == 0 || record.kind == RecordKind::run_started;
  stamp(record);
  scratch_.clear();
  encode_record(record, scratch_);
  if (scratch_.size() > wal::kRecordBytesMax) {
    // A step result, stream chunk or run result too large to journal (the
    // log would refuse it and stop the shard): the run fails, recorded so a
    // replay does not try again, and the shard and its other runs go on.
    // Not here: this may be the run's own coroutine, whose frame stop()
    // destroys; the shard does it once the coroutine has suspended.
    run.refused_record = oversize_message(record, scratch_.size());
    (void)post(
        [this, self = run.shared_from_this()] {
          if (self->finished()) return;
          auto message = std::move(self->refused_record);
          self->refused_record.clear();
          self->stop();
          end_run(*self, Outcome{RunStatus::failed, {}, errc::invalid_argument, std::move(message)});
          self->refused_record = "(failed)";  // nothing after the failure either
        },
        false);
    return;
  }
  if (fresh) count(record.kind);
  if (keep_history_) run.history.push_back(std::move(record));
  if (waiting_appends_.empty()) {
    auto lsn = sink_.append(id_, scratch_);
    if (lsn) {
      assigned(run, *lsn, scratch_, std::move(after_durable));
      return;
    }
    if (lsn.error() != make_error_code(wal::errc::queue_full)) {
      fail_storage(lsn.error());
      return;
    }
  }
  // The log is full: hold the record, in order behind the others.
  run.appends_waiting++;
  waiting_appends_.push_back(WaitingAppend{run.shared_from_this(), scratch_, std::move(after_durable)});
}

Result<Lsn> Shard::append_external(Run& run, JournalRecord record) {
  if (storage_error_) return storage_error_;
  busy_reason_.clear();
  if (!waiting_appends_.empty()) return make_error_code(errc::busy);
  if (busy_reason_ = core_.refusing_new_requests(); !busy_reason_.empty()) return make_error_code(errc::busy);
  const bool fresh = record.at_ms == 0 || record.kind == RecordKind::run_started;
  stamp(record);
  scratch_.clear();
  encode_record(record, scratch_);
  if (scratch_.size() > wal::kRecordBytesMax) {
    // Refused before anything is recorded; the caller says why.
    oversize_message_ = oversize_message(record, scratch_.size());
    return make_error_code(errc::invalid_argument);
  }
  auto lsn = sink_.append(id_, scratch_);
  if (!lsn) {
    if (lsn.error() == make_error_code(wal::errc::queue_full)) return make_error_code(errc::busy);
    fail_storage(lsn.error());
    return lsn.error();
  }
  if (fresh) count(record.kind);
  if (keep_history_) run.history.push_back(std::move(record));
  assigned(run, *lsn, scratch_, {});
  return *lsn;
}

void Shard::retry_waiting_appends() {
  while (!waiting_appends_.empty() && !storage_error_) {
    auto& front = waiting_appends_.front();
    auto lsn = sink_.append(id_, front.bytes);
    if (!lsn) {
      if (lsn.error() == make_error_code(wal::errc::queue_full)) return;
      fail_storage(lsn.error());
      return;
    }
    auto entry = std::move(front);
    waiting_appends_.pop_front();
    auto& run = *entry.run;
    run.appends_waiting--;
    assigned(run, *lsn, entry.bytes, std::move(entry.after_durable));
    if (run.appends_waiting == 0 && !run.gated.empty()) {
      auto gated = std::move(run.gated);
      run.gated.clear();
      for (auto& callback : gated) after_run_durable(run, std::move(callback));
    }
  }
}

void Shard::after_durable(Lsn lsn, DurableCallback callback) {
  if (storage_error_) {
    callback(storage_error_);
    return;
  }
  if (lsn <= durable_) {
    callback({});
    return;
  }
  durable_waits_.push(DurableWait{lsn, durable_order_++, std::move(callback)});
}

void Shard::after_run_durable(Run& run, DurableCallback callback) {
  if (run.appends_waiting > 0) {
    run.gated.push_back(std::move(callback));
    return;
  }
  after_durable(run.last_lsn, std::move(callback));
}

void Shard::fail_storage(std::error_code error) {
  if (!storage_error_) {
    storage_error_ = error;
    core_.storage_failed(id_, error);
  }
  waiting_appends_.clear();
  fail_waiters(storage_error_);
}

void Shard::fail_waiters(std::error_code error) {
  while (!durable_waits_.empty()) {
    auto callback = std::move(const_cast<DurableWait&>(durable_waits_.top()).callback);
    durable_waits_.pop();
    callback(error);
  }
  auto code = error == make_error_code(errc::shut_down) ? errc::shut_down : errc::storage;
  for (auto& [id, run] : runs_) {
    if (run->finished()) continue;
    auto waiters = std::move(run->external_waiters);
    run->external_waiters.clear();
    Outcome outcome{RunStatus::failed, {}, code,
                    code == errc::shut_down ? fmt::format("the engine shut down before run '{}' finished", id)
                                            : fmt::format("run '{}' cannot go on: the log failed: {}", id,
                                                          error.message())};
    for (auto& waiter : waiters) waiter(outcome);
    run->fail_callers(outcome);
    for (auto& [name, stream] : run->streams) {
      for (auto& reader : stream.readers) reader.feed->end(error);
      stream.readers.clear();
    }
  }
}

Result<bool> Shard::store_holds(const JournalRecord& record) {
  if (auto found = runs_.find(record.run_id); found != runs_.end()) {
    return found->second->journal_place.has_value();
  }
  if (auto known = held_by_store_.find(record.run_id); known != held_by_store_.end()) return known->second;
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
  held_by_store_[record.run_id] = held;
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
  if (keep_history_) run->history.push_back(record);
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
  for (auto& [id, run] : runs_) {
    if (run->parkable() && run->last_lsn <= lsn) candidates.push_back(run);
  }
  auto now = core_.now();
  std::vector<std::shared_ptr<Run>> parking;
  std::vector<std::shared_ptr<Run>> rest;
  std::size_t freed = 0;
  for (auto& run : candidates) {
    if (std::chrono::duration_cast<std::chrono::milliseconds>(now - run->waiting_since()) >= park_after_) {
      freed += run->memory_bytes;
      parking.push_back(std::move(run));
    } else {
      rest.push_back(std::move(run));
    }
  }
  if (memory_budget_bytes_ > 0 && loaded_bytes_ - freed > memory_budget_bytes_) {
    // Over the budget: the longest-waiting runs go early, down to 3/4 of it.
    std::sort(rest.begin(), rest.end(),
              [](const auto& a, const auto& b) { return a->waiting_since() < b->waiting_since(); });
    for (auto& run : rest) {
      if (loaded_bytes_ - freed <= memory_budget_bytes_ / 4 * 3) break;
      freed += run->memory_bytes;
      parking.push_back(std::move(run));
    }
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
    if (keep_history_ && !run->history.empty()) work.journals.emplace_back(run->id(), journal_json(run->history));
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
      bool leave_out = defer && !parks && !run.journal_place &&
                       (run.deferred_at == 0 || run.deferred_at == checkpoints_taken_);
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

Outcome Shard::finished_outcome(const std::string& id) {
  auto stored = stored_run(id);
  if (!stored) return Outcome{RunStatus::failed, {}, errc::storage, storage_message(id, stored.error())};
  if (!*stored) return Outcome{RunStatus::failed, {}, errc::not_found, fmt::format("no run '{}'", id)};
  return outcome_of(**stored);
}

Result<std::optional<FinishedRun>> Shard::stored_run(const std::string& id) {
  if (store_ == nullptr) return std::optional<FinishedRun>();
  return store_->finished(id);
}

void Shard::index_run(const Run& run) {
  auto found = runs_.find(run.id());
  if (found != runs_.end() && found->second.get() == &run) core_.run_index().put(run.info());
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

void Shard::arm_deadline(const std::shared_ptr<Run>& run) {
  if (!run->deadline() || run->ending()) return;
  add_timer(*run->deadline(), run.get(), [run] { run->on_deadline(); });
}

void Shard::start_code(Run& run) {
  if (run.code_started() || run.ending()) return;
  if (auto fn = core_.workflow(run.workflow(), run.version())) {
    bool was_waiting = run.info().status == RunStatus::stuck;
    run.waiting_for_code({});
    run.begin(*fn);
    if (was_waiting) index_run(run);  // the code came: no longer stuck
    return;
  }
  // Code of another version is there, not the run's: it waits, visibly.
  if (auto newest = core_.newest_version(run.workflow())) {
    auto why = fmt::format("run '{}' started on version {} of workflow '{}', whose code is not registered (the "
                           "newest registered is version {}): it waits for that code",
                           run.id(), run.version(), run.workflow(), *newest);
    if (run.waiting_for_code(why)) core_.warn_operator(why);
    index_run(run);
  }
}

void Shard::end_run(Run& run, Outcome outcome, DurableCallback on_durable) {
  run.end_recorded = true;
  auto why = fmt::format("its parent run '{}' ended ({})", run.id(), run_status_name(outcome.status));
  close_children_then(run, why,
                      [this, self = run.shared_from_this(), outcome = std::move(outcome),
                       on_durable = std::move(on_durable)](std::error_code error) mutable {
                        if (error) {
                          if (on_durable) on_durable(error);
                          return;
                        }
                        append_terminal(*self, std::move(outcome), std::move(on_durable));
                      });
}

void Shard::close_children_then(Run& run, const std::string& why, std::function<void(std::error_code)> then) {
  auto children = run.take_open_children();
  if (children.empty()) {
    then({});
    return;
  }
  // The children's cancels are durable before the parent's end is: a crash
  // in between replays the parent, which ends again and sends them again
  // (a parent_close cancel is idempotent, and so is terminating an ended
  // run). The other order could lose them for good.
  struct Closing {
    std::size_t left;
    std::function<void(std::error_code)> then;
  };
  auto closing = std::make_shared<Closing>(Closing{children.size(), std::move(then)});
  // Sent once the run's records are durable, after its children's starts
  // (which wait for the same): the child's shard sees the start first.
  after_run_durable(run, [this, self = run.shared_from_this(), children = std::move(children), closing,
                          why](std::error_code error) {
    if (error) {
      closing->then(error);
      return;
    }
    for (const auto& [position, child] : children) {
      auto mode = close_mode(child.policy);
      core_.close_child(child.id, why, mode, [this, self, closing] {
        core_.post_to_shard(id_, [closing] {
          if (--closing->left == 0) closing->then({});
        });
      });
    }
  });
}

void Shard::continue_run(Run& run) {
  run.end_recorded = true;
  run.continuing = true;
  // Not within the call: this is the run's own coroutine returning, whose
  // frame the old generation's stop() destroys.
  (void)post(
      [this, self = run.shared_from_this()] {
        auto why = fmt::format("its parent run '{}' continued as new", self->id());
        close_children_then(*self, why, [this, self](std::error_code error) {
          if (error) {
            // The shard's storage failed: nothing more is journaled.
            self->continuing = false;
            release_held(self->id());
            return;
          }
          // Every record of the old generation durable first: its answered
          // updates have told their callers, and what the new generation
          // carries is all the old one will ever hold.
          after_run_durable(*self, [this, self](std::error_code error) {
            if (!error) {
              start_continued(self);
            } else {
              self->continuing = false;
              release_held(self->id());
            }
          });
        });
      },
      false);
}

bool Shard::hold_if_continuing(const std::string& id, std::function<void()> retry) {
  auto found = runs_.find(id);
  if (found == runs_.end() || !found->second->continuing) return false;
  held_for_continue_[id].push_back(std::move(retry));
  return true;
}

void Shard::release_held(const std::string& id) {
  auto held = held_for_continue_.extract(id);
  if (held.empty()) return;
  for (auto& retry : held.mapped()) retry();
}

void Shard::start_continued(const std::shared_ptr<Run>& old) {
  // Requests that came between the generations go to the new one (or, if
  // it never starts, to whatever the id holds then).
  struct Release {
    Shard& shard;
    std::string id;
    ~Release() { shard.release_held(id); }
  } release{*this, old->id()};
  old->continuing = false;
  auto found = runs_.find(old->id());
  if (found == runs_.end() || found->second != old || old->superseded) return;  // reset meanwhile
  auto carried = old->carried_messages();
  auto version = core_.newest_version(old->workflow()).value_or(old->version());
  auto now = core_.now();
  // The ids the run was sent, a window of them, go with it: a client that
  // sends again what it has no acknowledgement of is answered as before.
  if (auto remembered = old->remembered(to_ms(now)); !remembered.empty()) carried.remembered = remembered.to_json();
  auto run = std::make_shared<Run>(*this, old->id(), old->generation() + 1, old->workflow(), version, carried.input,
                                   now, old->deadline());
  JournalRecord record;
  record.kind = RecordKind::run_started;
  record.run_id = old->id();
  record.generation = run->generation();
  record.name = old->workflow();
  record.detail = std::to_string(version);
  record.parent = old->parent;
  record.flag = true;
  record.value = started_value(carried, true);
  record.time_ms = to_ms(now);
  record.number = old->deadline() ? static_cast<std::uint64_t>(to_ms(*old->deadline())) : 0;
  if (auto bytes = encode_record(record).size(); bytes > wal::kRecordBytesMax) {
    // The old generation ends failed instead; nothing of the new one exists.
    append_terminal(*old,
                    Outcome{RunStatus::failed, {}, errc::invalid_argument,
                            fmt::format("continue_as_new: {} (the input with {} signal(s) and {} update(s) not taken)",
                                        oversize_message(record, bytes), carried.signals.size(),
                                        carried.updates.size())},
                    {});
    return;
  }
  append(*run, record, {});
  run->started_lsn = run->last_lsn;
  (void)run->load(record, run->last_lsn);  // takes the carried signals and updates
  for (auto& [update_id, state] : old->take_carried_updates()) run->updates[update_id].waiters = std::move(state.waiters);
  // The old generation stops here: an update it took and did not answer
  // fails for its caller; its streams end; whoever waited for the id's
  // result waits for the new generation's.
  old->superseded = true;
  old->superseded_by_lsn = run->started_lsn;
  old->fail_callers(Outcome{});
  old->stop();
  for (auto& [name, stream] : old->streams) {
    for (auto& reader : stream.readers) reader.feed->end();
    stream.readers.clear();
  }
  run->external_waiters = std::move(old->external_waiters);
  run->result_waiters = std::move(old->result_waiters);
  if (store_ != nullptr) superseded_.push_back(old);
  loaded_bytes_ -= old->memory_bytes;
  loaded_bytes_ += run->memory_bytes;
  found->second = run;
  arm_deadline(run);
  start_code(*run);
  core_.run_index().put(run->info());
}

void Shard::append_terminal(Run& run, Outcome outcome, DurableCallback on_durable) {
  auto now = core_.now();
  auto record = terminal_record(run, outcome, now);
  append(run, record, [self = run.shared_from_this(), outcome = std::move(outcome), now]() mutable {
    self->finish(std::move(outcome), now);
  });
  if (on_durable) after_run_durable(run, std::move(on_durable));
}

void Shard::handle_start(StartRequest request, bool internal,
                         std::function<void(std::error_code, std::string, StartOutcome)> reply) {
  std::uint32_t generation = 1;
  // Attaching to the id's run: the outcome, or nothing when the start gave
  // another workflow or input and the caller asked to refuse that (then it
  // was answered here).
  auto attach_to = [&](const std::string& workflow, const boost::json::value& input) -> std::optional<StartOutcome> {
    if (workflow == request.workflow && input == request.input) return StartOutcome::attached;
    if (request.options.if_input_differs == IfInputDiffers::reject) {
      reply(make_error_code(errc::conflict),
            workflow != request.workflow
                ? fmt::format("run '{}' is a run of workflow '{}', not '{}'", request.id, workflow, request.workflow)
                : fmt::format("run '{}' of workflow '{}' has another input: {}", request.id, workflow,
                              boost::json::serialize(input)),
            StartOutcome::attached_other_input);
      return std::nullopt;
    }
    return StartOutcome::attached_other_input;
  };
  std::error_code store_error;
  auto existing = find_run(request.id, store_error);
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(request.id, store_error), StartOutcome::started);
    return;
  }
  if (existing) {
    if (!existing->finished()) {
      if (request.options.if_running == IfRunning::reject) {
        reply(make_error_code(errc::already_exists),
              fmt::format("run '{}' of workflow '{}' is already running", request.id, existing->workflow()),
              StartOutcome::attached);
        return;
      }
      auto outcome = attach_to(existing->workflow(), existing->input());
      if (!outcome) return;
      after_run_durable(*existing, [reply, outcome = *outcome](std::error_code error) {
        reply(error, error ? "the run's start is not durable: " + error.message() : "", outcome);
      });
      return;
    }
    if (request.options.if_finished == IfFinished::reject) {
      reply(make_error_code(errc::already_exists),
            fmt::format("run '{}' of workflow '{}' already finished ({})", request.id, existing->workflow(),
                        run_status_name(existing->outcome().status)),
            StartOutcome::attached);
      return;
    }
    if (request.options.if_finished == IfFinished::attach) {
      if (auto outcome = attach_to(existing->workflow(), existing->input())) reply({}, {}, *outcome);
      return;
    }
    generation = existing->generation() + 1;
  } else {
    auto stored = stored_run(request.id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(request.id, stored.error()), StartOutcome::started);
      return;
    }
    if (*stored) {
      const auto& finished = **stored;
      if (request.options.if_finished == IfFinished::reject) {
        reply(make_error_code(errc::already_exists),
              fmt::format("run '{}' of workflow '{}' already finished ({})", request.id, finished.workflow,
                          run_status_name(finished.status)),
              StartOutcome::attached);
        return;
      }
      if (request.options.if_finished == IfFinished::attach) {
        if (auto outcome = attach_to(finished.workflow, finished.input)) reply({}, {}, *outcome);
        return;
      }
      generation = finished.generation + 1;
    }
  }
  auto version = core_.newest_version(request.workflow);
  if (!version) {
    reply(make_error_code(errc::unknown_workflow),
          fmt::format("no workflow named '{}' is registered (run '{}')", request.workflow, request.id),
          StartOutcome::started);
    return;
  }
  auto now = core_.now();
  std::optional<TimePoint> deadline;
  if (request.options.deadline) deadline = now + *request.options.deadline;
  auto run = std::make_shared<Run>(*this, request.id, generation, request.workflow, *version, request.input, now,
                                  deadline);
  JournalRecord record;
  record.kind = RecordKind::run_started;
  record.run_id = request.id;
  record.generation = generation;
  record.name = request.workflow;
  record.detail = std::to_string(*version);
  record.parent = request.parent;
  record.value = std::move(request.input);
  record.time_ms = to_ms(now);
  record.number = deadline ? static_cast<std::uint64_t>(to_ms(*deadline)) : 0;
  if (internal) {
    append(*run, record, {});
  } else {
    auto lsn = append_external(*run, record);
    if (!lsn) {
      reply(lsn.error(),
            lsn.error() == make_error_code(errc::busy)
                ? fmt::format("{}: run '{}' was not started, try again", busy_text(), request.id)
                : lsn.error() == make_error_code(errc::invalid_argument)
                ? fmt::format("run '{}' was not started: {}", request.id, oversize_message_)
                : fmt::format("run '{}' was not started: {}", request.id, lsn.error().message()),
            StartOutcome::started);
      return;
    }
  }
  run->started_lsn = run->last_lsn;
  run->parent = request.parent;
  if (existing) loaded_bytes_ -= existing->memory_bytes;
  loaded_bytes_ += run->memory_bytes;
  runs_[request.id] = run;
  after_run_durable(*run, [reply](std::error_code error) {
    reply(error, error ? "the run's start is not durable: " + error.message() : "", StartOutcome::started);
  });
  arm_deadline(run);
  start_code(*run);
  core_.run_index().put(run->info());
}

std::string Shard::busy_text() const {
  if (busy_reason_.empty()) return fmt::format("shard {} is busy", id_);
  return fmt::format("shard {} is busy ({})", id_, busy_reason_);
}

std::string Shard::refused_append_message(std::error_code error, const std::string& what,
                                         const std::string& run_id) const {
  if (error == make_error_code(errc::busy)) {
    return fmt::format("{}: {} to run '{}' was not recorded", busy_text(), what, run_id);
  }
  if (error == make_error_code(errc::invalid_argument)) {
    return fmt::format("{} was not recorded: {}", what, oversize_message_);
  }
  return error.message();
}

void Shard::handle_signal(const std::string& id, const std::string& signal, boost::json::value value,
                          const std::string& signal_id, Reply reply) {
  if (hold_if_continuing(id, [=, this] { handle_signal(id, signal, value, signal_id, reply); })) return;
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  auto found = runs_.find(id);
  if (found != runs_.end() && !signal_id.empty()) {
    // A repeat of a delivered signal is acknowledged even after the run ended.
    auto& seen_ids = found->second->signal_ids;
    if (auto seen = seen_ids.find(signal_id); seen != seen_ids.end()) {
      after_durable(seen->second.lsn, [reply](std::error_code error) { reply(error, error ? error.message() : ""); });
      return;
    }
  }
  bool finished = found != runs_.end();
  if (found == runs_.end()) {
    auto stored = stored_run(id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(id, stored.error()));
      return;
    }
    if (*stored) {
      const auto& ids = (*stored)->signal_ids;
      if (!signal_id.empty() && std::binary_search(ids.begin(), ids.end(), signal_id)) {
        reply({}, {});  // a repeat of a delivered signal: the store holds it durably
        return;
      }
      finished = true;
    }
  }
  // A stuck run takes signals (Temporal's rule too): its code waits for a
  // fix, and a signal refused now would be missing when it goes on. Only
  // a run that ended, or whose end is being recorded, refuses them.
  bool stuck = found != runs_.end() && !found->second->stuck_error().empty() && !found->second->end_recorded;
  if (found == runs_.end() || (found->second->ending() && !stuck)) {
    const char* why = found != runs_.end() && !found->second->finished() ? " (it is ending)"
                      : finished                                          ? " (it has finished)"
                                                                          : "";
    reply(make_error_code(errc::not_found), fmt::format("signal '{}': no run '{}' is running{}", signal, id, why));
    return;
  }
  auto run = found->second;
  if (auto why = core_.check_signal(run->workflow(), signal, value); !why.empty()) {
    reply(make_error_code(errc::invalid_argument), why);
    return;
  }
  JournalRecord record;
  record.kind = RecordKind::signal_received;
  record.run_id = id;
  record.generation = run->generation();
  record.name = signal;
  record.detail = signal_id;
  record.value = value;
  auto lsn = append_external(*run, record);
  if (!lsn) {
    reply(lsn.error(), refused_append_message(lsn.error(), fmt::format("signal '{}'", signal), id));
    return;
  }
  if (!signal_id.empty()) run->signal_ids[signal_id] = Run::SignalSeen{*lsn, to_ms(core_.now())};
  after_durable(*lsn, [reply](std::error_code error) { reply(error, error ? error.message() : ""); });
  run->deliver_signal(signal, signal_id, std::move(value));
}

void Shard::handle_cancel(const std::string& id, const std::string& reason, CancelMode mode,
                          const std::string& request_id, Reply reply) {
  if (hold_if_continuing(id, [=, this] { handle_cancel(id, reason, mode, request_id, reply); })) return;
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  auto found = runs_.find(id);
  if (found == runs_.end()) {
    auto stored = stored_run(id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(id, stored.error()));
    } else if (*stored) {
      reply({}, {});  // it finished already, as cancelling an ending run does
    } else {
      reply(make_error_code(errc::not_found), fmt::format("cancel: no run '{}'", id));
    }
    return;
  }
  auto run = found->second;
  auto acknowledge = [reply](std::error_code error) { reply(error, error ? error.message() : ""); };
  bool repeat = !request_id.empty() && run->cancel_ids.contains(request_id);
  // A stuck run's code does not run: any cancel ends it at once, durably.
  bool stuck = !run->stuck_error().empty() && !run->end_recorded;
  if (!stuck && (run->ending() || repeat || (mode == CancelMode::parent_close && run->cancel_requested()))) {
    after_run_durable(*run, acknowledge);
    return;
  }
  if (stuck || mode == CancelMode::terminate || run->cancel_requested()) {
    // Terminate, or a second cancel: the code stops here.
    if (storage_error_) {
      reply(storage_error_, storage_error_.message());
      return;
    }
    if (!waiting_appends_.empty()) {
      reply(make_error_code(errc::busy), fmt::format("shard {} is busy: run '{}' was not stopped, try again", id_, id));
      return;
    }
    auto message = mode == CancelMode::terminate ? fmt::format("run '{}' was terminated: {}", id, reason)
                   : stuck ? fmt::format("run '{}' was cancelled while stuck (none of its code ran): {}", id, reason)
                           : fmt::format("run '{}' was cancelled twice, which terminates it: {}", id, reason);
    run->stop();
    end_run(*run, Outcome{RunStatus::cancelled, {}, errc::cancelled, std::move(message)}, acknowledge);
    return;
  }
  JournalRecord record;
  record.kind = RecordKind::cancel_requested;
  record.run_id = id;
  record.generation = run->generation();
  record.detail = request_id;
  record.value = reason;
  auto lsn = append_external(*run, record);
  if (!lsn) {
    reply(lsn.error(), lsn.error() == make_error_code(errc::busy)
                           ? fmt::format("{}: cancel of run '{}' was not recorded", busy_text(), id)
                       : lsn.error() == make_error_code(errc::invalid_argument)
                           ? fmt::format("cancel was not recorded: {}", oversize_message_)
                           : lsn.error().message());
    return;
  }
  if (!request_id.empty()) run->cancel_ids.insert(request_id);
  after_durable(*lsn, acknowledge);
  run->request_cancel(reason);
}

void Shard::handle_result(const std::string& id, std::function<void(const Outcome&)> reply) {
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run: the caller waits on it
  if (store_error) {
    reply(Outcome{RunStatus::failed, {}, errc::storage, storage_message(id, store_error)});
    return;
  }
  auto found = runs_.find(id);
  if (found == runs_.end()) {
    reply(finished_outcome(id));
    return;
  }
  auto& run = *found->second;
  if (run.finished()) {
    reply(run.outcome());
  } else if (!run.stuck_error().empty()) {
    reply(Outcome{RunStatus::failed, {}, errc::nondeterminism, run.stuck_error()});
  } else if (storage_error_) {
    reply(Outcome{RunStatus::failed, {}, errc::storage,
                  fmt::format("run '{}' cannot go on: the log failed: {}", id, storage_error_.message())});
  } else {
    run.external_waiters.push_back(std::move(reply));
  }
}

void Shard::subscribe_end(const std::string& id, std::function<void(const Outcome&)> fn) {
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run: the parent waits on it
  if (store_error) {
    fn(Outcome{RunStatus::failed, {}, errc::storage, storage_message(id, store_error)});
    return;
  }
  auto found = runs_.find(id);
  if (found == runs_.end()) {
    fn(finished_outcome(id));
    return;
  }
  auto& run = *found->second;
  if (run.finished()) {
    fn(run.outcome());
  } else {
    run.result_waiters.push_back(std::move(fn));
  }
}

void Shard::handle_read_stream(const std::string& id, const std::string& stream_name, StreamFrom from,
                               std::shared_ptr<detail::StreamFeed> feed, Reply reply) {
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run: the reader follows it
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  auto found = runs_.find(id);
  if (found == runs_.end()) {
    read_stored_stream(id, stream_name, from, *feed, reply);
    return;
  }
  auto& run = *found->second;
  auto& stream = run.streams[stream_name];
  std::uint64_t start = 0;
  switch (from.kind) {
    case StreamFrom::Kind::earliest: start = 0; break;
    case StreamFrom::Kind::latest: start = stream.chunks.size(); break;
    case StreamFrom::Kind::offset: start = from.offset; break;
  }
  // The shard owns the stream, so history and the live edge join here with
  // nothing in between: no gap, no duplicate.
  for (auto offset = start; offset < stream.durable_count; ++offset) {
    feed->push(StreamChunk{offset, stream.chunks[offset]});
  }
  if (stream.closed || run.finished()) {
    feed->end();
  } else if (storage_error_) {
    feed->end(storage_error_);
  } else {
    stream.readers.push_back(StreamState::Reader{feed, std::max(start, stream.durable_count)});
  }
  reply({}, {});
}

void Shard::read_stored_stream(const std::string& id, const std::string& stream_name, StreamFrom from,
                               detail::StreamFeed& feed, const Reply& reply) {
  auto stored = stored_run(id);
  if (!stored) {
    reply(make_error_code(errc::storage), storage_message(id, stored.error()));
    return;
  }
  if (!*stored) {
    reply(make_error_code(errc::not_found), fmt::format("read_stream: no run '{}'", id));
    return;
  }
  auto streams = store_->streams(id);
  if (!streams) {
    reply(make_error_code(errc::storage), storage_message(id, streams.error()));
    return;
  }
  boost::json::array chunks;
  if (*streams) {
    boost::system::error_code error;
    auto parsed = boost::json::parse(**streams, error);
    if (error || !parsed.is_object()) {
      reply(make_error_code(errc::storage), fmt::format("run '{}': its streams in the run store do not decode", id));
      return;
    }
    if (const auto* stream = parsed.get_object().if_contains(stream_name)) {
      if (stream->is_object() && stream->get_object().contains("chunks")) {
        chunks = stream->get_object().at("chunks").as_array();
      }
    }
  }
  std::uint64_t start = from.kind == StreamFrom::Kind::offset ? from.offset
                        : from.kind == StreamFrom::Kind::latest ? chunks.size()
                                                                : 0;
  for (auto offset = start; offset < chunks.size(); ++offset) feed.push(StreamChunk{offset, chunks[offset]});
  feed.end();  // the run finished: nothing more comes
  reply({}, {});
}

RunInfo Shard::parked_info(const ParkedRun& run) {
  RunInfo info;
  info.id = run.id;
  info.workflow = run.workflow;
  info.status = RunStatus::running;
  info.generation = run.generation;
  info.version = run.version;
  info.started_at = from_ms(run.started_ms);
  info.waiting_on = run.waiting;
  return info;
}

void Shard::handle_waits(const std::vector<std::string>& ids, std::map<std::string, std::vector<PendingCommand>>& out) {
  for (const auto& id : ids) {
    if (auto found = runs_.find(id); found != runs_.end()) out[id] = found->second->waiting_on();
  }
}

void Shard::handle_list(const RunFilter& filter, std::vector<RunInfo>& out) {
  for (auto& [id, run] : runs_) {
    auto info = run->info();
    if (filter.workflow && info.workflow != *filter.workflow) continue;
    if (filter.status && info.status != *filter.status) continue;
    out.push_back(std::move(info));
  }
  if (store_ == nullptr || (filter.status && *filter.status != RunStatus::running)) return;
  // Parked runs are running too, out of memory.
  auto listed = store_->all_parked(id_, [&](const ParkedRun& run) {
    if (runs_.contains(run.id) || (filter.workflow && run.workflow != *filter.workflow)) return;
    out.push_back(parked_info(run));
  });
  if (!listed) fail_storage(listed.error());
}

std::optional<RunInfo> Shard::handle_get(const std::string& id, RunInfo (*from_finished)(const FinishedRun&)) {
  if (auto found = runs_.find(id); found != runs_.end()) return found->second->info();
  if (store_ == nullptr) return std::nullopt;
  auto parked = store_->parked(id_, id);
  if (!parked) {
    fail_storage(parked.error());
    return std::nullopt;
  }
  if (*parked) {
    auto info = parked_info(**parked);
    // A row written before rows kept the version: the index has the one
    // the run had when it parked (in this process).
    if (auto indexed = core_.run_index().get(id);
        info.version == 0 && indexed && indexed->generation == info.generation) {
      info.version = indexed->version;
    }
    return info;
  }
  auto finished = store_->finished(id);
  if (!finished) {
    fail_storage(finished.error());
    return std::nullopt;
  }
  if (*finished) return from_finished(**finished);
  return std::nullopt;
}

void Shard::handle_registered(const std::string& workflow) {
  std::vector<std::shared_ptr<Run>> waiting;
  for (auto& [id, run] : runs_) {
    if (run->workflow() == workflow && !run->code_started() && !run->ending()) waiting.push_back(run);
  }
  for (auto& run : waiting) start_code(*run);
  if (auto found = children_awaiting_code_.find(workflow); found != children_awaiting_code_.end()) {
    auto starts = std::move(found->second);
    children_awaiting_code_.erase(found);
    for (auto& start : starts) start();
  }
}

void Shard::start_child(StartRequest request, ChildEnd on_end) {
  auto id = request.id;
  auto workflow = request.workflow;
  auto again = request;  // for another try once the workflow is registered
  handle_start(std::move(request), true,
               [this, id, workflow, again = std::move(again), on_end = std::move(on_end)](
                   std::error_code error, std::string message, StartOutcome) mutable {
                 if (error == make_error_code(errc::unknown_workflow)) {
                   children_awaiting_code_[workflow].push_back(
                       [this, again = std::move(again), on_end = std::move(on_end)]() mutable {
                         start_child(std::move(again), std::move(on_end));
                       });
                   return;
                 }
                 if (error) {
                   auto code = error.category() == error_category() ? static_cast<errc>(error.value()) : errc::storage;
                   on_end(error, Outcome{RunStatus::failed, {}, code, std::move(message)});
                   return;
                 }
                 subscribe_end(id, [on_end = std::move(on_end)](const Outcome& outcome) { on_end({}, outcome); });
               });
}

void Shard::handle_journal(const std::string& id, std::function<void(std::error_code, std::string)> reply) {
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run: its journal comes back with it
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  if (auto found = runs_.find(id); found != runs_.end()) {
    if (found->second->history.empty()) {
      reply(make_error_code(errc::not_found), fmt::format("run '{}': its journal is not kept", id));
      return;
    }
    reply({}, without_secrets(journal_json(found->second->history)));
    return;
  }
  if (store_ != nullptr) {
    auto stored = store_->journal_of_finished(id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(id, stored.error()));
      return;
    }
    if (*stored) {
      reply({}, without_secrets(**stored));
      return;
    }
    auto finished = stored_run(id);
    if (finished && *finished) {
      reply(make_error_code(errc::not_found),
            fmt::format("run '{}' finished, and its journal was not kept (Config::keep_finished_journals)", id));
      return;
    }
  }
  reply(make_error_code(errc::not_found), fmt::format("no run '{}'", id));
}

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
    old = existing->history;
  } else if (store_ != nullptr) {
    auto stored = store_->journal_of_finished(id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(id, stored.error()));
      return;
    }
    if (*stored) {
      auto records = records_of_journal_json(**stored);
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
  auto run = std::make_shared<Run>(*this, id, generation, started.name, *version, std::move(started_parts->input), now,
                                   deadline);
  run->parent = started.parent;
  JournalRecord record = started;  // keeps the deadline (number) and what a continued start carries
  record.run_id = id;
  record.generation = generation;
  record.detail = std::to_string(*version);
  record.time_ms = to_ms(now);
  record.at_ms = to_ms(now);  // the new generation's start, not the old one's
  record.position = kResetStartMarker;  // whole once its run_reset is read too (Shard::load)
  auto lsn = append_external(*run, record);
  if (!lsn) {
    reply(lsn.error(), lsn.error() == make_error_code(errc::busy)
                           ? fmt::format("{}: run '{}' was not reset, try again", busy_text(), id)
                           : lsn.error().message());
    return;
  }
  run->started_lsn = *lsn;
  (void)run->load(record, *lsn);
  for (auto copy : kept) {
    copy.run_id = id;
    copy.generation = generation;
    append(*run, copy, {});
    if (auto loaded = run->load(copy, run->last_lsn); !loaded) {
      reply(loaded.error(), fmt::format("reset: run '{}''s journal does not replay", id));
      return;
    }
  }
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

void Shard::handle_query(const std::string& id, const std::string& name, const boost::json::value& arg,
                         std::function<void(std::error_code, std::string)> reply) {
  if (hold_if_continuing(id, [=, this] { handle_query(id, name, arg, reply); })) return;
  std::error_code store_error;
  auto run = find_run(id, store_error);  // a parked run comes back (its replay registers its handlers)
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  if (!run) {
    auto stored = stored_run(id);
    bool finished = stored && *stored;
    reply(make_error_code(errc::not_found), finished ? fmt::format("query: run '{}' has finished; queries answer "
                                                                   "running runs (its journal tells what happened)",
                                                                   id)
                                                     : fmt::format("query: no run '{}'", id));
    return;
  }
  if (run->finished() || run->ending()) {
    if (!run->stuck_error().empty()) {
      reply(make_error_code(errc::nondeterminism), run->stuck_error());
    } else {
      reply(make_error_code(errc::not_found),
            fmt::format("query: run '{}' has finished; queries answer running runs (its journal tells what happened)",
                        id));
    }
    return;
  }
  if (!run->code_started()) {
    reply(make_error_code(errc::unavailable),
          fmt::format("query: run '{}' is not running code here yet (workflow '{}' version {} is not registered)",
                      id, run->workflow(), run->version()));
    return;
  }
  std::string why;
  auto answer = run->answer_query(name, arg, why);
  if (!answer) {
    reply(answer.error(), why);
    return;
  }
  // The answer reads state whose records may not be durable yet (an
  // awakeable's token, a step's result): it leaves once they are, so a
  // crash cannot take back what a caller was told. Nothing is written.
  after_run_durable(*run, [reply = std::move(reply), text = boost::json::serialize(*answer)](std::error_code error) {
    if (error) {
      reply(error, "the run's state is not durable: " + error.message());
    } else {
      reply({}, text);
    }
  });
}

void Shard::handle_update(std::optional<StartRequest> start, const std::string& id, const std::string& name,
                          const boost::json::value& arg, const std::string& update_id,
                          std::function<void(const Outcome&)> reply) {
  if (hold_if_continuing(id, [=, this] { handle_update(start, id, name, arg, update_id, reply); })) return;
  auto fail = [&reply](errc code, std::string message) {
    reply(Outcome{RunStatus::failed, {}, code, std::move(message)});
  };
  if (start) {
    // A start refused at once answers here; one that fails later (the log)
    // fails the update's record too, which follows it.
    // (The start's reply may come later, once its record is durable.)
    auto refused = std::make_shared<std::optional<Outcome>>();
    handle_start(std::move(*start), false, [refused](std::error_code error, std::string message, StartOutcome) {
      if (error) {
        auto code = error.category() == error_category() ? static_cast<errc>(error.value()) : errc::storage;
        *refused = Outcome{RunStatus::failed, {}, code, std::move(message)};
      }
    });
    if (*refused) {
      reply(**refused);
      return;
    }
  }
  std::error_code store_error;
  auto run = find_run(id, store_error);  // a parked run comes back (its replay declares its updates again)
  if (store_error) {
    fail(errc::storage, storage_message(id, store_error));
    return;
  }
  if (!run) {
    auto stored = stored_run(id);
    if (!stored) {
      fail(errc::storage, storage_message(id, stored.error()));
    } else if (!*stored) {
      fail(errc::not_found, fmt::format("update '{}': no run '{}'", name, id));
    } else if (const auto* answer = (*stored)->update_answers.if_contains(update_id)) {
      // A repeat after the run ended: the answer the run store keeps.
      const auto& object = answer->as_object();
      if (object.at("ok").as_bool()) {
        reply(Outcome{RunStatus::completed, object.at("value"), errc::failed, {}});
      } else {
        fail(errc_from_name(std::string(object.at("code").as_string())),
             std::string(object.at("message").as_string()));
      }
    } else {
      fail(errc::not_found, fmt::format("update '{}': run '{}' has finished; it takes no more updates", name, id));
    }
    return;
  }
  if (auto known = run->updates.find(update_id); known != run->updates.end()) {
    // The same id again: the same answer, once it is durable.
    auto& update = known->second;
    if (update.answered && update.durable) {
      reply(update.answer);
    } else if (!run->ending() && run->stuck_error().empty()) {
      update.waiters.push_back(std::move(reply));
    } else if (!run->stuck_error().empty()) {
      fail(errc::nondeterminism, run->stuck_error());
    } else if (run->finished()) {
      reply(run->unanswered_update(update_id, update.name));
    } else {
      update.waiters.push_back(std::move(reply));  // the run's end answers it
    }
    return;
  }
  if (run->finished() || run->ending()) {
    if (!run->stuck_error().empty()) {
      fail(errc::nondeterminism, run->stuck_error());
    } else {
      fail(errc::not_found, fmt::format("update '{}': run '{}' has finished; it takes no more updates", name, id));
    }
    return;
  }
  if (!run->code_started()) {
    fail(errc::unavailable,
         fmt::format("update '{}': run '{}' is not running code here yet (workflow '{}' version {} is not registered)",
                     name, id, run->workflow(), run->version()));
    return;
  }
  std::string why;
  if (auto valid = run->validate_update(name, arg, why); !valid) {
    fail(static_cast<errc>(valid.error().value()), why);
    return;
  }
  JournalRecord record;
  record.kind = RecordKind::update_accepted;
  record.run_id = id;
  record.generation = run->generation();
  record.name = name;
  record.detail = update_id;
  record.value = arg;
  auto lsn = append_external(*run, record);
  if (!lsn) {
    fail(static_cast<errc>(lsn.error() == make_error_code(errc::busy) || lsn.error() == make_error_code(errc::invalid_argument)
                               ? lsn.error().value()
                               : static_cast<int>(errc::storage)),
         refused_append_message(lsn.error(), fmt::format("update '{}'", name), id));
    return;
  }
  // Registered before the delivery: the code may take and answer it at once.
  auto& update = run->updates[update_id];
  update.name = name;
  update.waiters.push_back(std::move(reply));
  run->deliver_update(name, update_id, arg);
}

void Shard::handle_awakeable(const std::string& token_text, bool succeeded, boost::json::value value, Reply reply) {
  auto token = parse_token(token_text);
  if (!token) {
    reply(make_error_code(errc::invalid_argument),
          "not an awakeable token (tokens look like awk1.<hex>.<position>.<32 hex digits>)");
    return;
  }
  if (hold_if_continuing(token->run_id, [=, this] { handle_awakeable(token_text, succeeded, value, reply); })) return;
  std::error_code store_error;
  auto run = find_run(token->run_id, store_error);  // a parked run comes back to take it
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(token->run_id, store_error));
    return;
  }
  if (!run || run->finished() || run->ending()) {
    // A repeat of a completion after the run ended: answered as the first.
    if (run) {
      if (auto first = run->earlier_awakeable(token->secret)) {
        answer_awakeable_repeat(*first, succeeded, value, reply);
        return;
      }
      if (!run->finished() && !run->stuck_error().empty() && !run->end_recorded) {
        // Stuck: its code does not run to take it (docs/engine.md, "Stuck runs").
        reply(make_error_code(errc::nondeterminism), run->stuck_error());
        return;
      }
    }
    bool finished = run != nullptr;
    if (!run) {
      auto stored = stored_run(token->run_id);
      finished = stored && *stored;
      if (finished) {
        for (const auto& [secret, answer] : (*stored)->awakeable_answers) {
          if (!same_secret(std::string(secret), token->secret) || !answer.is_object()) continue;
          const auto* name = answer.as_object().if_contains("name");
          answer_awakeable_repeat(Remembered::Answer{std::string(secret),
                                                     name != nullptr && name->is_string()
                                                         ? std::string(name->get_string())
                                                         : std::string(),
                                                     answer.as_object(), 0},
                                  succeeded, value, reply);
          return;
        }
      }
    }
    reply(make_error_code(errc::not_found),
          finished ? fmt::format("run '{}' has finished: its awakeables can no longer be completed", token->run_id)
                   : fmt::format("no run '{}' is running", token->run_id));
    return;
  }
  if (!run->code_started()) {
    reply(make_error_code(errc::unavailable),
          fmt::format("run '{}' is not running code here yet (workflow '{}' version {} is not registered)",
                      token->run_id, run->workflow(), run->version()));
    return;
  }
  run->complete_awakeable(token->position, token->secret, succeeded, std::move(value), std::move(reply));
}

}  // namespace fusee::engine
