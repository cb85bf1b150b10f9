// Group commit's decision logic: per-shard staging of encoded records, and the
// choice of which staged records form the next batch. Pure: no I/O, clocks or
// threads, so tests drive exactly the code production runs. Not thread-safe;
// the log guards it with its staging mutex, except ShardStage::Taken, whose
// bytes are copied outside it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "wal/limits.hpp"
#include "wal/log_format.hpp"

namespace fusee::wal {

// One shard's staged records in LSN order, stored encoded (varint length +
// bytes) back to back in chunks whose bytes never move once written, so
// that a batch can take records under the log's lock in O(records) and copy
// their bytes after releasing it (take()), while appenders go on staging.
class ShardStage {
 public:
  // Staging memory; shared with the Taken prefixes that still copy from it.
  struct Chunk {
    std::unique_ptr<std::byte[]> data;
    std::size_t capacity = 0;
    std::size_t size = 0;      // bytes written; only the stage's owner reads it
    std::uint64_t start = 0;   // stage position of data[0]
  };

  // Records taken out of a stage: their encoded bytes, in chunks kept alive
  // and unchanged while this lives. copy_to() needs no lock: appenders only
  // write past what was taken, and nothing frees a chunk a Taken holds.
  class Taken {
   public:
    std::size_t bytes() const { return bytes_; }
    void copy_to(std::byte* out) const;

   private:
    friend class ShardStage;
    struct Extent {
      std::shared_ptr<const Chunk> chunk;
      std::size_t offset = 0;
      std::size_t length = 0;
    };
    std::vector<Extent> extents_;
    std::size_t bytes_ = 0;
  };

  explicit ShardStage(Lsn next_lsn = 1) : next_lsn_(next_lsn), first_lsn_(next_lsn) {}

  // Stages one record (or, with blob_ref, the reference to a large record's
  // blob) and returns its LSN.
  Lsn push(std::span<const std::byte> record, bool blob_ref = false);
  bool empty() const { return ends_.empty(); }
  std::size_t record_count() const { return ends_.size(); }
  std::size_t staged_bytes() const { return static_cast<std::size_t>(tail_ - head_); }
  // LSN of the oldest staged record (the next one to be taken).
  Lsn first_lsn() const { return first_lsn_; }
  // LSN the next pushed record gets.
  Lsn next_lsn() const { return next_lsn_; }
  // Encoded size of the first count staged records.
  std::size_t prefix_bytes(std::size_t count) const;
  // How many leading records fit in budget_bytes (0 if not even one).
  std::size_t records_fitting(std::size_t budget_bytes) const;
  // The first count records' encoded bytes, without removing them.
  Taken peek(std::size_t count) const;
  // Removes the first count records and returns their bytes (they go into a
  // batch): O(count + chunks), no byte copied.
  Taken take(std::size_t count);
  // Removes the first count records.
  void pop(std::size_t count);
  // Drops everything staged (a poisoned log never writes it).
  void clear();

  // A staged blob reference may enter a batch only once its blob is durable:
  // block(lsn) holds back that record and every later one of this shard
  // until unblock(lsn).
  void block(Lsn lsn) { blocked_.insert(lsn); }
  void unblock(Lsn lsn) { blocked_.erase(lsn); }
  // How many leading records may go into a batch now: none of a blob
  // reference still blocked, nor of the open group, nor anything after them,
  // and no part of a closed group without the rest.
  std::size_t sealable_count() const;

  // Atomic groups: the records pushed between begin_group() and end_group()
  // go into one batch together, so a crash keeps all of them or none (the
  // engine's run started ahead of the disk, engine/shard_ahead.cpp). An open
  // group is not sealable; a closed one is never cut (plan_batch takes it
  // whole or leaves it to lead the next batch). At most one group is open;
  // end_group() without one open does nothing (a poisoned stage dropped it).
  void begin_group();
  void end_group();
  bool group_open() const { return group_open_; }
  // Encoded bytes pushed since the open group began (0 with none open).
  std::size_t open_group_bytes() const {
    return group_open_ ? static_cast<std::size_t>(tail_ - open_group_position_) : 0;
  }
  // Staged records in the open group.
  std::size_t open_group_records() const {
    return group_open_ ? static_cast<std::size_t>(next_lsn_ - std::max(open_group_first_, first_lsn_)) : 0;
  }
  // The largest count <= `count` of leading records that ends outside every
  // closed group (a batch may take that many without splitting one).
  std::size_t cut_before_group(std::size_t count) const;
  // How many leading records the unit after the first `count` spans: the
  // closed group that starts there, else one record.
  std::size_t next_unit_end(std::size_t count) const;

 private:
  std::deque<std::shared_ptr<Chunk>> chunks_;  // oldest first; the last one is written
  std::uint64_t head_ = 0;          // stage position of the first staged byte
  std::uint64_t tail_ = 0;          // stage position past the last staged byte
  std::deque<std::uint64_t> ends_;  // stage position past each staged record
  std::size_t next_chunk_bytes_ = kStageChunkBytesMin;  // grows while chunks fill
  Lsn next_lsn_;
  Lsn first_lsn_;
  std::set<Lsn> blocked_;  // blob references whose blob is not yet durable
  struct Group {
    Lsn first = 0;  // LSN of its first record
    Lsn end = 0;    // LSN past its last record
  };
  std::deque<Group> groups_;  // closed groups with records still staged, in order
  bool group_open_ = false;
  Lsn open_group_first_ = 0;
  std::uint64_t open_group_position_ = 0;  // stage position where the open group began
};

struct SectionPlan {
  ShardId shard = 0;
  std::uint32_t record_count = 0;
  std::uint32_t records_bytes = 0;
};

struct BatchPlan {
  std::vector<SectionPlan> sections;
  std::uint32_t body_bytes = 0;  // section headers + records
  bool empty() const { return sections.empty(); }
};

// Chooses the sections of the next batch: shards in turn from first_shard
// (wrapping), each handing over at most handoff_bytes_max of its sealable
// records (at least one record or group), whole sections while they fit in
// batch_bytes_max, then the leading records of the next section that fit,
// cut at a record boundary outside every group. Records that do not fit,
// wait for their blob, or belong to an open group stay staged.
BatchPlan plan_batch(std::span<const ShardStage> stages, ShardId first_shard,
                     std::size_t batch_bytes_max, std::size_t handoff_bytes_max);

// Bytes a planned batch occupies on disk (header + body, padded to blocks).
std::uint32_t batch_total_bytes(std::uint32_t body_bytes);

// Writes the planned sections' headers and records into body (which must be
// plan.body_bytes long): section i starts at first_lsns[i] and its records
// are taken[i]. Needs no lock (see ShardStage::Taken).
void encode_sections(const BatchPlan& plan, std::span<const Lsn> first_lsns,
                     std::span<const ShardStage::Taken> taken, std::span<std::byte> body);

// The same from the stages themselves, which it does not pop (tests, tools).
void encode_sections(const BatchPlan& plan, std::span<const ShardStage> stages,
                     std::span<std::byte> body);

}  // namespace fusee::wal
