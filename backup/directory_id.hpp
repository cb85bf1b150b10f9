// A data directory's backup id (<dir>/fusee.backup-id): made at its first
// backup, so that a target knows which directory writes it and refuses
// another. Written atomically (temporary file, sync, rename, directory
// sync).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::backup {

inline constexpr const char* kDirectoryIdFileName = "fusee.backup-id";

// The directory's id, made from `random` (32 hex digits) if it has none.
Result<std::string> directory_backup_id(io::FileSystem& fs, const std::string& dir,
                                        const std::function<std::uint64_t()>& random);

}  // namespace fusee::backup
