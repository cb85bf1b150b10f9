// `fusee reshard DIR --shards N`: changes a data directory's shard count
// offline and crash-safely (engine/reshard.hpp). Shows a progress bar on a
// terminal and plain progress lines otherwise.
#pragma once

#include <cstdint>
#include <string>

namespace fusee::cli {

struct ReshardCommandOptions {
  std::string dir;
  std::uint32_t shards = 0;
  bool quiet = false;  // only the summary line
};

// 0 when done (or nothing to do), 1 when refused or failed (why is printed).
int run_reshard(const ReshardCommandOptions& options);

}  // namespace fusee::cli
