#include "backup/directory_id.hpp"

#include <fmt/format.h>

namespace fusee::backup {

Result<std::string> directory_backup_id(io::FileSystem& fs, const std::string& dir,
                                        const std::function<std::uint64_t()>& random) {
  auto path = io::join_path(dir, kDirectoryIdFileName);
  if (FUSEE_TRY(fs.exists(path))) {
    auto file = FUSEE_TRY(fs.open(path, {}));
    std::string id(32, '\0');
    auto got = FUSEE_TRY(file->read_at(0, std::as_writable_bytes(std::span(id.data(), id.size()))));
    if (got == id.size()) return id;
    // A torn id (a crash while it was written is not possible: it is
    // renamed into place whole): a damaged file is made anew below.
  }
  auto id = fmt::format("{:016x}{:016x}", random(), random());
  auto temporary = path + ".tmp";
  {
    auto file = FUSEE_TRY(fs.open(temporary, {.write = true, .create = true}));
    FUSEE_TRY_VOID(file->truncate(0));
    auto bytes = std::as_bytes(std::span(id.data(), id.size()));
    std::size_t done = 0;
    while (done < bytes.size()) {
      auto wrote = FUSEE_TRY(file->write_at(done, bytes.subspan(done), io::WriteFlags::none));
      if (wrote == 0) return std::make_error_code(std::errc::io_error);
      done += wrote;
    }
    FUSEE_TRY_VOID(file->sync_data());
  }
  FUSEE_TRY_VOID(fs.rename(temporary, path));
  FUSEE_TRY_VOID(fs.sync_dir(dir));
  return id;
}

}  // namespace fusee::backup
