// log_bench: append-to-durable latency and throughput of the shared log
// (wal/log.hpp), set beside the disk's raw durable 4 KiB write latency
// measured in the same directory (bench/raw_flush.hpp). That raw figure is the
// floor: one appender can at best match it, and many appenders beat it only
// through group commit, which records_per_flush shows.
//
// The kinds of case, chosen with --cases:
//  - modes: 128-byte records from 1, 8 and 64 appenders on each write path:
//    "owner" (O_DIRECT + RWF_DSYNC submitted by the io_uring owner),
//    "threads" (the same writes from blocking log threads) and "buffered"
//    (buffered writes + fdatasync from log threads).
//  - inline: one appender, direct, with inline writes on and off: what the
//    waiting thread saves by writing its batch itself.
//  - mixed: 8 appenders of 128-byte records beside one appending 1 MiB
//    records, direct, log threads, with payload offload on and off: whether
//    large records hold up small ones.
//  - roll: 1 and 8 appenders of small records through at least 20 segment
//    rolls (4 MiB segments) beside the same load in a segment that never
//    rolls, in alternating rounds of the same run: what a roll costs the
//    appends around it (the next segment is prepared ahead, so little).
//  - roll_grow and bulk_small: a sustained bulk load of 1 MiB records;
//    see bench/log_bench_bulk.hpp.
//  - replicated: three replicas of the replicated log beside the local log;
//    see bench/log_bench_replicated.hpp.
//  - crc32c: the log's CRC-32C (base/crc32c.hpp) over a 64 MiB buffer beside
//    the one-chain loop it replaced, in alternating rounds of the same run.
//    No disk: the CRC runs under the seal lock and over every byte at
//    recovery, so its rate bounds both.
//
// Each appender owns one shard and loops: append one record, wait_durable for
// it, note the latency. Only one record per appender is ever outstanding, so
// throughput comes from batching across appenders, never from one appender
// pipelining.
//
// A requested writer mode is a wish, not a promise: the owner needs io_uring
// and O_DIRECT and the log runs its threads without them. Every case reports
// the writer that really ran (LogStats::owner_thread) and whether O_DIRECT
// held, so a figure is never credited to a mode that did not run.
//
// Output: tables for people, then one JSON line per measurement (grep '^{').
// Everything is written under a fresh directory in --dir, removed at the end.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <latch>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "base/crc32c.hpp"
#include "bench/bench_json.hpp"
#include "bench/figures.hpp"
#include "bench/log_bench_bulk.hpp"
#include "bench/log_bench_replicated.hpp"
#include "bench/raw_flush.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using fusee::bench::FlushMethod;
using fusee::bench::JsonLine;
using fusee::bench::LatencySummary;
using fusee::wal::LogWriterMode;

constexpr std::size_t kSmallRecordBytes = 128;
// Well above the offload threshold below, so with offload on every large
// record goes to the blob area; small enough that one append+wait loop still
// completes many records per second on a slow disk.
constexpr std::size_t kLargeRecordBytes = 1 * fusee::wal::kMiB;
constexpr std::uint32_t kMixedSmallAppenders = 8;
// The log's default threshold, named here so the "on" case does not change
// meaning if the default moves.
constexpr std::size_t kMixedOffloadBytes = 64 * fusee::wal::kKiB;

// The aims the log is built for (DESIGN.md §3, group commit): one appender
// pays little over the raw flush, and 64 appenders share flushes well enough
// to go about 64 times as fast. Reported as figures, not checked.
constexpr double kOneAppenderP50OverRawAimMax = 1.15;
constexpr double kThroughput64Over1AimMin = 40.0;
// Issue 16: the CRC on three chains at least twice the one-chain loop.
constexpr double kCrcSpeedupAimMin = 2.0;

// Larger than the last-level cache of the machines we run on, so the CRC
// reads from memory as recovery does, and as large as the largest batch
// (kBatchBytesMax).
constexpr std::size_t kCrcBufferBytes = 64 * fusee::wal::kMiB;
// Each loop is timed for at least this long, however short --seconds is, so
// the spread covers enough rounds to mean something.
constexpr double kCrcSecondsMin = 1.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One way of writing the log, and the raw flush it is compared with.
struct WritePath {
  std::string_view name;
  bool direct_io;
  LogWriterMode writer_mode;
  FlushMethod raw_method;
};

constexpr std::array<WritePath, 3> kWritePaths = {{
    {"owner", true, LogWriterMode::owner, FlushMethod::direct_dsync},
    {"threads", true, LogWriterMode::threads, FlushMethod::direct_dsync},
    {"buffered", false, LogWriterMode::threads, FlushMethod::buffered_fdatasync},
}};

constexpr std::string_view kCaseKindModes = "modes";
constexpr std::string_view kCaseKindInline = "inline";
constexpr std::string_view kCaseKindMixed = "mixed";
constexpr std::string_view kCaseKindCrc32c = "crc32c";
constexpr std::string_view kCaseKindRoll = "roll";
constexpr std::string_view kCaseKindRollGrow = "roll_grow";    // bench/log_bench_bulk.hpp
constexpr std::string_view kCaseKindBulkSmall = "bulk_small";  // bench/log_bench_bulk.hpp
constexpr std::string_view kCaseKindReplicated = "replicated";  // bench/log_bench_replicated.hpp

// roll: small segments roll many times a second under these loads; the
// no-roll segment is large enough that the same load never fills it.
// A roll writes two blocks durably (the next segment's header, then the
// marker) where a batch writes one, so it shows in the p99 when more than 1%
// of the records wait behind a roll: 4 MiB holds about a thousand
// one-block batches.
constexpr std::uint64_t kRollSegmentBytes = 4 * fusee::wal::kMiB;
constexpr std::uint64_t kNoRollSegmentBytes = 256 * fusee::wal::kMiB;
constexpr int kRollRounds = 3;
constexpr std::uint64_t kRollsMin = 20;
// Long enough for at least kRollsMin rolls of kRollSegmentBytes under one appender.
constexpr double kRollSecondsMin = 3.0;
// Issue 16: a roll costs the appends around it little.
constexpr double kRollP99AimMax = 1.5;
constexpr double kRollMaxAimMax = 3.0;

struct Config {
  std::string dir = ".";
  double seconds = 2.0;
  // Untimed start of each case: the first batches pay for waking threads and
  // faulting in buffers, which is not what the figures are about. raw_flush
  // has its warm-up writes for the same reason.
  double warmup_seconds = 0.2;
  std::vector<std::uint32_t> appender_counts = {1, 8, 64};
  std::vector<std::string> case_kinds = {std::string(kCaseKindModes), std::string(kCaseKindInline),
                                         std::string(kCaseKindMixed), std::string(kCaseKindRoll),
                                         std::string(kCaseKindRollGrow), std::string(kCaseKindBulkSmall),
                                         std::string(kCaseKindCrc32c), std::string(kCaseKindReplicated)};
  std::size_t raw_iterations = fusee::bench::RawFlushOptions{}.iterations;
  std::string fusee;  // replicated: the binary that runs each replica
  std::uint32_t replicated_kills = 20;
  bool replica_disk_thread = false;

  bool wants(std::string_view kind) const {
    return std::find(case_kinds.begin(), case_kinds.end(), kind) != case_kinds.end();
  }
};

using fusee::bench::format_ratio;
using fusee::bench::ratio;
using fusee::bench::round_to_digits;
using fusee::bench::round_to_ns;

std::string appenders_name(std::uint32_t appenders) {
  return appenders == 1 ? std::string("1_appender") : fmt::format("{}_appenders", appenders);
}

std::string mode_case_name(const WritePath& path, std::uint32_t appenders) {
  return fmt::format("{}/{}", path.name, appenders_name(appenders));
}

std::string inline_case_name(bool inline_writes) {
  return fmt::format("inline_{}/1_appender", inline_writes ? "on" : "off");
}

std::string mixed_case_name(std::size_t payload_offload_bytes) {
  return payload_offload_bytes > 0 ? "mixed/offload_on" : "mixed/offload_off";
}

std::string_view writer_mode_name(LogWriterMode mode) {
  switch (mode) {
    case LogWriterMode::automatic: return "automatic";
    case LogWriterMode::owner: return "owner";
    case LogWriterMode::threads: return "threads";
  }
  return "unknown";
}


// Owns the benchmark's scratch directory so that it goes however main ends.
class ScratchDir {
 public:
  ScratchDir(fusee::io::FileSystem& fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    if (auto removed = fusee::io::remove_tree(fs_, path_); !removed)
      fmt::print(stderr, "log_bench: could not remove {}: {}\n", path_, removed.error().message());
  }
  const std::string& path() const { return path_; }

 private:
  fusee::io::FileSystem& fs_;
  std::string path_;
};

// ---------------------------------------------------------------------------
// Raw flush: the floor.

struct RawResult {
  FlushMethod method = FlushMethod::direct_dsync;
  bool supported = false;
  std::string unsupported_reason;
  LatencySummary latency;
};

// The raw p50 of method, or NaN when it was not measured or is unsupported.
double raw_p50_us(const std::vector<RawResult>& raws, FlushMethod method) {
  for (const auto& raw : raws)
    if (raw.method == method && raw.supported) return raw.latency.p50_us;
  return std::nan("");
}

// ---------------------------------------------------------------------------
// Running a load: appender threads against one fresh log.

// The timed window of a case. Appenders read it only after the go signal,
// which is given once every appender thread is running, so thread start-up
// on a busy two-core machine does not eat into the warm-up.
struct Window {
  Clock::time_point measure_start;
  Clock::time_point measure_end;
};

struct AppenderSpec {
  fusee::wal::ShardId shard = 0;
  std::size_t record_bytes = kSmallRecordBytes;
};

struct AppenderOutput {
  std::vector<double> latencies_us;
  Clock::time_point last_durable_at{};
  std::error_code error;
};

// One appender's loop. Samples count only for appends started inside the
// window; the loop stops at its end.
void run_appender(fusee::wal::Log& log, const AppenderSpec& spec, std::latch& started, std::latch& go,
                  const Window& window, AppenderOutput& out) {
  std::vector<std::byte> record(spec.record_bytes, std::byte{0x5a});
  started.count_down();
  go.wait();
  const auto measure_start = window.measure_start;
  const auto measure_end = window.measure_end;
  for (std::uint64_t counter = 0;; ++counter) {
    // Distinct bytes per record, so nothing below can skip a repeated write.
    std::memcpy(record.data(), &counter, sizeof counter);
    auto appended_at = Clock::now();
    if (appended_at >= measure_end) return;
    auto lsn = log.append(spec.shard, record);
    if (!lsn) {
      out.error = lsn.error();
      return;
    }
    auto durable = log.wait_durable(spec.shard, *lsn);
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

// What the log itself did in a case.
struct LogCounters {
  // Deltas over the timed window.
  std::uint64_t records_written = 0;
  std::uint64_t flushes = 0;
  std::uint64_t inline_writes = 0;
  std::uint64_t blobs_written = 0;
  std::uint64_t rolls = 0;             // segments created
  std::uint64_t rolls_unprepared = 0;  // of which the roll had to create itself
  std::uint64_t rolls_late = 0;        // of which the preparation was not done in time
  double records_per_flush = 0;
  // What really ran, which may differ from what was asked for.
  bool owner_thread = false;
  bool direct_io_kept = true;  // false: direct I/O was asked for and refused
};

struct LoadRun {
  std::vector<AppenderOutput> outputs;  // one per AppenderSpec, in order
  Clock::time_point measure_start;
  LogCounters log;
};

// Opens a fresh log for the case under scratch_path, runs one thread per
// spec through warm-up and the timed window, closes the log cleanly and
// removes its directory.
fusee::Result<LoadRun> run_load(fusee::io::FileSystem& fs, const std::string& scratch_path, std::string_view name,
                                fusee::wal::LogOptions options, std::span<const AppenderSpec> specs,
                                const Config& config) {
  // Each case gets its own log directory: a fresh log, fresh segments.
  std::string dir_name(name);
  std::replace(dir_name.begin(), dir_name.end(), '/', '-');
  options.dir = fusee::io::join_path(scratch_path, dir_name);
  options.shard_count = 0;
  for (const auto& spec : specs) options.shard_count = std::max(options.shard_count, spec.shard + 1);
  options.warn = [](const std::string& line) { fmt::print(stderr, "log_bench: log warns: {}\n", line); };
  auto log = FUSEE_TRY(fusee::wal::Log::open(fs, options));

  LoadRun run;
  run.outputs.resize(specs.size());
  std::latch started(static_cast<std::ptrdiff_t>(specs.size()));
  std::latch go(1);
  Window window;
  std::vector<std::thread> threads;
  threads.reserve(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    threads.emplace_back([&, i] { run_appender(*log, specs[i], started, go, window, run.outputs[i]); });
  }
  started.wait();
  auto to_duration = [](double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  window.measure_start = Clock::now() + to_duration(config.warmup_seconds);
  window.measure_end = window.measure_start + to_duration(config.seconds);
  run.measure_start = window.measure_start;
  const auto measure_end = window.measure_end;
  go.count_down();

  std::this_thread::sleep_until(run.measure_start);
  auto stats_at_start = log->stats();
  std::this_thread::sleep_until(measure_end);
  auto stats_at_end = log->stats();
  for (auto& thread : threads) thread.join();
  // An appender's error is the cause; a failing close would only repeat it.
  for (const auto& out : run.outputs)
    if (out.error) return out.error;

  // A clean close, so the case ends as a real shutdown would; its close
  // marker falls outside the timed window.
  FUSEE_TRY_VOID(log->close());
  auto final_stats = log->stats();
  log.reset();
  // Segments and blobs of a finished case would only crowd the disk for the next.
  (void)fusee::io::remove_tree(fs, options.dir);

  run.log.records_written = stats_at_end.records_written - stats_at_start.records_written;
  run.log.flushes = stats_at_end.flushes - stats_at_start.flushes;
  run.log.inline_writes = stats_at_end.inline_writes - stats_at_start.inline_writes;
  run.log.blobs_written = stats_at_end.blobs_written - stats_at_start.blobs_written;
  run.log.rolls = stats_at_end.segments_created - stats_at_start.segments_created;
  run.log.rolls_unprepared = stats_at_end.rolls_unprepared - stats_at_start.rolls_unprepared;
  run.log.rolls_late = stats_at_end.rolls_late - stats_at_start.rolls_late;
  run.log.records_per_flush =
      run.log.flushes > 0 ? double(run.log.records_written) / double(run.log.flushes) : 0;
  run.log.owner_thread = final_stats.owner_thread;
  run.log.direct_io_kept = !options.direct_io || final_stats.direct_io;
  return run;
}

// Latency and rate of a group of appenders (all of one record size).
struct GroupResult {
  std::uint64_t records = 0;
  double measured_seconds = 0;
  double records_per_s = 0;
  LatencySummary latency;
};

GroupResult summarize_group(std::span<const AppenderOutput> outputs, Clock::time_point measure_start) {
  std::vector<double> samples_us;
  Clock::time_point last_durable_at = measure_start;
  for (const auto& out : outputs) {
    samples_us.insert(samples_us.end(), out.latencies_us.begin(), out.latencies_us.end());
    last_durable_at = std::max(last_durable_at, out.last_durable_at);
  }
  GroupResult group;
  group.records = samples_us.size();
  // Appends started before measure_end finish after it; the window runs to
  // the last of them so their time is counted with them.
  group.measured_seconds = std::chrono::duration<double>(last_durable_at - measure_start).count();
  group.records_per_s = group.measured_seconds > 0 ? group.records / group.measured_seconds : 0;
  group.latency = fusee::bench::summarize_latencies(std::move(samples_us));
  return group;
}

// The writer that ran, for the tables: "owner", "threads", or which was asked
// for and not granted.
std::string writer_ran(const LogCounters& log, LogWriterMode asked) {
  std::string ran = log.owner_thread ? "owner" : "threads";
  if (asked == LogWriterMode::owner && !log.owner_thread) ran += " (owner asked)";
  if (!log.direct_io_kept) ran += ", buffered (direct refused)";
  return ran;
}

void add_log_fields(JsonLine& line, const LogCounters& log) {
  line.field("owner_thread", log.owner_thread)
      .field("direct_io_kept", log.direct_io_kept)
      .field("flushes", log.flushes)
      .field("records_per_flush", round_to_digits(log.records_per_flush, 3))
      .field("inline_writes", log.inline_writes)
      .field("blobs_written", log.blobs_written);
}

void add_latency_fields(JsonLine& line, std::string_view prefix, const GroupResult& group) {
  auto key = [&](std::string_view name) { return fmt::format("{}{}", prefix, name); };
  line.field(key("records"), group.records)
      .field(key("seconds"), round_to_digits(group.measured_seconds, 6))
      .field(key("records_per_s"), round_to_digits(group.records_per_s, 1))
      .field(key("p50_us"), round_to_ns(group.latency.p50_us))
      .field(key("p99_us"), round_to_ns(group.latency.p99_us))
      .field(key("p999_us"), round_to_ns(group.latency.p999_us))
      .field(key("mean_us"), round_to_ns(group.latency.mean_us))
      .field(key("max_us"), round_to_ns(group.latency.max_us));
}

// ---------------------------------------------------------------------------
// modes: each write path with 1, 8 and 64 appenders of small records.

struct ModeResult {
  const WritePath* path = nullptr;
  std::uint32_t appenders = 0;
  GroupResult records;
  LogCounters log;
  double raw_p50_us = 0;

  std::string name() const { return mode_case_name(*path, appenders); }
  double p50_over_raw() const { return ratio(records.latency.p50_us, raw_p50_us); }
};

fusee::Result<ModeResult> run_mode_case(fusee::io::FileSystem& fs, const std::string& scratch_path,
                                        const WritePath& path, std::uint32_t appenders, double raw_p50_us,
                                        const Config& config) {
  ModeResult result;
  result.path = &path;
  result.appenders = appenders;
  result.raw_p50_us = raw_p50_us;
  fusee::wal::LogOptions options;
  options.direct_io = path.direct_io;
  options.writer_mode = path.writer_mode;
  std::vector<AppenderSpec> specs;
  for (std::uint32_t shard = 0; shard < appenders; ++shard) specs.push_back({shard, kSmallRecordBytes});
  auto run = FUSEE_TRY(run_load(fs, scratch_path, result.name(), options, specs, config));
  result.records = summarize_group(run.outputs, run.measure_start);
  result.log = run.log;
  return result;
}

void print_mode_header() {
  fmt::print("\nwrite paths, {} B records, append -> durable (latency in us)\n", kSmallRecordBytes);
  fmt::print("{:<24} {:>11} {:>9} {:>9} {:>9} {:>10} {:>8}  {}\n", "case", "records/s", "p50", "p99", "p99.9",
             "rec/flush", "p50/raw", "writer ran");
}

void print_mode_row(const ModeResult& result) {
  fmt::print("{:<24} {:>11.0f} {:>9.1f} {:>9.1f} {:>9.1f} {:>10.2f} {:>8}  {}\n", result.name(),
             result.records.records_per_s, result.records.latency.p50_us, result.records.latency.p99_us,
             result.records.latency.p999_us, result.log.records_per_flush, format_ratio(result.p50_over_raw()),
             writer_ran(result.log, result.path->writer_mode));
}

void print_mode_json(const ModeResult& result) {
  JsonLine line("log");
  line.field("case", result.name())
      .field("write_path", result.path->name)
      .field("writer_mode", writer_mode_name(result.path->writer_mode))
      .field("direct_io", result.path->direct_io)
      .field("method", fusee::bench::flush_method_name(result.path->raw_method))
      .field("appenders", result.appenders)
      .field("record_bytes", kSmallRecordBytes);
  add_latency_fields(line, "", result.records);
  add_log_fields(line, result.log);
  line.field("raw_p50_us", round_to_ns(result.raw_p50_us))
      .field("p50_over_raw", round_to_digits(result.p50_over_raw(), 3))
      .print();
}

// ---------------------------------------------------------------------------
// inline: one appender, inline writes on and off.

struct InlineResult {
  bool inline_writes = true;
  GroupResult records;
  LogCounters log;
  double raw_p50_us = 0;

  std::string name() const { return inline_case_name(inline_writes); }
  double p50_over_raw() const { return ratio(records.latency.p50_us, raw_p50_us); }
};

// One appender is where inline writes matter most: with nobody else to batch
// with, the two thread hand-offs they save are a large share of each append.
// The writer mode stays at its default, so the gain is the one users get.
fusee::Result<InlineResult> run_inline_case(fusee::io::FileSystem& fs, const std::string& scratch_path,
                                            bool inline_writes, double raw_p50_us, const Config& config) {
  InlineResult result;
  result.inline_writes = inline_writes;
  result.raw_p50_us = raw_p50_us;
  fusee::wal::LogOptions options;
  options.direct_io = true;
  options.inline_writes = inline_writes;
  const AppenderSpec specs[] = {{0, kSmallRecordBytes}};
  auto run = FUSEE_TRY(run_load(fs, scratch_path, result.name(), options, specs, config));
  result.records = summarize_group(run.outputs, run.measure_start);
  result.log = run.log;
  return result;
}

void print_inline_header() {
  fmt::print("\ninline writes, one appender, {} B records, direct (latency in us)\n", kSmallRecordBytes);
  fmt::print("{:<24} {:>11} {:>9} {:>9} {:>9} {:>8} {:>14}  {}\n", "case", "records/s", "p50", "p99", "p99.9",
             "p50/raw", "inline writes", "writer ran");
}

void print_inline_row(const InlineResult& result) {
  fmt::print("{:<24} {:>11.0f} {:>9.1f} {:>9.1f} {:>9.1f} {:>8} {:>14}  {}\n", result.name(),
             result.records.records_per_s, result.records.latency.p50_us, result.records.latency.p99_us,
             result.records.latency.p999_us, format_ratio(result.p50_over_raw()), result.log.inline_writes,
             writer_ran(result.log, LogWriterMode::automatic));
}

void print_inline_json(const InlineResult& result) {
  JsonLine line("log_inline");
  line.field("case", result.name())
      .field("inline_writes_enabled", result.inline_writes)
      .field("writer_mode", writer_mode_name(LogWriterMode::automatic))
      .field("direct_io", true)
      .field("method", fusee::bench::flush_method_name(FlushMethod::direct_dsync))
      .field("appenders", 1)
      .field("record_bytes", kSmallRecordBytes);
  add_latency_fields(line, "", result.records);
  add_log_fields(line, result.log);
  line.field("raw_p50_us", round_to_ns(result.raw_p50_us))
      .field("p50_over_raw", round_to_digits(result.p50_over_raw(), 3))
      .print();
}

// ---------------------------------------------------------------------------
// mixed: small-record appenders beside one large-record appender.

struct MixedResult {
  std::size_t payload_offload_bytes = 0;
  GroupResult small;
  GroupResult large;
  LogCounters log;

  std::string name() const { return mixed_case_name(payload_offload_bytes); }
};

// Log threads, not the owner, so the comparison is between offload on and
// off alone, whatever state the owner is in.
fusee::Result<MixedResult> run_mixed_case(fusee::io::FileSystem& fs, const std::string& scratch_path,
                                          std::size_t payload_offload_bytes, const Config& config) {
  MixedResult result;
  result.payload_offload_bytes = payload_offload_bytes;
  fusee::wal::LogOptions options;
  options.direct_io = true;
  options.writer_mode = LogWriterMode::threads;
  options.payload_offload_bytes = payload_offload_bytes;
  std::vector<AppenderSpec> specs;
  for (std::uint32_t shard = 0; shard < kMixedSmallAppenders; ++shard) specs.push_back({shard, kSmallRecordBytes});
  specs.push_back({kMixedSmallAppenders, kLargeRecordBytes});  // the large appender goes last
  auto run = FUSEE_TRY(run_load(fs, scratch_path, result.name(), options, specs, config));
  std::span<const AppenderOutput> outputs(run.outputs);
  result.small = summarize_group(outputs.first(kMixedSmallAppenders), run.measure_start);
  result.large = summarize_group(outputs.subspan(kMixedSmallAppenders), run.measure_start);
  result.log = run.log;
  return result;
}

void print_mixed_header() {
  fmt::print("\nmixed load: {} appenders of {} B records + 1 of {} KiB records, direct, log threads "
             "(latency in us)\n",
             kMixedSmallAppenders, kSmallRecordBytes, kLargeRecordBytes / fusee::wal::kKiB);
  fmt::print("{:<24} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>7}  {}\n", "case", "small rec/s", "small p50",
             "small p99", "small p99.9", "large rec/s", "large p50", "blobs", "writer ran");
}

void print_mixed_row(const MixedResult& result) {
  fmt::print("{:<24} {:>11.0f} {:>11.1f} {:>11.1f} {:>11.1f} {:>11.1f} {:>11.1f} {:>7}  {}\n", result.name(),
             result.small.records_per_s, result.small.latency.p50_us, result.small.latency.p99_us,
             result.small.latency.p999_us, result.large.records_per_s, result.large.latency.p50_us,
             result.log.blobs_written, writer_ran(result.log, LogWriterMode::threads));
}

void print_mixed_json(const MixedResult& result) {
  JsonLine line("log_mixed");
  line.field("case", result.name())
      .field("payload_offload_bytes", result.payload_offload_bytes)
      .field("writer_mode", writer_mode_name(LogWriterMode::threads))
      .field("direct_io", true)
      .field("small_appenders", kMixedSmallAppenders)
      .field("small_record_bytes", kSmallRecordBytes)
      .field("large_appenders", 1)
      .field("large_record_bytes", kLargeRecordBytes);
  add_latency_fields(line, "small_", result.small);
  add_latency_fields(line, "large_", result.large);
  add_log_fields(line, result.log);
  line.print();
}

// ---------------------------------------------------------------------------
// crc32c: the log's CRC beside the one-chain loop.

// The rates of one loop's rounds, each round one CRC over the whole buffer.
struct RateSpread {
  std::size_t rounds = 0;
  double seconds = 0;  // summed over the rounds
  double min_gib_per_s = 0;
  double median_gib_per_s = 0;
  double max_gib_per_s = 0;
};

RateSpread summarize_rates(std::vector<double> gib_per_s, double seconds) {
  RateSpread spread;
  spread.rounds = gib_per_s.size();
  spread.seconds = seconds;
  if (gib_per_s.empty()) return spread;
  std::sort(gib_per_s.begin(), gib_per_s.end());
  spread.min_gib_per_s = gib_per_s.front();
  spread.max_gib_per_s = gib_per_s.back();
  std::size_t middle = gib_per_s.size() / 2;
  spread.median_gib_per_s =
      gib_per_s.size() % 2 == 1 ? gib_per_s[middle] : (gib_per_s[middle - 1] + gib_per_s[middle]) / 2;
  return spread;
}

struct CrcResult {
  bool hardware = false;
  RateSpread log;           // crc32c_extend, what the log calls
  RateSpread single_chain;  // crc32c_single_chain_extend
  std::uint32_t crc = 0;

  double speedup() const { return ratio(log.median_gib_per_s, single_chain.median_gib_per_s); }
};

using CrcFn = std::uint32_t (*)(std::uint32_t, std::span<const std::byte>);

// The rounds alternate between the two loops, so whatever else the machine
// does during the run (a compiler on the other core) weighs on both alike.
fusee::Result<CrcResult> run_crc_case(const Config& config) {
  std::vector<std::byte> buffer(kCrcBufferBytes);
  // Random bytes: nothing in the data can let either loop take a shortcut.
  std::mt19937_64 rng(0x5eed'c3c2u);
  for (std::size_t at = 0; at < buffer.size(); at += sizeof(std::uint64_t)) {
    std::uint64_t word = rng();
    std::memcpy(buffer.data() + at, &word, sizeof word);
  }
  std::span<const std::byte> data(buffer);

  CrcResult result;
  result.hardware = fusee::crc32c_hardware_available();
  result.crc = fusee::crc32c_portable_extend(0, data);
  const CrcFn loops[] = {&fusee::crc32c_extend, &fusee::crc32c_single_chain_extend};
  const std::string_view loop_names[] = {"crc32c_extend", "crc32c_single_chain_extend"};
  // A rate for a wrong answer is no figure: every round is checked.
  auto wrong = [&](std::size_t i, std::uint32_t crc) {
    fmt::print(stderr, "log_bench: {} gave {:#010x}, the portable table {:#010x}\n", loop_names[i], crc, result.crc);
    return std::make_error_code(std::errc::state_not_recoverable);
  };
  // One untimed round each: the first pays for cold caches, not the CRC.
  for (std::size_t i = 0; i < 2; ++i)
    if (std::uint32_t crc = loops[i](0, data); crc != result.crc) return wrong(i, crc);

  const double seconds_min = std::max(config.seconds, kCrcSecondsMin);
  std::vector<double> rates[2];
  double seconds[2] = {0, 0};
  while (seconds[0] < seconds_min || seconds[1] < seconds_min) {
    for (std::size_t i = 0; i < 2; ++i) {
      auto start = Clock::now();
      std::uint32_t crc = loops[i](0, data);
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (crc != result.crc) return wrong(i, crc);
      seconds[i] += elapsed;
      rates[i].push_back(double(kCrcBufferBytes) / kGiB / elapsed);
    }
  }
  result.log = summarize_rates(std::move(rates[0]), seconds[0]);
  result.single_chain = summarize_rates(std::move(rates[1]), seconds[1]);
  return result;
}

void print_crc_table(const CrcResult& result) {
  fmt::print("\ncrc32c over {} MiB, one CRC per round, rounds alternating ({}; GiB/s)\n",
             kCrcBufferBytes / fusee::wal::kMiB,
             result.hardware ? "CRC-32C instruction" : "no CRC-32C instruction: both loops are the table");
  fmt::print("{:<24} {:>7} {:>9} {:>9} {:>9}\n", "case", "rounds", "min", "median", "max");
  auto row = [](std::string_view name, const RateSpread& spread) {
    fmt::print("{:<24} {:>7} {:>9.2f} {:>9.2f} {:>9.2f}\n", name, spread.rounds, spread.min_gib_per_s,
               spread.median_gib_per_s, spread.max_gib_per_s);
  };
  row("crc32c", result.log);
  row("crc32c/single_chain", result.single_chain);
  fmt::print("{:<24} {:>7} {:>9} {:>9} {:>9}\n", "speedup (median)", "", "", format_ratio(result.speedup()), "");
}

void print_crc_json(const CrcResult& result) {
  JsonLine line("log");
  line.field("case", kCaseKindCrc32c)
      .field("bytes", kCrcBufferBytes)
      .field("hardware", result.hardware)
      .field("gib_per_s", round_to_digits(result.log.median_gib_per_s, 3))
      .field("gib_per_s_single_chain", round_to_digits(result.single_chain.median_gib_per_s, 3))
      .field("speedup", round_to_digits(result.speedup(), 3))
      .field("gib_per_s_min", round_to_digits(result.log.min_gib_per_s, 3))
      .field("gib_per_s_max", round_to_digits(result.log.max_gib_per_s, 3))
      .field("rounds", result.log.rounds)
      .field("seconds", round_to_digits(result.log.seconds, 6))
      .field("gib_per_s_single_chain_min", round_to_digits(result.single_chain.min_gib_per_s, 3))
      .field("gib_per_s_single_chain_max", round_to_digits(result.single_chain.max_gib_per_s, 3))
      .field("rounds_single_chain", result.single_chain.rounds)
      .field("seconds_single_chain", round_to_digits(result.single_chain.seconds, 6))
      .field("crc", result.crc)
      .print();
}

// ---------------------------------------------------------------------------
// Aims: figures the log is built to reach, printed, never enforced.

// ---------------------------------------------------------------------------
// roll: appends through segment rolls beside the same load with no roll.

struct RollRound {
  GroupResult rolled;
  GroupResult steady;
  GroupResult unprepared;  // rolls with LogOptions::prepare_segments off
  std::uint64_t rolls = 0;
  std::uint64_t rolls_unprepared = 0;
  std::uint64_t rolls_late = 0;
  std::uint64_t steady_rolls = 0;  // should be 0: the no-roll segment never fills
};

double median_of(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct RollResult {
  std::uint32_t appenders = 0;
  std::vector<RollRound> rounds;

  std::string name() const { return fmt::format("roll/{}", appenders_name(appenders)); }
  template <typename Pick>
  std::vector<double> each(Pick pick) const {
    std::vector<double> out;
    for (const auto& round : rounds) out.push_back(pick(round));
    return out;
  }
  double p99_us() const { return median_of(each([](const RollRound& r) { return r.rolled.latency.p99_us; })); }
  double max_us() const { return median_of(each([](const RollRound& r) { return r.rolled.latency.max_us; })); }
  double p99_us_no_roll() const { return median_of(each([](const RollRound& r) { return r.steady.latency.p99_us; })); }
  double max_us_no_roll() const { return median_of(each([](const RollRound& r) { return r.steady.latency.max_us; })); }
  double rolls() const { return median_of(each([](const RollRound& r) { return double(r.rolls); })); }
  double p99_us_unprepared() const {
    return median_of(each([](const RollRound& r) { return r.unprepared.latency.p99_us; }));
  }
  double max_us_unprepared() const {
    return median_of(each([](const RollRound& r) { return r.unprepared.latency.max_us; }));
  }
  std::uint64_t rolls_unprepared() const {
    std::uint64_t total = 0;
    for (const auto& round : rounds) total += round.rolls_unprepared;
    return total;
  }
  std::uint64_t rolls_late() const {
    std::uint64_t total = 0;
    for (const auto& round : rounds) total += round.rolls_late;
    return total;
  }
  std::uint64_t steady_rolls() const {
    std::uint64_t total = 0;
    for (const auto& round : rounds) total += round.steady_rolls;
    return total;
  }
};

fusee::Result<RollResult> run_roll_case(fusee::io::FileSystem& fs, const std::string& scratch_path,
                                        std::uint32_t appenders, const Config& config) {
  RollResult result;
  result.appenders = appenders;
  Config timed = config;
  timed.seconds = std::max(config.seconds, kRollSecondsMin);
  std::vector<AppenderSpec> specs;
  for (std::uint32_t shard = 0; shard < appenders; ++shard) specs.push_back({shard, kSmallRecordBytes});
  for (int round = 0; round < kRollRounds; ++round) {
    RollRound figures;
    // Alternating, so that the machine's other load falls on each alike.
    enum class Kind { rolling, steady, unprepared };
    for (Kind kind : {Kind::rolling, Kind::steady, Kind::unprepared}) {
      fusee::wal::LogOptions options;
      options.segment_bytes = kind == Kind::steady ? kNoRollSegmentBytes : kRollSegmentBytes;
      options.prepare_segments = kind != Kind::unprepared;
      auto name = fmt::format("{}-{}-{}", result.name(), int(kind), round);
      auto run = FUSEE_TRY(run_load(fs, scratch_path, name, options, specs, timed));
      auto group = summarize_group(run.outputs, run.measure_start);
      if (kind == Kind::rolling) {
        figures.rolled = group;
        figures.rolls = run.log.rolls;
        figures.rolls_unprepared = run.log.rolls_unprepared;
        figures.rolls_late = run.log.rolls_late;
      } else if (kind == Kind::steady) {
        figures.steady = group;
        figures.steady_rolls = run.log.rolls;
      } else {
        figures.unprepared = group;
      }
    }
    result.rounds.push_back(figures);
  }
  return result;
}

void print_roll_header() {
  fmt::print("\nroll: {} KiB segments beside one of {} MiB that never rolls, {} rounds alternating (medians, us)\n",
             kRollSegmentBytes / fusee::wal::kKiB, kNoRollSegmentBytes / fusee::wal::kMiB, kRollRounds);
  fmt::print("{:<24} {:>7} {:>9} {:>9} {:>11} {:>11} {:>8} {:>8} {:>10} {:>10}  {}\n", "case", "rolls", "p99", "max",
             "p99 steady", "max steady", "p99/st", "max/st", "p99 unprep", "max unprep", "p99 per round");
}

void print_roll_row(const RollResult& result) {
  std::vector<std::string> per_round;
  for (const auto& round : result.rounds)
    per_round.push_back(fmt::format("{:.0f}/{:.0f}", round.rolled.latency.p99_us, round.steady.latency.p99_us));
  fmt::print("{:<24} {:>7.0f} {:>9.1f} {:>9.1f} {:>11.1f} {:>11.1f} {:>8} {:>8} {:>10.1f} {:>10.1f}  {}\n", result.name(),
             result.rolls(), result.p99_us(), result.max_us(), result.p99_us_no_roll(), result.max_us_no_roll(),
             format_ratio(ratio(result.p99_us(), result.p99_us_no_roll())),
             format_ratio(ratio(result.max_us(), result.max_us_no_roll())), result.p99_us_unprepared(),
             result.max_us_unprepared(), fmt::join(per_round, " "));
  if (result.rolls() < kRollsMin)
    fmt::print("  note: fewer than {} rolls per window; lower the load's segment size or raise --seconds\n", kRollsMin);
  if (result.steady_rolls() > 0) fmt::print("  note: the no-roll case rolled {} times\n", result.steady_rolls());
  if (result.rolls_late() > 0)
    fmt::print("  note: {} rolls came before their segment's preparation was done (rolls_late)\n", result.rolls_late());
}

void print_roll_json(const RollResult& result) {
  auto spread = [&](auto pick) {
    auto values = result.each(pick);
    std::sort(values.begin(), values.end());
    return std::pair{values.front(), values.back()};
  };
  auto [p99_min, p99_max] = spread([](const RollRound& r) { return r.rolled.latency.p99_us; });
  auto [steady_p99_min, steady_p99_max] = spread([](const RollRound& r) { return r.steady.latency.p99_us; });
  JsonLine line("log");
  line.field("case", kCaseKindRoll)
      .field("appenders", result.appenders)
      .field("p99_us", round_to_ns(result.p99_us()))
      .field("max_us", round_to_ns(result.max_us()))
      .field("p99_us_no_roll", round_to_ns(result.p99_us_no_roll()))
      .field("max_us_no_roll", round_to_ns(result.max_us_no_roll()))
      .field("p99_us_unprepared", round_to_ns(result.p99_us_unprepared()))
      .field("max_us_unprepared", round_to_ns(result.max_us_unprepared()))
      .field("rolls", result.rolls())
      .field("rolls_unprepared", result.rolls_unprepared())
      .field("rolls_late", result.rolls_late())
      .field("rounds", kRollRounds)
      .field("p99_us_min", round_to_ns(p99_min))
      .field("p99_us_max", round_to_ns(p99_max))
      .field("p99_us_no_roll_min", round_to_ns(steady_p99_min))
      .field("p99_us_no_roll_max", round_to_ns(steady_p99_max))
      .field("segment_bytes", kRollSegmentBytes)
      .field("segment_bytes_no_roll", kNoRollSegmentBytes)
      .field("seconds", round_to_digits(std::max(0.0, result.rounds.empty() ? 0.0 : result.rounds.front().rolled.measured_seconds), 6));
  line.print();
}

struct AimFigure {
  std::string name;  // the JSON case, e.g. "owner/one_appender_p50_over_raw"
  double value = 0;
  enum class Bound { none, at_most, at_least } bound = Bound::none;
  double bound_value = 0;
  std::string note;  // how to read it, for the table
};

const ModeResult* find_mode(const std::vector<ModeResult>& modes, std::string_view path, std::uint32_t appenders) {
  for (const auto& result : modes)
    if (result.path->name == path && result.appenders == appenders) return &result;
  return nullptr;
}

template <typename CaseResult>
const CaseResult* find_named(const std::vector<CaseResult>& results, std::string_view name) {
  for (const auto& result : results)
    if (result.name() == name) return &result;
  return nullptr;
}

std::vector<AimFigure> compute_aims(const std::vector<ModeResult>& modes, const std::vector<InlineResult>& inlines,
                                    const std::vector<MixedResult>& mixeds, const std::vector<CrcResult>& crcs,
                                    const std::vector<RollResult>& rolls, const Config& config) {
  std::vector<AimFigure> aims;
  const double missing = std::nan("");
  if (config.wants(kCaseKindModes)) {
    // The raw-flush aim is about the direct paths; buffered's ratio is in its table row.
    for (const auto& path : kWritePaths) {
      if (!path.direct_io) continue;
      const ModeResult* one = find_mode(modes, path.name, 1);
      AimFigure aim{fmt::format("{}/one_appender_p50_over_raw", path.name), one ? one->p50_over_raw() : missing,
                    AimFigure::Bound::at_most, kOneAppenderP50OverRawAimMax, ""};
      if (one != nullptr) aim.note = "writer ran: " + writer_ran(one->log, one->path->writer_mode);
      aims.push_back(aim);
    }
    for (const auto& path : kWritePaths) {
      const ModeResult* one = find_mode(modes, path.name, 1);
      const ModeResult* many = find_mode(modes, path.name, 64);
      double value = one && many ? ratio(many->records.records_per_s, one->records.records_per_s) : missing;
      aims.push_back({fmt::format("{}/throughput_64_over_1", path.name), value, AimFigure::Bound::at_least,
                      kThroughput64Over1AimMin, ""});
    }
  }
  if (config.wants(kCaseKindInline)) {
    const InlineResult* on = find_named(inlines, inline_case_name(true));
    const InlineResult* off = find_named(inlines, inline_case_name(false));
    aims.push_back({"inline/p50_gain_off_over_on",
                    on && off ? ratio(off->records.latency.p50_us, on->records.latency.p50_us) : missing,
                    AimFigure::Bound::none, 0, "above 1: inline writes cut latency"});
  }
  if (config.wants(kCaseKindMixed)) {
    const MixedResult* on = find_named(mixeds, mixed_case_name(kMixedOffloadBytes));
    const MixedResult* off = find_named(mixeds, mixed_case_name(0));
    aims.push_back({"mixed/small_p99_offload_on_us", on ? on->small.latency.p99_us : missing,
                    AimFigure::Bound::none, 0, ""});
    aims.push_back({"mixed/small_p99_offload_off_us", off ? off->small.latency.p99_us : missing,
                    AimFigure::Bound::none, 0, ""});
    aims.push_back({"mixed/small_p99_off_over_on",
                    on && off ? ratio(off->small.latency.p99_us, on->small.latency.p99_us) : missing,
                    AimFigure::Bound::none, 0, "above 1: offload keeps large records from holding up small ones"});
    // The same small load without the large appender, when the run has it:
    // near 1 means offloaded large records cost small ones nothing.
    if (const ModeResult* alone = find_mode(modes, "threads", kMixedSmallAppenders); alone && on) {
      aims.push_back({"mixed/small_p99_offload_on_over_alone",
                      ratio(on->small.latency.p99_us, alone->records.latency.p99_us), AimFigure::Bound::none, 0,
                      fmt::format("against threads/{}", appenders_name(kMixedSmallAppenders))});
    }
  }
  if (config.wants(kCaseKindRoll)) {
    for (const auto& roll : rolls) {
      aims.push_back({fmt::format("{}/p99_over_no_roll", roll.name()), ratio(roll.p99_us(), roll.p99_us_no_roll()),
                      AimFigure::Bound::at_most, kRollP99AimMax, fmt::format("{:.0f} rolls", roll.rolls())});
      aims.push_back({fmt::format("{}/max_over_no_roll", roll.name()), ratio(roll.max_us(), roll.max_us_no_roll()),
                      AimFigure::Bound::at_most, kRollMaxAimMax, ""});
    }
  }
  if (config.wants(kCaseKindCrc32c)) {
    aims.push_back({"crc32c/speedup_over_single_chain", crcs.empty() ? missing : crcs.front().speedup(),
                    AimFigure::Bound::at_least, kCrcSpeedupAimMin, "medians over 64 MiB"});
  }
  return aims;
}

void print_aims(const std::vector<AimFigure>& aims) {
  if (aims.empty()) return;
  fmt::print("\naims (figures, not gates)\n");
  for (const auto& aim : aims) {
    std::string value = aim.name.ends_with("_us") && std::isfinite(aim.value) ? fmt::format("{:.1f} us", aim.value)
                                                                               : format_ratio(aim.value);
    std::string bound;
    if (aim.bound == AimFigure::Bound::at_most) bound = fmt::format("  (aim <= {:.2f})", aim.bound_value);
    if (aim.bound == AimFigure::Bound::at_least) bound = fmt::format("  (aim >= {:.0f})", aim.bound_value);
    std::string note = aim.note.empty() ? "" : fmt::format("  [{}]", aim.note);
    fmt::print("{:<42} {:>10}{}{}\n", aim.name, value, bound, note);
  }
}

void print_aim_json(const AimFigure& aim) {
  JsonLine line("log_aims");
  line.field("case", aim.name).field("value", round_to_digits(aim.value, 3));
  if (aim.bound == AimFigure::Bound::at_most) line.field("aim_max", aim.bound_value);
  if (aim.bound == AimFigure::Bound::at_least) line.field("aim_min", aim.bound_value);
  line.print();
}

// ---------------------------------------------------------------------------

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
  if (auto stale = fs.exists(scratch_path); stale && *stale) (void)fusee::io::remove_tree(fs, scratch_path);
  if (auto created = fs.create_dir(scratch_path); !created) {
    fmt::print(stderr, "log_bench: cannot create {}: {}\n", scratch_path, created.error().message());
    return 1;
  }
  ScratchDir scratch(fs, scratch_path);

  fmt::print("log_bench in {}: cases {}, {:g} s per case after {:g} s warm-up\n", config.dir,
             fmt::join(config.case_kinds, ","), config.seconds, config.warmup_seconds);

  // The floor, measured first, in the directory the log will use. Only the
  // modes and inline cases are compared with it.
  std::vector<RawResult> raws;
  if (config.wants(kCaseKindModes) || config.wants(kCaseKindInline) || config.wants(kCaseKindReplicated)) {
    fusee::bench::RawFlushOptions raw_options;
    raw_options.iterations = config.raw_iterations;
    fmt::print("\nraw durable {} B write ({} iterations, us)\n", fusee::bench::kRawFlushBlockBytes,
               config.raw_iterations);
    fmt::print("{:<24} {:>9} {:>9} {:>9}\n", "method", "p50", "p99", "p99.9");
    for (FlushMethod method : {FlushMethod::direct_dsync, FlushMethod::buffered_fdatasync}) {
      auto measured = fusee::bench::measure_raw_flush(fs, scratch.path(), method, raw_options);
      if (!measured) {
        fmt::print(stderr, "log_bench: raw flush ({}): {}\n", fusee::bench::flush_method_name(method),
                   measured.error().message());
        return 1;
      }
      RawResult raw{method, measured->supported, measured->unsupported_reason, measured->latency};
      if (raw.supported) {
        fmt::print("{:<24} {:>9.1f} {:>9.1f} {:>9.1f}\n", fusee::bench::flush_method_name(method),
                   raw.latency.p50_us, raw.latency.p99_us, raw.latency.p999_us);
      } else {
        fmt::print("{:<24} unsupported: {}\n", fusee::bench::flush_method_name(method), raw.unsupported_reason);
      }
      raws.push_back(std::move(raw));
    }
    std::fflush(stdout);
  }

  auto fail = [](const std::string& name, std::error_code error) {
    fmt::print(stderr, "log_bench: {}: {}\n", name, error.message());
    return 1;
  };

  std::vector<ModeResult> modes;
  if (config.wants(kCaseKindModes)) {
    print_mode_header();
    for (const auto& path : kWritePaths) {
      for (std::uint32_t appenders : config.appender_counts) {
        auto result = run_mode_case(fs, scratch.path(), path, appenders, raw_p50_us(raws, path.raw_method), config);
        if (!result) return fail(mode_case_name(path, appenders), result.error());
        print_mode_row(*result);
        std::fflush(stdout);
        modes.push_back(*result);
      }
    }
  }

  std::vector<InlineResult> inlines;
  if (config.wants(kCaseKindInline)) {
    print_inline_header();
    for (bool inline_writes : {true, false}) {
      auto result =
          run_inline_case(fs, scratch.path(), inline_writes, raw_p50_us(raws, FlushMethod::direct_dsync), config);
      if (!result) return fail(inline_case_name(inline_writes), result.error());
      print_inline_row(*result);
      std::fflush(stdout);
      inlines.push_back(*result);
    }
  }

  std::vector<MixedResult> mixeds;
  if (config.wants(kCaseKindMixed)) {
    print_mixed_header();
    for (std::size_t offload_bytes : {kMixedOffloadBytes, std::size_t{0}}) {
      auto result = run_mixed_case(fs, scratch.path(), offload_bytes, config);
      if (!result) return fail(mixed_case_name(offload_bytes), result.error());
      print_mixed_row(*result);
      std::fflush(stdout);
      mixeds.push_back(*result);
    }
  }

  std::vector<RollResult> rolls;
  if (config.wants(kCaseKindRoll)) {
    print_roll_header();
    for (std::uint32_t appenders : {1u, 8u}) {
      auto result = run_roll_case(fs, scratch.path(), appenders, config);
      if (!result) return fail(fmt::format("roll/{}", appenders_name(appenders)), result.error());
      print_roll_row(*result);
      std::fflush(stdout);
      rolls.push_back(*result);
    }
  }

  fusee::bench::BulkCaseConfig bulk_config{config.seconds, config.warmup_seconds};
  std::vector<fusee::bench::RollGrowResult> roll_grows;
  if (config.wants(kCaseKindRollGrow)) {
    auto result = fusee::bench::run_roll_grow_case(fs, scratch.path(), bulk_config);
    if (!result) return fail(std::string(kCaseKindRollGrow), result.error());
    fusee::bench::print_roll_grow(*result);
    std::fflush(stdout);
    roll_grows.push_back(*result);
  }
  std::vector<fusee::bench::BulkSmallResult> bulk_smalls;
  if (config.wants(kCaseKindBulkSmall)) {
    auto result = fusee::bench::run_bulk_small_case(fs, scratch.path(), bulk_config);
    if (!result) return fail(std::string(kCaseKindBulkSmall), result.error());
    fusee::bench::print_bulk_small(*result);
    std::fflush(stdout);
    bulk_smalls.push_back(*result);
  }

  std::vector<CrcResult> crcs;
  if (config.wants(kCaseKindCrc32c)) {
    auto result = run_crc_case(config);
    if (!result) return fail(std::string(kCaseKindCrc32c), result.error());
    print_crc_table(*result);
    std::fflush(stdout);
    crcs.push_back(*result);
  }

  // replicated: beside the local log's default path (the owner) from the
  // modes case, run here for 1 and 64 appenders if that case was not.
  std::optional<fusee::bench::ReplicatedResult> replicated;
  fusee::bench::ReplicatedCaseConfig replicated_config;
  if (config.wants(kCaseKindReplicated)) {
    const WritePath& owner = kWritePaths[0];
    for (std::uint32_t appenders : {1u, 64u}) {
      if (find_mode(modes, owner.name, appenders) != nullptr) continue;
      if (!config.wants(kCaseKindModes)) print_mode_header();
      auto result = run_mode_case(fs, scratch.path(), owner, appenders, raw_p50_us(raws, owner.raw_method), config);
      if (!result) return fail(mode_case_name(owner, appenders), result.error());
      print_mode_row(*result);
      modes.push_back(*result);
    }
    const ModeResult* one = find_mode(modes, owner.name, 1);
    const ModeResult* many = find_mode(modes, owner.name, 64);
    replicated_config.fusee = config.fusee;
    replicated_config.seconds = config.seconds;
    replicated_config.kills = config.replicated_kills;
    replicated_config.disk_thread = config.replica_disk_thread;
    replicated_config.local_1_p50_us = one->records.latency.p50_us;
    replicated_config.local_1_p99_us = one->records.latency.p99_us;
    replicated_config.local_64_records_per_s = many->records.records_per_s;
    replicated_config.raw_p50_us = raw_p50_us(raws, FlushMethod::buffered_fdatasync);
    auto result = fusee::bench::run_replicated_case(fs, scratch.path(), replicated_config);
    if (!result) return fail(std::string(kCaseKindReplicated), result.error());
    fusee::bench::print_replicated(*result, replicated_config);
    std::fflush(stdout);
    replicated = *result;
  }

  auto aims = compute_aims(modes, inlines, mixeds, crcs, rolls, config);
  print_aims(aims);
  fmt::print("\n");
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
  for (const auto& result : modes) print_mode_json(result);
  for (const auto& result : inlines) print_inline_json(result);
  for (const auto& result : mixeds) print_mixed_json(result);
  for (const auto& result : rolls) print_roll_json(result);
  for (const auto& result : roll_grows) fusee::bench::print_roll_grow_json(result);
  for (const auto& result : bulk_smalls) fusee::bench::print_bulk_small_json(result);
  if (replicated) fusee::bench::print_replicated_json(*replicated, replicated_config);
  for (const auto& result : crcs) print_crc_json(result);
  for (const auto& aim : aims) print_aim_json(aim);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{"Shared-log append-to-durable latency and throughput, beside the disk's raw flush latency."};
  app.add_option("--dir", config.dir, "directory on the disk to measure (a scratch directory is made inside)")
      ->capture_default_str();
  app.add_option("--seconds", config.seconds, "timed seconds per case (per loop for crc32c, at least 1)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup-seconds", config.warmup_seconds, "untimed seconds at the start of each case")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--cases", config.case_kinds,
                 "case kinds to run, comma-separated: modes, inline, mixed, roll, roll_grow, bulk_small, crc32c, "
                 "replicated")
      ->delimiter(',')
      ->check(CLI::IsMember({std::string(kCaseKindModes), std::string(kCaseKindInline),
                             std::string(kCaseKindMixed), std::string(kCaseKindRoll),
                             std::string(kCaseKindRollGrow), std::string(kCaseKindBulkSmall),
                             std::string(kCaseKindCrc32c), std::string(kCaseKindReplicated)}))
      ->capture_default_str();
  app.add_option("--appenders", config.appender_counts, "appender counts for the modes cases (one shard each)")
      ->check(CLI::Range(1u, fusee::wal::kShardsMax))
      ->capture_default_str();
  app.add_option("--raw-iterations", config.raw_iterations, "timed raw flush writes per method")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // The build tree's fusee, beside bench/: what `make bench` runs.
  {
    std::error_code ignored;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ignored);
    config.fusee = (self.parent_path().parent_path() / "cli" / "fusee").string();
  }
  app.add_option("--fusee", config.fusee, "replicated: the fusee binary that runs each replica")->capture_default_str();
  app.add_option("--replicated-kills", config.replicated_kills, "replicated: SIGKILLs of the primary for failover")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  app.add_flag("--replica-disk-thread", config.replica_disk_thread,
               "replicated: each replica writes on a thread of its own (fusee replica run --disk-thread)");
  CLI11_PARSE(app, argc, argv);
  return run(config);
}
