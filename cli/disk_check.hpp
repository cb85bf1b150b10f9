// `fusee disk-check [DIR]`: how long the disk under DIR takes to make one
// 4 KiB write durable, on both of the log's write paths (O_DIRECT with
// RWF_DSYNC, the default; buffered with fdatasync, the fallback), measured
// without Fusee in the way (bench/raw_flush.hpp). The p50 of the path the
// log would use is the floor under a sequential durable step: one step
// cannot finish faster than its record's write.
#pragma once

#include <cstddef>
#include <string>

namespace fusee::cli {

struct DiskCheckOptions {
  std::string dir = ".";
  std::size_t iterations = 2000;
  bool json = false;  // one JSON object per write path instead of the table
};

// Returns the process's exit code: 0, or 1 when the disk could not be
// measured (the reason is printed).
int run_disk_check(const DiskCheckOptions& options);

}  // namespace fusee::cli
