// `fusee backup verify --from TARGET [--to TIME|latest] [--metrics-file PATH]`:
// checks, writing nothing to the target, every way it can be restored to
// the moment -- each snapshot before it and the whole log -- as a restore
// would check what it uses (backup::verify_target, docs/backup.md), prints
// the moments each serves, and exits 1 naming the first problem. With
// --metrics-file, a successful verify writes a Prometheus text file (for
// node_exporter's textfile collector) with its time.
#pragma once

#include <string>

namespace fusee::cli {

struct BackupVerifyOptions {
  std::string from;
  std::string to = "latest";
  std::string metrics_file;
};

// 0 when every way holds, 1 when one does not or the target cannot be read.
int run_backup_verify(const BackupVerifyOptions& options);

}  // namespace fusee::cli
