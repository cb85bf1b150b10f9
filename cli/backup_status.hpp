// `fusee backup status DIR [--json]`: what a data directory's continuous
// backup covers (docs/backup.md): the target, the batches it holds and when
// the newest was published, and the batches the log holds past it, which
// losing the disk now would lose. Read-only, also while an engine runs.
#pragma once

#include <string>

namespace fusee::cli {

struct BackupStatusOptions {
  std::string dir;
  bool json = false;
};

// 0 when shown, 1 when the directory has no backup or it does not read.
int run_backup_status(const BackupStatusOptions& options);

}  // namespace fusee::cli
