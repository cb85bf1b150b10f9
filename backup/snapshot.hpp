// Snapshots of the run store on a backup target (docs/backup.md,
// "Snapshots"). Taking one copies the store's live files (table files once,
// the rest each time) and then writes a description naming them with the
// point of the log they cover; restoring one writes them back into a new
// directory's run store. A restore then needs only the log from the
// snapshot's from_sequence on, so the log on the target before it may go.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "backup/backup_target.hpp"
#include "backup/manifest.hpp"
#include "engine/run_store.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::backup {

struct SnapshotTaken {
  std::string name;  // the description's object
  Snapshot snapshot;
  std::uint64_t bytes = 0;  // uploaded for it (table files already on the target not counted)
};

struct SnapshotSource {
  engine::RunStore& store;
  std::uint32_t shards = 0;
  // The newest batch the log has published, and the time on the clock
  // batches' publication times read.
  std::function<std::uint64_t()> published_sequence;
  std::function<std::int64_t()> now_ms;
};

// Bytes [offset, offset + bytes) of the file at `path`: io_error when it
// is shorter (the uploader reads segments with it, snapshots the store's
// files, whose MANIFEST and log may have grown past what the copy names).
Result<std::vector<std::byte>> read_range(io::FileSystem& fs, const std::string& path, std::uint64_t offset,
                                          std::uint64_t bytes);

// Uploads a snapshot of the store now. `tables` holds the table files'
// objects on the target (read with list(kStoreTablePrefix)) and gains those
// uploaded; `table_crcs` caches their CRC-32Cs, which the description
// carries for every file (a table uploaded before this process is read
// once for it). Nothing (no error) when the log has published nothing yet.
// A description of that name written by another directory fails with
// operation_not_permitted and `problem` saying so.
Result<std::optional<SnapshotTaken>> take_snapshot(io::FileSystem& fs, SnapshotSource source, BackupTarget& target,
                                                   const std::string& directory, std::set<std::string>& tables,
                                                   std::map<std::string, std::uint32_t>& table_crcs,
                                                   std::string* problem);

// Writes the snapshot's files into `runs_dir` (created) and syncs it, each
// checked against its size and CRC-32C; with write false, only checks them.
// `bytes_read` (optional) adds the bytes read from the target.
Result<void> restore_snapshot(io::FileSystem& fs, BackupTarget& target, const Snapshot& snapshot,
                              const std::string& runs_dir, std::string* problem, bool write = true,
                              std::uint64_t* bytes_read = nullptr);

}  // namespace fusee::backup
