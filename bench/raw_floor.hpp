// The raw floor a local-mode benchmark case is compared with: the disk's
// durable 4 KiB write in the case's own directory (bench/raw_flush.hpp),
// direct_dsync (the write FlushMethod::direct asks for), or
// buffered_fdatasync where the filesystem refuses O_DIRECT (the log falls
// back the same way). Measured right before the case, so a disk whose speed
// drifts (a shared or virtual one) is compared with itself. Thread-safe (no
// shared state). engine_bench and checkpoint_bench keep copies of their own.
#pragma once

#include <string>

#include "bench/raw_flush.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::bench {

struct RawFloor {
  bool measured = false;
  FlushMethod method = FlushMethod::direct_dsync;
  std::string note;  // why the floor is not direct_dsync, or why it is missing
  LatencySummary latency;
};

inline Result<RawFloor> measure_floor(const std::string& dir, std::size_t iterations) {
  io::PosixFileSystem fs;
  RawFlushOptions options;
  options.iterations = iterations;
  RawFloor floor;
  for (FlushMethod method : {FlushMethod::direct_dsync, FlushMethod::buffered_fdatasync}) {
    auto measured = FUSEE_TRY(measure_raw_flush(fs, dir, method, options));
    if (!measured.supported) {
      floor.note = measured.unsupported_reason;
      continue;
    }
    floor.measured = true;
    floor.method = method;
    floor.latency = measured.latency;
    return floor;
  }
  return floor;
}

}  // namespace fusee::bench
