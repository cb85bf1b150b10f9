// Appends and durability: a run's records to the log (held in order when
// the log pushes back), what waits for them to be durable, and a storage
// failure failing what waited.
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
  if (keep_history_) run.journal.add(scratch_);
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
  if (keep_history_) run.journal.add(scratch_);
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

bool Shard::may_run_ahead(const Run& run) const {
  return run.ahead && group_open_ && run.appends_waiting == 0 && !storage_error_ && sink_.in_group(id_);
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
  for (auto& [id, run] : runs_) {
    if (run->finished()) continue;
    auto waiters = std::move(run->external_waiters);
    run->external_waiters.clear();
    const Outcome outcome = shard_text::log_failed_outcome(id, error);
    for (auto& waiter : waiters) waiter(outcome);
    run->fail_callers(outcome);
    for (auto& [name, stream] : run->streams) {
      for (auto& reader : stream.readers) reader.feed->end(error);
      stream.readers.clear();
    }
  }
}

wal::Lsn Shard::durable_lsn() const { return sink_.durable_lsn(id_); }

}  // namespace fusee::engine
