// A replica's batches as the shared log's own segment files (<dir>/wal/,
// written as a replicated log's, kFormatVersionReplicated), so that every
// replica's files are byte-identical up to where each ends and `fusee
// inspect` reads any of them (docs/replication.md, "The replica's files").
//
// Every replica derives the same bytes from the same batches: nothing in a
// segment is drawn at random or chosen by one replica alone.
//  - A batch of the replicated log (replication::Entry) is one batch of the
//    shared log: sequence, view and acked are the entry's, the chain CRC
//    follows the batch before, life is the view (a primary's term is its
//    life), and the body is the entry's payload: the shared log's sections,
//    as `wal::Log` seals them (a replica process's batch is one section of
//    shard 0, a record per client's append: encode_records_body).
//  - A segment's salt is derived from the cluster's name and the segment's
//    number; its capacity is the first segment's, set when the cluster's
//    replicas are initialised.
//  - A batch is at most a quarter of the capacity; the batch after which
//    less than that is left carries the roll flag, and the chain goes on in
//    the next segment. So the roll is part of a batch (a replicated log's
//    roll may carry records) and takes no sequence of its own: the shared
//    log's sequences are the replicated log's.
//
// Segments retire from the oldest on (ReplicaStore::retire): the log then
// starts at a later segment, whose header holds the sequence of its first
// batch and the chain's CRC before it -- the chain's start, which
// <dir>/replica/start records durably before any segment goes (LogStart).
//
// Segments are not preallocated: a segment file ends where its last batch
// does, and reading it back is strict about that (replica_store.hpp says
// why: a zeroed sector where an acknowledged batch was must not read as
// the log's end).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "replica/store_errc.hpp"
#include "replication/replica_messages.hpp"
#include "wal/io/file_system.hpp"
#include "wal/limits.hpp"
#include "wal/log_format.hpp"

namespace fusee::replica {

// Holds a batch of the largest payload a replica takes (16 MiB) at a quarter.
inline constexpr std::uint64_t kSegmentBytesDefault = 80ull << 20;
inline constexpr std::uint64_t kSegmentBytesMin = 16 * wal::kBlockBytes;
// A quarter of it, the largest batch, is the largest the shared log reads.
inline constexpr std::uint64_t kSegmentBytesMax = 4 * wal::kBatchBytesMax;

// Where the chain stands after a batch: where the next one goes and what it
// must follow.
struct ChainPoint {
  std::uint64_t segment = 1;  // the segment the next batch goes into
  std::uint64_t salt = 0;     // that segment's
  std::uint64_t capacity = 0; // every segment's size bound
  std::uint64_t offset = wal::kSegmentHeaderBytes;  // where the next batch goes
  replication::Seq seq = 0;   // the last batch's (0: none yet)
  std::uint32_t crc = 0;      // the last batch's CRC (the chain)
  friend bool operator==(const ChainPoint&, const ChainPoint&) = default;
};

std::uint64_t segment_salt(const std::string& cluster, std::uint64_t segment);
// The largest batch a segment of `capacity` bytes takes, and the largest
// payload such a batch carries.
constexpr std::uint64_t batch_bytes_max(std::uint64_t capacity) {
  return capacity / 4 / wal::kBlockBytes * wal::kBlockBytes;
}
constexpr std::uint64_t payload_bytes_max(std::uint64_t capacity) {
  return batch_bytes_max(capacity) - wal::kBatchHeaderBytes;
}

// The first segment's header, and the point before the first batch.
wal::SegmentHeader first_segment_header(const std::string& cluster, std::uint64_t capacity);
ChainPoint start_point(const std::string& cluster, std::uint64_t capacity);

// Where the log starts once segments have retired: the first segment kept,
// and what its header says comes before it. Absent, the log starts at
// segment 1, sequence 1. Segments below it are retired: one still present
// is what a retirement stopped before removing (never damage, never read).
struct LogStart {
  std::uint64_t segment = 1;
  replication::Seq first_seq = 1;  // the first batch kept
  std::uint32_t prev_crc = 0;      // the chain's CRC before it
  replication::View prev_view = 0;  // the view of the batch before it
  friend bool operator==(const LogStart&, const LogStart&) = default;
};
std::string log_start_path(const std::string& dir);
// The start <dir>/replica/start records; LogStart{} when there is none.
// A record that does not parse is corrupt (wal::errc::corrupt).
Result<LogStart> read_log_start(io::FileSystem& fs, const std::string& dir);
// Records `start` durably (a new file renamed over the old, the directory
// synced): after it, a crash never brings back an earlier start.
Result<void> write_log_start(io::FileSystem& fs, const std::string& dir, const LogStart& start);
// Fills what only the disk knows into an append or a fetch's answer anchored
// at the log's start (AppendRequest::anchor, FetchReply::anchor); false when the anchor is not the disk's start any
// more (it retired further since the core asked): the message is dropped.
bool fill_anchor(replication::Message& message, const LogStart& start);
// The point before segment `header`'s first batch.
ChainPoint point_before(const wal::SegmentHeader& header);

// A body of one section: `records` of `shard` from `first_lsn` on.
std::string encode_records_body(wal::ShardId shard, wal::Lsn first_lsn, const std::vector<std::string>& records);
// The records of `shard` in a body, in order; nothing when the bytes are no
// body (sections that do not decode, a blob reference).
std::optional<std::vector<std::string>> records_in_body(std::string_view body, wal::ShardId shard);
// The LSN of the last record of `shard` in a body; 0 when it has none.
wal::Lsn last_lsn_in_body(std::string_view body, wal::ShardId shard);
// The LSN of the first record of `shard` in a body; 0 when it has none.
wal::Lsn first_lsn_in_body(std::string_view body, wal::ShardId shard);

// One entry as a batch of the shared log, after `before`.
struct EncodedBatch {
  std::vector<std::byte> bytes;  // whole blocks
  bool roll = false;             // the chain goes on in the next segment
  wal::SegmentHeader next;       // that segment's header, when roll
  ChainPoint after;
};
// StoreErrc::payload_too_large past payload_bytes_max(before.capacity),
// StoreErrc::malformed_batch for a payload that is no body of sections
// (a blob reference included: a replica has no blob area).
Result<EncodedBatch> encode_entry(const std::string& cluster, const ChainPoint& before,
                                  const replication::Entry& entry);

// A segment file's name in <dir>/wal.
std::string wal_dir_of(const std::string& dir);
std::string segment_path(const std::string& dir, std::uint64_t segment);
// Makes segment `header.segment_number` a file holding only its header,
// durably (the directory entry too).
Result<std::unique_ptr<io::File>> create_replica_segment(io::FileSystem& fs, const std::string& dir,
                                                         const wal::SegmentHeader& header);

// What a replica's segment files hold, read strictly.
struct ReadChain {
  std::vector<replication::Entry> entries;
  // points[k]: the chain after batch start.first_seq - 1 + k (points[0]:
  // before the first batch kept, the log's start; point_after() finds one).
  std::vector<ChainPoint> points;
  LogStart start;
  // Segment files below the start: what a retirement stopped before
  // removing (never damage, never part of the chain).
  std::vector<std::uint64_t> retired_segments;
  bool damaged = false;
  std::string damage;
  // Segment files past the one the chain ends in, holding their header at
  // most: a roll's new segment whose rolling batch did not land, or what a
  // cut left (never damage; one holding more is).
  std::vector<std::uint64_t> leftover_segments;
  std::vector<std::uint64_t> segments;  // every segment file found
  std::uint64_t file_bytes = 0;         // of all of them (the retired ones' left out)

  // The last batch retired (0: none); the chain holds the batches after it.
  replication::Seq retired_through() const { return start.first_seq - 1; }
  const ChainPoint& point_after(replication::Seq seq) const { return points[seq - retired_through()]; }
};
// Reads <dir>/wal of a replica of `cluster` (read-only), from its start. Past
// `held_bytes_max` of payloads, the oldest batches' are released as it reads
// (Entry::elided), so a long log is not held in memory whole. The chain must run
// to the end of each segment file: past its last whole batch only fewer
// zero bytes than a batch header may follow (an append that did not land).
// Anything else is damage -- a batch that fails its checksum or is cut
// short, zeros where one should be, one that does not follow, a roll to a
// segment that is missing, a segment past the chain's end holding more than
// its header, a start segment missing or whose header is not the one
// recorded -- and the chain ends before it.
Result<ReadChain> read_chain(io::FileSystem& fs, const std::string& dir, const std::string& cluster,
                             std::uint64_t held_bytes_max = UINT64_MAX);

}  // namespace fusee::replica
