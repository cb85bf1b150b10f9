#include "wal/batch_builder.hpp"

#include <algorithm>
#include <cstring>

#include "base/assert.hpp"
#include "wal/limits.hpp"

namespace fusee::wal {

Lsn ShardStage::push(std::span<const std::byte> record, bool blob_ref) {
  std::byte length[kVarintBytesMax];
  auto length_bytes = encode_varint(record_prefix(record.size(), blob_ref), length);
  auto encoded_bytes = length_bytes + record.size();
  if (chunks_.empty() || chunks_.back()->capacity - chunks_.back()->size < encoded_bytes) {
    // A shard that fills its chunks gets larger ones, up to kStageChunkBytes;
    // records never straddle chunks, and a large one gets a chunk of its own.
    if (!chunks_.empty()) next_chunk_bytes_ = std::min(kStageChunkBytes, next_chunk_bytes_ * 2);
    auto chunk = std::make_shared<Chunk>();
    chunk->capacity = std::max(next_chunk_bytes_, encoded_bytes);
    chunk->data = std::make_unique_for_overwrite<std::byte[]>(chunk->capacity);
    chunk->start = tail_;
    chunks_.push_back(std::move(chunk));
  }
  auto& chunk = *chunks_.back();
  std::memcpy(chunk.data.get() + chunk.size, length, length_bytes);
  if (!record.empty()) std::memcpy(chunk.data.get() + chunk.size + length_bytes, record.data(), record.size());
  chunk.size += encoded_bytes;
  tail_ += encoded_bytes;
  ends_.push_back(tail_);
  return next_lsn_++;
}

std::size_t ShardStage::prefix_bytes(std::size_t count) const {
  FUSEE_ASSERT(count <= record_count(), "prefix longer than the stage");
  if (count == 0) return 0;
  return static_cast<std::size_t>(ends_[count - 1] - head_);
}

std::size_t ShardStage::records_fitting(std::size_t budget_bytes) const {
  // ends_ is increasing, so the records that fit are a prefix: binary search.
  auto it = std::upper_bound(ends_.begin(), ends_.end(), head_ + budget_bytes);
  return static_cast<std::size_t>(it - ends_.begin());
}

ShardStage::Taken ShardStage::peek(std::size_t count) const {
  Taken taken;
  taken.bytes_ = prefix_bytes(count);
  auto from = head_;
  auto left = taken.bytes_;
  for (const auto& chunk : chunks_) {
    if (left == 0) break;
    auto chunk_end = chunk->start + chunk->size;
    if (chunk_end <= from) continue;
    auto offset = static_cast<std::size_t>(from - chunk->start);
    auto length = std::min<std::size_t>(left, static_cast<std::size_t>(chunk_end - from));
    taken.extents_.push_back({chunk, offset, length});
    from += length;
    left -= length;
  }
  FUSEE_ASSERT(left == 0, "staged records missing from the chunks");
  return taken;
}

ShardStage::Taken ShardStage::take(std::size_t count) {
  auto taken = peek(count);
  pop(count);
  return taken;
}

void ShardStage::pop(std::size_t count) {
  FUSEE_ASSERT(count <= record_count(), "popping more records than staged");
  if (count == 0) return;
  head_ = ends_[count - 1];
  ends_.erase(ends_.begin(), ends_.begin() + static_cast<std::ptrdiff_t>(count));
  first_lsn_ += count;
  // Chunks wholly taken go (a Taken still copying from one keeps it alive),
  // so an idle shard holds no staging memory.
  while (!chunks_.empty() && chunks_.front()->start + chunks_.front()->size <= head_) chunks_.pop_front();
}

void ShardStage::clear() { pop(record_count()); }

void ShardStage::Taken::copy_to(std::byte* out) const {
  for (const auto& extent : extents_) {
    std::memcpy(out, extent.chunk->data.get() + extent.offset, extent.length);
    out += extent.length;
  }
}

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

void encode_sections(const BatchPlan& plan, std::span<const Lsn> first_lsns,
                     std::span<const ShardStage::Taken> taken, std::span<std::byte> body) {
  FUSEE_ASSERT(body.size() == plan.body_bytes, "body buffer does not match the plan");
  FUSEE_ASSERT(first_lsns.size() == plan.sections.size() && taken.size() == plan.sections.size(),
               "one first LSN and one taken prefix per section");
  std::size_t at = 0;
  for (std::size_t i = 0; i < plan.sections.size(); ++i) {
    const auto& section = plan.sections[i];
    SectionHeader header{section.shard, section.record_count, first_lsns[i], section.records_bytes};
    encode_section_header(header, body.data() + at);
    at += kSectionHeaderBytes;
    FUSEE_ASSERT(taken[i].bytes() == section.records_bytes, "stage changed since planning");
    taken[i].copy_to(body.data() + at);
    at += taken[i].bytes();
  }
  FUSEE_ASSERT(at == body.size(), "sections do not fill the body");
}

void encode_sections(const BatchPlan& plan, std::span<const ShardStage> stages,
                     std::span<std::byte> body) {
  std::vector<Lsn> first_lsns;
  std::vector<ShardStage::Taken> taken;
  for (const auto& section : plan.sections) {
    first_lsns.push_back(stages[section.shard].first_lsn());
    taken.push_back(stages[section.shard].peek(section.record_count));
  }
  encode_sections(plan, first_lsns, taken, body);
}

}  // namespace fusee::wal
