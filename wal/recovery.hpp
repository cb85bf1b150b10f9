// Recovery of the shared log: first a read-only plan of what recovery would do
// (what chain it keeps, what tail it drops, or why it refuses), the same plan
// `fusee inspect` prints; then apply() carries it out. Planning never writes.
//
// The rule (spec/FuseeLog.tla states it; docs/durability.md explains it):
// follow the chain from the oldest segment; a batch continues it when its CRC
// holds with its segment's salt, its sequence is the next one and its prev_crc
// is the previous batch's CRC. Stop at the first batch that does not. If a
// valid batch anywhere past that end carries an `acked` reaching past the end,
// an acknowledged batch was lost: refuse, naming where. Damage that cannot be
// a torn write (a bad header of a segment the chain needs, a truncated
// segment) refuses too. A crash alone never refuses.
//
// Not thread-safe; run before the log's writer starts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"
#include "wal/log_format.hpp"

namespace fusee::wal {

struct SegmentSummary {
  std::uint64_t number = 0;
  std::string path;
  std::uint64_t file_bytes = 0;
  SegmentHeaderStatus header_status = SegmentHeaderStatus::damaged;
  SegmentHeader header;           // meaningful when header_status is valid
  std::uint64_t chain_batches = 0;  // batches of the chain in this segment
};

// Where one section of the chain lives, so records can be read back.
struct SectionLocation {
  ShardId shard = 0;
  Lsn first_lsn = 0;
  std::uint32_t record_count = 0;
  std::uint64_t segment = 0;
  std::uint64_t batch_offset = 0;
  std::uint32_t batch_bytes = 0;
  std::uint64_t sequence = 0;  // of the batch holding the section
};

// One batch of the chain, for `fusee inspect DIR batches`.
struct BatchSummary {
  std::uint64_t segment = 0;
  std::uint64_t offset = 0;
  std::uint64_t sequence = 0;
  std::uint32_t total_length = 0;
  std::uint32_t flags = 0;  // kBatchFlagRoll, kBatchFlagClose
  std::uint64_t acked = 0;
  std::uint64_t life = 0;
  std::uint32_t section_count = 0;
  std::uint64_t records = 0;
  std::uint64_t view = 0;  // a replicated log's: the view that sealed it
};

struct ShardRange {
  Lsn first_lsn = 0;  // 0 when the shard has no record in the log
  Lsn last_lsn = 0;
};

struct RecoveryPlan {
  std::string wal_dir;
  bool fresh = false;  // no log yet: open creates one
  bool replicated = false;  // its segments are a replicated log's (kFormatVersionReplicated)

  std::vector<SegmentSummary> segments;  // every segment file found, by number

  // The chain recovery keeps.
  std::uint64_t first_sequence = 0;
  std::uint64_t last_sequence = 0;  // first_sequence - 1 when the chain is empty
  std::uint32_t last_crc = 0;
  std::uint64_t chain_batches = 0;
  std::uint64_t chain_records = 0;
  bool ends_with_close = false;  // the last batch is a clean close marker
  std::vector<SectionLocation> sections;
  std::vector<ShardRange> shards;  // indexed by shard id
  std::vector<BatchSummary> batches;  // every batch of the chain, when asked for

  // Where the next batch goes: right after the chain's end.
  std::uint64_t write_segment = 0;
  std::uint64_t write_offset = 0;

  // What lies past the end and is dropped (not an error: a torn tail).
  std::string tail;                      // human description; empty when clean
  std::uint64_t stale_batches_past_end = 0;  // valid batches past the end (never acknowledged)
  std::vector<std::string> files_to_delete;  // segments past the end, leftovers

  // Blob files (wal/blobs/) the chain references, and those it does not,
  // which apply() deletes.
  std::vector<std::uint64_t> blob_files_referenced;
  std::vector<std::uint64_t> blob_files_unreferenced;
  std::uint64_t blob_records = 0;
  // For each referenced blob file, the newest segment referencing it: the
  // file may go once that segment is retired.
  std::map<std::uint64_t, std::uint64_t> blob_file_last_segment;

  // Set when recovery refuses to open; the message names file, offset and
  // sequences.
  bool refused = false;
  std::string refusal;
};

// What lies outside the log that recovery must agree with: the checkpoints
// that allowed old segments to be retired (engine/checkpointer.hpp).
struct RecoveryBase {
  // The oldest segment may start at no later sequence than this: every
  // shard's checkpoint needs the log from its keep_from_sequence on. 1 when
  // some shard has no checkpoint (nothing may have been retired).
  std::uint64_t first_sequence_max = 1;
  // Per shard (empty: all 0): the LSN its checkpoint covers. The log starts
  // a shard's LSNs past it even when none of its records is left, and
  // refuses when the records the checkpoint does not cover are missing.
  std::vector<Lsn> shard_lsn_floors;
  // Per shard (empty: floor + 1): the first LSN recovery reads, at or below
  // the floor when the checkpoint left recent runs' records in the log.
  std::vector<Lsn> shard_replay_from;
};

// Reads the log in wal_dir and decides; never writes. An I/O error reading is
// an error result; a damaged log is a plan with refused set. `list_batches`
// fills plan.batches (an inspection tool's view; recovery does not need it).
// `replica_files`: wal_dir is a replica's (replica/replica_segments.hpp),
// whose replicated segments are not preallocated and whose rolls ride on a
// batch of records; the replica's own recovery is stricter about its end.
Result<RecoveryPlan> plan_recovery(io::FileSystem& fs, const std::string& wal_dir,
                                   std::uint32_t shard_count, const RecoveryBase& base = {},
                                   bool list_batches = false, bool replica_files = false);

// Carries out a plan that did not refuse: deletes what it names and syncs the
// directory. Writes nothing else; reopening afterwards plans the same chain.
Result<void> apply_recovery(io::FileSystem& fs, const RecoveryPlan& plan);

// The blob area of a log directory.
std::string blob_dir_of(const std::string& wal_dir);

// Reads one whole batch (header + body) of a segment, for reading records
// back. Verifies CRC and structure against salt; errc::corrupt if they fail.
Result<std::vector<std::byte>> read_batch(io::File& file, std::uint64_t salt, std::uint64_t offset,
                                          std::uint32_t batch_bytes);

}  // namespace fusee::wal
