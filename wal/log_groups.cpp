// Atomic groups in the shared log: records a shard appends between
// begin_group and end_group go into one batch together, so a crash keeps all
// of them or none. The stage keeps them out of any batch while the group is
// open and never lets a batch cut a closed one (wal/batch_builder.hpp). Part
// of class Log (wal/log.hpp).
#include "base/assert.hpp"
#include "wal/log.hpp"

namespace fusee::wal {

void Log::begin_group(ShardId shard) {
  FUSEE_ASSERT(shard < stages_.size(), "shard out of range");
  std::lock_guard lock(mu_);
  if (poison_ || closing_) return;  // its appends fail anyway
  stages_[shard].begin_group();
  ++open_groups_;
}

void Log::end_group_locked(ShardId shard) {
  auto& stage = stages_[shard];
  if (!stage.group_open()) return;
  stage.end_group();
  --open_groups_;
  ++stats_.groups;
}

void Log::end_group(ShardId shard) {
  FUSEE_ASSERT(shard < stages_.size(), "shard out of range");
  bool ring_wake = false;
  {
    std::lock_guard lock(mu_);
    // Closing: a group not ended before close() began stays uncommitted and
    // unwritten, even if its close marker is not written yet.
    if (!stages_[shard].group_open() || closing_) return;
    end_group_locked(shard);
    ring_wake = owner_ && !in_flight_.empty() && in_flight_.size() < kWritesInFlightMax;
  }
  work_cv_.notify_one();
  if (ring_wake) queue_->wake();
  if (options_.sink && !options_.sink_thread) options_.sink->staged();
}

bool Log::fits_open_group_locked(ShardId shard, std::size_t encoded_bytes) {
  auto& stage = stages_[shard];
  if (!stage.group_open()) return false;
  if (stage.open_group_bytes() + encoded_bytes <= group_bytes_max_) return true;
  ++stats_.groups_cut_at_cap;
  end_group_locked(shard);
  return false;
}

bool Log::in_group(ShardId shard) const {
  FUSEE_ASSERT(shard < stages_.size(), "shard out of range");
  std::lock_guard lock(mu_);
  return stages_[shard].group_open();
}

bool Log::only_open_groups_staged_locked() const {
  if (open_groups_ == 0) return staged_records_ == 0;
  std::size_t in_open_groups = 0;
  for (const auto& stage : stages_) in_open_groups += stage.open_group_records();
  return in_open_groups == staged_records_;
}

}  // namespace fusee::wal
