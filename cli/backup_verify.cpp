#include "cli/backup_verify.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "backup/open_target.hpp"
#include "backup/restore.hpp"
#include "cli/restore.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {
namespace {

// The metrics file, written whole then renamed over the old one, so that a
// collector never reads half of it.
bool write_metrics(const std::string& path, std::int64_t now_s, std::size_t ways) {
  const auto temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "# HELP fusee_backup_verify_last_success_timestamp_seconds When fusee backup verify last found every way "
           "to restore the target sound.\n"
        << "# TYPE fusee_backup_verify_last_success_timestamp_seconds gauge\n"
        << "fusee_backup_verify_last_success_timestamp_seconds " << now_s << "\n"
        << "# HELP fusee_backup_verify_ways Ways to restore the target that the last verify checked.\n"
        << "# TYPE fusee_backup_verify_ways gauge\n"
        << "fusee_backup_verify_ways " << ways << "\n";
    if (!out) return false;
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  return !error;
}

}  // namespace

int run_backup_verify(const BackupVerifyOptions& options) {
  std::string why;
  auto to_ms = parse_restore_time(options.to, why);
  if (!why.empty()) {
    fmt::print(stderr, "fusee backup verify: {}\n", why);
    return 1;
  }
  io::PosixFileSystem fs;
  std::string target_problem;
  auto target = backup::open_target(fs, options.from, &target_problem);
  if (!target) {
    fmt::print(stderr, "fusee backup verify: --from {}: {}\n", options.from, target_problem);
    return 1;
  }
  std::string problem;
  auto verified = backup::verify_target(fs, **target, to_ms, &problem);
  if (!verified) {
    fmt::print(stderr, "fusee backup verify: {}\n", problem.empty() ? verified.error().message() : problem);
    return 1;
  }
  for (const auto& way : verified->ways) {
    fmt::print("fusee backup verify: {}: sound; restores moments from {} to {} ({} batches, {} to {})\n", way.way,
               utc_text(way.from_ms), utc_text(way.last_at_ms), way.batches, way.first_sequence, way.last_sequence);
  }
  fmt::print("fusee backup verify: {} of {} shards: every way to restore it holds\n", (*target)->describe(),
             verified->shards);
  if (!options.metrics_file.empty()) {
    const auto now_s =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (!write_metrics(options.metrics_file, now_s, verified->ways.size())) {
      fmt::print(stderr, "fusee backup verify: cannot write {}\n", options.metrics_file);
      return 1;
    }
  }
  return 0;
}

}  // namespace fusee::cli
