// ManifestChain: the manifests on a target, by name, read as needed and
// kept once read; and where the log a restore needs from a batch begins
// among them (the manifest naming the first chunk of that batch's segment).
// A restore reads forward from there; retention deletes what lies before.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backup/backup_target.hpp"
#include "backup/manifest.hpp"

namespace fusee::backup {

struct ManifestName {
  std::uint64_t last_sequence = 0;
  std::string name;
};

// Where the log from a batch begins: the first manifest to read, and the
// segment the batch lies in (chunks of earlier segments are not needed).
struct LogStart {
  std::size_t index = 0;
  std::uint64_t segment = 0;
};

class ManifestChain {
 public:
  // Lists the target's manifests; `problem` when a name is not a manifest's.
  static Result<ManifestChain> list(BackupTarget& target, std::string directory, std::string* problem);

  const std::vector<ManifestName>& names() const { return names_; }
  // The manifest at `index`, read once. Fails, with `problem`, when it does
  // not read or is another directory's.
  Result<const Manifest*> at(std::size_t index, std::string* problem);
  // Where the log from batch `from` begins; nothing when no manifest names
  // that batch (retired, not uploaded yet, or behind a gap).
  Result<std::optional<LogStart>> start_of(std::uint64_t from, std::string* problem);

 private:
  ManifestChain(BackupTarget& target, std::string directory) : target_(&target), directory_(std::move(directory)) {}
  BackupTarget* target_;
  std::string directory_;
  std::vector<ManifestName> names_;
  std::map<std::size_t, Manifest> read_;
};

}  // namespace fusee::backup
