#include "backup/open_target.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "backup/directory_target.hpp"
#include "backup/s3_target.hpp"

namespace fusee::backup {

Result<std::unique_ptr<BackupTarget>> open_target(io::FileSystem& fs, const std::string& address,
                                                  std::string* problem, MissingDirectory missing) {
  if (is_s3_address(address)) {
    auto settings = s3_settings(address, [](const char* name) { return std::getenv(name); }, problem);
    if (!settings) return settings.error();
    return open_s3_target(std::move(*settings));
  }
  if (address.empty()) {
    if (problem) *problem = "no backup target given";
    return std::make_error_code(std::errc::invalid_argument);
  }
  if (missing == MissingDirectory::refuse) {
    auto exists = fs.exists(address);
    if (!exists || !*exists) {
      if (problem) *problem = fmt::format("the target directory {} is not there", address);
      return std::make_error_code(std::errc::no_such_file_or_directory);
    }
  }
  auto target = open_directory_target(fs, address);
  if (!target && problem) *problem = fmt::format("cannot open the target directory {}: {}", address, target.error().message());
  return target;
}

}  // namespace fusee::backup
