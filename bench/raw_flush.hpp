// Raw flush: how long the disk under a directory takes to make one 4 KiB
// write durable, measured without Fusee in the way. It is the floor under
// every durable append, so each benchmark and `fusee disk-check` report it
// next to their own figures: a log append near this number is as fast as the
// disk allows.
//
// Two ways a write becomes durable, matching the log's two write paths:
//  - buffered_fdatasync: a buffered write_at, then sync_data (pwrite +
//    fdatasync), the fallback where O_DIRECT is refused;
//  - direct_dsync: an O_DIRECT write_at with WriteFlags::dsync (pwritev2 +
//    RWF_DSYNC), the default on Linux.
// Every I/O goes through the FileSystem seam, so this code makes no system
// call of its own.
//
// Each case writes a scratch file in the directory (removed afterwards),
// preallocated and filled once before timing so the timed writes overwrite
// written blocks: the figure is the device's data write plus cache flush, not
// the filesystem converting fresh extents. Blocks are rewritten sequentially,
// wrapping around the file.
//
// Thread-safety: no shared state; concurrent calls on different directories
// are fine (though they would disturb each other's timings on one disk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::bench {

enum class FlushMethod { buffered_fdatasync, direct_dsync };

// "buffered_fdatasync" or "direct_dsync": the `case` field in JSON output.
std::string_view flush_method_name(FlushMethod method);

struct RawFlushOptions {
  std::size_t iterations = 2000;
  // Untimed writes first, so page tables, the journal and the device's own
  // cache settle before the figures count.
  std::size_t warmup_iterations = 50;
  // The scratch file cycles through this many bytes; small enough to
  // preallocate quickly, large enough that one block is not rewritten
  // back-to-back (which some devices shortcut).
  std::uint64_t file_bytes = 1u << 20;
};

// Latencies in microseconds; percentiles by nearest rank.
struct LatencySummary {
  std::size_t samples = 0;
  double min_us = 0;
  double p50_us = 0;
  double p99_us = 0;
  double p999_us = 0;
  double max_us = 0;
  double mean_us = 0;
};

// Sorts samples_us and summarises it; all zeros when it is empty.
LatencySummary summarize_latencies(std::vector<double> samples_us);

struct RawFlushResult {
  FlushMethod method = FlushMethod::buffered_fdatasync;
  // False when the filesystem refuses O_DIRECT (EINVAL, e.g. tmpfs); then
  // latency is empty and unsupported_reason says why.
  bool supported = true;
  std::string unsupported_reason;
  LatencySummary latency;
};

// Block size of every timed write: the log's block size and O_DIRECT's
// alignment.
inline constexpr std::size_t kRawFlushBlockBytes = io::kDirectAlignment;

// Measures one method in directory dir (which must exist). Operating errors
// other than a refused O_DIRECT (ENOSPC, EIO, a missing directory) come back
// as errors.
[[nodiscard]] Result<RawFlushResult> measure_raw_flush(io::FileSystem& fs, const std::string& dir,
                                                       FlushMethod method,
                                                       const RawFlushOptions& options = {});

// Both methods, buffered first.
[[nodiscard]] Result<std::vector<RawFlushResult>> measure_raw_flush_all(
    io::FileSystem& fs, const std::string& dir, const RawFlushOptions& options = {});

}  // namespace fusee::bench
