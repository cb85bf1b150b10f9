// Opens the backup target an address names (docs/backup.md): s3://BUCKET
// [/PREFIX] for S3-compatible storage (s3_target.hpp), anything else a
// directory (directory_target.hpp). The one place that tells them apart,
// for the engine, `fusee restore` and `fusee backup status`.
#pragma once

#include <memory>
#include <string>

#include "backup/backup_target.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::backup {

// What to do with a directory target that is not there.
enum class MissingDirectory { create, refuse };

// Fails with `problem` saying why. Readers (restore, status, inspect)
// refuse a missing directory; the engine makes it.
Result<std::unique_ptr<BackupTarget>> open_target(io::FileSystem& fs, const std::string& address, std::string* problem,
                                                  MissingDirectory missing = MissingDirectory::refuse);

}  // namespace fusee::backup
