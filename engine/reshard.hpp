// Resharding a data directory offline: every shard's state — runs and their
// journals (timers, pending signals and stream chunks are journal records),
// parked runs with their wake times, finished runs with their streams and
// signal ids, the list index — moved into a new shard count.
//
// Crash-safe by construction: the new layout is written beside the current
// one (DIR/layout-g, engine/meta.hpp) and synced; then fusee.meta is
// replaced in one atomic step (temporary file, sync, rename, directory sync)
// naming the new shard count and layout; then the old layout is removed. A
// crash before the rename leaves the old layout current and the new one a
// leftover; after it, the new one current and the old a leftover. The next
// open (or reshard) removes leftovers. tests/engine/reshard_test.cpp crashes
// it at every operation.
//
// The new layout's log is empty: each unfinished run's journal goes into the
// new run store under its new shard with fresh LSNs, and each new shard gets
// a checkpoint past them, so the first open loads every run from the store
// (and leaves parked runs parked). The empty log starts at sequence 2, as a
// log whose first segment was retired under those checkpoints: recovery
// refuses a log that starts at sequence 1 yet holds none of the records a
// checkpoint covers, since that is what a deleted log looks like.
//
// Holds the directory's lock throughout, so it refuses while an engine (or
// another reshard) has the directory open. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::engine {

struct ReshardProgress {
  std::uint32_t shards_read = 0;  // old shards whose runs are moved
  std::uint32_t shards_total = 0;
  std::uint64_t runs_moved = 0;       // unfinished runs written to the new layout
  std::uint64_t finished_copied = 0;  // finished runs copied
};

struct ReshardOptions {
  std::uint32_t shards = 0;  // the new shard count, 1..kShardsMax
  std::function<void(const ReshardProgress&)> progress;  // after each step
  // The new log's first segment (later ones follow the engine's Config).
  std::uint64_t segment_bytes = 64u << 20;
  bool direct_io = true;  // falls back to buffered where O_DIRECT is refused
};

struct ReshardReport {
  bool changed = false;  // false: the directory already had that many shards
  std::uint32_t shards_from = 0;
  std::uint32_t shards_to = 0;
  std::uint32_t layout_from = 0;
  std::uint32_t layout_to = 0;
  std::uint64_t runs_moved = 0;      // unfinished runs, parked ones included
  std::uint64_t runs_parked = 0;     // of which parked
  std::uint64_t records_moved = 0;   // their journal records
  std::uint64_t finished_copied = 0;
  std::uint64_t leftovers_removed = 0;  // of an earlier interrupted reshard
};

// On failure the error, with `problem` (if given) saying why in words: the
// directory is in use, is not a data directory, would refuse to open (and
// why), or an I/O error at a named step. What was current stays current.
Result<ReshardReport> reshard(io::FileSystem& fs, const std::string& dir, const ReshardOptions& options,
                              std::string* problem = nullptr);

}  // namespace fusee::engine
