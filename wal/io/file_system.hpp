// The FileSystem seam: the only road from Fusee to the disk. Production uses
// PosixFileSystem (wal/io/posix_file_system.hpp); tests use the
// fault-injecting FaultFileSystem (tests/support/fault_file_system.hpp), which
// keeps synced and unsynced bytes apart so a crash can drop or tear the latter.
//
// Durability contract of this interface (what callers may rely on):
// - write_at(..., WriteFlags::dsync) returns only once that write's bytes, and
//   the file size and allocation needed to read them back, are durable
//   (pwritev2 with RWF_DSYNC).
// - A plain write_at is durable only after a later sync_data() on that file.
// - allocate() and truncate() are durable after sync_data() on that file.
// - A create, rename or remove is durable only after sync_dir() on the
//   directory holding the entry.
// - A write through a WriteQueue (open_write_queue) is durable once its
//   completion reports it (wal/io/write_queue.hpp).
// - A failed sync_data leaves the pages it could not write readable from the
//   page cache until drop_cache() (or a direct read) goes to the disk.
// - A File opened with OpenOptions::direct needs every write and read offset,
//   length and buffer address aligned to kDirectAlignment.
//
// Thread-safety: a FileSystem and its Files may be used from several threads
// at once; concurrent writes to the same File must not overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "wal/io/write_queue.hpp"

namespace fusee::io {

// O_DIRECT needs offsets, lengths and buffers aligned to the logical block
// size; 4 KiB covers every device we target (and is the log's block size).
inline constexpr std::size_t kDirectAlignment = 4096;

struct OpenOptions {
  bool write = false;       // open for writing (otherwise read-only)
  bool create = false;      // create the file if it does not exist
  bool exclusive = false;   // with create: fail if it exists
  bool direct = false;      // O_DIRECT; fails with EINVAL where refused (tmpfs)
};

enum class WriteFlags : unsigned { none = 0, dsync = 1 };

class File {
 public:
  virtual ~File() = default;

  // Writes data at offset. Returns the bytes written, which may be fewer than
  // asked (a short write); the caller writes the rest or gives up.
  [[nodiscard]] virtual Result<std::size_t> write_at(std::uint64_t offset,
                                                     std::span<const std::byte> data,
                                                     WriteFlags flags) = 0;
  // Reads up to out.size() bytes at offset; fewer only at the end of the file.
  [[nodiscard]] virtual Result<std::size_t> read_at(std::uint64_t offset,
                                                    std::span<std::byte> out) = 0;
  // fdatasync: makes every earlier write, allocate and truncate durable.
  [[nodiscard]] virtual Result<void> sync_data() = 0;
  [[nodiscard]] virtual Result<void> truncate(std::uint64_t size_bytes) = 0;
  // Reserves [offset, offset + length) on disk and extends the size to cover
  // it (fallocate mode 0). Fails with ENOSPC when the disk is full.
  [[nodiscard]] virtual Result<void> allocate(std::uint64_t offset, std::uint64_t length) = 0;
  [[nodiscard]] virtual Result<std::uint64_t> size() = 0;
  virtual bool direct() const = 0;
  // Evicts the file's clean cached pages (posix_fadvise DONTNEED), so later
  // reads come from the disk. Why: after a failed fdatasync Linux (ext4,
  // XFS) keeps the pages that could not be written in the page cache,
  // marked clean, so a plain read shows bytes that are not on the disk and
  // a later fdatasync has nothing to write. Recovery drops them before it
  // reads. Dirty pages (written, writeback not yet tried) stay. Changes no
  // byte on disk; allowed on a file opened read-only.
  [[nodiscard]] virtual Result<void> drop_cache() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  [[nodiscard]] virtual Result<std::unique_ptr<File>> open(const std::string& path,
                                                           OpenOptions options) = 0;
  [[nodiscard]] virtual Result<void> rename(const std::string& from, const std::string& to) = 0;
  [[nodiscard]] virtual Result<void> remove(const std::string& path) = 0;
  // Creates one directory; succeeds if it already exists.
  [[nodiscard]] virtual Result<void> create_dir(const std::string& path) = 0;
  // Removes an empty directory.
  [[nodiscard]] virtual Result<void> remove_dir(const std::string& path) = 0;
  // Names (not paths) of the entries in a directory, sorted, without . and ..
  [[nodiscard]] virtual Result<std::vector<std::string>> list(const std::string& path) = 0;
  [[nodiscard]] virtual Result<bool> exists(const std::string& path) = 0;
  // fsync on the directory: makes creates, renames and removes in it durable.
  [[nodiscard]] virtual Result<void> sync_dir(const std::string& path) = 0;
  // An asynchronous queue of durable writes to this file system's Files, at
  // most `depth` in flight (EINVAL outside [1, kWriteQueueDepthMax]). Fails
  // with std::errc::function_not_supported where the file system has none
  // (the default) or the kernel refuses one; the caller then writes with
  // write_at(..., WriteFlags::dsync) from a thread of its own.
  [[nodiscard]] virtual Result<std::unique_ptr<WriteQueue>> open_write_queue(std::size_t depth);
  // Whether path lives in memory (tmpfs, ramfs), where the kernel runs each
  // io_uring write on a worker thread, one at a time per file, so the log
  // keeps its threads there. Default: false.
  [[nodiscard]] virtual Result<bool> is_memory_backed(const std::string& path);
  // An exclusive lock on path (created if absent) held until the returned
  // object goes, so two engines never write one directory. Fails with
  // EWOULDBLOCK while anyone else holds it, in this process or another.
  // Default (in-memory test file systems): a lock that locks nothing.
  class Lock {
   public:
    virtual ~Lock() = default;
  };
  [[nodiscard]] virtual Result<std::unique_ptr<Lock>> lock_exclusive(const std::string& path);
};

// Removes a directory tree (files and subdirectories), syncing each
// directory it empties and finally `path`'s parent. Absent: nothing to do.
Result<void> remove_tree(FileSystem& fs, const std::string& path);

// The whole of the file at `path`, as far as reads reach at the moment
// (a file that shrinks meanwhile yields what was there).
Result<std::vector<std::byte>> read_file(FileSystem& fs, const std::string& path);

// Joins a directory and a name with one '/'.
std::string join_path(const std::string& dir, const std::string& name);
// The directory part of a path ("." when there is none).
std::string parent_path(const std::string& path);

// An owned buffer aligned for O_DIRECT, zero-filled.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t size_bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<std::byte> span() { return {data_, size_}; }
  std::span<const std::byte> span() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Keeps a buffer allocated for the rest of the process: for one the kernel
// may still read or write (an io_uring request given up on at shutdown).
// Reachable from a global list, so leak checkers do not report it.
void keep_for_the_kernel(AlignedBuffer buffer);

}  // namespace fusee::io
