#include "hosting/store_applier.hpp"

#include <fmt/format.h>

#include "fusee/error.hpp"
#include "replica/replica_segments.hpp"
#include "wal/errc.hpp"

namespace fusee::hosting {

using replication::Seq;
using replication::View;

std::vector<std::byte> encode_store_batch(const engine::RunStore::Batch& batch) {
  auto bytes = batch.encode();
  bytes.insert(bytes.begin(), static_cast<std::byte>(StoreRecordKind::batch));
  return bytes;
}

std::vector<std::byte> encode_store_expiry(std::int64_t before_ms) {
  std::vector<std::byte> bytes{static_cast<std::byte>(StoreRecordKind::expire)};
  const auto value = static_cast<std::uint64_t>(before_ms);
  for (int shift = 56; shift >= 0; shift -= 8) bytes.push_back(static_cast<std::byte>((value >> shift) & 0xff));
  return bytes;
}

StoreApplier::StoreApplier(std::shared_ptr<engine::RunStore> store, wal::ShardId store_shard,
                           std::function<void(const std::string&)> failed)
    : store_(std::move(store)), store_shard_(store_shard), failed_(std::move(failed)) {
  auto applied = store_->replica_applied();
  if (!applied) {
    throw Error(errc::storage, fmt::format("replicated mode: cannot read where the run store stands in the log: {}",
                                           applied.error().message()));
  }
  start_ = *applied;
  fed_ = feed_after();
  stats_.batches_done = fed_;
  thread_ = std::thread([this] { run(); });
}

StoreApplier::~StoreApplier() { stop(); }

void StoreApplier::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [key, waiter] : waiters_) {
      if (!waiter->outcome) waiter->outcome = Result<std::size_t>(make_error_code(errc::unavailable));
    }
    waiters_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool StoreApplier::committed(Seq seq, View view, std::string_view body) {
  Item item{seq, view, 0, {}, false};
  // The whole body is parsed (its sections' headers checked), so that a
  // body that does not decode stops the applying rather than hide records.
  if (auto records = replica::records_in_body(body, store_shard_)) {
    if (!records->empty()) {
      item.first_lsn = replica::first_lsn_in_body(body, store_shard_);
      item.records = std::move(*records);
    }
  } else {
    item.undecodable = true;
    item.records.emplace_back();
  }
  std::uint64_t bytes = 0;
  for (const auto& record : item.records) bytes += record.size();
  std::lock_guard lock(mu_);
  if (!stats_.error.empty()) return true;  // applying stopped: the replica is stopping
  if (!item.records.empty()) {
    if (!queue_.empty() && queued_bytes_ + bytes > kQueuedBytesMax) return false;
    queued_bytes_ += bytes;
    fed_ = seq;
    queue_.push_back(std::move(item));
    cv_.notify_all();
    return true;
  }
  fed_ = seq;
  if (queue_.empty() && applying_ == 0) {
    stats_.batches_done = seq;
    cv_.notify_all();
  }
  return true;
}

Result<std::size_t> StoreApplier::submit(std::uint64_t lead, View view,
                                         const std::function<Result<wal::Lsn>()>& append) {
  std::unique_lock lock(mu_);
  if (stopping_ || !stats_.error.empty() || lead <= ended_) return make_error_code(errc::unavailable);
  // Appended under the lock: the record cannot be applied before its
  // waiter is in place.
  auto lsn = append();
  if (!lsn) return lsn.error();
  auto waiter = std::make_shared<Waiter>();
  waiter->lead = lead;
  waiters_[{view, *lsn}] = waiter;
  cv_.wait(lock, [&] { return waiter->outcome.has_value(); });
  return *waiter->outcome;
}

void StoreApplier::lead_ended(std::uint64_t lead) {
  {
    std::lock_guard lock(mu_);
    ended_ = std::max(ended_, lead);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second->lead <= lead) {
        it->second->outcome = Result<std::size_t>(make_error_code(errc::unavailable));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  cv_.notify_all();
}

bool StoreApplier::wait_done(Seq seq, std::uint64_t lead) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stats_.batches_done >= seq || stopping_ || !stats_.error.empty() || lead <= ended_; });
  return stats_.batches_done >= seq;
}

StoreApplierStats StoreApplier::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void StoreApplier::settle(View view, wal::Lsn lsn, const Result<std::size_t>& outcome) {
  // Waiters of earlier views, or of this one before this LSN, lost their
  // records: the log went on past them without them.
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const auto [waiter_view, waiter_lsn] = it->first;
    if (waiter_view > view || (waiter_view == view && waiter_lsn > lsn)) break;
    it->second->outcome = waiter_view == view && waiter_lsn == lsn
                              ? outcome
                              : Result<std::size_t>(make_error_code(errc::unavailable));
    it = waiters_.erase(it);
  }
  cv_.notify_all();
}

void StoreApplier::run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && stats_.error.empty()); });
    if (stopping_) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    applying_ = item.seq;
    lock.unlock();
    std::vector<Result<std::size_t>> outcomes;
    std::string error;
    std::uint64_t skipped = 0;
    for (std::uint32_t index = 0; index < item.records.size() && error.empty(); ++index) {
      if (item.seq < start_.seq || (item.seq == start_.seq && index < start_.records)) {
        ++skipped;
        outcomes.emplace_back(std::size_t{0});
        continue;
      }
      auto applied = apply(item, index);
      if (!applied) {
        error = fmt::format("cannot apply the run store's record {} of batch {} ({}): {}", index, item.seq,
                            item.undecodable ? "the batch does not decode" : "view " + std::to_string(item.view),
                            applied.error().message());
      }
      outcomes.push_back(applied);
    }
    lock.lock();
    applying_ = 0;
    for (const auto& record : item.records) queued_bytes_ -= record.size();
    stats_.records_skipped += skipped;
    stats_.records_applied += outcomes.size() - skipped - (error.empty() ? 0 : 1);
    if (!item.undecodable) {
      for (std::uint32_t index = 0; index < outcomes.size(); ++index) {
        settle(item.view, item.first_lsn + index, outcomes[index]);
      }
    }
    if (!error.empty()) {
      lock.unlock();
      fail(error);
      lock.lock();
      continue;
    }
    stats_.batches_done = queue_.empty() ? fed_ : queue_.front().seq - 1;
    cv_.notify_all();
  }
}

Result<std::size_t> StoreApplier::apply(const Item& item, std::uint32_t index) {
  if (item.undecodable) return make_error_code(wal::errc::corrupt);
  const std::string& record = item.records[index];
  if (record.empty()) return make_error_code(wal::errc::corrupt);
  const engine::ReplicaApplied place{item.seq, index + 1, item.first_lsn + index};
  const auto body = std::as_bytes(std::span(record)).subspan(1);
  std::size_t expired = 0;
  engine::RunStore::Batch batch;
  switch (static_cast<StoreRecordKind>(record.front())) {
    case StoreRecordKind::batch: {
      auto decoded = engine::RunStore::Batch::decode(body);
      if (!decoded) return make_error_code(wal::errc::corrupt);
      batch = std::move(*decoded);
      break;
    }
    case StoreRecordKind::expire: {
      if (body.size() != 8) return make_error_code(wal::errc::corrupt);
      std::uint64_t before_ms = 0;
      for (std::byte byte : body) before_ms = before_ms << 8 | static_cast<std::uint8_t>(byte);
      // Every replica's store holds the same finished runs here, so each
      // removes the same ones; done again after a crash, it removes nothing
      // more.
      expired = FUSEE_TRY(store_->expire_finished(static_cast<std::int64_t>(before_ms)));
      break;
    }
    default:
      return make_error_code(wal::errc::corrupt);
  }
  batch.put_replica_applied(place);
  // Unsynced: a crash takes back a suffix of the applies, place included,
  // and the log, which holds them all, gives them again.
  FUSEE_TRY_VOID(store_->write_unsynced(std::move(batch)));
  return expired;
}

void StoreApplier::fail(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (!stats_.error.empty()) return;
    stats_.error = why;
    for (auto& [key, waiter] : waiters_) waiter->outcome = Result<std::size_t>(make_error_code(errc::storage));
    waiters_.clear();
  }
  cv_.notify_all();
  if (failed_) failed_(why);
}

}  // namespace fusee::hosting
