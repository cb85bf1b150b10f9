// BackupTarget: where a continuous backup puts its objects (docs/backup.md):
// a directory on any mounted file system (directory_target.hpp) or, later,
// S3-compatible object storage. Objects are named by flat names (letters,
// digits, '-', '.'), written whole, never appended to.
//
// Thread-compatible: one uploader writes; a restore reads.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace fusee::backup {

// Every call may come from several threads at once (a restore reads the
// log's chunks and the run store's files side by side).
class BackupTarget {
 public:
  virtual ~BackupTarget() = default;
  // Writes the object whole; durable on the target when it returns. An
  // object of that name is replaced.
  [[nodiscard]] virtual Result<void> put(const std::string& name, std::span<const std::byte> bytes) = 0;
  // Writes the object only if none of that name exists: false when one did
  // (nothing written). A target's identity is made this way; the uploader
  // reads it back and compares, so two directories never write one target.
  [[nodiscard]] virtual Result<bool> put_new(const std::string& name, std::span<const std::byte> bytes) = 0;
  // The object, or nothing when there is none of that name.
  [[nodiscard]] virtual Result<std::optional<std::vector<std::byte>>> get(const std::string& name) = 0;
  // Deletes the object; durable on the target when it returns. None of
  // that name is no error. (Retention: backup_retention.)
  [[nodiscard]] virtual Result<void> remove(const std::string& name) = 0;
  // The names starting with `prefix`, sorted.
  [[nodiscard]] virtual Result<std::vector<std::string>> list(const std::string& prefix) = 0;
  // For messages: "directory /mnt/backup".
  virtual std::string describe() const = 0;
};

}  // namespace fusee::backup
