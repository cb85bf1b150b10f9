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

// A directory is made if missing. Fails with `problem` saying why.
Result<std::unique_ptr<BackupTarget>> open_target(io::FileSystem& fs, const std::string& address, std::string* problem);

}  // namespace fusee::backup
