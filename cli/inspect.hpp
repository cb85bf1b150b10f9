// `fusee inspect DIR [VIEW]`: a strictly read-only look at a data directory
// and what an engine opening it would do — the meta, the recovery plan (where
// the chain ends, the torn tail it would drop, or why it would refuse), the
// segments, batches, shards' LSN ranges and checkpoints, blob files, runs,
// one run's journal decoded, one stream's chunks. Everything is read through
// io::ReadOnlyFileSystem, RocksDB included, so no view can change a byte.
// Every view prints aligned tables, or one JSON document with --json (the
// schemas are in docs/cli.md).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace fusee::cli {

enum class InspectView { summary, segments, batches, shards, blobs, runs, run, stream };

struct InspectOptions {
  std::string dir;
  InspectView view = InspectView::summary;
  bool json = false;
  std::optional<std::uint64_t> segment;  // batches: only this segment
  std::optional<std::string> status;     // runs: running | completed | failed | cancelled
  std::optional<std::string> workflow;   // runs
  std::size_t limit = 100;               // runs
  std::string run_id;                    // run, stream
  std::string stream;                    // stream
};

// Returns the exit code: 0 when the directory would open (and the view was
// shown), 1 when it would refuse or the view cannot be shown (the reason is
// printed), 2 is left to argument errors.
int run_inspect(const InspectOptions& options);

}  // namespace fusee::cli
