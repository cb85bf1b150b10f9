#include "backup/directory_id.hpp"

#include <fmt/format.h>

#include "wal/segment_file.hpp"

namespace fusee::backup {
namespace {

// A small file written whole: temporary name, sync, rename, directory sync.
Result<void> write_file_atomically(io::FileSystem& fs, const std::string& dir, const std::string& name,
                                   const std::string& text) {
  auto path = io::join_path(dir, name);
  auto temporary = path + ".tmp";
  {
    auto file = FUSEE_TRY(fs.open(temporary, {.write = true, .create = true}));
    FUSEE_TRY_VOID(file->truncate(0));
    FUSEE_TRY_VOID(wal::write_durably(*file, 0, std::as_bytes(std::span(text.data(), text.size()))));
  }
  FUSEE_TRY_VOID(fs.rename(temporary, path));
  return fs.sync_dir(dir);
}

Result<std::optional<std::string>> read_small_file(io::FileSystem& fs, const std::string& path) {
  if (!FUSEE_TRY(fs.exists(path))) return std::optional<std::string>();
  auto file = FUSEE_TRY(fs.open(path, {}));
  auto size = FUSEE_TRY(file->size());
  std::string text(size, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    auto got = FUSEE_TRY(file->read_at(done, std::as_writable_bytes(std::span(text.data() + done, text.size() - done))));
    if (got == 0) break;
    done += got;
  }
  text.resize(done);
  return std::optional<std::string>(std::move(text));
}

}  // namespace

Result<std::string> directory_backup_id(io::FileSystem& fs, const std::string& dir,
                                        const std::function<std::uint64_t()>& random) {
  auto path = io::join_path(dir, kDirectoryIdFileName);
  if (auto known = FUSEE_TRY(read_small_file(fs, path)); known && known->size() == 32) return *known;
  // None yet (or not whole: it is renamed into place whole, so only a
  // damaged file gets here): made anew.
  auto id = fmt::format("{:016x}{:016x}", random(), random());
  FUSEE_TRY_VOID(write_file_atomically(fs, dir, kDirectoryIdFileName, id));
  return id;
}

Result<void> record_backup_target(io::FileSystem& fs, const std::string& dir, const std::string& target) {
  if (auto known = FUSEE_TRY(read_small_file(fs, io::join_path(dir, kBackupTargetFileName))); known && *known == target) {
    return ok();
  }
  return write_file_atomically(fs, dir, kBackupTargetFileName, target);
}

Result<std::optional<std::string>> recorded_backup_target(io::FileSystem& fs, const std::string& dir) {
  return read_small_file(fs, io::join_path(dir, kBackupTargetFileName));
}

}  // namespace fusee::backup
