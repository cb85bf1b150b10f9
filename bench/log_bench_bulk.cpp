#include "bench/log_bench_bulk.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <latch>
#include <mutex>
#include <thread>

#include "bench/bench_json.hpp"
#include "bench/figures.hpp"
#include "wal/errc.hpp"
#include "wal/log.hpp"

namespace fusee::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kBulkRecordBytes = 1 * wal::kMiB;
// roll_grow: two appenders, each waiting for its own record, keep a write
// in flight while the next is sealed (the log's two write slots).
constexpr std::uint32_t kRollGrowAppenders = 2;
// The log's default segment size, doubling to 256 MiB under this load.
constexpr std::uint64_t kGrowSegmentBytes = wal::kSegmentBytesDefault;
// Never filled within a window: 1 GiB at 400 MB/s lasts 2.6 s.
constexpr std::uint64_t kNoRollSegmentBytes = wal::kSegmentBytesMax;
constexpr int kBulkRounds = 3;
constexpr double kBulkSecondsMin = 1.0;
// roll_grow's window: the no-roll segment must not fill in it (1 GiB at up
// to 800 MB/s, warm-up included), so --seconds does not stretch it.
constexpr double kRollGrowSeconds = 1.0;
// bulk_small: the small record, and how many records the bulk appender keeps
// outstanding (appended, not yet durable) so that the log always has a
// large batch to seal.
constexpr std::size_t kSmallAppendBytes = 16;
constexpr std::size_t kBulkPipelineDepth = 8;

// Issue 34's aims: a roll into a grown segment costs a durable append about
// what a roll into a small one does (log_bench's roll case), and a small
// append beside a bulk load waits at most for one batch's write.
constexpr double kRollGrowP99AimMax = 1.5;
constexpr double kRollGrowMaxAimMax = 3.0;

double median_of(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double to_us(Clock::duration duration) { return std::chrono::duration<double, std::micro>(duration).count(); }

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

struct Window {
  Clock::time_point start;
  Clock::time_point end;
  bool contains(Clock::time_point at) const { return at >= start && at < end; }
};

wal::LogOptions bulk_options(const std::string& dir, std::uint64_t segment_bytes) {
  wal::LogOptions options;
  options.dir = dir;
  options.shard_count = 2;
  options.segment_bytes = segment_bytes;
  options.direct_io = true;
  // Every byte in the log's own batches: the load this case is about.
  options.payload_offload_bytes = 0;
  options.warn = [](const std::string& line) { fmt::print(stderr, "log_bench: log warns: {}\n", line); };
  return options;
}

// Distinct bytes per record, so nothing below can skip a repeated write.
void stamp(std::vector<std::byte>& record, std::uint64_t counter) {
  std::memcpy(record.data(), &counter, sizeof counter);
}

// Runs `bodies` on threads of their own against one fresh log in
// scratch/name; each body gets the window, which opens after the warm-up
// once every thread runs. Returns the log's statistics at the window's
// start and end; the log is closed and its directory removed.
struct RunStats {
  wal::LogStats at_start;
  wal::LogStats at_end;
  std::uint64_t segment_bytes_max = 0;
};

using Body = std::function<Result<void>(wal::Log&, const Window&)>;

Result<RunStats> run_threads(io::FileSystem& fs, const std::string& scratch_path, const std::string& name,
                             std::uint64_t segment_bytes, const std::vector<Body>& bodies,
                             const BulkCaseConfig& config, double seconds) {
  auto options = bulk_options(io::join_path(scratch_path, name), segment_bytes);
  auto log = FUSEE_TRY(wal::Log::open(fs, options));
  std::latch started(static_cast<std::ptrdiff_t>(bodies.size()));
  std::latch go(1);
  Window window;
  std::vector<std::error_code> errors(bodies.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] {
      started.count_down();
      go.wait();
      auto done = bodies[i](*log, window);
      if (!done) errors[i] = done.error();
    });
  }
  started.wait();
  window.start = Clock::now() + to_duration(config.warmup_seconds);
  window.end = window.start + to_duration(seconds);
  go.count_down();
  RunStats stats;
  std::this_thread::sleep_until(window.start);
  stats.at_start = log->stats();
  // The segment size in use, sampled: it grows and shrinks back with the load.
  while (Clock::now() < window.end) {
    stats.segment_bytes_max = std::max(stats.segment_bytes_max, log->stats().segment_bytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stats.at_end = log->stats();
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors)
    if (error) return error;
  FUSEE_TRY_VOID(log->close());
  log.reset();
  (void)io::remove_tree(fs, options.dir);
  return stats;
}

// Appends 1 MiB records to shard and waits for each; latencies of those
// appended inside the window, and their bytes.
struct BulkOutput {
  std::mutex mu;
  std::vector<double> latencies_us;
  std::uint64_t bytes = 0;
};

// With until_first_roll, the samples end where the log first rolls: the
// no-roll baseline must hold no roll, on a disk fast enough to fill 1 GiB.
Body bulk_waiting_appender(wal::ShardId shard, BulkOutput& out, bool until_first_roll) {
  return [shard, &out, until_first_roll](wal::Log& log, const Window& window) -> Result<void> {
    std::vector<std::byte> record(kBulkRecordBytes, std::byte{0x6b});
    std::vector<double> latencies_us;
    std::uint64_t bytes = 0;
    for (std::uint64_t counter = 0;; ++counter) {
      stamp(record, counter);
      auto appended_at = Clock::now();
      if (appended_at >= window.end) break;
      auto lsn = FUSEE_TRY(log.append(shard, record));
      FUSEE_TRY_VOID(log.wait_durable(shard, lsn));
      if (until_first_roll && log.stats().segments_created > 0) break;
      if (window.contains(appended_at)) {
        latencies_us.push_back(to_us(Clock::now() - appended_at));
        bytes += record.size();
      }
    }
    std::lock_guard lock(out.mu);
    out.latencies_us.insert(out.latencies_us.end(), latencies_us.begin(), latencies_us.end());
    out.bytes += bytes;
    return ok();
  };
}

// Appends 1 MiB records to shard keeping kBulkPipelineDepth outstanding.
Body bulk_pipelined_appender(wal::ShardId shard, std::uint64_t& bytes_in_window) {
  return [shard, &bytes_in_window](wal::Log& log, const Window& window) -> Result<void> {
    std::vector<std::byte> record(kBulkRecordBytes, std::byte{0x6c});
    std::deque<std::pair<wal::Lsn, Clock::time_point>> outstanding;
    auto settle_oldest = [&]() -> Result<void> {
      FUSEE_TRY_VOID(log.wait_durable(shard, outstanding.front().first));
      if (window.contains(outstanding.front().second)) bytes_in_window += kBulkRecordBytes;
      outstanding.pop_front();
      return ok();
    };
    for (std::uint64_t counter = 0;; ++counter) {
      auto now = Clock::now();
      if (now >= window.end) break;
      stamp(record, counter);
      auto lsn = log.append(shard, record);
      if (!lsn) {
        // A full stage: wait for the oldest, then try again.
        if (lsn.error() != make_error_code(wal::errc::queue_full) || outstanding.empty()) return lsn.error();
        FUSEE_TRY_VOID(settle_oldest());
        continue;
      }
      outstanding.emplace_back(*lsn, now);
      while (outstanding.size() > kBulkPipelineDepth) FUSEE_TRY_VOID(settle_oldest());
    }
    while (!outstanding.empty()) FUSEE_TRY_VOID(settle_oldest());
    return ok();
  };
}

// Times each append() call of a 16-byte record (staging only), then waits
// for it, so the small appender never runs ahead of the disk.
Body small_appender(wal::ShardId shard, std::vector<double>& append_us) {
  return [shard, &append_us](wal::Log& log, const Window& window) -> Result<void> {
    std::vector<std::byte> record(kSmallAppendBytes, std::byte{0x11});
    for (std::uint64_t counter = 0;; ++counter) {
      stamp(record, counter);
      auto before = Clock::now();
      if (before >= window.end) break;
      auto lsn = log.append(shard, record);
      auto after = Clock::now();
      if (!lsn) return lsn.error();
      if (window.contains(before)) append_us.push_back(to_us(after - before));
      FUSEE_TRY_VOID(log.wait_durable(shard, *lsn));
    }
    return ok();
  };
}

double mb_per_s(std::uint64_t bytes, double seconds) { return seconds > 0 ? double(bytes) / 1e6 / seconds : 0; }

}  // namespace

namespace {
// The median over rounds of one figure of each round.
template <typename Round, typename Pick>
double median_over(const std::vector<Round>& rounds, Pick pick) {
  std::vector<double> values;
  for (const auto& round : rounds) values.push_back(pick(round));
  return median_of(values);
}
}  // namespace

double RollGrowResult::p99_us() const { return median_over(rounds, [](const Round& r) { return r.rolled.p99_us; }); }
double RollGrowResult::max_us() const { return median_over(rounds, [](const Round& r) { return r.rolled.max_us; }); }
double RollGrowResult::p99_us_no_roll() const {
  return median_over(rounds, [](const Round& r) { return r.steady.p99_us; });
}
double RollGrowResult::max_us_no_roll() const {
  return median_over(rounds, [](const Round& r) { return r.steady.max_us; });
}
double BulkSmallResult::p99_us_alone() const {
  return median_over(rounds, [](const Round& r) { return r.alone.p99_us; });
}
double BulkSmallResult::p99_us_beside() const {
  return median_over(rounds, [](const Round& r) { return r.beside.p99_us; });
}
double BulkSmallResult::max_us_beside() const {
  return median_over(rounds, [](const Round& r) { return r.beside.max_us; });
}
double BulkSmallResult::batch_write_us() const {
  return median_over(rounds, [](const Round& r) { return r.batch_write_us; });
}

Result<RollGrowResult> run_roll_grow_case(io::FileSystem& fs, const std::string& scratch_path,
                                          const BulkCaseConfig& config) {
  RollGrowResult result;
  double seconds = kRollGrowSeconds;
  for (int round = 0; round < kBulkRounds; ++round) {
    RollGrowResult::Round figures;
    // Alternating, so that the machine's other load falls on each alike.
    for (bool rolling : {true, false}) {
      BulkOutput out;
      std::vector<Body> bodies;
      for (wal::ShardId shard = 0; shard < kRollGrowAppenders; ++shard)
        bodies.push_back(bulk_waiting_appender(shard, out, /*until_first_roll=*/!rolling));
      auto name = fmt::format("roll_grow-{}-{}", rolling ? "rolling" : "steady", round);
      auto stats = FUSEE_TRY(run_threads(fs, scratch_path, name, rolling ? kGrowSegmentBytes : kNoRollSegmentBytes,
                                         bodies, config, seconds));
      auto rolls = stats.at_end.segments_created - stats.at_start.segments_created;
      auto latency = summarize_latencies(std::move(out.latencies_us));
      if (rolling) {
        figures.rolled = latency;
        figures.rolled_mb_per_s = mb_per_s(out.bytes, seconds);
        figures.rolls = rolls;
        figures.rolls_late = stats.at_end.rolls_late - stats.at_start.rolls_late;
        figures.rolls_unprepared = stats.at_end.rolls_unprepared - stats.at_start.rolls_unprepared;
        figures.segment_bytes_max = stats.segment_bytes_max;
      } else {
        figures.steady = latency;
        figures.steady_mb_per_s = mb_per_s(out.bytes, seconds);
        figures.steady_rolls = rolls;  // its samples stop at the first
      }
    }
    result.rounds.push_back(figures);
  }
  return result;
}

Result<BulkSmallResult> run_bulk_small_case(io::FileSystem& fs, const std::string& scratch_path,
                                            const BulkCaseConfig& config) {
  BulkSmallResult result;
  double seconds = std::max(config.seconds, kBulkSecondsMin);
  for (int round = 0; round < kBulkRounds; ++round) {
    BulkSmallResult::Round figures;
    for (bool beside : {false, true}) {
      std::vector<double> append_us;
      std::uint64_t bulk_bytes = 0;
      std::vector<Body> bodies{small_appender(0, append_us)};
      if (beside) bodies.push_back(bulk_pipelined_appender(1, bulk_bytes));
      auto name = fmt::format("bulk_small-{}-{}", beside ? "beside" : "alone", round);
      auto stats = FUSEE_TRY(run_threads(fs, scratch_path, name, kGrowSegmentBytes, bodies, config, seconds));
      auto latency = summarize_latencies(std::move(append_us));
      if (beside) {
        figures.beside = latency;
        figures.bulk_mb_per_s = mb_per_s(bulk_bytes, seconds);
        auto flushes = stats.at_end.flushes - stats.at_start.flushes;
        auto flush_us = stats.at_end.flush_latency_sum_us - stats.at_start.flush_latency_sum_us;
        figures.batch_write_us = flushes > 0 ? double(flush_us) / double(flushes) : 0;
      } else {
        figures.alone = latency;
      }
    }
    result.rounds.push_back(figures);
  }
  return result;
}

void print_roll_grow(const RollGrowResult& result) {
  fmt::print("\nroll_grow: {} appenders of {} MiB records through rolls into growing segments ({} MiB doubling) "
             "beside a {} MiB segment that never rolls; {} rounds alternating (medians, us)\n",
             kRollGrowAppenders, kBulkRecordBytes / wal::kMiB, kGrowSegmentBytes / wal::kMiB,
             kNoRollSegmentBytes / wal::kMiB, kBulkRounds);
  fmt::print("{:<12} {:>9} {:>9} {:>11} {:>11} {:>8} {:>8}  {}\n", "case", "p99", "max", "p99 steady", "max steady",
             "p99/st", "max/st", "per round: MB/s rolled/steady, rolls, late, largest segment MiB");
  std::vector<std::string> rounds;
  for (const auto& round : result.rounds)
    rounds.push_back(fmt::format("{:.0f}/{:.0f} {} {} {}", round.rolled_mb_per_s, round.steady_mb_per_s, round.rolls,
                                 round.rolls_late, round.segment_bytes_max / wal::kMiB));
  fmt::print("{:<12} {:>9.1f} {:>9.1f} {:>11.1f} {:>11.1f} {:>8} {:>8}  {}\n", "roll_grow", result.p99_us(),
             result.max_us(), result.p99_us_no_roll(), result.max_us_no_roll(),
             format_ratio(ratio(result.p99_us(), result.p99_us_no_roll())),
             format_ratio(ratio(result.max_us(), result.max_us_no_roll())), fmt::join(rounds, "; "));
  std::uint64_t steady_rolls = 0;
  for (const auto& round : result.rounds) steady_rolls += round.steady_rolls;
  if (steady_rolls > 0)
    fmt::print("  note: the no-roll segment rolled {} times in all (it filled); its samples stop at its first roll\n", steady_rolls);
  fmt::print("{:<42} {:>10}  (aim <= {:.2f})\n", "roll_grow/p99_over_no_roll",
             format_ratio(ratio(result.p99_us(), result.p99_us_no_roll())), kRollGrowP99AimMax);
  fmt::print("{:<42} {:>10}  (aim <= {:.2f})\n", "roll_grow/max_over_no_roll",
             format_ratio(ratio(result.max_us(), result.max_us_no_roll())), kRollGrowMaxAimMax);
}

void print_bulk_small(const BulkSmallResult& result) {
  fmt::print("\nbulk_small: the append() call of a {} B record alone and beside a pipelined {} MiB appender; {} "
             "rounds alternating (medians, us)\n",
             kSmallAppendBytes, kBulkRecordBytes / wal::kMiB, kBulkRounds);
  fmt::print("{:<12} {:>10} {:>10} {:>10} {:>12} {:>12}  {}\n", "case", "p99 alone", "p99 beside", "max beside",
             "batch write", "p99 bound", "per round: p99 alone/beside, bulk MB/s");
  std::vector<std::string> rounds;
  for (const auto& round : result.rounds)
    rounds.push_back(fmt::format("{:.1f}/{:.1f} {:.0f}", round.alone.p99_us, round.beside.p99_us, round.bulk_mb_per_s));
  fmt::print("{:<12} {:>10.1f} {:>10.1f} {:>10.1f} {:>12.1f} {:>12.1f}  {}\n", "bulk_small", result.p99_us_alone(),
             result.p99_us_beside(), result.max_us_beside(), result.batch_write_us(), result.p99_bound_us(),
             fmt::join(rounds, "; "));
  fmt::print("{:<42} {:>10}  (aim <= 1.00: p99 beside over 2 x p99 alone + one batch's write)\n",
             "bulk_small/p99_over_bound", format_ratio(ratio(result.p99_us_beside(), result.p99_bound_us())));
}

void print_roll_grow_json(const RollGrowResult& result) {
  for (std::size_t i = 0; i < result.rounds.size(); ++i) {
    const auto& round = result.rounds[i];
    JsonLine line("log");
    line.field("case", "roll_grow")
        .field("round", i)
        .field("appenders", kRollGrowAppenders)
        .field("record_bytes", kBulkRecordBytes)
        .field("p50_us", round_to_ns(round.rolled.p50_us))
        .field("p99_us", round_to_ns(round.rolled.p99_us))
        .field("max_us", round_to_ns(round.rolled.max_us))
        .field("p50_us_no_roll", round_to_ns(round.steady.p50_us))
        .field("p99_us_no_roll", round_to_ns(round.steady.p99_us))
        .field("max_us_no_roll", round_to_ns(round.steady.max_us))
        .field("mb_per_s", round_to_digits(round.rolled_mb_per_s, 1))
        .field("mb_per_s_no_roll", round_to_digits(round.steady_mb_per_s, 1))
        .field("rolls", round.rolls)
        .field("rolls_late", round.rolls_late)
        .field("rolls_unprepared", round.rolls_unprepared)
        .field("segment_bytes_max", round.segment_bytes_max)
        .field("rolls_no_roll", round.steady_rolls)
        .field("samples", round.rolled.samples)
        .field("samples_no_roll", round.steady.samples);
    line.print();
  }
  JsonLine p99("log_aims");
  p99.field("case", "roll_grow/p99_over_no_roll")
      .field("value", round_to_digits(ratio(result.p99_us(), result.p99_us_no_roll()), 3))
      .field("aim_max", kRollGrowP99AimMax);
  p99.print();
  JsonLine max("log_aims");
  max.field("case", "roll_grow/max_over_no_roll")
      .field("value", round_to_digits(ratio(result.max_us(), result.max_us_no_roll()), 3))
      .field("aim_max", kRollGrowMaxAimMax);
  max.print();
}

void print_bulk_small_json(const BulkSmallResult& result) {
  for (std::size_t i = 0; i < result.rounds.size(); ++i) {
    const auto& round = result.rounds[i];
    JsonLine line("log");
    line.field("case", "bulk_small")
        .field("round", i)
        .field("small_record_bytes", kSmallAppendBytes)
        .field("bulk_record_bytes", kBulkRecordBytes)
        .field("append_p50_us_alone", round_to_ns(round.alone.p50_us))
        .field("append_p99_us_alone", round_to_ns(round.alone.p99_us))
        .field("append_max_us_alone", round_to_ns(round.alone.max_us))
        .field("append_p50_us", round_to_ns(round.beside.p50_us))
        .field("append_p99_us", round_to_ns(round.beside.p99_us))
        .field("append_p999_us", round_to_ns(round.beside.p999_us))
        .field("append_max_us", round_to_ns(round.beside.max_us))
        .field("bulk_mb_per_s", round_to_digits(round.bulk_mb_per_s, 1))
        .field("batch_write_us", round_to_ns(round.batch_write_us))
        .field("samples", round.beside.samples);
    line.print();
  }
  JsonLine aim("log_aims");
  aim.field("case", "bulk_small/p99_over_bound")
      .field("value", round_to_digits(ratio(result.p99_us_beside(), result.p99_bound_us()), 3))
      .field("aim_max", 1.0);
  aim.print();
}

}  // namespace fusee::bench
