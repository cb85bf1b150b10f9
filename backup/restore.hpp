// Restore: rebuilds a data directory from a backup target with what was
// published up to a moment (docs/backup.md). The run store comes from the
// newest snapshot taken before the moment (whose log the target holds),
// and the chain's batches from the segment the snapshot needs on, whose
// publication time is at or before the moment, and no later one, go back
// into segment files as the log wrote them (zeros past the last, as a crash
// leaves a segment); the directory then opens as after a crash at that
// moment, replaying the log past the snapshot's checkpoints. Without a
// snapshot before the moment, the whole log from the first batch is
// restored, and replayed into a new run store.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backup/backup_target.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::backup {

struct RestoreSummary {
  std::uint32_t shards = 0;
  std::uint64_t batches = 0;        // restored
  std::uint64_t first_sequence = 0;  // of the first restored batch (0: none)
  std::uint64_t snapshot_sequence = 0;  // the snapshot restored covers the log to here (0: none)
  std::uint64_t last_sequence = 0;  // of the last restored batch (0: none)
  std::int64_t last_at_ms = 0;      // its publication time
  // In the backup, published after the moment, among the manifests read (a
  // restore reads none past the one the moment lies in): 0 when none.
  std::uint64_t batches_left_out = 0;
  std::uint64_t segments = 0;
  // Read from the target: the log's chunks and blob packs, the snapshot's
  // files (manifests and descriptions not counted).
  std::uint64_t bytes_read = 0;
  // Newer ways to the moment that were tried and refused (a damaged
  // snapshot: then an older one, or the whole log), each with why.
  std::vector<std::string> skipped;
};

// `dir` must not exist, or be empty. to_ms: the moment, in ms since the
// epoch; nothing: the latest the target holds. Fails with `problem` saying
// why: an unreadable or damaged target, a gap in its chain, a moment before
// its first batch.
Result<RestoreSummary> restore_directory(io::FileSystem& fs, BackupTarget& target, const std::string& dir,
                                         std::optional<std::int64_t> to_ms, std::string* problem);

// One way to restore a target (backup verify): from a snapshot, or the
// whole log, to the batches it serves.
struct VerifiedWay {
  std::string way;                  // the snapshot's object, or "the whole log"
  std::int64_t from_ms = 0;         // the earliest moment it serves: the snapshot's, or the first batch's
  std::uint64_t first_sequence = 0;  // of the log it restores
  std::uint64_t last_sequence = 0;
  std::int64_t last_at_ms = 0;
  std::uint64_t batches = 0;
};

struct VerifySummary {
  std::uint32_t shards = 0;
  std::vector<VerifiedWay> ways;  // newest snapshot first, the whole log last
};

// `fusee backup verify`: checks, writing nothing, every way the target can
// be restored to the moment (nothing: the latest) -- each snapshot before
// it and the whole log -- as a restore would check what it uses: every
// object named exists with its size and CRC-32C, every batch's header, CRC
// and chain, every blob pack, every snapshot file. Fails with `problem`
// naming the first problem and the way it breaks.
Result<VerifySummary> verify_target(io::FileSystem& fs, BackupTarget& target, std::optional<std::int64_t> to_ms,
                                    std::string* problem);

}  // namespace fusee::backup
