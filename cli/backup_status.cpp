#include "cli/backup_status.hpp"

#include <boost/json.hpp>
#include <date/date.h>
#include <fmt/format.h>

#include <chrono>

#include "backup/directory_id.hpp"
#include "backup/open_target.hpp"
#include "backup/manifest.hpp"
#include "engine/offline_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {

int run_backup_status(const BackupStatusOptions& options) {
  io::PosixFileSystem fs;
  auto fail = [](const std::string& why) {
    fmt::print(stderr, "fusee backup status: {}\n", why);
    return 1;
  };
  auto recorded = backup::recorded_backup_target(fs, options.dir);
  if (!recorded) return fail(fmt::format("{}: {}", options.dir, recorded.error().message()));
  if (!*recorded) return fail(fmt::format("{} has no backup (no engine opened it with Config::backup_target)", options.dir));
  const auto& target_dir = **recorded;
  std::string target_problem;
  auto target = backup::open_target(fs, target_dir, &target_problem);
  if (!target) return fail(target_problem);
  auto manifests = (*target)->list(backup::kManifestPrefix);
  if (!manifests) return fail(fmt::format("cannot list {}: {}", target_dir, manifests.error().message()));
  std::uint64_t covered = 0;
  std::int64_t covered_at_ms = 0;
  if (!manifests->empty()) {
    auto bytes = (*target)->get(manifests->back());
    auto last = bytes && *bytes ? backup::parse_manifest(**bytes) : std::nullopt;
    if (!last) return fail(fmt::format("{}: manifest {} does not read", target_dir, manifests->back()));
    covered = last->batches.back().sequence;
    covered_at_ms = last->batches.back().at_ms;
  }
  auto offline = engine::read_offline_dir(fs, options.dir);
  if (!offline) return fail(fmt::format("cannot read {}: {}", options.dir, offline.error().message()));
  const std::uint64_t log_last = offline->plan_made ? offline->plan.last_sequence : 0;
  const std::uint64_t pending = log_last > covered ? log_last - covered : 0;
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  if (options.json) {
    boost::json::object out{{"dir", options.dir},
                            {"target", target_dir},
                            {"uploads", manifests->size()},
                            {"covered_sequence", covered},
                            {"covered_at_ms", covered_at_ms},
                            {"log_last_sequence", log_last},
                            {"pending_batches", pending}};
    fmt::print("{}\n", boost::json::serialize(out));
    return 0;
  }
  fmt::print("backup of {} to {}\n", options.dir, target_dir);
  if (manifests->empty()) {
    fmt::print("  nothing uploaded yet\n");
  } else {
    auto at = std::chrono::system_clock::time_point(std::chrono::milliseconds(covered_at_ms));
    fmt::print("  on the target: batches 1 to {} in {} uploads; the newest published {} ({:.1f} s ago)\n", covered,
               manifests->size(), date::format("%FT%TZ", std::chrono::time_point_cast<std::chrono::milliseconds>(at)),
               static_cast<double>(now_ms - covered_at_ms) / 1000);
  }
  if (pending == 0) {
    fmt::print("  the log ends at batch {}: everything is on the target\n", log_last);
  } else {
    fmt::print("  the log ends at batch {}: {} batches not on the target yet, which losing the disk now would lose\n",
               log_last, pending);
  }
  return 0;
}

}  // namespace fusee::cli
