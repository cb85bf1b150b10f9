#include "wal/io/rocksdb_file_system.hpp"

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "wal/io/file_system.hpp"

namespace fusee::io {
namespace {

using rocksdb::FileOptions;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

// The statuses PosixFileSystem gives RocksDB for the same errno, which
// RocksDB's callers test for: a missing path is PathNotFound (an IOError
// subcode), a full disk NoSpace.
IOStatus io_status(std::error_code error, const char* context, const std::string& path) {
  std::string what = std::string(context) + " " + path;
  if (error == std::errc::no_such_file_or_directory) return IOStatus::PathNotFound(what, error.message());
  if (error == std::errc::no_space_on_device) return IOStatus::NoSpace(what, error.message());
  return IOStatus::IOError(what, error.message());
}

// Memory maps would bypass the FileSystem, and a RocksDB reading through one
// may pass no scratch buffer to Read.
bool refuses_file_options(const FileOptions& options) {
  return options.use_mmap_reads || options.use_mmap_writes;
}

IOStatus mmap_refused(const std::string& path) {
  return IOStatus::NotSupported("memory-mapped files through the FileSystem seam", path);
}

// Whether path is a directory: list() succeeds on one and fails with ENOTDIR
// on a file, on the FaultFileSystem and on Linux alike, where open() would
// succeed on a directory.
Result<bool> is_directory(FileSystem& fs, const std::string& path) {
  auto names = fs.list(path);
  if (names) return true;
  if (names.error() == std::errc::not_a_directory) return false;
  return Result<bool>(boost::system::in_place_error, names.error());
}

class SeamSequentialFile final : public rocksdb::FSSequentialFile {
 public:
  SeamSequentialFile(std::unique_ptr<File> file, std::string path)
      : file_(std::move(file)), path_(std::move(path)) {}

  IOStatus Read(std::size_t n, const IOOptions& /*options*/, Slice* result, char* scratch,
                IODebugContext* /*dbg*/) override {
    auto read = file_->read_at(offset_, std::as_writable_bytes(std::span(scratch, n)));
    if (!read) return io_status(read.error(), "read", path_);
    offset_ += *read;
    *result = Slice(scratch, *read);
    return IOStatus::OK();
  }

  IOStatus Skip(std::uint64_t n) override {
    offset_ += n;
    return IOStatus::OK();
  }

 private:
  std::unique_ptr<File> file_;
  std::string path_;
  std::uint64_t offset_ = 0;
};

class SeamRandomAccessFile final : public rocksdb::FSRandomAccessFile {
 public:
  SeamRandomAccessFile(std::unique_ptr<File> file, std::string path)
      : file_(std::move(file)), path_(std::move(path)) {}

  IOStatus Read(std::uint64_t offset, std::size_t n, const IOOptions& /*options*/, Slice* result,
                char* scratch, IODebugContext* /*dbg*/) const override {
    auto read = file_->read_at(offset, std::as_writable_bytes(std::span(scratch, n)));
    if (!read) return io_status(read.error(), "read", path_);
    *result = Slice(scratch, *read);
    return IOStatus::OK();
  }

 private:
  std::unique_ptr<File> file_;
  std::string path_;
};

// Appends at the end it tracks; RocksDB has one writer per file and never
// appends elsewhere.
class SeamWritableFile final : public rocksdb::FSWritableFile {
 public:
  SeamWritableFile(std::unique_ptr<File> file, std::string path, std::uint64_t end,
                   const FileOptions& options)
      : rocksdb::FSWritableFile(options), file_(std::move(file)), path_(std::move(path)), end_(end) {}

  IOStatus Append(const Slice& data, const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    auto rest = std::as_bytes(std::span(data.data(), data.size()));
    while (!rest.empty()) {
      auto written = file_->write_at(end_, rest, WriteFlags::none);
      if (!written) return io_status(written.error(), "append to", path_);
      // A short write of nothing would loop forever; the disk is refusing.
      if (*written == 0) return IOStatus::IOError("append to " + path_, "a write made no progress");
      end_ += *written;
      rest = rest.subspan(*written);
    }
    return IOStatus::OK();
  }

  IOStatus Truncate(std::uint64_t size, const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    if (auto cut = file_->truncate(size); !cut) return io_status(cut.error(), "truncate", path_);
    end_ = size;
    return IOStatus::OK();
  }

  IOStatus Close(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    file_.reset();
    return IOStatus::OK();
  }

  // Nothing is buffered here: every Append reached the FileSystem.
  IOStatus Flush(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override { return IOStatus::OK(); }

  IOStatus Sync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    if (auto synced = file_->sync_data(); !synced) return io_status(synced.error(), "sync", path_);
    return IOStatus::OK();
  }

  // sync_data also makes the size durable, which is all the metadata a file
  // has on this seam; a new name is made durable by the directory's Fsync.
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override { return Sync(options, dbg); }

  // Every io::File may be synced while another thread writes to it.
  bool IsSyncThreadSafe() const override { return true; }

  std::uint64_t GetFileSize(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return end_;
  }

 private:
  std::unique_ptr<File> file_;
  std::string path_;
  std::uint64_t end_;
};

class SeamDirectory final : public rocksdb::FSDirectory {
 public:
  SeamDirectory(FileSystem& fs, std::string path) : fs_(fs), path_(std::move(path)) {}

  IOStatus Fsync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    if (auto synced = fs_.sync_dir(path_); !synced) return io_status(synced.error(), "sync directory", path_);
    return IOStatus::OK();
  }

 private:
  FileSystem& fs_;
  std::string path_;
};

class SeamLock final : public rocksdb::FileLock {
 public:
  explicit SeamLock(std::unique_ptr<FileSystem::Lock> lock) : lock_(std::move(lock)) {}

 private:
  std::unique_ptr<FileSystem::Lock> lock_;
};

class DiscardingLogger final : public rocksdb::Logger {
 public:
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
  void Logv(const rocksdb::InfoLogLevel /*level*/, const char* /*format*/, va_list /*ap*/) override {}
};

class SeamFileSystem final : public rocksdb::FileSystem {
 public:
  explicit SeamFileSystem(io::FileSystem& fs) : fs_(fs) {}

  const char* Name() const override { return "FuseeFileSystem"; }

  IOStatus NewSequentialFile(const std::string& path, const FileOptions& options,
                             std::unique_ptr<rocksdb::FSSequentialFile>* result,
                             IODebugContext* /*dbg*/) override {
    if (refuses_file_options(options)) return mmap_refused(path);
    auto file = fs_.open(path, OpenOptions{});
    if (!file) return io_status(file.error(), "open", path);
    *result = std::make_unique<SeamSequentialFile>(std::move(file).value(), path);
    return IOStatus::OK();
  }

  IOStatus NewRandomAccessFile(const std::string& path, const FileOptions& options,
                               std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                               IODebugContext* /*dbg*/) override {
    if (refuses_file_options(options)) return mmap_refused(path);
    auto file = fs_.open(path, OpenOptions{});
    if (!file) return io_status(file.error(), "open", path);
    *result = std::make_unique<SeamRandomAccessFile>(std::move(file).value(), path);
    return IOStatus::OK();
  }

  // O_CREAT | O_TRUNC: the truncate is a data operation like any other, durable
  // with the file's first sync. A new file is empty already and skips it, so a
  // crash test counts no operation that changes nothing.
  IOStatus NewWritableFile(const std::string& path, const FileOptions& options,
                           std::unique_ptr<rocksdb::FSWritableFile>* result,
                           IODebugContext* /*dbg*/) override {
    if (refuses_file_options(options)) return mmap_refused(path);
    auto file = fs_.open(path, OpenOptions{.write = true, .create = true});
    if (!file) return io_status(file.error(), "create", path);
    auto size = (*file)->size();
    if (!size) return io_status(size.error(), "size of", path);
    if (*size > 0) {
      if (auto cut = (*file)->truncate(0); !cut) return io_status(cut.error(), "truncate", path);
    }
    *result = std::make_unique<SeamWritableFile>(std::move(file).value(), path, 0, options);
    return IOStatus::OK();
  }

  IOStatus ReopenWritableFile(const std::string& path, const FileOptions& options,
                              std::unique_ptr<rocksdb::FSWritableFile>* result,
                              IODebugContext* /*dbg*/) override {
    if (refuses_file_options(options)) return mmap_refused(path);
    auto file = fs_.open(path, OpenOptions{.write = true, .create = true});
    if (!file) return io_status(file.error(), "open", path);
    auto size = (*file)->size();
    if (!size) return io_status(size.error(), "size of", path);
    *result = std::make_unique<SeamWritableFile>(std::move(file).value(), path, *size, options);
    return IOStatus::OK();
  }

  IOStatus NewDirectory(const std::string& path, const IOOptions& /*options*/,
                        std::unique_ptr<rocksdb::FSDirectory>* result, IODebugContext* /*dbg*/) override {
    auto directory = is_directory(fs_, path);
    if (!directory) return io_status(directory.error(), "open directory", path);
    if (!*directory) return IOStatus::IOError("open directory " + path, "not a directory");
    *result = std::make_unique<SeamDirectory>(fs_, path);
    return IOStatus::OK();
  }

  // NotFound, not PathNotFound, as RocksDB's contract for FileExists says.
  IOStatus FileExists(const std::string& path, const IOOptions& /*options*/,
                      IODebugContext* /*dbg*/) override {
    auto exists = fs_.exists(path);
    if (!exists) return io_status(exists.error(), "stat", path);
    return *exists ? IOStatus::OK() : IOStatus::NotFound(path);
  }

  // NotFound for a missing directory or a file, as RocksDB's contract says
  // (and PosixFileSystem answers).
  IOStatus GetChildren(const std::string& path, const IOOptions& /*options*/,
                       std::vector<std::string>* result, IODebugContext* /*dbg*/) override {
    auto names = fs_.list(path);
    if (!names) {
      if (names.error() == std::errc::no_such_file_or_directory ||
          names.error() == std::errc::not_a_directory) {
        return IOStatus::NotFound("list " + path, names.error().message());
      }
      return io_status(names.error(), "list", path);
    }
    *result = std::move(names).value();
    return IOStatus::OK();
  }

  IOStatus DeleteFile(const std::string& path, const IOOptions& /*options*/,
                      IODebugContext* /*dbg*/) override {
    if (auto removed = fs_.remove(path); !removed) return io_status(removed.error(), "remove", path);
    return IOStatus::OK();
  }

  IOStatus Truncate(const std::string& path, std::size_t size, const IOOptions& /*options*/,
                    IODebugContext* /*dbg*/) override {
    auto file = fs_.open(path, OpenOptions{.write = true});
    if (!file) return io_status(file.error(), "open", path);
    if (auto cut = (*file)->truncate(size); !cut) return io_status(cut.error(), "truncate", path);
    return IOStatus::OK();
  }

  // create_dir succeeds on an existing directory; RocksDB wants EEXIST here.
  IOStatus CreateDir(const std::string& path, const IOOptions& /*options*/,
                     IODebugContext* /*dbg*/) override {
    auto exists = fs_.exists(path);
    if (!exists) return io_status(exists.error(), "stat", path);
    if (*exists) return IOStatus::IOError("create directory " + path, "it exists");
    if (auto created = fs_.create_dir(path); !created) return io_status(created.error(), "create directory", path);
    return IOStatus::OK();
  }

  IOStatus CreateDirIfMissing(const std::string& path, const IOOptions& /*options*/,
                              IODebugContext* /*dbg*/) override {
    if (auto created = fs_.create_dir(path); !created) return io_status(created.error(), "create directory", path);
    return IOStatus::OK();
  }

  IOStatus DeleteDir(const std::string& path, const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    if (auto removed = fs_.remove_dir(path); !removed) return io_status(removed.error(), "remove directory", path);
    return IOStatus::OK();
  }

  IOStatus GetFileSize(const std::string& path, const IOOptions& /*options*/, std::uint64_t* size,
                       IODebugContext* /*dbg*/) override {
    auto file = fs_.open(path, OpenOptions{});
    if (!file) return io_status(file.error(), "open", path);
    auto bytes = (*file)->size();
    if (!bytes) return io_status(bytes.error(), "size of", path);
    *size = *bytes;
    return IOStatus::OK();
  }

  // The seam keeps no times. RocksDB reads them only to report them and for
  // time-based deletion that Fusee does not configure.
  IOStatus GetFileModificationTime(const std::string& /*path*/, const IOOptions& /*options*/,
                                   std::uint64_t* time, IODebugContext* /*dbg*/) override {
    *time = 0;
    return IOStatus::OK();
  }

  IOStatus RenameFile(const std::string& from, const std::string& to, const IOOptions& /*options*/,
                      IODebugContext* /*dbg*/) override {
    if (auto renamed = fs_.rename(from, to); !renamed) {
      return io_status(renamed.error(), "rename", from + " to " + to);
    }
    return IOStatus::OK();
  }

  IOStatus LockFile(const std::string& path, const IOOptions& /*options*/, rocksdb::FileLock** lock,
                    IODebugContext* /*dbg*/) override {
    auto held = fs_.lock_exclusive(path);
    if (!held) return io_status(held.error(), "lock", path);
    *lock = new SeamLock(std::move(held).value());
    return IOStatus::OK();
  }

  IOStatus UnlockFile(rocksdb::FileLock* lock, const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    delete lock;
    return IOStatus::OK();
  }

  IOStatus GetTestDirectory(const IOOptions& /*options*/, std::string* path, IODebugContext* /*dbg*/) override {
    // Where PosixFileSystem's test directory would be; created on a
    // FaultFileSystem, which starts with nothing but "/".
    *path = "/tmp";
    if (auto created = fs_.create_dir(*path); !created) return io_status(created.error(), "create directory", *path);
    return IOStatus::OK();
  }

  IOStatus NewLogger(const std::string& /*path*/, const IOOptions& /*options*/,
                     std::shared_ptr<rocksdb::Logger>* result, IODebugContext* /*dbg*/) override {
    *result = std::make_shared<DiscardingLogger>();
    return IOStatus::OK();
  }

  // The seam has no working directory to resolve a relative path against:
  // PosixFileSystem hands it to the kernel and the FaultFileSystem reads it
  // from the root, so either way the path already names the file as it is.
  IOStatus GetAbsolutePath(const std::string& path, const IOOptions& /*options*/, std::string* absolute,
                           IODebugContext* /*dbg*/) override {
    *absolute = path;
    return IOStatus::OK();
  }

  IOStatus IsDirectory(const std::string& path, const IOOptions& /*options*/, bool* directory,
                       IODebugContext* /*dbg*/) override {
    auto found = is_directory(fs_, path);
    if (!found) return io_status(found.error(), "stat", path);
    *directory = *found;
    return IOStatus::OK();
  }

 private:
  io::FileSystem& fs_;
};

}  // namespace

std::shared_ptr<rocksdb::Env> make_rocksdb_env(FileSystem& fs) {
  return rocksdb::NewCompositeEnv(std::make_shared<SeamFileSystem>(fs));
}

}  // namespace fusee::io
