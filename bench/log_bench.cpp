// log_bench: append-to-durable latency and throughput of the shared log
// (wal/log.hpp) with 128-byte records from 1, 8 and 64 concurrent appenders,
// on both write paths (O_DIRECT + RWF_DSYNC, and buffered + fdatasync), set
// beside the disk's raw durable 4 KiB write latency measured in the same
// directory (bench/raw_flush.hpp). That raw figure is the floor: one appender
// can at best match it, and many appenders beat it only through group commit,
// which records_per_flush shows.
//
// Each appender owns one shard and loops: append one record, wait_durable for
// it, note the latency. Only one record per appender is ever outstanding, so
// throughput comes from batching across appenders, never from one appender
// pipelining.
//
// Output: a table for people, then one JSON line per measurement (grep '^{').
// Everything is written under a fresh directory in --dir, removed at the end.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <latch>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bench/bench_json.hpp"
#include "bench/raw_flush.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using fusee::bench::FlushMethod;
using fusee::bench::JsonLine;
using fusee::bench::LatencySummary;

constexpr std::size_t kRecordBytes = 128;
// The aims the log is built for (DESIGN.md §3, group commit): one appender
// pays little over the raw flush, and 64 appenders share flushes well enough
// to go about 64 times as fast. Reported as figures, not checked.
constexpr double kOneAppenderP50OverRawAimMax = 1.15;
constexpr double kThroughput64Over1AimMin = 40.0;

struct Config {
  std::string dir = ".";
  double seconds = 2.0;
  // Untimed start of each case: the first batches pay for waking threads and
  // faulting in buffers, which is not what the figures are about. raw_flush
  // has its warm-up writes for the same reason.
  double warmup_seconds = 0.2;
  std::vector<std::uint32_t> appender_counts = {1, 8, 64};
  std::size_t raw_iterations = fusee::bench::RawFlushOptions{}.iterations;
};

struct CaseResult {
  FlushMethod method = FlushMethod::direct_dsync;
  std::uint32_t appenders = 0;
  bool direct_io_kept = true;  // false: the log fell back to buffered writes
  LatencySummary latency;
  std::uint64_t records = 0;
  double measured_seconds = 0;
  double records_per_s = 0;
  std::uint64_t log_records_written = 0;  // LogStats deltas over the timed window
  std::uint64_t log_flushes = 0;
  double records_per_flush = 0;
};

struct RawResult {
  FlushMethod method = FlushMethod::direct_dsync;
  bool supported = false;
  std::string unsupported_reason;
  LatencySummary latency;
};

// Multiplying by a power of ten and dividing back (never multiplying by a
// fraction such as 0.001) gives the double nearest the decimal, so JSON shows
// 0.3 and not 0.30000000000000004.
double round_to_digits(double value, int digits) {
  double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

// The clock reads in nanoseconds; more digits than that are float noise.
double round_to_ns(double value_us) { return round_to_digits(value_us, 3); }

double ratio(double numerator, double denominator) {
  // NaN becomes null in JSON and "n/a" in the table: no raw figure to compare with.
  return denominator > 0 ? numerator / denominator : std::nan("");
}

std::string format_ratio(double value) {
  return std::isfinite(value) ? fmt::format("{:.2f}", value) : std::string("n/a");
}

std::string case_name(FlushMethod method, std::uint32_t appenders) {
  return fmt::format("{}/{}_appenders", fusee::bench::flush_method_name(method), appenders);
}

// Removes a tree the benchmark made, through the FileSystem seam like every
// other I/O here. The seam has no stat, so an entry whose unlink fails with
// EISDIR (Linux) or EPERM (what POSIX allows instead) is taken for a directory.
fusee::Result<void> remove_tree(fusee::io::FileSystem& fs, const std::string& path) {
  auto removed = fs.remove(path);
  if (removed) return fusee::ok();
  if (removed.error() != std::errc::is_a_directory && removed.error() != std::errc::operation_not_permitted)
    return removed.error();
  for (const auto& name : FUSEE_TRY(fs.list(path))) {
    FUSEE_TRY_VOID(remove_tree(fs, fusee::io::join_path(path, name)));
  }
  return fs.remove_dir(path);
}

// Owns the benchmark's scratch directory so that it goes however main ends.
class ScratchDir {
 public:
  ScratchDir(fusee::io::FileSystem& fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    if (auto removed = remove_tree(fs_, path_); !removed)
      fmt::print(stderr, "log_bench: could not remove {}: {}\n", path_, removed.error().message());
  }
  const std::string& path() const { return path_; }

 private:
  fusee::io::FileSystem& fs_;
  std::string path_;
};

// The timed window of a case. Appenders read it only after the go signal,
// which is given once every appender thread is running, so thread start-up
// on a busy two-core machine does not eat into the warm-up.
struct Window {
  Clock::time_point measure_start;
  Clock::time_point measure_end;
};

struct AppenderOutput {
  std::vector<double> latencies_us;
  Clock::time_point last_durable_at{};
  std::error_code error;
};

// One appender's loop. Samples count only for appends started inside the
// window; the loop stops at its end.
void run_appender(fusee::wal::Log& log, fusee::wal::ShardId shard, std::latch& started, std::latch& go,
                  const Window& window, AppenderOutput& out) {
  std::vector<std::byte> record(kRecordBytes, std::byte{0x5a});
  started.count_down();
  go.wait();
  const auto measure_start = window.measure_start;
  const auto measure_end = window.measure_end;
  for (std::uint64_t counter = 0;; ++counter) {
    // Distinct bytes per record, so nothing below can skip a repeated write.
    std::memcpy(record.data(), &counter, sizeof counter);
    auto appended_at = Clock::now();
    if (appended_at >= measure_end) return;
    auto lsn = log.append(shard, record);
    if (!lsn) {
      out.error = lsn.error();
      return;
    }
    auto durable = log.wait_durable(shard, *lsn);
    auto durable_at = Clock::now();
    if (!durable) {
      out.error = durable.error();
      return;
    }
    if (appended_at >= measure_start) {
      out.latencies_us.push_back(std::chrono::duration<double, std::micro>(durable_at - appended_at).count());
      out.last_durable_at = durable_at;
    }
  }
}

fusee::Result<CaseResult> run_case(fusee::io::FileSystem& fs, const std::string& dir, FlushMethod method,
                                   std::uint32_t appenders, const Config& config) {
  fusee::wal::LogOptions options;
  options.dir = dir;
  options.shard_count = appenders;
  options.direct_io = method == FlushMethod::direct_dsync;
  options.warn = [](const std::string& line) { fmt::print(stderr, "log_bench: log warns: {}\n", line); };
  auto log = FUSEE_TRY(fusee::wal::Log::open(fs, options));

  std::vector<AppenderOutput> outputs(appenders);
  std::latch started(appenders);
  std::latch go(1);
  Window window;
  std::vector<std::thread> threads;
  threads.reserve(appenders);
  for (std::uint32_t shard = 0; shard < appenders; ++shard) {
    threads.emplace_back(
        [&, shard] { run_appender(*log, shard, started, go, window, outputs[shard]); });
  }
  started.wait();
  auto to_duration = [](double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  window.measure_start = Clock::now() + to_duration(config.warmup_seconds);
  window.measure_end = window.measure_start + to_duration(config.seconds);
  const auto measure_start = window.measure_start;
  go.count_down();

  std::this_thread::sleep_until(measure_start);
  auto stats_at_start = log->stats();
  std::this_thread::sleep_until(window.measure_end);
  auto stats_at_end = log->stats();
  for (auto& thread : threads) thread.join();

  // A clean close, so the case ends as a real shutdown would; its close
  // marker falls outside the timed window.
  FUSEE_TRY_VOID(log->close());
  auto final_stats = log->stats();
  log.reset();

  CaseResult result;
  result.method = method;
  result.appenders = appenders;
  result.direct_io_kept = !options.direct_io || final_stats.direct_io;
  std::vector<double> samples_us;
  Clock::time_point last_durable_at = measure_start;
  for (auto& out : outputs) {
    if (out.error) return out.error;
    samples_us.insert(samples_us.end(), out.latencies_us.begin(), out.latencies_us.end());
    last_durable_at = std::max(last_durable_at, out.last_durable_at);
  }
  result.records = samples_us.size();
  // Appends started before measure_end finish after it; the window runs to
  // the last of them so their time is counted with them.
  result.measured_seconds = std::chrono::duration<double>(last_durable_at - measure_start).count();
  result.records_per_s = result.measured_seconds > 0 ? result.records / result.measured_seconds : 0;
  result.latency = fusee::bench::summarize_latencies(std::move(samples_us));
  result.log_records_written = stats_at_end.records_written - stats_at_start.records_written;
  result.log_flushes = stats_at_end.flushes - stats_at_start.flushes;
  result.records_per_flush =
      result.log_flushes > 0 ? double(result.log_records_written) / double(result.log_flushes) : 0;
  return result;
}

const RawResult* find_raw(const std::vector<RawResult>& raws, FlushMethod method) {
  for (const auto& raw : raws)
    if (raw.method == method && raw.supported) return &raw;
  return nullptr;
}

const CaseResult* find_case(const std::vector<CaseResult>& cases, FlushMethod method, std::uint32_t appenders) {
  for (const auto& result : cases)
    if (result.method == method && result.appenders == appenders) return &result;
  return nullptr;
}

int run(const Config& config) {
  fusee::io::PosixFileSystem fs;
  auto dir_exists = fs.exists(config.dir);
  if (!dir_exists || !*dir_exists) {
    fmt::print(stderr, "log_bench: --dir {} does not exist\n", config.dir);
    return 1;
  }
  // The pid keeps concurrent runs apart; a directory of that name can only be
  // left by a dead run with the same pid, so it is cleared, not reused.
  std::string scratch_path = fusee::io::join_path(config.dir, fmt::format(".fusee-log-bench-{}", ::getpid()));
  if (auto stale = fs.exists(scratch_path); stale && *stale) (void)remove_tree(fs, scratch_path);
  if (auto created = fs.create_dir(scratch_path); !created) {
    fmt::print(stderr, "log_bench: cannot create {}: {}\n", scratch_path, created.error().message());
    return 1;
  }
  ScratchDir scratch(fs, scratch_path);

  const FlushMethod methods[] = {FlushMethod::direct_dsync, FlushMethod::buffered_fdatasync};

  // The floor, measured first, in the directory the log will use.
  std::vector<RawResult> raws;
  fusee::bench::RawFlushOptions raw_options;
  raw_options.iterations = config.raw_iterations;
  fmt::print("log_bench in {}: {} B records, {:g} s per case after {:g} s warm-up\n\n", config.dir, kRecordBytes,
             config.seconds, config.warmup_seconds);
  fmt::print("raw durable {} B write ({} iterations, us)\n", fusee::bench::kRawFlushBlockBytes,
             config.raw_iterations);
  fmt::print("{:<20} {:>9} {:>9} {:>9}\n", "method", "p50", "p99", "p99.9");
  for (FlushMethod method : methods) {
    auto measured = fusee::bench::measure_raw_flush(fs, scratch.path(), method, raw_options);
    if (!measured) {
      fmt::print(stderr, "log_bench: raw flush ({}): {}\n", fusee::bench::flush_method_name(method),
                 measured.error().message());
      return 1;
    }
    RawResult raw{method, measured->supported, measured->unsupported_reason, measured->latency};
    if (raw.supported) {
      fmt::print("{:<20} {:>9.1f} {:>9.1f} {:>9.1f}\n", fusee::bench::flush_method_name(method), raw.latency.p50_us,
                 raw.latency.p99_us, raw.latency.p999_us);
    } else {
      fmt::print("{:<20} unsupported: {}\n", fusee::bench::flush_method_name(method), raw.unsupported_reason);
    }
    raws.push_back(std::move(raw));
  }
  std::fflush(stdout);

  fmt::print("\nshared log, append -> durable (latency in us)\n");
  fmt::print("{:<34} {:>11} {:>9} {:>9} {:>9} {:>12} {:>9}\n", "case", "records/s", "p50", "p99", "p99.9",
             "rec/flush", "p50/raw");
  std::fflush(stdout);
  std::vector<CaseResult> cases;
  for (FlushMethod method : methods) {
    const RawResult* raw = find_raw(raws, method);
    for (std::uint32_t appenders : config.appender_counts) {
      // Each case gets its own log directory: a fresh log, fresh segments.
      auto case_dir = fusee::io::join_path(scratch.path(), fmt::format("{}-{}", fusee::bench::flush_method_name(method), appenders));
      auto measured = run_case(fs, case_dir, method, appenders, config);
      if (!measured) {
        fmt::print(stderr, "log_bench: {}: {}\n", case_name(method, appenders), measured.error().message());
        return 1;
      }
      // Segments of a finished case would only crowd the disk for the next.
      (void)remove_tree(fs, case_dir);
      const auto& result = *measured;
      double p50_over_raw = raw != nullptr ? ratio(result.latency.p50_us, raw->latency.p50_us) : std::nan("");
      fmt::print("{:<34} {:>11.0f} {:>9.1f} {:>9.1f} {:>9.1f} {:>12.2f} {:>9}{}\n", case_name(method, appenders),
                 result.records_per_s, result.latency.p50_us, result.latency.p99_us, result.latency.p999_us,
                 result.records_per_flush, format_ratio(p50_over_raw),
                 result.direct_io_kept ? "" : "  (fell back to buffered)");
      std::fflush(stdout);
      cases.push_back(result);
    }
  }

  // The aims, per write path, when the run has the cases they need.
  struct Aims {
    FlushMethod method;
    double one_appender_p50_over_raw;
    double throughput_64_over_1;
  };
  std::vector<Aims> aims;
  fmt::print("\n");
  for (FlushMethod method : methods) {
    const CaseResult* one = find_case(cases, method, 1);
    const CaseResult* many = find_case(cases, method, 64);
    const RawResult* raw = find_raw(raws, method);
    Aims aim{method, std::nan(""), std::nan("")};
    if (one != nullptr && raw != nullptr) aim.one_appender_p50_over_raw = ratio(one->latency.p50_us, raw->latency.p50_us);
    if (one != nullptr && many != nullptr) aim.throughput_64_over_1 = ratio(many->records_per_s, one->records_per_s);
    auto name = fusee::bench::flush_method_name(method);
    fmt::print("{}: one appender p50 / raw p50 = {} (aim <= {:.2f})\n", name,
               format_ratio(aim.one_appender_p50_over_raw), kOneAppenderP50OverRawAimMax);
    fmt::print("{}: 64 appenders throughput / 1 appender = {} (aim >= {:.0f})\n", name,
               format_ratio(aim.throughput_64_over_1), kThroughput64Over1AimMin);
    aims.push_back(aim);
  }
  std::fflush(stdout);

  for (const auto& raw : raws) {
    JsonLine line("raw_flush");
    line.field("case", fusee::bench::flush_method_name(raw.method))
        .field("dir", config.dir)
        .field("block_bytes", fusee::bench::kRawFlushBlockBytes)
        .field("supported", raw.supported);
    if (raw.supported) {
      line.field("p50_us", round_to_ns(raw.latency.p50_us))
          .field("p99_us", round_to_ns(raw.latency.p99_us))
          .field("p999_us", round_to_ns(raw.latency.p999_us))
          .field("mean_us", round_to_ns(raw.latency.mean_us))
          .field("max_us", round_to_ns(raw.latency.max_us))
          .field("iterations", raw.latency.samples);
    } else {
      line.field("reason", raw.unsupported_reason).field("iterations", 0);
    }
    line.print();
  }
  for (const auto& result : cases) {
    const RawResult* raw = find_raw(raws, result.method);
    double raw_p50_us = raw != nullptr ? raw->latency.p50_us : std::nan("");
    JsonLine line("log");
    line.field("case", case_name(result.method, result.appenders))
        .field("appenders", result.appenders)
        .field("method", fusee::bench::flush_method_name(result.method))
        .field("direct_io_kept", result.direct_io_kept)
        .field("record_bytes", kRecordBytes)
        .field("records", result.records)
        .field("seconds", round_to_digits(result.measured_seconds, 6))
        .field("records_per_s", round_to_digits(result.records_per_s, 1))
        .field("p50_us", round_to_ns(result.latency.p50_us))
        .field("p99_us", round_to_ns(result.latency.p99_us))
        .field("p999_us", round_to_ns(result.latency.p999_us))
        .field("mean_us", round_to_ns(result.latency.mean_us))
        .field("max_us", round_to_ns(result.latency.max_us))
        .field("flushes", result.log_flushes)
        .field("records_per_flush", round_to_digits(result.records_per_flush, 3))
        .field("raw_p50_us", round_to_ns(raw_p50_us))
        .field("p50_over_raw", round_to_digits(ratio(result.latency.p50_us, raw_p50_us), 3))
        .print();
  }
  for (const auto& aim : aims) {
    JsonLine("log_aims")
        .field("case", fusee::bench::flush_method_name(aim.method))
        .field("method", fusee::bench::flush_method_name(aim.method))
        .field("one_appender_p50_over_raw", round_to_digits(aim.one_appender_p50_over_raw, 3))
        .field("one_appender_p50_over_raw_aim_max", kOneAppenderP50OverRawAimMax)
        .field("throughput_64_over_1", round_to_digits(aim.throughput_64_over_1, 3))
        .field("throughput_64_over_1_aim_min", kThroughput64Over1AimMin)
        .print();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{"Shared-log append-to-durable latency and throughput, beside the disk's raw flush latency."};
  app.add_option("--dir", config.dir, "directory on the disk to measure (a scratch directory is made inside)")
      ->capture_default_str();
  app.add_option("--seconds", config.seconds, "timed seconds per case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup-seconds", config.warmup_seconds, "untimed seconds at the start of each case")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--appenders", config.appender_counts, "appender counts to run (one shard each)")
      ->check(CLI::Range(1u, fusee::wal::kShardsMax))
      ->capture_default_str();
  app.add_option("--raw-iterations", config.raw_iterations, "timed raw flush writes per method")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return run(config);
}
