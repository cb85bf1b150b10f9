#include "wal/batch_builder.hpp"

#include <algorithm>
#include <cstring>

#include "base/assert.hpp"
#include "wal/limits.hpp"

namespace fusee::wal {

Lsn ShardStage::push(std::span<const std::byte> record, bool blob_ref) {
  std::byte length[kVarintBytesMax];
  auto length_bytes = encode_varint(record_prefix(record.size(), blob_ref), length);
  bytes_.insert(bytes_.end(), length, length + length_bytes);
  bytes_.insert(bytes_.end(), record.begin(), record.end());
  ends_.push_back(bytes_.size());
  return next_lsn_++;
}

std::size_t ShardStage::prefix_bytes(std::size_t count) const {
  FUSEE_ASSERT(count <= record_count(), "prefix longer than the stage");
  if (count == 0) return 0;
  return ends_[ends_head_ + count - 1] - head_;
}

std::size_t ShardStage::records_fitting(std::size_t budget_bytes) const {
  // ends_ is increasing, so the records that fit are a prefix: binary search.
  auto begin = ends_.begin() + static_cast<std::ptrdiff_t>(ends_head_);
  auto limit = head_ + budget_bytes;
  auto it = std::upper_bound(begin, ends_.end(), limit);
  return static_cast<std::size_t>(it - begin);
}

std::span<const std::byte> ShardStage::prefix(std::size_t count) const {
  return {bytes_.data() + head_, prefix_bytes(count)};
}

void ShardStage::pop(std::size_t count) {
  FUSEE_ASSERT(count <= record_count(), "popping more records than staged");
  if (count == 0) return;
  head_ = ends_[ends_head_ + count - 1];
  ends_head_ += count;
  first_lsn_ += count;
  if (empty()) {
    bytes_.clear();
    ends_.clear();
    head_ = 0;
    ends_head_ = 0;
  } else if (head_ > bytes_.size() / 2) {
    // Compact once the taken part dominates, so the cost stays linear.
    bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(head_));
    for (auto i = ends_head_; i < ends_.size(); ++i) ends_[i] -= head_;
    ends_.erase(ends_.begin(), ends_.begin() + static_cast<std::ptrdiff_t>(ends_head_));
    head_ = 0;
    ends_head_ = 0;
  }
}

void ShardStage::clear() { pop(record_count()); }

std::uint32_t batch_total_bytes(std::uint32_t body_bytes) {
  return static_cast<std::uint32_t>(round_up_to_block(kBatchHeaderBytes + std::uint64_t(body_bytes)));
}

BatchPlan plan_batch(std::span<const ShardStage> stages, ShardId first_shard,
                     std::size_t batch_bytes_max, std::size_t handoff_bytes_max) {
  FUSEE_ASSERT(batch_bytes_max > kBatchHeaderBytes + kSectionHeaderBytes, "batch limit too small");
  BatchPlan plan;
  if (stages.empty()) return plan;
  // The body may use whatever the header and the final block's padding leave.
  std::size_t budget = batch_bytes_max - kBatchHeaderBytes;
  auto count = stages.size();
  for (std::size_t i = 0; i < count; ++i) {
    auto shard = static_cast<ShardId>((first_shard + i) % count);
    const auto& stage = stages[shard];
    auto sealable = stage.sealable_count();
    if (sealable == 0) continue;
    if (budget <= kSectionHeaderBytes) break;
    auto room = budget - kSectionHeaderBytes;
    auto handoff = std::min(handoff_bytes_max, room);
    auto take = std::min(stage.records_fitting(handoff), sealable);
    if (take == 0) {
      // A shard hands over at least one record however large, but only where
      // it fits the batch; otherwise it leads the next batch.
      if (stage.prefix_bytes(1) <= room) {
        take = 1;
      } else {
        break;
      }
    }
    auto bytes = stage.prefix_bytes(take);
    plan.sections.push_back({shard, static_cast<std::uint32_t>(take), static_cast<std::uint32_t>(bytes)});
    budget -= kSectionHeaderBytes + bytes;
    plan.body_bytes += static_cast<std::uint32_t>(kSectionHeaderBytes + bytes);
    // A section cut short by the batch limit (not by the hand-off) ends the
    // batch: the rest of that shard leads the next one.
    if (take < sealable && stage.prefix_bytes(take + 1) <= handoff_bytes_max && stage.prefix_bytes(take + 1) > room)
      break;
  }
  return plan;
}

void encode_sections(const BatchPlan& plan, std::span<const ShardStage> stages,
                     std::span<std::byte> body) {
  FUSEE_ASSERT(body.size() == plan.body_bytes, "body buffer does not match the plan");
  std::size_t at = 0;
  for (const auto& section : plan.sections) {
    const auto& stage = stages[section.shard];
    SectionHeader header{section.shard, section.record_count, stage.first_lsn(), section.records_bytes};
    encode_section_header(header, body.data() + at);
    at += kSectionHeaderBytes;
    auto records = stage.prefix(section.record_count);
    FUSEE_ASSERT(records.size() == section.records_bytes, "stage changed since planning");
    std::memcpy(body.data() + at, records.data(), records.size());
    at += records.size();
  }
  FUSEE_ASSERT(at == body.size(), "sections do not fill the body");
}

}  // namespace fusee::wal
