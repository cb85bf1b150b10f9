// Every limit of the shared log, in one place, each with why it is what it is.
// Changing one of these changes behaviour under load; the format constants
// (block size, header sizes) live in wal/log_format.hpp and never change
// without a format version bump.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fusee::wal {

inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kMiB = 1024 * kKiB;

// The most one batch carries, header and padding included; also the most
// recovery reads as one batch, so a corrupt length field cannot make it
// allocate more than this.
inline constexpr std::size_t kBatchBytesMax = 64 * kMiB;

// The most of one shard's staged records that one batch takes, so that a shard
// with a large backlog cannot keep the others out of a batch. A shard always
// hands over at least one record, whatever its size.
inline constexpr std::size_t kHandoffBytesMax = 8 * kMiB;

// The largest record the log accepts. Larger payloads belong in the blob area
// (a later part of the log); this keeps one record well inside one batch and
// bounds the memory a single append can pin.
inline constexpr std::size_t kRecordBytesMax = 16 * kMiB;

// Most bytes of one atomic group (Log::begin_group): a group goes into one
// batch whole, so it must stay far below a batch. A run that starts ahead of
// the disk (engine) writes a few hundred bytes; one that would write more
// stops running ahead there.
inline constexpr std::size_t kGroupBytesMax = 64 * kKiB;

// Records longer than this go to the blob area by default: above it, one
// record's write would hold up every shard's small records behind it.
inline constexpr std::size_t kPayloadOffloadBytesDefault = 64 * kKiB;

// A disk whose flush takes at most this long is "fast" enough for a thread
// waiting for its records to write the batch itself instead of handing it
// over (the two thread wake-ups saved cost as much as a fast flush). The
// seed's 200 us protects a shard thread that has other runs to serve; a
// caller of wait_durable has nothing else to do while it waits, and on this
// project's virtual disks (150-250 us) 200 us switched inline writes off
// half the time, so the log's default is higher. The engine's shards, which
// do have other work, will pass the seed's figure.
inline constexpr std::uint64_t kInlineFlushMaxUsDefault = 1000;

// Writes in flight at once: one being flushed while the next is filled and
// submitted. More buys nothing on one device and delays error detection.
inline constexpr std::size_t kWritesInFlightMax = 2;
// A replicated log's primary (LogOptions::sink): batches sealed and not yet
// published by a quorum. Replication pipelines them (a backup acknowledges
// each as it lands), so more than a disk's two help.
inline constexpr std::size_t kSinkBatchesInFlightMax = 16;

// The log prepares the next segment once 1/kPrepareAtFillDivisor of the
// current one is written (wal/log_prepare.cpp), late enough that a log that
// does not roll soon writes no segment it may never use...
inline constexpr std::uint64_t kPrepareAtFillDivisor = 4;
// ...or sooner, by time: once the current segment, at the rate it fills,
// would be full within kPrepareLeadFactor times what the next preparation
// is expected to take. A quarter alone was not enough above ~100 MB/s: a
// grown segment doubles what there is to prepare while the lead shrinks,
// and rolls into 256 MiB segments waited 222-601 ms for the preparer.
inline constexpr std::uint64_t kPrepareLeadFactor = 3;
// Until a preparation has been timed, it is taken to run at this speed
// (zeros in 1 MiB durable writes beside the log's own on a shared disk).
inline constexpr std::uint64_t kPrepareBytesPerSecondAssumed = 100'000'000;
// The fill rate is trusted once the segment has filled this long.
inline constexpr std::uint64_t kPrepareRateWindowUs = 20'000;

// Bytes of staging memory per chunk (wal/batch_builder.hpp). A record larger
// than this gets a chunk of its own; smaller ones share. Small enough that a
// shard with a few records pins little (and an idle one none), large enough
// that a busy shard allocates rarely; below glibc's mmap threshold, so an
// allocation is cheap.
inline constexpr std::size_t kStageChunkBytes = 64 * kKiB;
// A shard's first chunk; each one it fills doubles the next, up to the above.
inline constexpr std::size_t kStageChunkBytesMin = 4 * kKiB;

// Default bound on staged (not yet sealed) bytes across all shards. A full
// stage refuses appends with errc::queue_full instead of growing without
// bound while the disk stalls.
inline constexpr std::size_t kStagedBytesMaxDefault = 256 * kMiB;

// Default segment size. Segments are preallocated; a larger size rolls (and,
// later, checkpoints) less often, a smaller one retires space sooner.
inline constexpr std::uint64_t kSegmentBytesDefault = 64 * kMiB;
// Small segments are for tests that want many rolls; below this a segment
// could not hold its header, one batch block and the roll marker block.
inline constexpr std::uint64_t kSegmentBytesMin = 16 * kKiB;
inline constexpr std::uint64_t kSegmentBytesMax = 1024 * kMiB;

// A thread that wrote a batch inline keeps its buffer for the next one only
// up to this size: there may be many such threads.
inline constexpr std::size_t kInlineBufferKeepBytes = 1 * kMiB;

// Segment growth: while the log fills segments faster than this, each next
// segment doubles, up to kSegmentGrowthBytesMax, so a busy log rolls (and
// asks shards to checkpoint) less often; below it segments return to the
// configured size so an idle log does not hold large files.
inline constexpr std::uint64_t kSegmentGrowthRateBytesPerSecond = 100'000'000;
inline constexpr std::uint64_t kSegmentGrowthBytesMax = 256 * kMiB;

// Shards per log: section headers carry a 32-bit shard id, but per-shard
// state is kept in arrays, so the count is bounded.
inline constexpr std::uint32_t kShardsMax = 4096;

}  // namespace fusee::wal
