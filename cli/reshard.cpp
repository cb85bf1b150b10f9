#include "cli/reshard.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>

#include "engine/reshard.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {
namespace {

// Redraws one line on a terminal; otherwise prints a line per old shard.
class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet), terminal_(::isatty(STDERR_FILENO) == 1) {}

  void update(const engine::ReshardProgress& progress) {
    if (quiet_) return;
    if (terminal_) {
      auto now = std::chrono::steady_clock::now();
      bool done = progress.shards_read == progress.shards_total && progress.shards_total > 0;
      if (!done && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      constexpr int kWidth = 30;
      int filled = progress.shards_total == 0 ? 0 : kWidth * progress.shards_read / progress.shards_total;
      fmt::print(stderr, "\r[{:#<{}}{:<{}}] {}/{} shards, {} runs moved, {} finished runs copied", "", filled, "",
                 kWidth - filled, progress.shards_read, progress.shards_total, progress.runs_moved,
                 progress.finished_copied);
      drawn_ = true;
      return;
    }
    if (progress.shards_read != last_shard_) {
      last_shard_ = progress.shards_read;
      fmt::print(stderr, "reshard: shard {} of {} moved ({} runs moved, {} finished runs copied)\n",
                 progress.shards_read, progress.shards_total, progress.runs_moved, progress.finished_copied);
    }
  }
  void finish() {
    if (drawn_) fmt::print(stderr, "\n");
  }

 private:
  bool quiet_;
  bool terminal_;
  bool drawn_ = false;
  std::uint32_t last_shard_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace

int run_reshard(const ReshardCommandOptions& options) {
  io::PosixFileSystem fs;
  Progress progress(options.quiet);
  engine::ReshardOptions reshard_options;
  reshard_options.shards = options.shards;
  reshard_options.progress = [&progress](const engine::ReshardProgress& p) { progress.update(p); };
  std::string problem;
  auto report = engine::reshard(fs, options.dir, reshard_options, &problem);
  progress.finish();
  if (!report) {
    fmt::print(stderr, "fusee reshard: {}\n", problem.empty() ? report.error().message() : problem);
    return 1;
  }
  if (report->leftovers_removed > 0) {
    fmt::print("removed {} leftovers of an interrupted reshard\n", report->leftovers_removed);
  }
  if (!report->changed) {
    fmt::print("{} already has {} shards: nothing to do\n", options.dir, report->shards_to);
    return 0;
  }
  fmt::print("resharded {}: {} -> {} shards (layout {} -> {}); moved {} unfinished runs ({} parked, {} records), "
             "copied {} finished runs\n",
             options.dir, report->shards_from, report->shards_to, report->layout_from, report->layout_to,
             report->runs_moved, report->runs_parked, report->records_moved, report->finished_copied);
  return 0;
}

}  // namespace fusee::cli
