// ScratchDir: owns a benchmark's scratch directory so that it goes however
// the benchmark ends. std::filesystem rather than the FileSystem seam: the
// engine's directory holds more than the log (the run store), and the seam
// has no stat to tell a directory from a file.
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace fusee::bench {

class ScratchDir {
 public:
  // program: named in the warning when the directory cannot be removed.
  ScratchDir(std::string path, std::string program) : path_(std::move(path)), program_(std::move(program)) {}
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
    if (error) fmt::print(stderr, "{}: could not remove {}: {}\n", program_, path_, error.message());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string program_;
};

}  // namespace fusee::bench
