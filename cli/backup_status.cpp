#include "cli/backup_status.hpp"

#include <boost/json.hpp>
#include <date/date.h>
#include <fmt/format.h>

#include <chrono>

#include "backup/directory_id.hpp"
#include "backup/manifest.hpp"
#include "backup/open_target.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {
namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string utc(std::int64_t ms) {
  auto at = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
  return date::format("%FT%TZ", std::chrono::time_point_cast<std::chrono::milliseconds>(at));
}

}  // namespace

std::optional<BackupSummary> read_backup_summary(io::FileSystem& fs, const engine::OfflineDir& offline,
                                                 std::string& problem) {
  auto recorded = backup::recorded_backup_target(fs, offline.dir);
  if (!recorded) {
    problem = fmt::format("{}: {}", offline.dir, recorded.error().message());
    return std::nullopt;
  }
  if (!*recorded) return std::nullopt;
  BackupSummary summary;
  summary.target = **recorded;
  auto target = backup::open_target(fs, summary.target, &problem);
  if (!target) return summary;
  auto manifests = (*target)->list(backup::kManifestPrefix);
  if (!manifests) {
    problem = fmt::format("cannot list {}: {}", (*target)->describe(), manifests.error().message());
    return summary;
  }
  summary.uploads = manifests->size();
  if (!manifests->empty()) {
    auto bytes = (*target)->get(manifests->back());
    auto last = bytes && *bytes ? backup::parse_manifest(**bytes) : std::nullopt;
    if (!last) {
      problem = fmt::format("{}: manifest {} does not read", (*target)->describe(), manifests->back());
      return summary;
    }
    summary.covered_sequence = last->batches.back().sequence;
    summary.covered_at_ms = last->batches.back().at_ms;
    bytes = (*target)->get(manifests->front());
    auto first = bytes && *bytes ? backup::parse_manifest(**bytes) : std::nullopt;
    if (!first) {
      problem = fmt::format("{}: manifest {} does not read", (*target)->describe(), manifests->front());
      return summary;
    }
    summary.first_sequence = first->batches.front().sequence;
  }
  auto snapshots = (*target)->list(backup::kSnapshotPrefix);
  if (!snapshots) {
    problem = fmt::format("cannot list {}: {}", (*target)->describe(), snapshots.error().message());
    return summary;
  }
  summary.snapshots = snapshots->size();
  if (!snapshots->empty()) {
    auto bytes = (*target)->get(snapshots->back());
    auto newest = bytes && *bytes ? backup::parse_snapshot(**bytes) : std::nullopt;
    if (!newest) {
      problem = fmt::format("{}: {} does not read", (*target)->describe(), snapshots->back());
      return summary;
    }
    summary.snapshot_sequence = newest->covers_sequence;
    summary.snapshot_at_ms = newest->covers_at_ms;
  }
  summary.log_last_sequence = offline.plan_made ? offline.plan.last_sequence : 0;
  if (summary.log_last_sequence > summary.covered_sequence) {
    summary.pending_batches = summary.log_last_sequence - summary.covered_sequence;
  }
  for (const auto& batch : offline.plan.batches) {
    if (batch.sequence > summary.covered_sequence) summary.pending_bytes += batch.total_length;
  }
  return summary;
}

int run_backup_status(const BackupStatusOptions& options) {
  io::PosixFileSystem fs;
  auto fail = [](const std::string& why) {
    fmt::print(stderr, "fusee backup status: {}\n", why);
    return 1;
  };
  auto offline = engine::read_offline_dir(fs, options.dir, true);
  if (!offline) return fail(fmt::format("cannot read {}: {}", options.dir, offline.error().message()));
  std::string problem;
  auto summary = read_backup_summary(fs, *offline, problem);
  if (!summary) {
    if (!problem.empty()) return fail(problem);
    return fail(fmt::format("{} has no backup (no engine opened it with Config::backup_target)", options.dir));
  }
  if (!problem.empty()) return fail(problem);
  const auto now = now_ms();
  // What losing the disk now would lose: everything published after the
  // newest batch on the target, which is how long ago that was.
  const std::optional<std::int64_t> loss_window_ms =
      summary->pending_batches == 0 ? std::optional<std::int64_t>(0)
      : summary->covered_at_ms > 0  ? std::optional<std::int64_t>(std::max<std::int64_t>(0, now - summary->covered_at_ms))
                                    : std::nullopt;
  if (options.json) {
    boost::json::object out{{"dir", options.dir},
                            {"target", summary->target},
                            {"uploads", summary->uploads},
                            {"first_sequence", summary->first_sequence},
                            {"covered_sequence", summary->covered_sequence},
                            {"covered_at_ms", summary->covered_at_ms},
                            {"log_last_sequence", summary->log_last_sequence},
                            {"pending_batches", summary->pending_batches},
                            {"pending_bytes", summary->pending_bytes},
                            {"snapshots", summary->snapshots},
                            {"snapshot_sequence", summary->snapshot_sequence},
                            {"snapshot_at_ms", summary->snapshot_at_ms},
                            {"loss_window_ms", loss_window_ms ? boost::json::value(*loss_window_ms) : nullptr}};
    fmt::print("{}\n", boost::json::serialize(out));
    return 0;
  }
  fmt::print("backup of {} to {}\n", options.dir, summary->target);
  if (summary->uploads == 0) {
    fmt::print("  nothing uploaded yet\n");
  } else {
    fmt::print("  on the target: batches {} to {} in {} uploads; the newest published {} ({:.1f} s ago)\n",
               summary->first_sequence, summary->covered_sequence, summary->uploads, utc(summary->covered_at_ms),
               static_cast<double>(now - summary->covered_at_ms) / 1000);
  }
  if (summary->snapshots == 0) {
    fmt::print("  no snapshot of the run store: a restore replays the log from batch 1\n");
  } else {
    fmt::print("  {} snapshots of the run store; the newest covers the log to batch {}, taken {}: a restore to a "
               "later moment replays the log from there\n",
               summary->snapshots, summary->snapshot_sequence, utc(summary->snapshot_at_ms));
  }
  if (summary->pending_batches == 0) {
    fmt::print("  the log ends at batch {}: everything is on the target; losing the disk now loses nothing\n",
               summary->log_last_sequence);
  } else {
    fmt::print("  backlog: the log ends at batch {}: {} batches ({} bytes) not on the target yet\n",
               summary->log_last_sequence, summary->pending_batches, summary->pending_bytes);
    fmt::print("  losing the disk now loses what was acknowledged {}\n",
               summary->covered_at_ms > 0 ? fmt::format("in the last {:.1f} s (since {})",
                                                        static_cast<double>(*loss_window_ms) / 1000,
                                                        utc(summary->covered_at_ms))
                                          : std::string("since the directory's start (nothing is uploaded)"));
  }
  return 0;
}

}  // namespace fusee::cli
