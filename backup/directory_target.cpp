#include "backup/directory_target.hpp"

#include <algorithm>
#include <system_error>

#include "wal/io/file_system.hpp"
#include "wal/segment_file.hpp"

namespace fusee::backup {
namespace {

// Names that could leave the directory, or collide with the temporary ones,
// are refused: the names are the uploader's own.
bool good_name(const std::string& name) {
  if (name.empty() || name.front() == '.' || name.ends_with(".tmp")) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_';
  });
}

class DirectoryTarget final : public BackupTarget {
 public:
  DirectoryTarget(io::FileSystem& fs, std::string dir) : fs_(fs), dir_(std::move(dir)) {}

  Result<void> put(const std::string& name, std::span<const std::byte> bytes) override {
    if (!good_name(name)) return std::make_error_code(std::errc::invalid_argument);
    auto temporary = io::join_path(dir_, name + ".tmp");
    FUSEE_TRY_VOID(write_synced(temporary, bytes));
    FUSEE_TRY_VOID(fs_.rename(temporary, io::join_path(dir_, name)));
    return fs_.sync_dir(dir_);
  }

  Result<bool> put_new(const std::string& name, std::span<const std::byte> bytes) override {
    if (!good_name(name)) return Result<bool>(boost::system::in_place_error, std::make_error_code(std::errc::invalid_argument));
    // Whole or absent, as put: a crash while it is written must not leave a
    // torn identity. (Two processes making the same object at the same
    // moment could both see none; a target is one directory's, and each
    // checks the identity it reads back.)
    auto exists = fs_.exists(io::join_path(dir_, name));
    if (!exists) return Result<bool>(boost::system::in_place_error, exists.error());
    if (*exists) return false;
    if (auto written = put(name, bytes); !written) return Result<bool>(boost::system::in_place_error, written.error());
    return true;
  }

  Result<std::optional<std::vector<std::byte>>> get(const std::string& name) override {
    using Out = std::optional<std::vector<std::byte>>;
    if (!good_name(name)) return Result<Out>(boost::system::in_place_error, std::make_error_code(std::errc::invalid_argument));
    auto path = io::join_path(dir_, name);
    if (!FUSEE_TRY(fs_.exists(path))) {
      // The target's own directory gone (an unmounted disk, a share away)
      // is a target out of reach, not one without the object: the uploader
      // tries again, where "no identity" would stop the backup for good.
      if (!FUSEE_TRY(fs_.exists(dir_))) {
        return Result<Out>(boost::system::in_place_error, std::make_error_code(std::errc::no_such_device));
      }
      return Out();
    }
    auto file = FUSEE_TRY(fs_.open(path, {}));
    auto size = FUSEE_TRY(file->size());
    std::vector<std::byte> bytes(size);
    std::size_t done = 0;
    while (done < bytes.size()) {
      // 1 MiB a read: the kernel reads ahead of a file read in pieces while
      // each is copied out, and a single read of a whole 30 MB chunk waits for
      // each readahead window in turn (about 1.1 GB/s against 1.7-2.0 here).
      constexpr std::size_t kReadBytes = 1u << 20;
      auto got = FUSEE_TRY(file->read_at(done, std::span(bytes).subspan(done, std::min(kReadBytes, bytes.size() - done))));
      if (got == 0) return Result<Out>(boost::system::in_place_error, std::make_error_code(std::errc::io_error));
      done += got;
    }
    return Out(std::move(bytes));
  }

  Result<void> remove(const std::string& name) override {
    if (!good_name(name)) return std::make_error_code(std::errc::invalid_argument);
    auto path = io::join_path(dir_, name);
    if (!FUSEE_TRY(fs_.exists(path))) return ok();
    FUSEE_TRY_VOID(fs_.remove(path));
    return fs_.sync_dir(dir_);
  }

  Result<std::vector<std::string>> list(const std::string& prefix) override {
    auto names = FUSEE_TRY(fs_.list(dir_));
    std::erase_if(names, [&](const std::string& name) { return !name.starts_with(prefix) || name.ends_with(".tmp"); });
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string describe() const override { return "directory " + dir_; }

 private:
  Result<void> write_synced(const std::string& path, std::span<const std::byte> bytes) {
    auto file = FUSEE_TRY(fs_.open(path, {.write = true, .create = true}));
    FUSEE_TRY_VOID(file->truncate(0));
    return wal::write_durably(*file, 0, bytes);
  }

  io::FileSystem& fs_;
  std::string dir_;
};

}  // namespace

Result<std::unique_ptr<BackupTarget>> open_directory_target(io::FileSystem& fs, const std::string& dir) {
  if (!FUSEE_TRY(fs.exists(dir))) {
    FUSEE_TRY_VOID(fs.create_dir(dir));
    FUSEE_TRY_VOID(fs.sync_dir(io::parent_path(dir)));
  }
  return std::unique_ptr<BackupTarget>(std::make_unique<DirectoryTarget>(fs, dir));
}

}  // namespace fusee::backup
