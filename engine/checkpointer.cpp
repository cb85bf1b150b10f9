#include "engine/checkpointer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "engine/shard.hpp"

namespace fusee::engine {

Checkpointer::Checkpointer(std::vector<Shard*> shards, JournalSink& sink, RunStore& store,
                           CheckpointerOptions options, std::vector<std::uint64_t> keep_from, std::vector<bool> held)
    : shards_(std::move(shards)),
      sink_(sink),
      store_(store),
      options_(std::move(options)),
      keep_from_(std::move(keep_from)),
      held_(held.empty() ? std::vector<bool>(shards_.size(), true) : std::move(held)),
      requested_(shards_.size(), false),
      asked_(shards_.size(), false),
      written_(shards_.size(), 0),
      next_due_(shards_.size(), std::chrono::steady_clock::now() + options_.interval) {
  keep_from_.resize(shards_.size(), 1);
}

Checkpointer::~Checkpointer() { stop(); }

void Checkpointer::start() {
  thread_ = std::thread([this] { loop(); });
}

void Checkpointer::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  done_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Checkpointer::ask(std::uint32_t shard_id) {
  asked_[shard_id] = true;
  requested_[shard_id] = false;
  auto* shard = shards_[shard_id];
  bool posted = shard->post(
      [this, shard] {
        auto work = shard->take_checkpoint();
        {
          std::lock_guard lock(mu_);
          works_.push_back(std::move(work));
        }
        cv_.notify_all();
      },
      false);
  if (!posted) asked_[shard_id] = false;  // the shard stopped; final_checkpoint takes it
}

void Checkpointer::loop() {
  auto last_expiry = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (!stats_.error.empty()) {
      done_cv_.notify_all();
      cv_.wait(lock, [&] { return stopping_; });
      break;
    }
    auto now = std::chrono::steady_clock::now();
    for (std::uint32_t shard = 0; shard < shards_.size(); ++shard) {
      if (!held_[shard]) {
        next_due_[shard] = now + options_.interval;  // another worker's, for now
        continue;
      }
      bool due = options_.interval.count() > 0 && now >= next_due_[shard];
      // Asked and not answered yet (the shard is busy, a step of its own
      // blocking it, say): the next due time moves on, or the wait below
      // would return at once, over and over.
      if (asked_[shard] && due) next_due_[shard] = now + options_.interval;
      if (asked_[shard] || !(requested_[shard] || due)) continue;
      ask(shard);
      next_due_[shard] = now + options_.interval;
    }
    if (!works_.empty()) {
      auto work = std::move(works_.front());
      works_.pop_front();
      auto shard = work.shard;
      writing_ = true;
      lock.unlock();
      bool written = write(std::move(work), true);
      if (written && options_.interval.count() > 0 &&
          now - last_expiry >= std::max<std::chrono::steady_clock::duration>(options_.interval,
                                                                            std::chrono::minutes(1))) {
        expire_finished();
        last_expiry = now;
      }
      lock.lock();
      writing_ = false;
      asked_[shard] = false;
      ++written_[shard];
      done_cv_.notify_all();
      continue;
    }
    auto ready = [&] {
      if (stopping_ || !works_.empty()) return true;
      for (std::uint32_t shard = 0; shard < shards_.size(); ++shard) {
        if (held_[shard] && requested_[shard] && !asked_[shard]) return true;
      }
      return false;
    };
    if (options_.interval.count() > 0) {
      auto due = *std::min_element(next_due_.begin(), next_due_.end());
      cv_.wait_until(lock, due, ready);
    } else {
      cv_.wait(lock, ready);
    }
  }
}

bool Checkpointer::write(CheckpointWork work, bool unload) {
  std::lock_guard write_lock(write_mu_);
  {
    std::lock_guard lock(mu_);
    if (!stats_.error.empty()) return false;
  }
  RunStore::Batch batch;
  // Order matters within the batch: erase and move before the new records.
  for (const auto& run : work.erased) {
    if (run.place) batch.erase_journal(*run.place, work.shard, run.id);
    if (run.parked) batch.erase_parked(work.shard, *run.parked);
  }
  for (const auto& run : work.finished) {
    if (run.generation > 1) {
      // The index entries of the id's previous run sort by its finish time.
      auto previous = store_.finished(run.id);
      if (!previous) {
        fail(fmt::format("cannot read run '{}' from the run store: {}", run.id, previous.error().message()));
        return false;
      }
      if (*previous) batch.erase_finished(**previous);
    }
    batch.put_finished(run);
  }
  for (const auto& [id, streams] : work.streams) batch.put_streams(id, streams);
  for (const auto& [id, journal] : work.journals) batch.put_journal_of_finished(id, journal);
  for (const auto& run : work.revived) {
    if (run.place == JournalPlace::parked && !move_journal(batch, work.shard, run.id, JournalPlace::parked,
                                                           JournalPlace::live)) {
      return false;
    }
    if (run.parked) batch.erase_parked(work.shard, *run.parked);
  }
  for (const auto& park : work.parks) {
    if (park.before.place == JournalPlace::live &&
        !move_journal(batch, work.shard, park.parked.id, JournalPlace::live, JournalPlace::parked)) {
      return false;
    }
    if (park.before.parked) batch.erase_parked(work.shard, *park.before.parked);
    batch.put_parked(work.shard, park.parked);
  }
  put_journal_chunks(batch, work);
  batch.put_checkpoint(Checkpoint{work.shard, work.lsn, work.keep_from_sequence, {}, work.replay_from});
  // Unsynced, a checkpoint costs the disk nothing on the log's flush path
  // (a synced one queued each shard's next flush behind RocksDB's). A crash
  // may take it back, and with it what it unloaded: the log still holds
  // all of that, since no segment goes before the store is synced below.
  auto written = unload ? store_.write_unsynced(std::move(batch)) : store_.write(std::move(batch));
  if (!written) {
    fail(fmt::format("cannot write shard {}'s checkpoint to the run store: {}", work.shard,
                     written.error().message()));
    return false;
  }
  if (unload && (!work.unload_finished.empty() || !work.unload_parked.empty())) {
    auto* shard = shards_[work.shard];
    // The shard needs only the lists and the LSN back.
    auto done = std::make_shared<CheckpointWork>();
    done->lsn = work.lsn;
    done->unload_finished = std::move(work.unload_finished);
    done->unload_parked = std::move(work.unload_parked);
    (void)shard->post([shard, done] { shard->checkpoint_written(*done); }, false);
  }
  std::uint64_t keep_from = 0;
  {
    std::lock_guard lock(mu_);
    keep_from_[work.shard] = std::max(keep_from_[work.shard], work.keep_from_sequence);
    keep_from = *std::min_element(keep_from_.begin(), keep_from_.end());
    ++stats_.checkpoints;
  }
  if (options_.retire_bound) keep_from = std::min(keep_from, options_.retire_bound());
  auto retired = sink_.retire(keep_from, [this] { return store_.sync(); });
  if (!retired) {
    fail(fmt::format("cannot retire log segments: {}", retired.error().message()));
    return false;
  }
  std::lock_guard lock(mu_);
  stats_.segments_retired += retired->segments;
  stats_.blob_files_retired += retired->blob_files;
  return true;
}

void Checkpointer::put_journal_chunks(RunStore::Batch& batch, const CheckpointWork& work) {
  // work.journal is in the log's order, the runs' records interleaved: one
  // chunk per run (and place) holds its records, still in LSN order.
  std::unordered_map<std::string_view, std::size_t> chunk_of[2];  // live, parked
  std::vector<std::vector<RunStore::Batch::StoredRecord>> chunks;
  std::vector<const CheckpointWork::JournalCopy*> firsts;
  for (const auto& record : work.journal) {
    auto& index = chunk_of[record.place == JournalPlace::parked ? 1 : 0];
    auto [found, added] = index.try_emplace(record.id, chunks.size());
    if (added) {
      chunks.emplace_back();
      firsts.push_back(&record);
    }
    chunks[found->second].push_back({record.lsn, record.bytes});
  }
  for (std::size_t chunk = 0; chunk < chunks.size(); ++chunk) {
    batch.put_journal_records(firsts[chunk]->place, work.shard, firsts[chunk]->id, chunks[chunk]);
  }
}

bool Checkpointer::move_journal(RunStore::Batch& batch, std::uint32_t shard, const std::string& id, JournalPlace from,
                                JournalPlace to) {
  // The visitor's bytes last only for its call: kept here until the chunk is put.
  std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> records;
  auto read = store_.read_journal(from, shard, id,
                                  [&](const std::string&, std::uint64_t lsn, std::span<const std::byte> bytes) {
                                    records.emplace_back(lsn, std::vector<std::byte>(bytes.begin(), bytes.end()));
                                    return ok();
                                  });
  if (!read) {
    fail(fmt::format("cannot read run '{}' from the run store: {}", id, read.error().message()));
    return false;
  }
  std::vector<RunStore::Batch::StoredRecord> chunk;
  chunk.reserve(records.size());
  for (const auto& [lsn, bytes] : records) chunk.push_back({lsn, bytes});
  batch.erase_journal(from, shard, id);
  batch.put_journal_records(to, shard, id, chunk);
  return true;
}

void Checkpointer::expire_finished() {
  if (!options_.now_ms) return;
  auto before_ms = options_.now_ms() - options_.finished_retention.count();
  auto expired = store_.expire_finished(before_ms);
  if (expired && options_.expired) options_.expired(before_ms);
  std::lock_guard lock(mu_);
  if (expired) stats_.finished_expired += *expired;
}

void Checkpointer::fail(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (!stats_.error.empty()) return;
    stats_.error = why;
  }
  if (options_.warn) {
    options_.warn(fmt::format("{}; checkpoints and log retirement stop until the next open, which recovers "
                              "from the last good checkpoints and the log",
                              why));
  }
  for (auto* shard : shards_) (void)shard->post([shard] { shard->checkpoints_stopped(); }, false);
  cv_.notify_all();
  done_cv_.notify_all();
}

Result<void> Checkpointer::checkpoint_all() {
  std::vector<std::uint32_t> checkpointed;
  {
    std::unique_lock lock(mu_);
    std::vector<std::uint64_t> target(shards_.size());
    for (std::uint32_t shard = 0; shard < shards_.size(); ++shard) {
      if (!held_[shard]) continue;
      // A work already on its way was taken before this call.
      target[shard] = written_[shard] + (asked_[shard] ? 2 : 1);
      requested_[shard] = true;
    }
    cv_.notify_all();
    done_cv_.wait(lock, [&] {
      if (stopping_ || !stats_.error.empty()) return true;
      for (std::uint32_t shard = 0; shard < shards_.size(); ++shard) {
        if (written_[shard] < target[shard]) return false;
      }
      return true;
    });
    if (!stats_.error.empty()) return std::make_error_code(std::errc::io_error);
    if (stopping_) return std::make_error_code(std::errc::operation_canceled);
    for (std::uint32_t shard = 0; shard < shards_.size(); ++shard) {
      if (held_[shard]) checkpointed.push_back(shard);
    }
  }
  // write() hands each shard the runs its checkpoint lets go (finished runs
  // unloaded, waiting ones parked) as a message, posted before the write
  // counted as done: a message posted now runs after it. Without waiting
  // for it, a caller could see the checkpoint written and the runs not yet
  // parked (run_index_test saw runs_parked 0 on a busy machine).
  std::vector<std::future<void>> unloaded;
  for (auto shard : checkpointed) {
    auto done = std::make_shared<std::promise<void>>();
    unloaded.push_back(done->get_future());
    if (!shards_[shard]->post([done] { done->set_value(); }, false)) done->set_value();  // stopped
  }
  for (auto& future : unloaded) future.wait();
  expire_finished();
  return ok();
}

Result<void> Checkpointer::final_checkpoint() {
  // Works taken before the shards stopped come first: each shard's
  // checkpoints go to the store in the order they were taken.
  std::deque<CheckpointWork> left;
  {
    std::lock_guard lock(mu_);
    left.swap(works_);
  }
  for (auto& work : left) {
    if (!write(std::move(work), false)) return std::make_error_code(std::errc::io_error);
  }
  std::vector<bool> held;
  {
    std::lock_guard lock(mu_);
    held = held_;
  }
  for (std::uint32_t shard = 0; shard < shards_.size(); ++shard) {
    if (!held[shard]) continue;
    if (!write(shards_[shard]->take_checkpoint(/*defer=*/false), false)) {
      return std::make_error_code(std::errc::io_error);
    }
  }
  return ok();
}

void Checkpointer::request_lagging(std::uint64_t retires_at) {
  if (retires_at == 0) return;
  {
    std::lock_guard lock(mu_);
    for (std::uint32_t shard = 0; shard < shards_.size(); ++shard) {
      if (keep_from_[shard] < retires_at) requested_[shard] = true;
    }
  }
  cv_.notify_all();
}

void Checkpointer::adopt(std::uint32_t shard, std::uint64_t keep_from) {
  {
    std::lock_guard lock(mu_);
    held_[shard] = true;
    keep_from_[shard] = keep_from;
    next_due_[shard] = std::chrono::steady_clock::now() + options_.interval;
  }
  cv_.notify_all();
}

void Checkpointer::request(std::uint32_t shard) {
  {
    std::lock_guard lock(mu_);
    requested_[shard] = true;
  }
  cv_.notify_all();
}

CheckpointerStats Checkpointer::stats() const {
  std::lock_guard lock(mu_);
  auto stats = stats_;
  stats.store_bytes = store_.size_bytes();
  return stats;
}

}  // namespace fusee::engine
