#include "cli/restore.hpp"

#include <date/date.h>
#include <fmt/format.h>

#include <charconv>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <chrono>
#include <sstream>

#include "backup/open_target.hpp"
#include "backup/restore.hpp"
#include "engine/offline_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {
namespace {

// 1973-03-03 in ms; as seconds, the year 5138.
constexpr std::int64_t kBareNumberMsMin = 100'000'000'000;

}  // namespace

std::string utc_text(std::int64_t ms) {
  return date::format("%FT%TZ", std::chrono::time_point_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::time_point(std::chrono::milliseconds(ms))));
}

std::optional<std::int64_t> parse_restore_time(const std::string& text, std::string& why) {
  why.clear();
  if (text == "latest") return std::nullopt;
  std::int64_t ms = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (error == std::errc() && end == text.data() + text.size()) {
    // Milliseconds; a number this small is seconds (or a typo), and read
    // as ms it would name a moment in 1970 or 1971.
    if (ms < kBareNumberMsMin) {
      why = fmt::format("--to {}: a bare number is milliseconds since the epoch, and {} ms is {}, before any "
                        "backup; for seconds since the epoch give {}000, or give UTC ISO 8601 "
                        "(2026-12-02T04:00:00Z)",
                        text, text, utc_text(ms), text);
      return std::nullopt;
    }
    return ms;
  }
  std::istringstream in(text);
  date::sys_time<std::chrono::milliseconds> at;
  in >> date::parse("%FT%TZ", at);
  if (in.fail() || in.peek() != std::char_traits<char>::eof()) {
    why = fmt::format("--to {}: not a time: give UTC ISO 8601 (2026-12-02T04:00:00Z, 2026-12-02T04:00:00.250Z), "
                      "milliseconds since the epoch, or latest",
                      text);
    return std::nullopt;
  }
  return at.time_since_epoch().count();
}

namespace {

// The drill's second half: the restored directory opened read-only as an
// engine's recovery would read it, every run's journal assembled, the runs
// counted.
int check_restored(io::FileSystem& fs, const std::string& dir) {
  auto offline = engine::read_offline_dir(fs, dir);
  if (!offline) {
    fmt::print(stderr, "fusee restore --check: the restored directory does not read: {}\n", offline.error().message());
    return 1;
  }
  if (!offline->refusal.empty()) {
    fmt::print(stderr, "fusee restore --check: the restored directory would not open: {}\n", offline->refusal);
    return 1;
  }
  std::uint64_t in_log = 0, parked = 0, finished = 0;
  const auto shards = offline->meta ? offline->meta->shards : 0;
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    std::string problem;
    auto runs = engine::collect_runs(fs, *offline, shard, &problem);
    if (!runs) {
      fmt::print(stderr, "fusee restore --check: shard {}'s journals do not assemble: {}\n", shard,
                 problem.empty() ? runs.error().message() : problem);
      return 1;
    }
    for (const auto& run : *runs) (run.parked ? parked : in_log)++;
  }
  if (offline->store) {
    engine::RunQuery query;
    query.limit = 1000;
    for (;;) {
      auto page = offline->store->list(query);
      if (!page) {
        fmt::print(stderr, "fusee restore --check: the run store does not list: {}\n", page.error().message());
        return 1;
      }
      finished += page->runs.size();
      if (page->next_cursor.empty()) break;
      query.cursor = page->next_cursor;
    }
  }
  fmt::print("fusee restore --check: it opens: {} runs ({} loaded from the log, {} parked, {} finished in the run "
             "store), every journal assembled\n",
             in_log + parked + finished, in_log, parked, finished);
  return 0;
}

}  // namespace

int run_restore(const RestoreCommandOptions& options) {
  std::string why;
  auto to_ms = parse_restore_time(options.to, why);
  if (!why.empty()) {
    fmt::print(stderr, "fusee restore: {}\n", why);
    return 1;
  }
  io::PosixFileSystem fs;
  std::string target_problem;
  auto target = backup::open_target(fs, options.from, &target_problem);
  if (!target) {
    fmt::print(stderr, "fusee restore: --from {}: {}\n", options.from, target_problem);
    return 1;
  }
  std::string dir = options.dir;
  if (options.check && dir.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "fusee-restore-check-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      fmt::print(stderr, "fusee restore --check: cannot make a scratch directory under {}: {}\n",
                 std::filesystem::temp_directory_path().string(), std::strerror(errno));
      return 1;
    }
    dir = pattern;
  }
  std::string problem;
  auto restored = backup::restore_directory(fs, **target, dir, to_ms, &problem);
  if (!restored) {
    fmt::print(stderr, "fusee restore: {}\n", problem.empty() ? restored.error().message() : problem);
    if (options.check && options.dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove(dir, ignored);  // the drill's empty scratch directory
    }
    return 1;
  }
  const auto& summary = *restored;
  for (const auto& skipped : summary.skipped) fmt::print("fusee restore: skipped {}\n", skipped);
  fmt::print("fusee restore: {} batches of {} shards into {}, {}{}{}; {}\n", summary.batches, summary.shards,
             dir,
             summary.batches > 0 ? fmt::format("batches {} to {}", summary.first_sequence, summary.last_sequence)
                                 : std::string("no batch"),
             summary.batches > 0 ? fmt::format(" (the last published {})", utc_text(summary.last_at_ms)) : "",
             summary.snapshot_sequence > 0
                 ? fmt::format(", over the run store's snapshot at batch {}", summary.snapshot_sequence)
                 : std::string(", the whole log (no snapshot of the run store before the moment)"),
             summary.batches_left_out > 0 ? "later batches in the backup left out" : "nothing later in the backup");
  if (options.check) {
    const int checked = check_restored(fs, dir);
    std::error_code removed;
    std::filesystem::remove_all(dir, removed);
    if (removed) fmt::print(stderr, "fusee restore --check: could not remove {}: {}\n", dir, removed.message());
    if (checked == 0) fmt::print("fusee restore --check: {} removed; the backup restores to that moment\n", dir);
    return checked;
  }
  fmt::print("fusee restore: open it as a data directory (Config::local(\"{}\")): it recovers as after a crash at "
             "that moment\n",
             options.dir);
  return 0;
}

}  // namespace fusee::cli
