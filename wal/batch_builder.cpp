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
  FUSEE_ASSERT(cut_before_group(count) == count, "a batch would split a group");
  head_ = ends_[count - 1];
  ends_.erase(ends_.begin(), ends_.begin() + static_cast<std::ptrdiff_t>(count));
  first_lsn_ += count;
  while (!groups_.empty() && groups_.front().end <= first_lsn_) groups_.pop_front();
  // Chunks wholly taken go (a Taken still copying from one keeps it alive),
  // so an idle shard holds no staging memory.
  while (!chunks_.empty() && chunks_.front()->start + chunks_.front()->size <= head_) chunks_.pop_front();
}

void ShardStage::clear() {
  // Nothing staged will be written (a poisoned log): the groups go too.
  groups_.clear();
  group_open_ = false;
  pop(record_count());
}

std::size_t ShardStage::sealable_count() const {
  auto limit = next_lsn_;
  if (!blocked_.empty()) limit = std::min(limit, *blocked_.begin());
  if (group_open_) limit = std::min(limit, std::max(open_group_first_, first_lsn_));
  // A closed group with a blocked reference inside waits whole.
  return cut_before_group(static_cast<std::size_t>(limit - first_lsn_));
}

void ShardStage::begin_group() {
  FUSEE_ASSERT(!group_open_, "a group is already open on this stage");
  group_open_ = true;
  open_group_first_ = next_lsn_;
  open_group_position_ = tail_;
}

void ShardStage::end_group() {
  if (!group_open_) return;
  group_open_ = false;
  // A group of one record is a record; an empty one is nothing.
  if (next_lsn_ - open_group_first_ > 1) groups_.push_back({open_group_first_, next_lsn_});
}

std::size_t ShardStage::cut_before_group(std::size_t count) const {
  auto at = first_lsn_ + count;
  for (const auto& group : groups_) {
    if (group.first >= at) break;
    if (at < group.end && at > group.first) return static_cast<std::size_t>(group.first - first_lsn_);
  }
  return count;
}

std::size_t ShardStage::next_unit_end(std::size_t count) const {
  auto at = first_lsn_ + count;
  for (const auto& group : groups_) {
    if (group.first > at) break;
    if (group.first == at) return static_cast<std::size_t>(group.end - first_lsn_);
  }
  return count + 1;
}

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
    // Never a cut inside a group: a crash keeps a group whole or loses it.
    auto take = stage.cut_before_group(std::min(stage.records_fitting(handoff), sealable));
    if (take == 0) {
      // A shard hands over at least one record (or group) however large, but
      // only where it fits the batch; otherwise it leads the next batch.
      auto unit = stage.next_unit_end(0);
      if (stage.prefix_bytes(unit) <= room) {
        take = unit;
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
    if (take < sealable) {
      auto next = stage.next_unit_end(take);
      if (next <= sealable && stage.prefix_bytes(next) <= handoff_bytes_max && stage.prefix_bytes(next) > room) break;
    }
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
