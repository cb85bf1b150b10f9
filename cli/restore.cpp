#include "cli/restore.hpp"

#include <date/date.h>
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <sstream>

#include "backup/open_target.hpp"
#include "backup/restore.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {
namespace {

std::string utc_text(std::int64_t ms) {
  return date::format("%FT%TZ", std::chrono::time_point_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::time_point(std::chrono::milliseconds(ms))));
}

// 1973-03-03 in ms; as seconds, the year 5138.
constexpr std::int64_t kBareNumberMsMin = 100'000'000'000;

}  // namespace

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
  std::string problem;
  auto restored = backup::restore_directory(fs, **target, options.dir, to_ms, &problem);
  if (!restored) {
    fmt::print(stderr, "fusee restore: {}\n", problem.empty() ? restored.error().message() : problem);
    return 1;
  }
  const auto& summary = *restored;
  for (const auto& skipped : summary.skipped) fmt::print("fusee restore: skipped {}\n", skipped);
  fmt::print("fusee restore: {} batches of {} shards into {}, {}{}{}; {}\n", summary.batches, summary.shards,
             options.dir,
             summary.batches > 0 ? fmt::format("batches {} to {}", summary.first_sequence, summary.last_sequence)
                                 : std::string("no batch"),
             summary.batches > 0 ? fmt::format(" (the last published {})", utc_text(summary.last_at_ms)) : "",
             summary.snapshot_sequence > 0
                 ? fmt::format(", over the run store's snapshot at batch {}", summary.snapshot_sequence)
                 : std::string(", the whole log (no snapshot of the run store before the moment)"),
             summary.batches_left_out > 0 ? "later batches in the backup left out" : "nothing later in the backup");
  fmt::print("fusee restore: open it as a data directory (Config::local(\"{}\")): it recovers as after a crash at "
             "that moment\n",
             options.dir);
  return 0;
}

}  // namespace fusee::cli
