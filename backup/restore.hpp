// Restore: rebuilds a data directory from a backup target with what was
// published up to a moment (docs/backup.md). The chain's batches whose
// publication time is at or before it, and no later one, go back into
// segment files as the log wrote them (zeros past the last, as a crash
// leaves a segment); the directory then opens as after a crash at that
// moment, replaying the whole log into a new run store.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backup/backup_target.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::backup {

struct RestoreSummary {
  std::uint32_t shards = 0;
  std::uint64_t batches = 0;        // restored
  std::uint64_t last_sequence = 0;  // of the last restored batch (0: none)
  std::int64_t last_at_ms = 0;      // its publication time
  std::uint64_t batches_left_out = 0;  // in the backup, published after the moment
  std::uint64_t segments = 0;
};

// `dir` must not exist, or be empty. to_ms: the moment, in ms since the
// epoch; nothing: the latest the target holds. Fails with `problem` saying
// why: an unreadable or damaged target, a gap in its chain, a moment before
// its first batch.
Result<RestoreSummary> restore_directory(io::FileSystem& fs, BackupTarget& target, const std::string& dir,
                                         std::optional<std::int64_t> to_ms, std::string* problem);

}  // namespace fusee::backup
