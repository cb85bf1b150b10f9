// `fusee backup status DIR [--json]`: what a data directory's continuous
// backup covers (docs/backup.md): the target, the batches it holds and when
// the newest was published, and the batches the log holds past it (the
// backlog), which losing the disk now would lose. Read-only, also while an
// engine runs. `fusee inspect` shows the same summary in a line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/offline_dir.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::cli {

struct BackupStatusOptions {
  std::string dir;
  bool json = false;
};

struct BackupSummary {
  std::string target;
  std::uint64_t uploads = 0;           // manifests on the target
  std::uint64_t first_sequence = 0;    // the target's log starts at this batch
  std::uint64_t covered_sequence = 0;  // every batch up to it is on the target
  std::int64_t covered_at_ms = 0;      // when the newest of them was published (0: none)
  std::uint64_t log_last_sequence = 0;
  std::uint64_t pending_batches = 0;   // in the log, not on the target: the backlog
  std::uint64_t pending_bytes = 0;
  std::uint64_t snapshots = 0;          // of the run store, on the target
  std::uint64_t snapshot_sequence = 0;  // the newest covers the log to this batch (0: none)
  std::int64_t snapshot_at_ms = 0;
};

// The directory's backup as its target tells it: nothing when the directory
// was never backed up; `problem` when the target cannot be read now.
std::optional<BackupSummary> read_backup_summary(io::FileSystem& fs, const engine::OfflineDir& offline,
                                                 std::string& problem);

// 0 when shown, 1 when the directory has no backup or it does not read.
int run_backup_status(const BackupStatusOptions& options);

}  // namespace fusee::cli
