#include "wal/io/posix_file_system.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <system_error>
#include <utility>

#include "base/assert.hpp"
#include "wal/io/uring_write_queue.hpp"

namespace fusee::io {
namespace {

std::error_code errno_code(int error_number) {
  return std::error_code(error_number, std::generic_category());
}

std::error_code last_errno() { return errno_code(errno); }

// Retries a system call interrupted by a signal: EINTR says nothing about the
// operation, so giving up would turn a harmless signal into a failed write.
template <typename Call>
auto retry_on_eintr(Call call) {
  for (;;) {
    auto rc = call();
    if (rc != -1 || errno != EINTR) return rc;
  }
}

// Offsets arrive as uint64 but the kernel takes a signed off_t; one past its
// range is a caller bug we report rather than let wrap negative.
bool fits_off_t(std::uint64_t value) {
  return value <= static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
}

class PosixFile final : public File {
 public:
  PosixFile(const PosixFileSystem* owner, int fd, bool direct)
      : owner_(owner), fd_(fd), direct_(direct) {}
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  ~PosixFile() override {
    // close() errors are deliberately ignored: durability is decided by
    // sync_data() / RWF_DSYNC before this point, and retrying close on Linux
    // could close a descriptor another thread has just been given.
    ::close(fd_);
  }

  Result<std::size_t> write_at(std::uint64_t offset, std::span<const std::byte> data,
                               WriteFlags flags) override {
    if (!fits_off_t(offset)) return errno_code(EFBIG);
    // pwritev2 rather than pwrite so that WriteFlags::dsync becomes RWF_DSYNC:
    // the write and the metadata needed to read it back are durable when the
    // call returns, without a separate fdatasync (one round trip to the disk).
    iovec vec{const_cast<std::byte*>(data.data()), data.size()};
    int rwf = flags == WriteFlags::dsync ? RWF_DSYNC : 0;
    ssize_t written = retry_on_eintr(
        [&] { return ::pwritev2(fd_, &vec, 1, static_cast<off_t>(offset), rwf); });
    if (written < 0) return last_errno();
    return static_cast<std::size_t>(written);
  }

  Result<std::size_t> read_at(std::uint64_t offset, std::span<std::byte> out) override {
    if (!fits_off_t(offset)) return errno_code(EFBIG);
    // pread may return less than asked (signals, huge reads); the contract
    // promises a short read only at end of file, so keep going until then.
    std::size_t done_bytes = 0;
    while (done_bytes < out.size()) {
      ssize_t got = retry_on_eintr([&] {
        return ::pread(fd_, out.data() + done_bytes, out.size() - done_bytes,
                       static_cast<off_t>(offset + done_bytes));
      });
      if (got < 0) return last_errno();
      if (got == 0) break;
      done_bytes += static_cast<std::size_t>(got);
    }
    return done_bytes;
  }

  Result<void> sync_data() override {
    // Retrying only on EINTR: after EIO the kernel may already have dropped
    // the dirty pages, so a second fdatasync could falsely succeed. The caller
    // must treat any other error as poison.
    if (retry_on_eintr([&] { return ::fdatasync(fd_); }) != 0) return last_errno();
    return ok();
  }

  Result<void> truncate(std::uint64_t size_bytes) override {
    if (!fits_off_t(size_bytes)) return errno_code(EFBIG);
    if (retry_on_eintr([&] { return ::ftruncate(fd_, static_cast<off_t>(size_bytes)); }) != 0) {
      return last_errno();
    }
    return ok();
  }

  Result<void> allocate(std::uint64_t offset, std::uint64_t length) override {
    if (!fits_off_t(offset) || !fits_off_t(length) || !fits_off_t(offset + length)) {
      return errno_code(EFBIG);
    }
    auto start = static_cast<off_t>(offset);
    auto len = static_cast<off_t>(length);
    // Mode 0 both reserves the blocks (so a later write cannot hit ENOSPC) and
    // extends the size, which is what preallocated segments need.
    if (retry_on_eintr([&] { return ::fallocate(fd_, 0, start, len); }) == 0) return ok();
    if (errno != EOPNOTSUPP) return last_errno();
    // Some filesystems have no fallocate; glibc's posix_fallocate emulates it
    // by writing a byte per block. It returns the error rather than set errno.
    int rc = ::posix_fallocate(fd_, start, len);
    if (rc != 0) return errno_code(rc);
    return ok();
  }

  Result<std::uint64_t> size() override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return last_errno();
    return static_cast<std::uint64_t>(st.st_size);
  }

  bool direct() const override { return direct_; }

  Result<void> drop_cache() override {
    // Returns the error rather than set errno. A direct file reads past the
    // cache anyway; its cached pages (from other descriptors) go too.
    int rc = ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
    if (rc != 0) return errno_code(rc);
    return ok();
  }

  const PosixFileSystem* owner() const { return owner_; }
  int fd() const { return fd_; }

 private:
  // Only compared, never followed: PosixFile need not outlive its owner.
  const PosixFileSystem* owner_;
  int fd_;
  bool direct_;
};

}  // namespace

Result<std::unique_ptr<File>> PosixFileSystem::open(const std::string& path,
                                                    OpenOptions options) {
  // O_CLOEXEC so that a child process (the CLI runs tools) never inherits a
  // log descriptor and keeps a deleted segment alive.
  int flags = O_CLOEXEC | (options.write ? O_RDWR : O_RDONLY);
  if (options.create) flags |= O_CREAT;
  if (options.create && options.exclusive) flags |= O_EXCL;
  if (options.direct) flags |= O_DIRECT;
  int fd = retry_on_eintr([&] { return ::open(path.c_str(), flags, 0644); });
  // EINVAL from O_DIRECT on tmpfs reaches the caller unchanged: the log uses
  // it to fall back to buffered writes plus fdatasync.
  if (fd < 0) return last_errno();
  return std::unique_ptr<File>(std::make_unique<PosixFile>(this, fd, options.direct));
}

Result<void> PosixFileSystem::rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return last_errno();
  return ok();
}

Result<void> PosixFileSystem::remove(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return last_errno();
  return ok();
}

Result<void> PosixFileSystem::create_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return ok();
  if (errno != EEXIST) return last_errno();
  // EEXIST is success only if what exists is a directory; a file of that
  // name would otherwise surface later as a confusing ENOTDIR.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return last_errno();
  if (!S_ISDIR(st.st_mode)) return errno_code(ENOTDIR);
  return ok();
}

Result<void> PosixFileSystem::remove_dir(const std::string& path) {
  if (::rmdir(path.c_str()) != 0) return last_errno();
  return ok();
}

Result<std::vector<std::string>> PosixFileSystem::list(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return last_errno();
  std::vector<std::string> names;
  for (;;) {
    // readdir returns nullptr both at the end and on error; only errno tells.
    errno = 0;
    dirent* entry = ::readdir(dir);
    if (entry == nullptr) {
      int error_number = errno;
      ::closedir(dir);
      if (error_number != 0) return errno_code(error_number);
      break;
    }
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    names.push_back(std::move(name));
  }
  // Directory order is arbitrary; callers (segment discovery) need a stable one.
  std::sort(names.begin(), names.end());
  return names;
}

Result<bool> PosixFileSystem::exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  // ENOTDIR: a component of the path is a file, so nothing can exist below it.
  if (errno == ENOENT || errno == ENOTDIR) return false;
  // bool is constructible from error_code, so the error must be named.
  return Result<bool>(boost::system::in_place_error, last_errno());
}

Result<void> PosixFileSystem::sync_dir(const std::string& path) {
  int fd = retry_on_eintr(
      [&] { return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (fd < 0) return last_errno();
  int rc = retry_on_eintr([&] { return ::fsync(fd); });
  int error_number = errno;
  ::close(fd);
  if (rc != 0) return errno_code(error_number);
  return ok();
}

Result<std::unique_ptr<WriteQueue>> PosixFileSystem::open_write_queue(std::size_t depth) {
  if (depth == 0 || depth > kWriteQueueDepthMax) return errno_code(EINVAL);
#ifdef FUSEE_HAVE_LIBURING
  return open_uring_write_queue(*this, depth);
#else
  return std::make_error_code(std::errc::function_not_supported);
#endif
}

int PosixFileSystem::descriptor_of(File& file) const {
  auto* posix = dynamic_cast<PosixFile*>(&file);
  FUSEE_ASSERT(posix != nullptr, "not a File of a PosixFileSystem");
  FUSEE_ASSERT(posix->owner() == this, "a File of another PosixFileSystem");
  return posix->fd();
}

Result<bool> PosixFileSystem::is_memory_backed(const std::string& path) {
  struct statfs info;
  while (::statfs(path.c_str(), &info) != 0) {
    // bool converts from error_code, so the error is placed explicitly.
    if (errno != EINTR) return Result<bool>(boost::system::in_place_error, std::error_code(errno, std::generic_category()));
  }
  return info.f_type == TMPFS_MAGIC || info.f_type == RAMFS_MAGIC;
}

namespace {
class PosixLock final : public FileSystem::Lock {
 public:
  explicit PosixLock(int fd) : fd_(fd) {}
  ~PosixLock() override { ::close(fd_); }  // closing the description releases the flock

 private:
  int fd_;
};
}  // namespace

Result<std::unique_ptr<FileSystem::Lock>> PosixFileSystem::lock_exclusive(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return std::error_code(errno, std::generic_category());
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    auto error = std::error_code(errno, std::generic_category());
    ::close(fd);
    return error;
  }
  return std::unique_ptr<FileSystem::Lock>(std::make_unique<PosixLock>(fd));
}

}  // namespace fusee::io
