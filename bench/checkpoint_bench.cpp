// checkpoint_bench: what checkpoints buy and what they cost. The engine
// checkpoints each shard into the run store (<dir>/runs) on an interval and
// when a log segment roll asks, retires the log segments (<dir>/wal) the
// checkpoints cover, and at open loads the checkpointed journals and replays
// only the log past each shard's checkpoint. Three claims follow, one case
// each, chosen with --cases (always run in this order):
//
//  - reopen: recovery after a checkpoint replays only the log past it, so
//    open time is bounded by the data since the last checkpoints, not by
//    history. For each history size (--reopen-steps, paired with
//    --reopen-runs; default 250,000 steps / 2,500 runs and 1,000,000 / 10,000,
//    i.e. 100 no-op steps a run) a child process opens a fresh engine, writes
//    the history with at most --reopen-in-flight runs in flight (2,000:
//    runs finish as the history grows, so history is mostly finished runs;
//    0 puts every run in flight at once, and then everything written is
//    "since the last checkpoint"), tells the parent it is done and is SIGKILLed: no clean
//    shutdown, no final checkpoint, only the ones the engine took on its
//    interval (--reopen-checkpoint-ms) and on segment rolls. The parent then
//    times Engine::open alone, reads /proc/self/io around it (rchar: bytes
//    read through read system calls, the log's recovery and RocksDB's
//    together; read_bytes: what of that came from the device rather than the
//    page cache) and notes the log and run store sizes; then shuts that
//    engine down cleanly (which takes a last checkpoint) and measures a
//    second open the same way. The children are forked when the benchmark
//    starts, before any engine (and any RocksDB thread pool) exists in the
//    process, and wait on a pipe until their turn.
//    Aim: open time after a kill at the largest history within 1.5x of the
//    smallest (the history grows 4x by default).
//  - bounded: disk stays bounded. --bounded-steps (default 5,000,000) no-op
//    steps as runs of 100 with at most --bounded-in-flight (2,000) runs in
//    flight, new ones started as others finish; a sampler reads
//    Engine::stats().wal_bytes and the bytes of the files under <dir>/wal
//    every 50 ms and keeps the peaks. Aim: the peak stays within three log
//    segments (the one being written, one waiting for the checkpoint that
//    covers it, and one of slack), and the second half of the run peaks no
//    higher than the first.
//  - p99: checkpoints run off the step path. engine_bench's fan-out
//    (--p99-runs x --p99-steps, default 1,000 x 10, --p99-rounds (20) rounds
//    of fresh runs on one engine to gather samples), then its sequential
//    chain (a run of --chain-steps (1,000), --chain-rounds (5) runs one after
//    another), each on an engine with checkpoint_interval 0 (only when
//    a segment roll asks: none in this window with the default segments; the
//    table shows the count) and on one with --p99-checkpoint-ms (20 ms), so
//    checkpoints run all through the window. Step latency as engine_bench
//    reads it, beside the disk's raw durable 4 KiB write measured in the
//    case's directory just before (bench/raw_flush.hpp). Each repeats its
//    rounds past those counts until it has timed --p99-min-seconds (1 s;
//    at most 8x the rounds asked for). Aim: p99 with checkpoints within
//    1.25x of p99 without, for both.
//
// Every case runs in local mode with --shards shards (default 2) and
// FlushMethod::direct (--buffered: buffered writes + fdatasync), in a fresh
// directory under --dir, removed at the end. A step's latency is the time
// between its completion and the previous one's (the first step's: since the
// workflow body began), read by the workflow code with steady_clock, which
// never enters the journal. Runs are started by --starters threads, each
// putting a batch in flight with engine.start_async(), waiting for the
// starts, then for the results with engine.result_async(), and repeating.
//
// The aims are figures, not gates: a missed aim does not fail the run. An
// Error from the engine, a checkpoint error in Engine::stats() or a run that
// returns the wrong result does (exit status 1).
//
// Output: tables for people, then one JSON line per measurement (grep '^{'):
// {"bench":"checkpoint","case":"reopen"|"bounded"|"p99",...}, and one
// {"bench":"checkpoint_aims",...} per aim.
#include <fmt/format.h>
#include <fcntl.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench/bench_json.hpp"
#include "bench/figures.hpp"
#include "bench/raw_flush.hpp"
#include "bench/scratch_dir.hpp"
#include "bench/timed_steps.hpp"
#include "fusee/fusee.hpp"
#include "wal/io/posix_file_system.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using fusee::bench::format_ratio;
using fusee::bench::JsonLine;
using fusee::bench::LatencySummary;
using fusee::bench::ratio;
using fusee::bench::round_to_digits;
using fusee::bench::round_to_ns;
using fusee::bench::kWarmupSteps;
using fusee::bench::make_step_names;
using fusee::bench::register_timed;
using fusee::bench::StepTimes;
using RawMethod = fusee::bench::FlushMethod;

constexpr std::string_view kCaseReopen = "reopen";
constexpr std::string_view kCaseBounded = "bounded";
constexpr std::string_view kCaseP99 = "p99";

// The aims (see the header comment). Reported as figures, not checked.
constexpr double kReopenOpenGrowthAimMax = 1.5;
constexpr double kBoundedPeakSegmentsAimMax = 3.0;
constexpr double kBoundedHalvesAimMax = 1.0;
constexpr double kP99WithOverWithoutAimMax = 1.25;

constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  std::string dir = ".";
  std::vector<std::string> cases = {std::string(kCaseReopen), std::string(kCaseBounded), std::string(kCaseP99)};
  std::uint32_t shards = 2;
  bool buffered = false;
  std::uint32_t starters = 2;
  std::uint64_t segment_bytes = 0;  // 0: the engine's default
  // reopen
  std::vector<std::uint64_t> reopen_steps = {250'000, 1'000'000};
  std::vector<std::uint32_t> reopen_runs = {2'500, 10'000};
  std::uint32_t reopen_checkpoint_ms = 200;
  std::uint32_t reopen_in_flight = 2000;  // 0: every run at once
  // bounded
  std::uint64_t bounded_steps = 5'000'000;
  std::uint32_t bounded_steps_per_run = 100;
  std::uint32_t bounded_in_flight = 2'000;
  std::uint32_t bounded_checkpoint_ms = 1000;
  std::uint32_t sample_ms = 50;
  // p99
  std::uint32_t p99_runs = 1000;
  std::uint32_t p99_steps = 10;
  std::uint32_t p99_rounds = 20;
  std::uint32_t p99_checkpoint_ms = 20;
  std::uint32_t chain_steps = 1000;
  std::uint32_t chain_rounds = 5;
  double p99_min_seconds = 1.0;
  static constexpr std::uint32_t kP99RoundsGrowthMax = 8;  // rounds past the asked ones, as a multiple of them
  std::size_t raw_iterations = fusee::bench::RawFlushOptions{}.iterations;

  bool wants(std::string_view name) const { return std::find(cases.begin(), cases.end(), name) != cases.end(); }
  std::uint64_t segment_bytes_in_use() const { return segment_bytes != 0 ? segment_bytes : fusee::Config{}.segment_bytes; }
  std::string_view flush_name() const { return buffered ? "buffered" : "direct"; }
};

fusee::Config make_config(const Options& options, const std::string& dir, std::chrono::milliseconds interval) {
  fusee::Config config = fusee::Config::local(dir);
  config.shards = options.shards;
  config.flush = options.buffered ? fusee::FlushMethod::buffered : fusee::FlushMethod::direct;
  config.checkpoint_interval = interval;
  if (options.segment_bytes != 0) config.segment_bytes = options.segment_bytes;
  return config;
}

double millis(Clock::duration elapsed) { return std::chrono::duration<double, std::milli>(elapsed).count(); }
double seconds_of(Clock::duration elapsed) { return std::chrono::duration<double>(elapsed).count(); }
double mib(std::uint64_t bytes) { return double(bytes) / kMiB; }
// "64 MiB", or the bytes when that is not a whole number of MiB.
std::string size_text(std::uint64_t bytes) {
  auto whole = static_cast<std::uint64_t>(kMiB);
  return bytes % whole == 0 ? fmt::format("{} MiB", bytes / whole) : fmt::format("{} bytes", bytes);
}

// "Error text (errc name)" for a fusee::Error, what() for anything else.
std::string describe(const std::exception& failure) {
  if (const auto* error = dynamic_cast<const fusee::Error*>(&failure))
    return fmt::format("{} ({})", error->what(), fusee::errc_name(error->error()));
  return failure.what();
}

// Bytes of the regular files under path (apparent sizes; log segments are
// preallocated, so a segment counts in full from its creation). Files may
// vanish while the engine retires them: a walk that meets an error is
// retried, and nullopt comes back if three walks fail.
std::optional<std::uint64_t> dir_bytes(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::error_code error;
    std::uint64_t total = 0;
    fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, error);
    bool failed = bool(error);
    for (; !failed && it != fs::recursive_directory_iterator(); it.increment(error)) {
      if (error) break;
      std::error_code entry_error;
      if (it->is_regular_file(entry_error)) {
        auto size = it->file_size(entry_error);
        if (!entry_error) total += size;
      }
    }
    failed = failed || bool(error);
    if (!failed) return total;
  }
  return std::nullopt;
}

std::uint64_t dir_bytes_or_zero(const std::filesystem::path& path) { return dir_bytes(path).value_or(0); }

// ---------------------------------------------------------------------------
// Workflows.

// Names made before any timing, so no formatting in the loop.

// In: the number of steps. Out: the steps taken. Untimed (reopen, bounded).
using NoopRef = fusee::WorkflowRef<std::uint32_t, std::uint32_t>;
NoopRef noop_ref() { return {"bench.noop"}; }

fusee::Task<std::uint32_t> noop(fusee::Ctx& ctx, std::uint32_t steps, const std::vector<std::string>* names) {
  if (steps > names->size())
    throw fusee::TerminalError(fmt::format("{} steps asked, the benchmark named {}", steps, names->size()));
  for (std::uint32_t step = 0; step < steps; ++step) co_await ctx.step((*names)[step], [] {});
  co_return steps;
}

void register_noop(fusee::Engine& engine, const std::vector<std::string>* names) {
  engine.register_workflow(noop_ref(), [names](fusee::Ctx& ctx, std::uint32_t steps) { return noop(ctx, steps, names); });
}

// ---------------------------------------------------------------------------
// Driving runs: --starters threads, each taking every starters-th run and
// putting them in flight in batches of max_in_flight / starters: start the
// batch with start_async, wait for the starts (each is acknowledged once
// durable), ask for the results with result_async, wait for them, repeat.
// Returns the seconds from the first start to the last result. Throws what
// a thread threw (fusee::Error, or std::runtime_error for a wrong result).
struct DriveSpec {
  const NoopRef* ref = nullptr;
  const std::vector<std::string>* ids = nullptr;
  std::function<std::uint32_t(std::uint32_t)> input;  // run index -> workflow input
  std::uint32_t expected_steps = 0;                   // what each run must return
  std::uint32_t starters = 1;
  std::uint32_t max_in_flight = 1;
};

double drive(fusee::Engine& engine, const DriveSpec& spec) {
  const auto& ids = *spec.ids;
  const auto run_count = static_cast<std::uint32_t>(ids.size());
  if (run_count == 0) return 0;
  const std::uint32_t starters = std::max<std::uint32_t>(1, std::min(spec.starters, run_count));
  const std::uint32_t batch = std::max<std::uint32_t>(1, spec.max_in_flight / starters);
  struct Output {
    Clock::time_point last_result_at{};
    std::exception_ptr error;
  };
  std::vector<Output> outputs(starters);
  std::latch ready(starters);
  std::latch go(1);
  std::vector<std::thread> threads;
  threads.reserve(starters);
  for (std::uint32_t first = 0; first < starters; ++first) {
    threads.emplace_back([&, first] {
      ready.count_down();
      go.wait();
      try {
        std::vector<std::uint32_t> indices;
        std::vector<std::future<fusee::StartOutcome>> starts;
        std::vector<std::future<std::uint32_t>> results;
        for (std::uint32_t next = first; next < run_count;) {
          indices.clear();
          for (; next < run_count && indices.size() < batch; next += starters) indices.push_back(next);
          starts.clear();
          for (auto run : indices) starts.push_back(engine.start_async(*spec.ref, ids[run], spec.input(run)));
          for (auto& start : starts) {
            if (start.get() != fusee::StartOutcome::started)
              throw std::runtime_error("a run attached to an existing run in a fresh engine");
          }
          results.clear();
          for (auto run : indices) results.push_back(engine.result_async(*spec.ref, ids[run]));
          for (auto& result : results) {
            std::uint32_t steps = result.get();
            if (steps != spec.expected_steps)
              throw std::runtime_error(fmt::format("a run returned {} steps, not {}", steps, spec.expected_steps));
          }
        }
        outputs[first].last_result_at = Clock::now();
      } catch (...) {
        outputs[first].error = std::current_exception();
      }
    });
  }
  // Thread start-up stays outside the timed window.
  ready.wait();
  const auto started_at = Clock::now();
  go.count_down();
  for (auto& thread : threads) thread.join();
  for (const auto& out : outputs)
    if (out.error) std::rethrow_exception(out.error);
  auto last = started_at;
  for (const auto& out : outputs) last = std::max(last, out.last_result_at);
  return seconds_of(last - started_at);
}

std::vector<std::string> make_ids(std::string_view prefix, std::uint32_t count) {
  std::vector<std::string> ids;
  ids.reserve(count);
  for (std::uint32_t run = 0; run < count; ++run) ids.push_back(fmt::format("{}-{}", prefix, run));
  return ids;
}

// A checkpoint error the engine reports is a failure of the benchmark.
void check_checkpoints(const fusee::EngineStats& stats, std::string_view where) {
  if (!stats.checkpoint_error.empty())
    throw std::runtime_error(fmt::format("{}: checkpoints stopped: {}", where, stats.checkpoint_error));
}

// ---------------------------------------------------------------------------
// reopen

struct ReopenSize {
  std::uint64_t steps = 0;
  std::uint32_t runs = 0;
  std::uint32_t steps_per_run() const { return static_cast<std::uint32_t>(steps / runs); }
};

// What a writing child sends its parent when the history is written (or it
// failed). Plain bytes through a pipe, one write.
struct ChildReport {
  std::int32_t ok = 0;
  double write_seconds = 0;
  std::uint64_t checkpoints = 0;
  std::uint64_t segments_retired = 0;
  std::uint64_t wal_bytes = 0;
  std::uint64_t wal_segments = 0;
  std::uint64_t run_store_bytes = 0;
  std::uint64_t records_written = 0;
  std::uint64_t batches_written = 0;
  char error[1024] = {};
};
static_assert(std::is_trivially_copyable_v<ChildReport>);

bool write_all(int fd, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::write(fd, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    bytes += written;
    size -= std::size_t(written);
  }
  return true;
}

// Bytes read until size or end of file.
std::size_t read_all(int fd, void* data, std::size_t size) {
  auto* bytes = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t got = ::read(fd, bytes + done, size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += std::size_t(got);
  }
  return done;
}

// One writing child: forked at start-up, waiting on go_fd.
struct ReopenChild {
  pid_t pid = -1;
  int go_fd = -1;      // parent's end: one byte starts the child; closing it ends it
  int report_fd = -1;  // parent's end: the ChildReport
  std::string data_dir;
  ReopenSize size;
};

std::string data_dir_for(const std::string& scratch, std::string_view name) {
  return (std::filesystem::path(scratch) / name).string();
}

// The child: waits for its turn, opens a fresh engine in data_dir, writes the
// history, reports, and waits to be killed. Never returns; ends with _exit so
// that none of the parent's objects (the scratch directory) is destroyed.
[[noreturn]] void reopen_child_main(const Options& options, const ReopenChild& child, int go_fd, int report_fd) {
  char go = 0;
  ssize_t got = 0;
  do {
    got = ::read(go_fd, &go, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1) ::_exit(0);  // the parent no longer needs this history
  ChildReport report;
  try {
    auto engine = fusee::Engine::open(
        make_config(options, child.data_dir, std::chrono::milliseconds(options.reopen_checkpoint_ms)));
    const auto names = make_step_names(child.size.steps_per_run());
    register_noop(*engine, &names);
    const auto ref = noop_ref();
    const auto ids = make_ids("reopen", child.size.runs);
    const std::uint32_t per_run = child.size.steps_per_run();
    DriveSpec spec;
    spec.ref = &ref;
    spec.ids = &ids;
    spec.input = [per_run](std::uint32_t) { return per_run; };
    spec.expected_steps = per_run;
    spec.starters = options.starters;
    spec.max_in_flight = options.reopen_in_flight != 0 ? options.reopen_in_flight : child.size.runs;
    report.write_seconds = drive(*engine, spec);
    const auto stats = engine->stats();
    check_checkpoints(stats, "writing the history");
    report.checkpoints = stats.checkpoints;
    report.segments_retired = stats.segments_retired;
    report.wal_bytes = stats.wal_bytes;
    report.wal_segments = stats.wal_segments;
    report.run_store_bytes = stats.run_store_bytes;
    report.records_written = stats.records_written;
    report.batches_written = stats.batches_written;
    report.ok = 1;
    if (!write_all(report_fd, &report, sizeof report)) ::_exit(1);
    // The engine stays open, its threads running, until the SIGKILL.
    for (;;) ::pause();
  } catch (const std::exception& failure) {
    auto text = describe(failure);
    std::strncpy(report.error, text.c_str(), sizeof report.error - 1);
    (void)write_all(report_fd, &report, sizeof report);
    ::_exit(1);
  } catch (...) {
    std::strncpy(report.error, "unknown exception", sizeof report.error - 1);
    (void)write_all(report_fd, &report, sizeof report);
    ::_exit(1);
  }
}

// The writing children, forked before any engine exists in this process (a
// fork after RocksDB started its thread pools would leave the child with a
// pool whose threads are gone). The destructor ends and reaps every child
// still there, whatever happened.
class ReopenChildren {
 public:
  ReopenChildren() = default;
  ReopenChildren(const ReopenChildren&) = delete;
  ReopenChildren& operator=(const ReopenChildren&) = delete;
  ~ReopenChildren() {
    for (auto& child : children_) finish(child);
  }

  // Forks one child per size. Throws std::system_error.
  void fork_all(const Options& options, const std::string& scratch, const std::vector<ReopenSize>& sizes) {
    const pid_t parent = ::getpid();
    for (const auto& size : sizes) {
      ReopenChild child;
      child.size = size;
      child.data_dir = data_dir_for(scratch, fmt::format("reopen-{}", size.steps));
      int go[2];
      int report[2];
      if (::pipe2(go, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
      if (::pipe2(report, O_CLOEXEC) != 0) {
        int saved = errno;
        ::close(go[0]);
        ::close(go[1]);
        throw std::system_error(saved, std::generic_category(), "pipe");
      }
      std::fflush(stdout);
      std::fflush(stderr);
      pid_t pid = ::fork();
      if (pid < 0) {
        int saved = errno;
        for (int fd : {go[0], go[1], report[0], report[1]}) ::close(fd);
        throw std::system_error(saved, std::generic_category(), "fork");
      }
      if (pid == 0) {
        // Die with the parent; and if it is already gone, do nothing.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(1);
        for (auto& other : children_) {
          ::close(other.go_fd);
          ::close(other.report_fd);
        }
        ::close(go[1]);
        ::close(report[0]);
        reopen_child_main(options, child, go[0], report[1]);
      }
      ::close(go[0]);
      ::close(report[1]);
      child.pid = pid;
      child.go_fd = go[1];
      child.report_fd = report[0];
      children_.push_back(std::move(child));
    }
  }

  ReopenChild& at(std::size_t index) { return children_.at(index); }

  // Starts child `index` and waits for its report. Throws std::runtime_error
  // if it failed or died.
  ChildReport run(std::size_t index) {
    auto& child = children_.at(index);
    char go = 'g';
    if (!write_all(child.go_fd, &go, 1)) throw std::runtime_error("cannot start the writing child");
    ChildReport report;
    std::size_t got = read_all(child.report_fd, &report, sizeof report);
    if (got != sizeof report) {
      std::string how = reap(child);
      throw std::runtime_error(fmt::format("the writing child ended without reporting ({})", how));
    }
    if (report.ok != 1) {
      report.error[sizeof report.error - 1] = '\0';
      reap(child);
      throw std::runtime_error(fmt::format("writing the history: {}", report.error));
    }
    return report;
  }

  // SIGKILLs child `index` (done writing) and waits for it. Throws
  // std::runtime_error if it had ended some other way.
  void kill(std::size_t index) {
    auto& child = children_.at(index);
    ::kill(child.pid, SIGKILL);
    std::string how = reap(child);
    if (how != "killed by signal 9")
      throw std::runtime_error(fmt::format("the writing child was to be SIGKILLed but was {}", how));
  }

 private:
  // Waits for the child; says how it ended.
  static std::string reap(ReopenChild& child) {
    if (child.pid <= 0) return "already reaped";
    int status = 0;
    pid_t waited = 0;
    do {
      waited = ::waitpid(child.pid, &status, 0);
    } while (waited < 0 && errno == EINTR);
    child.pid = -1;
    if (waited < 0) return fmt::format("not waitable: {}", std::strerror(errno));
    if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    return "ended";
  }

  static void finish(ReopenChild& child) {
    if (child.go_fd >= 0) ::close(child.go_fd);  // a child still waiting reads end of file and exits
    child.go_fd = -1;
    if (child.report_fd >= 0) ::close(child.report_fd);
    child.report_fd = -1;
    if (child.pid > 0) {
      ::kill(child.pid, SIGKILL);
      reap(child);
    }
  }

  std::vector<ReopenChild> children_;
};

struct ProcIo {
  std::uint64_t rchar = 0;       // bytes through read-like system calls
  std::uint64_t syscr = 0;       // read-like system calls
  std::uint64_t read_bytes = 0;  // bytes fetched from the device
};

ProcIo read_proc_io() {
  std::ifstream in("/proc/self/io");
  if (!in) throw std::runtime_error("cannot read /proc/self/io");
  ProcIo io;
  std::string key;
  std::uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "rchar:") io.rchar = value;
    if (key == "syscr:") io.syscr = value;
    if (key == "read_bytes:") io.read_bytes = value;
  }
  return io;
}

struct OpenFigures {
  std::string kind;  // "kill" or "clean"
  double open_ms = 0;
  std::uint64_t bytes_read = 0;          // rchar
  std::uint64_t device_bytes_read = 0;   // read_bytes
  std::uint64_t read_calls = 0;          // syscr
  std::uint64_t wal_bytes = 0;           // stats() after open
  std::uint64_t wal_segments = 0;
  std::uint64_t wal_disk_bytes = 0;      // files under <dir>/wal
  std::uint64_t run_store_bytes = 0;     // stats(): RocksDB's estimate
  std::uint64_t run_store_disk_bytes = 0;  // files under <dir>/runs
  double shutdown_ms = 0;                // the clean shutdown of this engine, after the figures
};

struct ReopenResult {
  ReopenSize size;
  std::uint32_t shards = 0;
  ChildReport written;
  std::vector<OpenFigures> opens;
};

// Times Engine::open on dir, notes its figures, checks one run's result (the
// history is there), then shuts it down cleanly (timed too).
OpenFigures measure_open(const Options& options, const std::string& dir, std::string kind, const ReopenSize& size,
                         std::uint32_t* shards_out) {
  OpenFigures figures;
  figures.kind = std::move(kind);
  auto config = make_config(options, dir, std::chrono::milliseconds(options.reopen_checkpoint_ms));
  const auto io_before = read_proc_io();
  const auto opening = Clock::now();
  auto engine = fusee::Engine::open(config);
  const auto opened = Clock::now();
  const auto io_after = read_proc_io();
  figures.open_ms = millis(opened - opening);
  figures.bytes_read = io_after.rchar - io_before.rchar;
  figures.device_bytes_read = io_after.read_bytes - io_before.read_bytes;
  figures.read_calls = io_after.syscr - io_before.syscr;
  const auto stats = engine->stats();
  check_checkpoints(stats, fmt::format("reopen after {}", figures.kind));
  figures.wal_bytes = stats.wal_bytes;
  figures.wal_segments = stats.wal_segments;
  figures.run_store_bytes = stats.run_store_bytes;
  figures.wal_disk_bytes = dir_bytes_or_zero(std::filesystem::path(dir) / "wal");
  figures.run_store_disk_bytes = dir_bytes_or_zero(std::filesystem::path(dir) / "runs");
  *shards_out = engine->shard_count();

  // Outside the timed window: the history is really there.
  const auto names = make_step_names(size.steps_per_run());
  register_noop(*engine, &names);
  for (std::uint32_t run : {0u, size.runs - 1}) {
    auto id = fmt::format("reopen-{}", run);
    auto steps = engine->result(noop_ref(), id);
    if (steps != size.steps_per_run())
      throw std::runtime_error(fmt::format("after the {} reopen, run {} returned {} steps, not {}", figures.kind, id,
                                           steps, size.steps_per_run()));
  }

  const auto stopping = Clock::now();
  engine->shutdown();
  figures.shutdown_ms = millis(Clock::now() - stopping);
  engine.reset();
  return figures;
}

ReopenResult run_reopen(const Options& options, ReopenChildren& children, std::size_t index) {
  ReopenResult result;
  const auto& child = children.at(index);
  result.size = child.size;
  const std::string dir = child.data_dir;
  result.written = children.run(index);
  children.kill(index);
  result.opens.push_back(measure_open(options, dir, "kill", result.size, &result.shards));
  result.opens.push_back(measure_open(options, dir, "clean", result.size, &result.shards));
  std::error_code removed;
  std::filesystem::remove_all(dir, removed);
  return result;
}

// ---------------------------------------------------------------------------
// bounded

struct BoundedResult {
  std::uint32_t shards = 0;
  std::uint64_t steps = 0;
  std::uint32_t runs = 0;
  std::uint32_t steps_per_run = 0;
  std::uint32_t in_flight = 0;
  double seconds = 0;
  double steps_per_s = 0;
  std::uint32_t checkpoint_ms = 0;
  std::uint64_t segment_bytes = 0;
  std::uint64_t wal_peak_bytes = 0;       // stats().wal_bytes
  std::uint64_t wal_peak_segments = 0;
  std::uint64_t wal_peak_disk_bytes = 0;  // files under <dir>/wal
  std::uint64_t wal_peak_first_half_bytes = 0;   // stats, first half of the window
  std::uint64_t wal_peak_second_half_bytes = 0;  // stats, second half
  std::uint64_t wal_final_bytes = 0;
  std::uint64_t wal_final_segments = 0;
  std::uint64_t checkpoints = 0;
  std::uint64_t segments_retired = 0;
  std::uint64_t run_store_bytes = 0;
  std::uint64_t run_store_disk_bytes = 0;
  std::uint64_t records_written = 0;
  std::size_t samples = 0;
};

BoundedResult run_bounded(const Options& options, const std::string& scratch) {
  BoundedResult result;
  if (options.bounded_steps % options.bounded_steps_per_run != 0)
    throw std::runtime_error("--bounded-steps must be a multiple of --bounded-steps-per-run");
  const std::string dir = data_dir_for(scratch, "bounded");
  result.steps_per_run = options.bounded_steps_per_run;
  result.runs = static_cast<std::uint32_t>(options.bounded_steps / options.bounded_steps_per_run);
  result.steps = options.bounded_steps;
  result.in_flight = options.bounded_in_flight;
  result.checkpoint_ms = options.bounded_checkpoint_ms;
  result.segment_bytes = options.segment_bytes_in_use();

  auto engine =
      fusee::Engine::open(make_config(options, dir, std::chrono::milliseconds(options.bounded_checkpoint_ms)));
  result.shards = engine->shard_count();
  const auto names = make_step_names(result.steps_per_run);
  register_noop(*engine, &names);
  const auto ref = noop_ref();
  const auto ids = make_ids("bounded", result.runs);

  struct Sample {
    Clock::time_point at;
    std::uint64_t wal_bytes;
  };
  std::vector<Sample> samples;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::string sampler_error;
  const auto wal_dir = std::filesystem::path(dir) / "wal";
  std::thread sampler([&] {
    try {
      std::unique_lock lock(mu);
      while (!stop) {
        lock.unlock();
        const auto at = Clock::now();
        const auto stats = engine->stats();
        const auto disk = dir_bytes(wal_dir);
        lock.lock();
        samples.push_back({at, stats.wal_bytes});
        result.wal_peak_bytes = std::max(result.wal_peak_bytes, stats.wal_bytes);
        result.wal_peak_segments = std::max(result.wal_peak_segments, stats.wal_segments);
        if (disk) result.wal_peak_disk_bytes = std::max(result.wal_peak_disk_bytes, *disk);
        if (!stats.checkpoint_error.empty() && sampler_error.empty())
          sampler_error = fmt::format("checkpoints stopped: {}", stats.checkpoint_error);
        cv.wait_for(lock, std::chrono::milliseconds(options.sample_ms), [&] { return stop; });
      }
    } catch (const std::exception& failure) {
      std::lock_guard guard(mu);
      sampler_error = describe(failure);
    }
  });
  auto stop_sampler = [&] {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (sampler.joinable()) sampler.join();
  };

  DriveSpec spec;
  spec.ref = &ref;
  spec.ids = &ids;
  spec.input = [per_run = result.steps_per_run](std::uint32_t) { return per_run; };
  spec.expected_steps = result.steps_per_run;
  spec.starters = options.starters;
  spec.max_in_flight = options.bounded_in_flight;
  const auto started_at = Clock::now();
  try {
    result.seconds = drive(*engine, spec);
  } catch (...) {
    stop_sampler();
    throw;
  }
  stop_sampler();
  if (!sampler_error.empty()) throw std::runtime_error(fmt::format("sampling the engine: {}", sampler_error));
  result.samples = samples.size();
  const auto middle = started_at + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(result.seconds / 2));
  for (const auto& sample : samples) {
    auto& peak = sample.at < middle ? result.wal_peak_first_half_bytes : result.wal_peak_second_half_bytes;
    peak = std::max(peak, sample.wal_bytes);
  }
  result.steps_per_s = result.seconds > 0 ? double(result.steps) / result.seconds : 0;

  const auto stats = engine->stats();
  check_checkpoints(stats, "the bounded workload");
  result.wal_final_bytes = stats.wal_bytes;
  result.wal_final_segments = stats.wal_segments;
  result.checkpoints = stats.checkpoints;
  result.segments_retired = stats.segments_retired;
  result.run_store_bytes = stats.run_store_bytes;
  result.records_written = stats.records_written;
  result.run_store_disk_bytes = dir_bytes_or_zero(std::filesystem::path(dir) / "runs");
  engine->shutdown();
  engine.reset();
  std::error_code removed;
  std::filesystem::remove_all(dir, removed);
  return result;
}

// ---------------------------------------------------------------------------
// p99

// The raw figure compared with: direct_dsync (the write FlushMethod::direct
// asks for) or buffered_fdatasync where the filesystem refuses O_DIRECT (the
// log falls back the same way), or with --buffered.
struct RawFloor {
  bool measured = false;
  RawMethod method = RawMethod::direct_dsync;
  std::string note;  // why the floor is not direct_dsync, or why it is missing
  LatencySummary latency;
};

fusee::Result<RawFloor> measure_floor(const std::string& dir, std::size_t iterations, bool buffered) {
  fusee::io::PosixFileSystem fs;
  fusee::bench::RawFlushOptions options;
  options.iterations = iterations;
  RawFloor floor;
  std::vector<RawMethod> methods = {RawMethod::direct_dsync, RawMethod::buffered_fdatasync};
  if (buffered) methods = {RawMethod::buffered_fdatasync};
  for (RawMethod method : methods) {
    auto measured = FUSEE_TRY(fusee::bench::measure_raw_flush(fs, dir, method, options));
    if (!measured.supported) {
      floor.note = measured.unsupported_reason;
      continue;
    }
    floor.measured = true;
    floor.method = method;
    floor.latency = measured.latency;
    return floor;
  }
  return floor;
}

struct P99Row {
  std::string variant;  // "fanout" or "chain"
  std::uint32_t checkpoint_ms = 0;
  std::uint32_t shards = 0;
  std::uint32_t runs = 0;  // per round
  std::uint32_t steps_per_run = 0;
  std::uint32_t rounds = 0;
  double seconds = 0;
  double steps_per_s = 0;
  LatencySummary latency;
  std::uint64_t checkpoints = 0;        // during the window
  std::uint64_t checkpoints_total = 0;  // since the engine opened, at the end of the window
  RawFloor raw;

  std::uint64_t steps() const { return std::uint64_t(runs) * steps_per_run * rounds; }
};

// One engine with the given interval: the fan-out rounds, then the chain.
std::vector<P99Row> run_p99_engine(const Options& options, const std::string& scratch, std::uint32_t checkpoint_ms) {
  const std::string dir = data_dir_for(scratch, fmt::format("p99-{}ms", checkpoint_ms));
  std::filesystem::create_directory(dir);
  auto floor = measure_floor(dir, options.raw_iterations, options.buffered);
  if (!floor) throw std::system_error(floor.error(), "raw flush");

  const std::uint32_t fanout_rounds_max = options.p99_rounds * Options::kP99RoundsGrowthMax;
  const std::uint32_t chain_rounds_max = options.chain_rounds * Options::kP99RoundsGrowthMax;
  StepTimes fanout_times(options.p99_runs * fanout_rounds_max, options.p99_steps);
  StepTimes chain_times(chain_rounds_max, options.chain_steps);
  auto more = [&](std::uint32_t round, std::uint32_t asked, std::uint32_t most, double seconds) {
    return round < asked || (round < most && seconds < options.p99_min_seconds);
  };
  const NoopRef fanout_ref{"bench.timed_fanout"};
  const NoopRef chain_ref{"bench.timed_chain"};

  auto engine = fusee::Engine::open(make_config(options, dir, std::chrono::milliseconds(checkpoint_ms)));
  register_timed(*engine, fanout_ref, &fanout_times);
  register_timed(*engine, chain_ref, &chain_times);

  // Untimed: the first appends pay for the log's first segment and for
  // waking every thread.
  if (engine->execute(fanout_ref, std::string("p99-warmup"), fanout_times.warmup_index()) != kWarmupSteps)
    throw std::runtime_error("the warm-up run did not take its steps");

  P99Row fanout;
  fanout.variant = "fanout";
  fanout.checkpoint_ms = checkpoint_ms;
  fanout.shards = engine->shard_count();
  fanout.runs = options.p99_runs;
  fanout.steps_per_run = options.p99_steps;
  fanout.raw = *floor;
  const auto before_fanout = engine->stats();
  for (std::uint32_t round = 0; more(round, options.p99_rounds, fanout_rounds_max, fanout.seconds); ++round) {
    fanout.rounds = round + 1;
    const auto ids = make_ids(fmt::format("fanout-r{}", round), options.p99_runs);
    const std::uint32_t offset = round * options.p99_runs;
    DriveSpec spec;
    spec.ref = &fanout_ref;
    spec.ids = &ids;
    spec.input = [offset](std::uint32_t run) { return offset + run; };
    spec.expected_steps = options.p99_steps;
    spec.starters = options.starters;
    spec.max_in_flight = options.p99_runs;  // the whole round at once
    fanout.seconds += drive(*engine, spec);
  }
  const auto after_fanout = engine->stats();
  check_checkpoints(after_fanout, "the p99 fan-out");
  fanout.checkpoints = after_fanout.checkpoints - before_fanout.checkpoints;
  fanout.checkpoints_total = after_fanout.checkpoints;
  fanout.steps_per_s = fanout.seconds > 0 ? double(fanout.steps()) / fanout.seconds : 0;
  // Only the slots of the rounds that ran.
  fanout_times.step_us.resize(std::size_t(fanout.rounds) * options.p99_runs * options.p99_steps);
  fanout.latency = fusee::bench::summarize_latencies(std::move(fanout_times.step_us));

  P99Row chain;
  chain.variant = "chain";
  chain.checkpoint_ms = checkpoint_ms;
  chain.shards = fanout.shards;
  chain.runs = 1;
  chain.steps_per_run = options.chain_steps;
  chain.raw = *floor;
  for (std::uint32_t round = 0; more(round, options.chain_rounds, chain_rounds_max, chain.seconds); ++round) {
    chain.rounds = round + 1;
    const auto chain_started = Clock::now();
    if (engine->execute(chain_ref, fmt::format("chain-{}", round), round) != options.chain_steps)
      throw std::runtime_error("a chain run did not take its steps");
    chain.seconds += seconds_of(Clock::now() - chain_started);
  }
  const auto after_chain = engine->stats();
  check_checkpoints(after_chain, "the p99 chain");
  chain.checkpoints = after_chain.checkpoints - after_fanout.checkpoints;
  chain.checkpoints_total = after_chain.checkpoints;
  chain.steps_per_s = chain.seconds > 0 ? double(chain.steps()) / chain.seconds : 0;
  chain_times.step_us.resize(std::size_t(chain.rounds) * options.chain_steps);
  chain.latency = fusee::bench::summarize_latencies(std::move(chain_times.step_us));

  engine->shutdown();
  engine.reset();
  std::error_code removed;
  std::filesystem::remove_all(dir, removed);
  return {fanout, chain};
}

// ---------------------------------------------------------------------------
// Output.

void print_reopen_header(const Options& options) {
  fmt::print("\nreopen: history written by a child with {} in flight, checkpoint interval {} ms; then "
             "SIGKILL (kill) or a clean shutdown (clean) and a timed Engine::open\n",
             options.reopen_in_flight == 0 ? std::string("every run")
                                           : fmt::format("at most {} runs", options.reopen_in_flight),
             options.reopen_checkpoint_ms);
  fmt::print("(ckpts: checkpoints the writer had finished when killed; read: rchar, device: read_bytes of "
             "/proc/self/io over Engine::open; wal: stats().wal_bytes/wal_segments after open; runs: files under "
             "runs/, rdb est: stats().run_store_bytes; shut ms: the clean shutdown after that open)\n");
  fmt::print("{:>9} {:>6} {:>8} {:>9} {:>7} {:>5} {:>9} {:>9} {:>10} {:>8} {:>5} {:>8} {:>8} {:>8}\n", "steps",
             "runs", "write s", "steps/s", "ckpts", "open", "open ms", "read MiB", "device MiB", "wal MiB", "segs",
             "runs MiB", "rdb est", "shut ms");
}

void print_reopen_rows(const ReopenResult& result) {
  for (const auto& open : result.opens) {
    fmt::print("{:>9} {:>6} {:>8.2f} {:>9.0f} {:>7} {:>5} {:>9.1f} {:>9.2f} {:>10.2f} {:>8.2f} {:>5} {:>8.2f} "
               "{:>8.2f} {:>8.1f}\n",
               result.size.steps, result.size.runs, result.written.write_seconds,
               ratio(double(result.size.steps), result.written.write_seconds), result.written.checkpoints,
               open.kind, open.open_ms, mib(open.bytes_read), mib(open.device_bytes_read), mib(open.wal_bytes),
               open.wal_segments, mib(open.run_store_disk_bytes), mib(open.run_store_bytes), open.shutdown_ms);
  }
}

void print_bounded_table(const BoundedResult& result, std::uint32_t sample_ms) {
  fmt::print("\nbounded: {} steps as {} runs of {}, at most {} in flight; checkpoint interval {} ms, segments of "
             "{}; wal sampled every ~{} ms ({} samples)\n",
             result.steps, result.runs, result.steps_per_run, result.in_flight, result.checkpoint_ms,
             size_text(result.segment_bytes), sample_ms, result.samples);
  fmt::print("(peak: stats().wal_bytes, disk: files under wal/, 1st/2nd half: peak stats().wal_bytes in each half "
             "of the run, final: at the end; runs: files under runs/, rdb est: stats().run_store_bytes)\n");
  fmt::print("{:>9} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6} {:>7} {:>8} {:>9}\n", "steps",
             "seconds", "steps/s", "peak MiB", "disk MiB", "peak segs", "1st half", "2nd half", "final MiB", "ckpts",
             "retired", "runs MiB", "rdb est");
  fmt::print("{:>9} {:>8.1f} {:>8.0f} {:>10.2f} {:>10.2f} {:>10} {:>10.2f} {:>10.2f} {:>10.2f} {:>6} {:>7} {:>8.2f} "
             "{:>9.2f}\n",
             result.steps, result.seconds, result.steps_per_s, mib(result.wal_peak_bytes),
             mib(result.wal_peak_disk_bytes), result.wal_peak_segments, mib(result.wal_peak_first_half_bytes),
             mib(result.wal_peak_second_half_bytes), mib(result.wal_final_bytes), result.checkpoints,
             result.segments_retired, mib(result.run_store_disk_bytes), mib(result.run_store_bytes));
}

void print_p99_header() {
  fmt::print("\np99: no-op step latency (us) with checkpoints off (interval 0) and on; raw = durable {} B write "
             "in the case's directory just before it\n",
             fusee::bench::kRawFlushBlockBytes);
  fmt::print("{:<7} {:>8} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9}\n", "case", "ckpt ms",
             "rounds", "steps", "seconds", "steps/s", "p50", "p99", "p99.9", "max", "ckpts", "raw p50", "raw p99");
}

void print_p99_row(const P99Row& row) {
  auto us = [](double value) { return std::isfinite(value) ? fmt::format("{:.1f}", value) : std::string("-"); };
  std::string note;
  if (!row.raw.measured) note = fmt::format("  (raw unmeasured: {})", row.raw.note);
  if (row.raw.measured && !row.raw.note.empty())
    note = fmt::format("  (raw is {}: {})", fusee::bench::flush_method_name(row.raw.method), row.raw.note);
  fmt::print("{:<7} {:>8} {:>7} {:>8} {:>8.3f} {:>9.0f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>6} {:>9} {:>9}{}\n",
             row.variant, row.checkpoint_ms, row.rounds, row.steps(), row.seconds, row.steps_per_s,
             row.latency.p50_us, row.latency.p99_us, row.latency.p999_us, row.latency.max_us, row.checkpoints,
             us(row.raw.measured ? row.raw.latency.p50_us : std::nan("")),
             us(row.raw.measured ? row.raw.latency.p99_us : std::nan("")), note);
}

JsonLine checkpoint_line(std::string_view name, const Options& options, std::uint32_t shards) {
  JsonLine line("checkpoint");
  line.field("case", name).field("shards", shards).field("flush", options.flush_name());
  return line;
}

void print_reopen_json(const ReopenResult& result, const Options& options) {
  for (const auto& open : result.opens) {
    auto line = checkpoint_line(kCaseReopen, options, result.shards);
    line.field("reopen", open.kind)
        .field("history_steps", result.size.steps)
        .field("runs", result.size.runs)
        .field("steps_per_run", result.size.steps_per_run())
        .field("checkpoint_interval_ms", options.reopen_checkpoint_ms)
        .field("in_flight_max", options.reopen_in_flight != 0 ? options.reopen_in_flight : result.size.runs)
        .field("segment_bytes", options.segment_bytes_in_use())
        .field("write_seconds", round_to_digits(result.written.write_seconds, 6))
        .field("write_steps_per_s", round_to_digits(ratio(double(result.size.steps), result.written.write_seconds), 1))
        .field("write_checkpoints", result.written.checkpoints)
        .field("write_segments_retired", result.written.segments_retired)
        .field("write_wal_bytes", result.written.wal_bytes)
        .field("write_records", result.written.records_written)
        .field("open_ms", round_to_digits(open.open_ms, 3))
        .field("bytes_read", open.bytes_read)
        .field("device_bytes_read", open.device_bytes_read)
        .field("read_calls", open.read_calls)
        .field("wal_bytes", open.wal_bytes)
        .field("wal_segments", open.wal_segments)
        .field("wal_disk_bytes", open.wal_disk_bytes)
        .field("run_store_bytes", open.run_store_bytes)
        .field("run_store_disk_bytes", open.run_store_disk_bytes)
        .field("shutdown_ms", round_to_digits(open.shutdown_ms, 3));
    line.print();
  }
}

void print_bounded_json(const BoundedResult& result, const Options& options) {
  auto line = checkpoint_line(kCaseBounded, options, result.shards);
  line.field("steps", result.steps)
      .field("runs", result.runs)
      .field("steps_per_run", result.steps_per_run)
      .field("in_flight_max", result.in_flight)
      .field("checkpoint_interval_ms", result.checkpoint_ms)
      .field("segment_bytes", result.segment_bytes)
      .field("seconds", round_to_digits(result.seconds, 6))
      .field("steps_per_s", round_to_digits(result.steps_per_s, 1))
      .field("wal_peak_bytes", result.wal_peak_bytes)
      .field("wal_peak_disk_bytes", result.wal_peak_disk_bytes)
      .field("wal_peak_segments", result.wal_peak_segments)
      .field("wal_peak_first_half_bytes", result.wal_peak_first_half_bytes)
      .field("wal_peak_second_half_bytes", result.wal_peak_second_half_bytes)
      .field("wal_final_bytes", result.wal_final_bytes)
      .field("wal_final_segments", result.wal_final_segments)
      .field("checkpoints", result.checkpoints)
      .field("segments_retired", result.segments_retired)
      .field("run_store_bytes", result.run_store_bytes)
      .field("run_store_disk_bytes", result.run_store_disk_bytes)
      .field("records_written", result.records_written)
      .field("samples", result.samples);
  line.print();
}

void print_p99_json(const P99Row& row, const Options& options) {
  auto line = checkpoint_line(kCaseP99, options, row.shards);
  line.field("variant", row.variant)
      .field("checkpoint_interval_ms", row.checkpoint_ms)
      .field("runs", row.runs)
      .field("steps_per_run", row.steps_per_run)
      .field("rounds", row.rounds)
      .field("steps", row.steps())
      .field("seconds", round_to_digits(row.seconds, 6))
      .field("steps_per_s", round_to_digits(row.steps_per_s, 1))
      .field("p50_us", round_to_ns(row.latency.p50_us))
      .field("p99_us", round_to_ns(row.latency.p99_us))
      .field("p999_us", round_to_ns(row.latency.p999_us))
      .field("mean_us", round_to_ns(row.latency.mean_us))
      .field("max_us", round_to_ns(row.latency.max_us))
      .field("checkpoints", row.checkpoints)
      .field("checkpoints_since_open", row.checkpoints_total)
      .field("raw_method", fusee::bench::flush_method_name(row.raw.method))
      .field("raw_p50_us", round_to_ns(row.raw.measured ? row.raw.latency.p50_us : std::nan("")))
      .field("raw_p99_us", round_to_ns(row.raw.measured ? row.raw.latency.p99_us : std::nan("")));
  if (!row.raw.note.empty()) line.field("raw_note", row.raw.note);
  line.print();
}

struct AimFigure {
  std::string name;  // e.g. "reopen/kill_open_growth"
  double value = 0;
  double bound = 0;  // at most
  std::string note;
};

std::vector<AimFigure> compute_aims(const std::vector<ReopenResult>& reopens, const std::optional<BoundedResult>& bounded,
                                    const std::vector<P99Row>& p99) {
  std::vector<AimFigure> aims;
  if (reopens.size() >= 2) {
    const auto& small = reopens.front();
    const auto& large = reopens.back();
    for (std::size_t kind = 0; kind < small.opens.size() && kind < large.opens.size(); ++kind) {
      aims.push_back({fmt::format("reopen/{}_open_growth", small.opens[kind].kind),
                      ratio(large.opens[kind].open_ms, small.opens[kind].open_ms), kReopenOpenGrowthAimMax,
                      fmt::format("open ms at {} steps / at {} (history x{:.1f})", large.size.steps, small.size.steps,
                                  ratio(double(large.size.steps), double(small.size.steps)))});
    }
  }
  if (bounded) {
    aims.push_back({"bounded/wal_peak_segments",
                    ratio(double(bounded->wal_peak_bytes), double(bounded->segment_bytes)),
                    kBoundedPeakSegmentsAimMax, "peak wal bytes / segment bytes"});
    aims.push_back({"bounded/wal_second_over_first_half",
                    ratio(double(bounded->wal_peak_second_half_bytes), double(bounded->wal_peak_first_half_bytes)),
                    kBoundedHalvesAimMax, "peak wal bytes, second half of the run / first half"});
  }
  for (const auto& with : p99) {
    if (with.checkpoint_ms == 0) continue;
    for (const auto& without : p99) {
      if (without.checkpoint_ms != 0 || without.variant != with.variant) continue;
      aims.push_back({fmt::format("p99/{}_p99_with_over_without", with.variant),
                      ratio(with.latency.p99_us, without.latency.p99_us), kP99WithOverWithoutAimMax,
                      fmt::format("p99 with {} ms checkpoints / without", with.checkpoint_ms)});
    }
  }
  return aims;
}

std::string_view aim_verdict(const AimFigure& aim) {
  if (!std::isfinite(aim.value)) return "n/a";
  return aim.value <= aim.bound ? "met" : "missed";
}

void print_aims(const std::vector<AimFigure>& aims) {
  if (aims.empty()) return;
  fmt::print("\naims (figures, not gates)\n");
  for (const auto& aim : aims) {
    fmt::print("{:<34} {:>8}  (aim <= {:.2f})  {:<6}  {}\n", aim.name, format_ratio(aim.value), aim.bound,
               aim_verdict(aim), aim.note);
  }
}

void print_aim_json(const AimFigure& aim) {
  fusee::bench::print_aim_line("checkpoint_aims", aim.name, aim.value, /*at_most=*/true, aim.bound);
}

int run(const Options& options) {
  std::error_code error;
  if (!std::filesystem::is_directory(options.dir, error)) {
    fmt::print(stderr, "checkpoint_bench: --dir {} is not a directory\n", options.dir);
    return 1;
  }
  std::vector<ReopenSize> sizes;
  if (options.wants(kCaseReopen)) {
    if (options.reopen_steps.size() != options.reopen_runs.size()) {
      fmt::print(stderr, "checkpoint_bench: --reopen-steps has {} sizes but --reopen-runs {}: give one run count "
                         "per history size\n",
                 options.reopen_steps.size(), options.reopen_runs.size());
      return 1;
    }
    for (std::size_t i = 0; i < options.reopen_steps.size(); ++i) {
      ReopenSize size{options.reopen_steps[i], options.reopen_runs[i]};
      if (size.runs == 0 || size.steps % size.runs != 0 || size.steps / size.runs > UINT32_MAX) {
        fmt::print(stderr, "checkpoint_bench: {} reopen steps do not divide into {} runs\n", size.steps, size.runs);
        return 1;
      }
      sizes.push_back(size);
    }
  }
  // The pid keeps concurrent runs apart; a directory of that name can only be
  // left by a dead run with the same pid, so it is cleared, not reused.
  std::string scratch_path =
      (std::filesystem::path(options.dir) / fmt::format(".fusee-checkpoint-bench-{}", ::getpid())).string();
  std::filesystem::remove_all(scratch_path, error);
  if (!std::filesystem::create_directory(scratch_path, error) || error) {
    fmt::print(stderr, "checkpoint_bench: cannot create {}: {}\n", scratch_path, error.message());
    return 1;
  }
  fusee::bench::ScratchDir scratch(scratch_path, "checkpoint_bench");

  // A child that died must not take the parent with it when started.
  ::signal(SIGPIPE, SIG_IGN);
  // Before anything else in this process: the writing children.
  ReopenChildren children;
  try {
    children.fork_all(options, scratch.path(), sizes);
  } catch (const std::exception& failure) {
    fmt::print(stderr, "checkpoint_bench: reopen: {}\n", describe(failure));
    return 1;
  }

  fmt::print("checkpoint_bench in {}: cases {}, {} shards, {} writes, segments of {}, {} starting threads\n",
             options.dir, fmt::join(options.cases, ","), options.shards, options.flush_name(),
             size_text(options.segment_bytes_in_use()), options.starters);
  std::fflush(stdout);

  std::vector<ReopenResult> reopens;
  std::optional<BoundedResult> bounded;
  std::vector<P99Row> p99;
  auto fail = [](std::string_view name, const std::exception& failure) {
    std::fflush(stdout);
    fmt::print(stderr, "checkpoint_bench: {}: {}\n", name, describe(failure));
    return 1;
  };

  if (options.wants(kCaseReopen)) {
    print_reopen_header(options);
    std::fflush(stdout);
    for (std::size_t index = 0; index < sizes.size(); ++index) {
      try {
        reopens.push_back(run_reopen(options, children, index));
      } catch (const std::exception& failure) {
        return fail(kCaseReopen, failure);
      }
      print_reopen_rows(reopens.back());
      std::fflush(stdout);
    }
  }
  if (options.wants(kCaseBounded)) {
    try {
      bounded = run_bounded(options, scratch.path());
    } catch (const std::exception& failure) {
      return fail(kCaseBounded, failure);
    }
    print_bounded_table(*bounded, options.sample_ms);
    std::fflush(stdout);
  }
  if (options.wants(kCaseP99)) {
    print_p99_header();
    std::fflush(stdout);
    for (std::uint32_t checkpoint_ms : {0u, options.p99_checkpoint_ms}) {
      try {
        for (auto& row : run_p99_engine(options, scratch.path(), checkpoint_ms)) {
          print_p99_row(row);
          p99.push_back(std::move(row));
        }
      } catch (const std::exception& failure) {
        return fail(kCaseP99, failure);
      }
      std::fflush(stdout);
    }
  }

  auto aims = compute_aims(reopens, bounded, p99);
  print_aims(aims);
  fmt::print("\n");
  std::fflush(stdout);

  for (const auto& result : reopens) print_reopen_json(result, options);
  if (bounded) print_bounded_json(*bounded, options);
  for (const auto& row : p99) print_p99_json(row, options);
  for (const auto& aim : aims) print_aim_json(aim);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Checkpoints: reopen time after a kill and a clean shutdown, a bounded log under a long workload, "
               "and step latency with checkpoints running and without."};
  app.add_option("--dir", options.dir, "directory on the disk to measure (a scratch directory is made inside)")
      ->capture_default_str();
  app.add_option("--cases", options.cases, "cases to run, comma-separated: reopen, bounded, p99")
      ->delimiter(',')
      ->check(CLI::IsMember({std::string(kCaseReopen), std::string(kCaseBounded), std::string(kCaseP99)}))
      ->capture_default_str();
  app.add_option("--shards", options.shards, "engine shards")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--buffered", options.buffered, "buffered writes + fdatasync instead of O_DIRECT + RWF_DSYNC");
  app.add_option("--starters", options.starters, "threads starting and awaiting runs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--segment-bytes", options.segment_bytes, "log segment size (0: the engine's default, 64 MiB)")
      ->capture_default_str();
  app.add_option("--reopen-steps", options.reopen_steps, "reopen: history sizes in steps, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--reopen-runs", options.reopen_runs,
                 "reopen: runs of each history size, comma-separated, one per --reopen-steps")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--reopen-checkpoint-ms", options.reopen_checkpoint_ms, "reopen: checkpoint interval (0: rolls only)")
      ->capture_default_str();
  app.add_option("--reopen-in-flight", options.reopen_in_flight,
                 "reopen: runs in flight at most while writing (0: every run at once, like engine_bench's fan-out)")
      ->capture_default_str();
  app.add_option("--bounded-steps", options.bounded_steps, "bounded: steps in all")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--bounded-steps-per-run", options.bounded_steps_per_run, "bounded: steps per run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--bounded-in-flight", options.bounded_in_flight, "bounded: runs in flight at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--bounded-checkpoint-ms", options.bounded_checkpoint_ms,
                 "bounded: checkpoint interval (0: rolls only)")
      ->capture_default_str();
  app.add_option("--sample-ms", options.sample_ms, "bounded: how often the log's size is sampled")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--p99-runs", options.p99_runs, "p99: concurrent runs per fan-out round")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--p99-steps", options.p99_steps, "p99: steps per fan-out run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--p99-rounds", options.p99_rounds, "p99: fan-out rounds of fresh runs on one engine")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--p99-checkpoint-ms", options.p99_checkpoint_ms, "p99: checkpoint interval of the 'with' engine")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--chain-steps", options.chain_steps, "p99: sequential steps of the chain run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--chain-rounds", options.chain_rounds, "p99: chain runs, one after another, on one engine")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--p99-min-seconds", options.p99_min_seconds,
                 "p99: each case repeats its rounds until it has timed this long (at most 8x the rounds)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--raw-iterations", options.raw_iterations, "p99: timed raw flush writes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return run(options);
}
