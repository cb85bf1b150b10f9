// ReadOnlyFileSystem: a FileSystem over another that refuses every change
// (EROFS): opening for writing, rename, remove, creating or removing a
// directory, syncing a directory, taking a lock. `fusee inspect` reads a data
// directory through it, RocksDB included (io::make_rocksdb_env), so being
// read-only is a property of its one road to the disk rather than a promise
// each reader keeps. Thread-safe as the file system it wraps.
#pragma once

#include "wal/io/file_system.hpp"

namespace fusee::io {

class ReadOnlyFileSystem final : public FileSystem {
 public:
  explicit ReadOnlyFileSystem(FileSystem& inner) : inner_(inner) {}

  Result<std::unique_ptr<File>> open(const std::string& path, OpenOptions options) override;
  Result<void> rename(const std::string& from, const std::string& to) override;
  Result<void> remove(const std::string& path) override;
  Result<void> create_dir(const std::string& path) override;
  Result<void> remove_dir(const std::string& path) override;
  Result<std::vector<std::string>> list(const std::string& path) override;
  Result<bool> exists(const std::string& path) override;
  Result<void> sync_dir(const std::string& path) override;
  Result<std::unique_ptr<Lock>> lock_exclusive(const std::string& path) override;

 private:
  FileSystem& inner_;
};

}  // namespace fusee::io
