// Segment files: their names, and creating one durably. Creating goes through
// the FileSystem seam; the order of steps is what recovery's rules rely on
// (see create_segment).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"
#include "wal/log_format.hpp"

namespace fusee::wal {

// "0000000042.seg" for segment 42.
std::string segment_file_name(std::uint64_t segment_number);
// The number in a segment file name, or nullopt for any other name.
std::optional<std::uint64_t> parse_segment_file_name(const std::string& name);

// Creates segment `header.segment_number` in wal_dir and makes it durable:
// prepare_segment_file, then write_segment_header. So a valid header implies
// a durable, full-size, zero-filled file. Returns the file opened for
// writing (direct when asked and allowed; *direct_out says which).
//
// Why the zeros: fallocate leaves "unwritten" extents, and the first durable
// write into one must also commit the file system's journal to mark it
// written, which roughly doubles that write's latency. Writing zeros once
// up front makes every later batch write a plain overwrite.
Result<std::unique_ptr<io::File>> create_segment(io::FileSystem& fs, const std::string& wal_dir,
                                                 const SegmentHeader& header, bool direct, bool* direct_out);

// create_segment without the zeros: preallocated and synced, directory entry
// synced, header written; milliseconds where the zeros take hundreds. For a
// roll on the write path that found no prepared segment, where stalling
// every writer would cost more than the slower first writes.
Result<std::unique_ptr<io::File>> create_segment_unzeroed(io::FileSystem& fs, const std::string& wal_dir,
                                                          const SegmentHeader& header, bool direct,
                                                          bool* direct_out);

// The slow part of create_segment, done ahead of a roll by the log's
// preparer thread: creates segment file `number` (truncating any leftover),
// preallocates size_bytes and syncs, writes zeros over all of it (the header
// block too, so until a header is written the file reads as a zeroed
// segment, which recovery deletes when it lies past the chain's end) in
// 1 MiB durable writes (O_DIRECT where allowed), each done before the next,
// then syncs the directory entry.
// Stops with std::errc::operation_canceled between steps once *cancel is set.
//
// Cut short after the preallocation (*allocated set), the file has its full
// size durably and reads as zeros, written or not; what it lacks is the
// directory sync and the zeros past where it stopped, so a roll may still
// take it (write_segment_header, then sync the directory) and pay only the
// slower first writes into unwritten extents. Without zero_fill it stops
// there by design: the quick create of a roll that found nothing prepared.
struct SegmentPreparation {
  const std::atomic<bool>* cancel = nullptr;
  std::atomic<bool>* allocated = nullptr;  // set once the full size is durable
  std::atomic<std::uint64_t>* zeroed = nullptr;  // bytes of zeros durable so far
  bool zero_fill = true;
};
// A preparation's zeros per durable write: a log flush sharing the disk
// waits behind at most one; a preparation cut short stops within one.
inline constexpr std::uint64_t kPrepareStepBytes = 1024 * 1024;
Result<void> prepare_segment_file(io::FileSystem& fs, const std::string& wal_dir, std::uint64_t number,
                                  std::uint64_t size_bytes, SegmentPreparation how = {});

// The rest: writes the header block of a prepared segment durably, which
// makes it a segment. Returns the file opened for writing (direct when asked
// and allowed, and buffered from then on if a direct write is refused;
// *direct_out says which).
Result<std::unique_ptr<io::File>> write_segment_header(io::FileSystem& fs, const std::string& wal_dir,
                                                       const SegmentHeader& header, bool direct, bool* direct_out);

// Creates an empty log in parent_dir/wal: segment 1 is made durable inside
// parent_dir/wal.new, which is then renamed to wal. So wal/ existing proves
// its first segment is whole, and recovery may treat a damaged first segment
// as damage, not a torn create. Its chain starts at `first_sequence` after
// `prev_crc`: 1 and 0 for a new data directory; past 1 for a reshard's new
// layout, which reads as a log whose earlier segments were all retired
// under checkpoints (engine/reshard.hpp). `replicated`: a replicated log's
// segment (kFormatVersionReplicated).
Result<void> create_empty_log(io::FileSystem& fs, const std::string& parent_dir, std::uint64_t first_sequence,
                              std::uint32_t prev_crc, std::uint64_t segment_bytes, bool direct, std::uint64_t salt,
                              bool replicated = false);

// Opens an existing segment for writing (direct when asked and allowed).
Result<std::unique_ptr<io::File>> open_segment_for_write(io::FileSystem& fs, const std::string& path,
                                                         bool direct, bool* direct_out);

// Writes all of data at offset with flags, continuing after short writes.
// A direct file that stops at an unaligned point is an I/O error.
Result<void> write_fully(io::File& file, std::uint64_t offset, std::span<const std::byte> data,
                         io::WriteFlags flags);

// Writes all of data at offset and makes it durable: one RWF_DSYNC write on a
// direct file, or write + fdatasync on a buffered one. Short writes continue
// where they stopped.
Result<void> write_durably(io::File& file, std::uint64_t offset, std::span<const std::byte> data);

}  // namespace fusee::wal
