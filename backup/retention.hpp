// Retention on a backup target (Config::backup_retention, docs/backup.md,
// "Retention"): deletes what no restore to a moment at or after a horizon
// needs. Such a restore starts from the newest snapshot taken by the
// horizon (or a later one), so everything older than that snapshot goes:
// the older snapshots, the manifests before the log it needs (with their
// chunks and blob packs), and the store's files no kept snapshot names.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "backup/backup_target.hpp"
#include "backup/manifest.hpp"

namespace fusee::backup {

struct Retired {
  std::uint64_t snapshots = 0;
  std::uint64_t manifests = 0;
  std::uint64_t objects = 0;  // in all, these included
};

// `snapshots` keeps the descriptions read (by object name) between calls;
// `tables` is the uploader's set of table files on the target, and loses
// those deleted. Deletes in an order a crash can stop anywhere: older
// snapshots' descriptions first, then each old manifest's chunks and packs
// before the manifest, then the store's files no kept snapshot names.
Result<Retired> retire_before(BackupTarget& target, const std::string& directory, std::int64_t horizon_ms,
                              std::map<std::string, Snapshot>& snapshots, std::set<std::string>& tables,
                              std::string* problem);

}  // namespace fusee::backup
