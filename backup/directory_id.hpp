// A data directory's backup id (<dir>/fusee.backup-id): made at its first
// backup, so that a target knows which directory writes it and refuses
// another. Written atomically (temporary file, sync, rename, directory
// sync).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::backup {

inline constexpr const char* kDirectoryIdFileName = "fusee.backup-id";
// Where the directory's backup goes (the target's path), written at each
// open with a backup, for `fusee backup status DIR`.
inline constexpr const char* kBackupTargetFileName = "fusee.backup-target";

// The directory's id, made from `random` (32 hex digits) if it has none.
Result<std::string> directory_backup_id(io::FileSystem& fs, const std::string& dir,
                                        const std::function<std::uint64_t()>& random);

// Writes `target` (the target directory's path) beside the id; reads it
// back (nothing when the directory has never been backed up).
Result<void> record_backup_target(io::FileSystem& fs, const std::string& dir, const std::string& target);
Result<std::optional<std::string>> recorded_backup_target(io::FileSystem& fs, const std::string& dir);

}  // namespace fusee::backup
