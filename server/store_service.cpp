#include "server/store_service.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/id_filter.hpp"
#include "engine/run_hash.hpp"
#include "wal/errc.hpp"

namespace fusee::server {

using protocol::StoreCall;
using protocol::StoreOp;
using protocol::StoreReply;
using protocol::encode_checkpoint;
using protocol::encode_finished;
using protocol::encode_journal_row;
using protocol::encode_optional;
using protocol::encode_parked;
using protocol::encode_u64;

namespace {


// What one store_rows frame carries at most.
constexpr std::size_t kRowsChunkBytes = 1u << 20;
// An id filter's size stops here (about 6 MiB): past it, false positives
// grow and cost round trips, never answers.
constexpr std::size_t kFilterIdsMax = 5'000'000;

// A store error's name on the wire (remote/remote_run_store.cpp reads it).
std::string store_error_name(std::error_code error) {
  if (error == make_error_code(wal::errc::corrupt)) return "corrupt";
  if (error == std::errc::read_only_file_system) return "read_only";
  if (error == std::errc::no_space_on_device) return "no_space";
  return "io";
}

StoreReply failed(std::error_code error, const std::string& what) {
  return StoreReply{store_error_name(error), fmt::format("{}: {}", what, error.message()), {}};
}

std::vector<std::byte> to_bytes(const std::string& text) {
  auto bytes = std::as_bytes(std::span(text));
  return {bytes.begin(), bytes.end()};
}

// Collects rows and sends them in frames of about kRowsChunkBytes.
class RowSender {
 public:
  explicit RowSender(const std::function<void(const std::vector<std::vector<std::byte>>&)>& send) : send_(send) {}
  void add(std::vector<std::byte> row) {
    bytes_ += row.size() + 4;
    rows_.push_back(std::move(row));
    if (bytes_ >= kRowsChunkBytes) flush();
  }
  void flush() {
    if (!rows_.empty()) send_(rows_);
    rows_.clear();
    bytes_ = 0;
  }

 private:
  const std::function<void(const std::vector<std::vector<std::byte>>&)>& send_;
  std::vector<std::vector<std::byte>> rows_;
  std::size_t bytes_ = 0;
};

}  // namespace

StoreService::StoreService(engine::RunStore& store, wal::Log& log, std::vector<std::uint64_t> keep_from,
                           std::function<void(const std::string&)> say)
    : store_(store), log_(log), say_(std::move(say)), keep_from_(std::move(keep_from)), written_(keep_from_.size(), 0) {}

StoreReply StoreService::serve(const StoreCall& call, const std::function<bool(std::uint32_t, std::uint64_t)>& holds,
                               const std::function<void(const std::vector<std::vector<std::byte>>&)>& send_rows) {
  RowSender rows(send_rows);
  auto journal_row = [&](const std::string& id, std::uint64_t lsn, std::span<const std::byte> record) -> Result<void> {
    rows.add(protocol::encode_journal_row(id, lsn, record));
    return ok();
  };
  bool shard_call = call.op == StoreOp::checkpoint || call.op == StoreOp::load_journals ||
                    call.op == StoreOp::read_journal || call.op == StoreOp::parked ||
                    call.op == StoreOp::parked_by_wake || call.op == StoreOp::all_parked;
  if (shard_call && call.shard >= keep_from_.size()) {
    return StoreReply{"bad_request", fmt::format("shard {}: the directory has {}", call.shard, keep_from_.size()), {}};
  }
  switch (call.op) {
    case StoreOp::write:
      return write(call, holds);
    case StoreOp::finished: {
      auto run = store_.finished(call.id);
      if (!run) return failed(run.error(), fmt::format("reading run '{}'", call.id));
      return StoreReply{{}, {}, protocol::encode_optional(*run ? std::optional(protocol::encode_finished(**run)) : std::nullopt)};
    }
    case StoreOp::list: {
      auto page = store_.list(call.query);
      if (!page) return failed(page.error(), "listing runs");
      for (const auto& run : page->runs) rows.add(protocol::encode_finished(run));
      rows.flush();
      return StoreReply{{}, {}, to_bytes(page->next_cursor)};
    }
    case StoreOp::checkpoint: {
      auto checkpoint = store_.checkpoint(call.shard);
      if (!checkpoint) return failed(checkpoint.error(), fmt::format("reading shard {}'s checkpoint", call.shard));
      return StoreReply{{}, {}, protocol::encode_optional(*checkpoint ? std::optional(protocol::encode_checkpoint(**checkpoint))
                                                                    : std::nullopt)};
    }
    case StoreOp::journal_of_finished: {
      auto journal = store_.journal_of_finished(call.id);
      if (!journal) return failed(journal.error(), fmt::format("reading run '{}''s journal", call.id));
      return StoreReply{{}, {}, protocol::encode_optional(*journal ? std::optional(to_bytes(**journal)) : std::nullopt)};
    }
    case StoreOp::streams: {
      auto streams = store_.streams(call.id);
      if (!streams) return failed(streams.error(), fmt::format("reading run '{}''s streams", call.id));
      return StoreReply{{}, {}, protocol::encode_optional(*streams ? std::optional(to_bytes(**streams)) : std::nullopt)};
    }
    case StoreOp::load_journals: {
      auto loaded = store_.load_journals(call.shard, journal_row);
      if (!loaded) return failed(loaded.error(), fmt::format("reading shard {}'s journals", call.shard));
      rows.flush();
      return StoreReply{};
    }
    case StoreOp::read_journal: {
      auto read = store_.read_journal(call.place, call.shard, call.id, journal_row);
      if (!read) return failed(read.error(), fmt::format("reading run '{}''s journal", call.id));
      rows.flush();
      return StoreReply{};
    }
    case StoreOp::parked: {
      auto run = store_.parked(call.shard, call.id);
      if (!run) return failed(run.error(), fmt::format("reading parked run '{}'", call.id));
      return StoreReply{{}, {}, protocol::encode_optional(*run ? std::optional(protocol::encode_parked(**run)) : std::nullopt)};
    }
    case StoreOp::parked_by_wake: {
      // From (ms, id) on: runs at ms with an id up to call.id were sent before.
      std::uint32_t sent = 0;
      auto limit = std::max<std::uint32_t>(1, call.limit);
      auto scanned = store_.parked_by_wake(call.shard, call.ms, [&](const engine::ParkedRun& run) {
        if (!call.id.empty() && run.wake_ms == call.ms && run.id <= call.id) return true;
        rows.add(protocol::encode_parked(run));
        return ++sent < limit;
      });
      if (!scanned) return failed(scanned.error(), fmt::format("reading shard {}'s parked runs", call.shard));
      rows.flush();
      return StoreReply{};
    }
    case StoreOp::all_parked: {
      auto listed = store_.all_parked(call.shard, [&](const engine::ParkedRun& run) { rows.add(protocol::encode_parked(run)); });
      if (!listed) return failed(listed.error(), fmt::format("reading shard {}'s parked runs", call.shard));
      rows.flush();
      return StoreReply{};
    }
    case StoreOp::id_filters: {
      // Two passes over the ids: count per shard, then fill filters sized
      // for twice that (room for what the worker stores next).
      if (call.limit == 0 || call.limit > 1u << 16) return StoreReply{"bad_request", "id_filters: a shard count", {}};
      std::vector<std::size_t> counts(call.limit, 0);
      auto counted = store_.stored_ids([&](std::string_view id) { ++counts[engine::shard_of(id, call.limit)]; });
      if (!counted) return failed(counted.error(), "reading the stored run ids");
      std::vector<engine::IdFilter> filters;
      for (auto count : counts) filters.emplace_back(std::min<std::size_t>(2 * count, kFilterIdsMax));
      auto filled = store_.stored_ids([&](std::string_view id) { filters[engine::shard_of(id, call.limit)].add(id); });
      if (!filled) return failed(filled.error(), "reading the stored run ids");
      for (const auto& filter : filters) rows.add(filter.encode());
      rows.flush();
      return StoreReply{};
    }
    case StoreOp::expire_finished: {
      auto expired = store_.expire_finished(call.ms);
      if (!expired) return failed(expired.error(), "expiring finished runs");
      std::lock_guard lock(mu_);
      stats_.finished_expired += *expired;
      return StoreReply{{}, {}, protocol::encode_u64(*expired)};
    }
  }
  return StoreReply{"bad_request", "an unknown store call", {}};
}

StoreReply StoreService::write(const StoreCall& call, const std::function<bool(std::uint32_t, std::uint64_t)>& holds) {
  auto batch = engine::RunStore::Batch::decode(call.batch);
  if (!batch) return StoreReply{"bad_request", "a store write whose batch does not decode", {}};
  // Every write a worker makes is a shard's checkpoint: one that names no
  // shard would pass no fence.
  if (batch->shards().empty()) return StoreReply{"bad_request", "a store write that names no shard", {}};
  std::lock_guard fence(fence_mu_);
  for (auto shard : batch->shards()) {
    auto named = std::find_if(call.epochs.begin(), call.epochs.end(), [&](const auto& e) { return e.first == shard; });
    if (shard >= keep_from_.size() || named == call.epochs.end() || !holds(shard, named->second)) {
      return StoreReply{"fenced", fmt::format("a store write for shard {}, whose lease this connection does not hold",
                                              shard),
                        {}};
    }
  }
  // The worker has no log: its checkpoints keep the log from the batch
  // holding their first record not in the store (see Log::keep_from_sequence).
  for (auto& checkpoint : batch->checkpoints()) {
    if (checkpoint.keep_from_sequence != 0) continue;
    auto first = checkpoint.replay_from > 0 ? checkpoint.replay_from : checkpoint.lsn + 1;
    checkpoint.keep_from_sequence = log_.keep_from_sequence(checkpoint.shard, first - 1);
  }
  auto checkpoints = batch->checkpoints();
  if (auto written = store_.write(std::move(*batch)); !written) {
    return failed(written.error(), "writing to the run store");
  }
  std::uint64_t keep_from = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& checkpoint : checkpoints) {
      keep_from_[checkpoint.shard] = std::max(keep_from_[checkpoint.shard], checkpoint.keep_from_sequence);
      ++written_[checkpoint.shard];
      ++stats_.checkpoints;
    }
    keep_from = *std::min_element(keep_from_.begin(), keep_from_.end());
  }
  if (!checkpoints.empty()) {
    auto retired = log_.retire(keep_from);
    std::lock_guard lock(mu_);
    if (retired) {
      stats_.segments_retired += retired->segments;
      stats_.blob_files_retired += retired->blob_files;
    } else if (stats_.retire_error.empty()) {
      // The checkpoint stands; the log keeps what it could not retire.
      stats_.retire_error = retired.error().message();
      if (say_) say_(fmt::format("cannot retire log segments: {}", stats_.retire_error));
    }
  }
  return StoreReply{{}, {}, protocol::encode_u64(store_.size_bytes())};
}

std::vector<std::uint32_t> StoreService::lagging(std::uint64_t retires_at) const {
  std::vector<std::uint32_t> shards;
  std::lock_guard lock(mu_);
  for (std::uint32_t shard = 0; shard < keep_from_.size(); ++shard) {
    if (keep_from_[shard] < retires_at) shards.push_back(shard);
  }
  return shards;
}

std::uint64_t StoreService::checkpoints_of(std::uint32_t shard) const {
  std::lock_guard lock(mu_);
  return shard < written_.size() ? written_[shard] : 0;
}

StoreServiceStats StoreService::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace fusee::server
