// A backup target in a directory of any mounted file system (a second disk,
// NFS), written through the FileSystem seam like everything on disk. Each
// object is written to a temporary name, synced, renamed into place and the
// directory synced, so a crash leaves an object whole or absent.
#pragma once

#include <memory>
#include <string>

#include "backup/backup_target.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::backup {

// Creates the directory if it is missing. `fs` must outlive the target.
Result<std::unique_ptr<BackupTarget>> open_directory_target(io::FileSystem& fs, const std::string& dir);

}  // namespace fusee::backup
