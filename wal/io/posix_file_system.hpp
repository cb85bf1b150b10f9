// PosixFileSystem: the production FileSystem, a thin layer over Linux system
// calls (open, pwritev2, pread, fdatasync, fallocate, rename, ...). It adds no
// caching and no buffering, so the durability contract in
// wal/io/file_system.hpp holds exactly as the kernel provides it.
//
// Errors come back as std::error_code(errno, std::generic_category()), so a
// caller can tell EINVAL (O_DIRECT refused, e.g. on tmpfs) or ENOSPC apart.
//
// open_write_queue() gives an io_uring WriteQueue (wal/io/uring_write_queue.hpp)
// when Fusee was built with liburing and the kernel allows io_uring;
// otherwise std::errc::function_not_supported.
//
// Thread-safety: stateless; one instance may be shared by every thread. A
// PosixFile may be used from several threads at once (positioned I/O only, no
// shared file offset); concurrent writes to one file must not overlap. A
// PosixFile closes its descriptor when destroyed and need not outlive the
// PosixFileSystem that opened it; a write queue must not outlive it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "wal/io/file_system.hpp"

namespace fusee::io {

class PosixFileSystem final : public FileSystem {
 public:
  [[nodiscard]] Result<std::unique_ptr<File>> open(const std::string& path,
                                                   OpenOptions options) override;
  [[nodiscard]] Result<void> rename(const std::string& from, const std::string& to) override;
  [[nodiscard]] Result<void> remove(const std::string& path) override;
  [[nodiscard]] Result<void> create_dir(const std::string& path) override;
  [[nodiscard]] Result<void> remove_dir(const std::string& path) override;
  [[nodiscard]] Result<std::vector<std::string>> list(const std::string& path) override;
  [[nodiscard]] Result<bool> exists(const std::string& path) override;
  [[nodiscard]] Result<void> sync_dir(const std::string& path) override;
  [[nodiscard]] Result<std::unique_ptr<WriteQueue>> open_write_queue(std::size_t depth) override;
  [[nodiscard]] Result<bool> is_memory_backed(const std::string& path) override;
  // flock(LOCK_EX | LOCK_NB) on its own open file description.
  [[nodiscard]] Result<std::unique_ptr<Lock>> lock_exclusive(const std::string& path) override;

  // The descriptor of a File that this PosixFileSystem opened (asserts that it
  // did), for its write queue. Valid while the File lives.
  int descriptor_of(File& file) const;
};

}  // namespace fusee::io
