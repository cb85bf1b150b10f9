// engine_bench: what a durable workflow step costs through the whole engine
// (SDK, shards, journal, shared log), set beside the disk's raw durable 4 KiB
// write latency (bench/raw_flush.hpp), measured in each local case's own data
// directory right before the case, so a disk whose speed drifts (a shared or
// virtual one) is compared with itself. That raw figure is the floor: a
// sequential step waits for its predecessor's record to be durable before its
// function runs (DESIGN.md §4, "code runs ahead of the disk"), so one chain of
// steps can at best go one step per flush; many runs go faster only through
// group commit.
//
// The cases, chosen with --cases:
//  - chain: one run of --chain-steps sequential no-op steps, local mode,
//    direct writes. Per-step latency beside the raw flush; aim p50/raw <= 1.2.
//  - fanout: --runs concurrent runs of --steps no-op steps each, local mode,
//    direct writes. Durable steps/s (all steps / wall time from the first
//    start to the last result) and step latency across every step of every
//    run; aims >= 50,000 steps/s on two cores and p99 <= 3 x p50.
//  - memory: the same fanout on Config::memory(); aim >= 500,000 steps/s.
//  - fanout_long, memory_long: the fanout and memory cases with
//    --long-steps steps a run (400), so that a round, all its runs started
//    together, is a window of about a second or more: the steady state, where
//    fanout's 10-step rounds of 40-60 ms are mostly the burst of 1,000
//    starts. Aim (issue 40): fanout_long >= 1,000,000 durable steps/s over
//    such windows.
//  - chain_unix, chain_tcp, fanout_unix (server_step_cost): the chain and the
//    fan-out in remote mode, against a `fusee server` log service run in this
//    process on a Unix socket or loopback TCP, writing directly into the
//    case's directory. What the server costs a sequential step is its p50
//    beside the local chain's in the same run; aim: Unix socket p50 within
//    local + 40 us.
//  - chain_replicated, fanout_replicated (replicated_step_cost): the chain
//    and the fan-out on the primary of three replicas in this process
//    (Config::replicated, an etcd of the benchmark's own:
//    bench/bench_cluster.hpp), each batch durable once a quorum holds it,
//    beside the local cases of the same run; aims (issue 42): p50 within
//    1.5x local's, steps/s at least 0.7x local's. The three share this
//    machine's cores and disk.
//  - failover_replicated: three replicas as processes (this program, run
//    again) and an etcd, the primary SIGKILLed --failover-kills times with
//    runs parked on a wait: from the SIGKILL to the first completed step on
//    the new primary, and to every parked run resumed and finished
//    (bench/failover_case.hpp); p50 and max over the kills, beside the
//    etcd lease, which bounds how soon another replica may lead.
//  - start: --start-runs sequential Engine::execute() calls of a one-step
//    workflow, local mode, direct writes, each call timed: starting a run and
//    getting its result, with no HTTP client in front. It needs two durable
//    writes (run_started, then the step and the run's end); aim p50 <= 2.5 x
//    the raw flush's p50. "steps" in its table row are calls.
//  - parallel_steps: one run of 100 coroutine steps, each waiting 10 ms on a
//    helper thread (a stand-in for an outside call), started together
//    (Future, Ctx::all), beside the same run with the steps one after
//    another, rounds alternating; aim: together <= 2 waits + 4 raw flushes.
//  - parallel_children: 100 parents each starting 10 children of 10 no-op
//    steps together, beside the same parents awaiting their children one by
//    one.
//  - queue: --runs one-step runs enqueued (Engine::enqueue_json_async, all
//    in flight) into a durable queue with concurrency 100, local mode,
//    direct writes: runs/s from the first enqueue to the last result, each
//    run's latency from its enqueue to its result as a waiting thread sees
//    it. "steps" in its row are runs.
//  - limit: --limit-runs runs of --steps steps each, every step under a step
//    limit of --limit-rate permits/s (Engine::limit), local mode, direct
//    writes: the achieved steps/s beside the limit; aim within 5 % of it.
//  - fanout_backup: the fan-out with a continuous backup to a directory
//    beside the case's (Config::backup_target, an upload every 100 ms): steps/s
//    beside fanout's in the same run; aim at most 10 % slower.
//  - limit_split_unix: the same with two workers splitting the shards of a
//    log service in this process (Unix socket): the server grants the
//    permits to both (docs/server-protocol.md, "Step limits"), so the two
//    together achieve the limit, not twice it; aim within 5 % of it.
//  - fanout_split_unix: the fan-out with two workers on the Unix socket, each
//    holding half the shards (Config::server_shards_max); every run is
//    started and awaited through the first, so half the starts and results
//    go through the server to the other worker (docs/server-protocol.md,
//    "Workers that split the shards"). Steps/s beside fanout_unix's.
//
// A step's latency is the time between its completion and the previous one's
// (the first step's: since the workflow body began), read by the workflow
// code with std::chrono::steady_clock. The clock is the benchmark's, not the
// engine's: the engine reads time only through its injected Clock, and the
// timing never enters the journal.
//
// Every case repeats its timed round (the runs above, started together;
// start's calls, one after another) until it has timed --min-seconds (1 s)
// and at least --min-rounds (3) rounds, and prints the spread of steps/s and
// p50 over the rounds beside the totals: a window of a few milliseconds
// measures the scheduler, not the engine.
//
// Each case opens a fresh engine and first executes one untimed warm-up run.
// Runs are started by --starters threads, each putting its share in flight
// with engine.start_async(), waiting for those starts (each is acknowledged
// once its record is durable), then for the results with
// engine.result_async(), as a client with many runs would. A blocking start()
// per run would pace the fan-out at one start per flush and thread wake-up.
//
// Records per flush: journal records made durable per log batch in the
// timed window, from Engine::stats() (local cases) or the log service's
// stats (remote cases).
//
// Output: tables for people, then one JSON line per measurement (grep '^{').
// Everything is written under a fresh directory in --dir, removed at the end.
#include <fmt/format.h>
#include <future>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <latch>
#include <map>
#include <mutex>
#include <condition_variable>
#include <coroutine>
#include <memory>
#include <stdexcept>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "bench/bench_cluster.hpp"
#include "bench/failover_case.hpp"
#include "bench/bench_json.hpp"
#include "bench/figures.hpp"
#include "bench/raw_flush.hpp"
#include "bench/scratch_dir.hpp"
#include "bench/timed_steps.hpp"
#include "fusee/fusee.hpp"
#include "server/log_service.hpp"
#include "wal/io/posix_file_system.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using fusee::bench::JsonLine;
using fusee::bench::LatencySummary;
using RawMethod = fusee::bench::FlushMethod;

constexpr std::string_view kCaseChain = "chain";
constexpr std::string_view kCaseFanout = "fanout";
constexpr std::string_view kCaseFanoutBackup = "fanout_backup";
// fanout_backup's upload interval (Config::backup_upload_interval).
constexpr std::int64_t kBackupUploadIntervalMs = 100;
constexpr std::string_view kCaseMemory = "memory";
constexpr std::string_view kCaseFanoutLong = "fanout_long";
constexpr std::string_view kCaseMemoryLong = "memory_long";
constexpr std::string_view kCaseChainUnix = "chain_unix";
constexpr std::string_view kCaseChainTcp = "chain_tcp";
constexpr std::string_view kCaseFanoutUnix = "fanout_unix";
constexpr std::string_view kCaseFanoutSplitUnix = "fanout_split_unix";
constexpr std::string_view kCaseChainReplicated = "chain_replicated";
constexpr std::string_view kCaseFanoutReplicated = "fanout_replicated";
constexpr std::string_view kCaseFailoverReplicated = "failover_replicated";
// Replicated beside local, same run (issue 42): a sequential step's p50
// within 1.5x local's, the fan-out's steps/s at least 0.7x local's.
constexpr double kReplicatedChainP50OverLocalAimMax = 1.5;
constexpr double kReplicatedFanoutOverLocalAimMin = 0.7;
constexpr std::string_view kCaseStart = "start";
// query, signal and update: sequential calls against one run that waits,
// beside each other (a query answers from memory; a signal waits for its
// durable record; an update for its accepted record and the code's answer,
// journaled in the same flush or the next).
constexpr std::string_view kCaseQuery = "query";
constexpr std::string_view kCaseSignal = "signal";
constexpr std::string_view kCaseUpdate = "update";
constexpr std::string_view kCaseParallelSteps = "parallel_steps";
constexpr std::string_view kCaseParallelChildren = "parallel_children";
constexpr std::string_view kCaseQueue = "queue";
constexpr std::string_view kCaseLimit = "limit";
constexpr std::string_view kCaseLimitSplitUnix = "limit_split_unix";
constexpr std::uint32_t kQueueConcurrency = 100;
constexpr double kLimitAchievedAimTolerance = 0.05;  // achieved within 5 % of the limit
// parallel_steps: 100 coroutine steps of one run, each waiting 10 ms.
constexpr std::uint32_t kParallelSteps = 100;
constexpr std::chrono::milliseconds kParallelStepWait{10};
// parallel_children: 100 parents, each with 10 children of 10 no-op steps.
constexpr std::uint32_t kParallelParents = 100;
constexpr std::uint32_t kParallelChildrenPerParent = 10;
constexpr std::uint32_t kParallelChildSteps = 10;
// start: one execute() of a one-step workflow; its step runs ahead of the
// start's flush, and the start, the step and the end go to the log as one
// atomic group: one flush (docs/durability.md, "Running ahead").
constexpr double kStartP50OverRawAimMax = 2.5;
// server_step_cost: a sequential step over the Unix socket within this much
// of the local chain's p50.
constexpr double kServerStepExtraAimMaxUs = 40.0;

// The aims the engine is built for (the engine issue). Reported as figures,
// not checked.
constexpr double kChainP50OverRawAimMax = 1.2;
constexpr double kFanoutStepsPerSecondAimMin = 1'000'000;  // issue 40 (was 50,000)
// Every case's tail (issue 40): p99 within 3x its p50.
constexpr double kP99OverP50AimMax = 3.0;
// A sequential 1-step execute costs one durable write of the log (issue 40).
constexpr double kStartDurableWritesPerCallAimMax = 1.0;
// fanout_backup: a continuous backup costs at most 10 % of the fan-out's steps/s (issue 24).
constexpr double kFanoutBackupOverFanoutAimMin = 0.9;
constexpr double kMemoryStepsPerSecondAimMin = 500'000;

// Every case repeats its timed round until it has timed min_seconds and at
// least min_rounds rounds: a window of a few milliseconds measures the
// scheduler, and the spread over rounds says how steady a figure is.
struct RoundRule {
  double min_seconds = 1.0;
  std::uint32_t min_rounds = 3;
  // Whether a case that has timed `rounds` rounds, `seconds` in all, goes on.
  bool more(std::uint32_t rounds, double seconds) const { return rounds < min_rounds || seconds < min_seconds; }
};

struct Options {
  std::string dir = ".";
  std::vector<std::string> cases = {std::string(kCaseChain),     std::string(kCaseFanout),
                                    std::string(kCaseFanoutBackup),
                                    std::string(kCaseMemory),    std::string(kCaseFanoutLong),
                                    std::string(kCaseMemoryLong), std::string(kCaseChainUnix),
                                    std::string(kCaseChainTcp),  std::string(kCaseFanoutUnix),
                                    std::string(kCaseFanoutSplitUnix), std::string(kCaseChainReplicated),
                                    std::string(kCaseFanoutReplicated), std::string(kCaseFailoverReplicated),
                                    std::string(kCaseStart),
                                    std::string(kCaseQuery),          std::string(kCaseSignal),
                                    std::string(kCaseUpdate),
                                    std::string(kCaseParallelSteps), std::string(kCaseParallelChildren),
                                    std::string(kCaseQueue),         std::string(kCaseLimit),
                                    std::string(kCaseLimitSplitUnix)};
  std::string backup_dir;           // fanout_backup: the target's parent ("": beside the case's data)
  std::uint32_t limit_runs = 100;   // limit: concurrent runs asking for permits
  double limit_rate = 1000;         // limit: permits per second
  std::uint32_t chain_steps = 1000;
  std::uint32_t start_runs = 200;  // start: sequential execute() calls per round
  std::uint32_t runs = 1000;
  std::uint32_t steps = 10;
  std::uint32_t long_steps = 400;  // fanout_long, memory_long
  std::uint32_t shards = 0;  // 0: the engine's default (the number of CPUs)
  std::uint32_t starters = 2;
  std::uint32_t failover_kills = 20;  // failover_replicated
  std::string self;                   // this program, run again as failover_replicated's replicas
  std::size_t raw_iterations = fusee::bench::RawFlushOptions{}.iterations;
  RoundRule rounds;

  bool wants(std::string_view name) const { return std::find(cases.begin(), cases.end(), name) != cases.end(); }
};

using fusee::bench::format_ratio;
using fusee::bench::ratio;
using fusee::bench::round_to_digits;
using fusee::bench::round_to_ns;


// ---------------------------------------------------------------------------
// The workflow: n no-op steps, each completion timed.

using fusee::bench::kWarmupSteps;
using fusee::bench::StepTimes;

// In: the run's index into StepTimes. Out: the steps it took.
fusee::bench::TimedStepsRef noop_steps_ref() { return {"bench.noop_steps"}; }

// start: one no-op step, its input back.
const fusee::WorkflowRef<std::uint32_t, std::uint32_t>& one_step_ref() {
  static const fusee::WorkflowRef<std::uint32_t, std::uint32_t> ref{"bench.one_step"};
  return ref;
}

// ---------------------------------------------------------------------------
// Raw flush: the floor.

// The raw figure a local case is compared with: direct_dsync, the write the
// engine's FlushMethod::direct asks for, or buffered_fdatasync where the
// filesystem refuses O_DIRECT (the log falls back the same way).
struct RawFloor {
  bool measured = false;
  RawMethod method = RawMethod::direct_dsync;
  std::string note;  // why the floor is not direct_dsync, or why it is missing
  LatencySummary latency;
};

fusee::Result<RawFloor> measure_floor(const std::string& dir, std::size_t iterations) {
  fusee::io::PosixFileSystem fs;
  fusee::bench::RawFlushOptions options;
  options.iterations = iterations;
  RawFloor floor;
  for (RawMethod method : {RawMethod::direct_dsync, RawMethod::buffered_fdatasync}) {
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

// A local case's fresh directory, and the disk's raw flush measured in it.
RawFloor make_case_dir(const std::string& dir, std::size_t raw_iterations) {
  std::filesystem::create_directory(dir);
  auto floor = measure_floor(dir, raw_iterations);
  if (!floor) throw std::system_error(floor.error(), "raw flush");
  return *floor;
}

void remove_case_dir(const std::string& dir) {
  std::error_code removed;
  std::filesystem::remove_all(dir, removed);
}

// Local mode in the case's directory, writing directly (the raw floor's way).
fusee::Config local_direct(const std::string& dir, std::uint32_t shards) {
  fusee::Config config = fusee::Config::local(dir);
  config.shards = shards;
  config.flush = fusee::FlushMethod::direct;
  return config;
}

// ---------------------------------------------------------------------------
// Running a case.

struct CaseResult {
  std::string name;
  bool local = true;
  // query, signal and update: durable writes per timed call.
  std::optional<double> durable_writes_per_call;
  std::uint32_t shards = 0;  // what the engine ran with
  std::uint32_t runs = 0;
  std::uint32_t steps_per_run = 0;
  std::uint32_t starters = 0;
  std::uint32_t rounds = 0;  // timed rounds of `runs` runs each
  double seconds = 0;        // the rounds' timed windows (first start to last result), summed
  double steps_per_s = 0;    // every round's steps over `seconds`
  LatencySummary latency;    // per step, across all runs of all rounds
  std::vector<double> round_steps_per_s;  // each round's own
  std::vector<double> round_p50_us;
  RawFloor raw;            // local cases: the disk just before the case
  double records_per_flush = 0;  // local cases, timed window
  std::string transport;          // remote cases: "unix" or "tcp"
  std::optional<double> limit_per_s;  // limit: the step limit's rate
  // fanout_backup: publication to upload, over the last 8192 batches.
  struct UploadLag {
    std::int64_t p50_ms = 0, p99_ms = 0, max_ms = 0;
    std::uint64_t uploads = 0, failures = 0;
    std::string target;  // the target directory
    std::uint64_t snapshots = 0;  // of the run store, in the whole case (the first upload takes one)
  };
  std::optional<UploadLag> upload_lag;

  std::uint64_t steps() const { return std::uint64_t(runs) * steps_per_run * rounds; }
  double p99_over_p50() const { return ratio(latency.p99_us, latency.p50_us); }
};

struct CaseSpec {
  std::string name;
  bool local = true;
  std::string data_dir;  // local mode: a fresh directory for this case alone
  std::uint32_t runs = 0;
  std::uint32_t steps_per_run = 0;
  std::uint32_t starters = 1;
  // "": in this process (local or memory mode); "unix" or "tcp": remote mode
  // against a log service in data_dir (local is then true: the raw floor is
  // measured there too).
  std::string transport;
  bool split = false;  // remote: two workers, half the shards each
  bool backup = false;  // local: a continuous backup to a directory beside the case's (docs/backup.md)
  std::string backup_dir;  // where that backup goes instead (--backup-dir): another disk, say
  bool replicated = false;  // local: three replicas in this process (bench/bench_cluster.hpp)
};

// fanout_backup's target directory: beside the case's data, or in
// --backup-dir.
std::string backup_target_of(const CaseSpec& spec) {
  if (spec.backup_dir.empty()) return spec.data_dir + "-backup";
  return spec.backup_dir + "/" + std::string(kCaseFanoutBackup) + "-backup";
}

// One starting thread's share: runs first, first + stride, ...
struct StarterOutput {
  Clock::time_point last_result_at{};
  std::exception_ptr error;
};

void start_and_await(fusee::Engine& engine, const std::vector<std::string>& ids, std::uint32_t first,
                     std::uint32_t stride, std::uint32_t expected_steps, std::latch& ready, std::latch& go,
                     StarterOutput& out) {
  ready.count_down();
  go.wait();
  try {
    const auto ref = noop_steps_ref();
    std::vector<std::future<fusee::StartOutcome>> starts;
    for (std::uint32_t run = first; run < ids.size(); run += stride) starts.push_back(engine.start_async(ref, ids[run], run));
    for (auto& start : starts) {
      if (start.get() != fusee::StartOutcome::started)
        throw std::runtime_error("a run attached to an existing run in a fresh engine");
    }
    std::vector<std::future<std::uint32_t>> results;
    for (std::uint32_t run = first; run < ids.size(); run += stride) results.push_back(engine.result_async(ref, ids[run]));
    for (auto& result : results) {
      std::uint32_t steps = result.get();
      if (steps != expected_steps)
        throw std::runtime_error(fmt::format("a run returned {} steps, not {}", steps, expected_steps));
    }
    out.last_result_at = Clock::now();
  } catch (...) {
    out.error = std::current_exception();
  }
}

// Measures the raw flush in the case's fresh directory (local mode), opens a
// fresh engine there, runs the case, shuts the engine down and removes the
// directory. Throws fusee::Error or std::runtime_error.
CaseResult run_case(const CaseSpec& spec, std::uint32_t shards, std::size_t raw_iterations, const RoundRule& rule) {
  fusee::Config config = fusee::Config::memory();
  config.shards = shards;
  if (spec.local) config = local_direct(spec.data_dir, shards);
  if (spec.backup) {
    config.backup_target = backup_target_of(spec);
    // Ten uploads a second rather than one, so that the timed rounds (about
    // a second in all) hold several and their cost shows.
    config.backup_upload_interval = std::chrono::milliseconds(kBackupUploadIntervalMs);
  }
  fusee::io::PosixFileSystem server_fs;
  std::unique_ptr<fusee::server::LogService> service;

  StepTimes times(spec.runs, spec.steps_per_run);
  std::vector<std::string> ids;
  ids.reserve(spec.runs);
  for (std::uint32_t run = 0; run < spec.runs; ++run) ids.push_back(fmt::format("{}-{}", spec.name, run));

  CaseResult result;
  result.name = spec.name;
  result.local = spec.local;
  result.transport = spec.transport;
  result.runs = spec.runs;
  result.steps_per_run = spec.steps_per_run;

  if (spec.local) result.raw = make_case_dir(spec.data_dir, raw_iterations);
  if (!spec.transport.empty()) {
    fusee::server::LogServiceOptions service_options;
    service_options.dir = spec.data_dir + "/server";
    service_options.listen = spec.transport == "unix" ? "unix:" + spec.data_dir + "/server.sock" : "127.0.0.1:0";
    service_options.shards = shards != 0 ? shards : std::max(1u, std::thread::hardware_concurrency());
    service_options.log = [](const std::string&) {};
    service = fusee::server::LogService::open(server_fs, service_options);
    config = fusee::Config::remote(service->endpoint());
    config.shards = shards;
    if (spec.split) config.server_shards_max = std::max(1u, service_options.shards / 2);
  }

  StepTimes* times_ptr = &times;
  // Replicated: three replicas in this process, the case run on the
  // primary's Engine (bench/bench_cluster.hpp).
  std::unique_ptr<fusee::bench::BenchCluster> cluster;
  std::unique_ptr<fusee::Engine> own_engine;
  if (spec.replicated) {
    const std::uint32_t replicated_shards = shards != 0 ? shards : std::max(1u, std::thread::hardware_concurrency());
    cluster = std::make_unique<fusee::bench::BenchCluster>(
        spec.data_dir + "/cluster", replicated_shards,
        [&](fusee::Engine& replica) { fusee::bench::register_timed(replica, noop_steps_ref(), times_ptr); });
  } else {
    own_engine = fusee::Engine::open(config);
    fusee::bench::register_timed(*own_engine, noop_steps_ref(), times_ptr);
  }
  fusee::Engine* engine = cluster ? &cluster->primary() : own_engine.get();
  result.shards = engine->shard_count();
  // The split case's other worker: it runs the other half's steps.
  std::unique_ptr<fusee::Engine> partner;
  if (spec.split) {
    partner = fusee::Engine::open(config);
    fusee::bench::register_timed(*partner, noop_steps_ref(), times_ptr);
  }

  // Untimed: the first appends pay for the log's first segment and for
  // waking every thread, which is not what the figures are about.
  const auto warmup_id = fmt::format("{}-warmup", spec.name);
  if (engine->execute(noop_steps_ref(), warmup_id, times.warmup_index()) != kWarmupSteps)
    throw std::runtime_error(fmt::format("warm-up run {} did not take {} steps", warmup_id, kWarmupSteps));

  const std::uint32_t starters = std::max<std::uint32_t>(1, std::min(spec.starters, spec.runs));
  result.starters = starters;
  // Records per flush: the engine's log, or in remote mode the server's
  // (one flush covers every worker's records).
  auto log_counts = [&] {
    if (service) {
      auto stats = service->stats();
      return std::pair(stats.records_written, stats.batches_written);
    }
    auto stats = engine->stats();
    return std::pair(stats.records_written, stats.batches_written);
  };
  const auto counts_before = log_counts();
  std::vector<double> step_us;
  double timed_seconds = 0;
  for (std::uint32_t round = 0; rule.more(round, timed_seconds); ++round) {
    for (std::uint32_t run = 0; run < spec.runs; ++run) ids[run] = fmt::format("{}-{}-{}", spec.name, round, run);
    std::fill(times.step_us.begin(), times.step_us.end(), 0.0);
    std::vector<StarterOutput> outputs(starters);
    std::latch ready(starters);
    std::latch go(1);
    std::vector<std::thread> threads;
    threads.reserve(starters);
    for (std::uint32_t first = 0; first < starters; ++first) {
      threads.emplace_back([&, first] {
        start_and_await(*engine, ids, first, starters, spec.steps_per_run, ready, go, outputs[first]);
      });
    }
    // Thread start-up stays outside the timed window.
    ready.wait();
    const auto started_at = Clock::now();
    go.count_down();
    for (auto& thread : threads) thread.join();
    for (const auto& out : outputs)
      if (out.error) std::rethrow_exception(out.error);
    auto last_result_at = started_at;
    for (const auto& out : outputs) last_result_at = std::max(last_result_at, out.last_result_at);
    const double seconds = std::chrono::duration<double>(last_result_at - started_at).count();
    timed_seconds += seconds;
    result.round_steps_per_s.push_back(seconds > 0 ? double(spec.runs) * spec.steps_per_run / seconds : 0);
    result.round_p50_us.push_back(fusee::bench::summarize_latencies(times.step_us).p50_us);
    step_us.insert(step_us.end(), times.step_us.begin(), times.step_us.end());
    result.rounds = round + 1;
  }
  const auto counts_after = log_counts();
  if (auto batches = counts_after.second - counts_before.second; batches > 0)
    result.records_per_flush = double(counts_after.first - counts_before.first) / double(batches);

  if (spec.backup) {
    auto backup = engine->stats().backup;
    result.upload_lag = CaseResult::UploadLag{backup.upload_lag_p50.count(), backup.upload_lag_p99.count(),
                                              backup.upload_lag_max.count(), backup.uploads, backup.failures,
                                              backup_target_of(spec), backup.snapshots};
  }
  // A clean shutdown, as a real one would end; outside the timed window.
  if (cluster) cluster->shutdown();
  if (own_engine) own_engine->shutdown();
  own_engine.reset();
  cluster.reset();
  engine = nullptr;
  if (partner) partner->shutdown();
  partner.reset();
  if (service) service->stop();
  service.reset();
  if (spec.local) remove_case_dir(spec.data_dir);
  if (spec.backup) remove_case_dir(backup_target_of(spec));

  result.seconds = timed_seconds;
  result.steps_per_s = result.seconds > 0 ? double(result.steps()) / result.seconds : 0;
  result.latency = fusee::bench::summarize_latencies(std::move(step_us));
  return result;
}

// Times `calls` sequential calls of call(n) a round, each alone, rounds
// until the rule has enough (prepare(round) runs before a round, untimed):
// fills the result's rounds and round figures, and gives every call's
// latency and the seconds timed.
template <typename Prepare, typename Call>
std::vector<double> time_sequential_rounds(std::uint32_t calls, const RoundRule& rule, CaseResult& result,
                                           double& timed_seconds, Prepare prepare, Call call) {
  std::vector<double> call_us;
  timed_seconds = 0;
  for (std::uint32_t round = 0; rule.more(round, timed_seconds); ++round) {
    prepare(round);
    std::vector<double> round_us;
    round_us.reserve(calls);
    const auto round_started = Clock::now();
    for (std::uint32_t n = 0; n < calls; ++n) {
      const auto called = Clock::now();
      call(n);
      round_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - called).count());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - round_started).count();
    timed_seconds += seconds;
    result.round_steps_per_s.push_back(seconds > 0 ? double(calls) / seconds : 0);
    result.round_p50_us.push_back(fusee::bench::summarize_latencies(round_us).p50_us);
    call_us.insert(call_us.end(), round_us.begin(), round_us.end());
    result.rounds = round + 1;
  }
  return call_us;
}

// start: sequential Engine::execute() of a one-step workflow in this
// process, local mode, direct writes: what starting a run and getting its
// result costs without an HTTP client in front, beside the raw flush. Each
// round is spec.runs calls one after another, each timed alone; rounds repeat
// as in run_case.
// durable_writes_per_call: the log's durable writes per execute (its
// flushes per run).
CaseResult run_start_case(const CaseSpec& spec, std::uint32_t shards, std::size_t raw_iterations,
                          const RoundRule& rule) {
  CaseResult result;
  result.name = spec.name;
  result.local = true;
  result.runs = spec.runs;
  result.steps_per_run = 1;
  result.starters = 1;
  result.raw = make_case_dir(spec.data_dir, raw_iterations);
  auto engine = fusee::Engine::open(local_direct(spec.data_dir, shards));
  result.shards = engine->shard_count();
  engine->register_workflow(one_step_ref(), [](fusee::Ctx& ctx, std::uint32_t input) -> fusee::Task<std::uint32_t> {
    co_await ctx.step("noop", [] {});
    co_return input;
  });
  for (std::uint32_t warmup = 0; warmup < kWarmupSteps; ++warmup)
    (void)engine->execute(one_step_ref(), fmt::format("{}-warmup-{}", spec.name, warmup), warmup);

  auto stats_before = engine->stats();
  std::vector<std::string> ids(spec.runs);
  double timed_seconds = 0;
  auto call_us = time_sequential_rounds(
      spec.runs, rule, result, timed_seconds,
      [&](std::uint32_t round) {
        for (std::uint32_t run = 0; run < spec.runs; ++run) ids[run] = fmt::format("{}-{}-{}", spec.name, round, run);
      },
      [&](std::uint32_t run) {
        if (engine->execute(one_step_ref(), ids[run], run) != run)
          throw std::runtime_error(fmt::format("{} returned another value", ids[run]));
      });
  auto stats_after = engine->stats();
  if (auto batches = stats_after.batches_written - stats_before.batches_written; batches > 0)
    result.records_per_flush = double(stats_after.records_written - stats_before.records_written) / double(batches);
  // Flushes per run (issue 40: one per short run is the aim), over the
  // timed rounds' executes.
  if (const auto calls = std::uint64_t(spec.runs) * result.rounds; calls > 0)
    result.durable_writes_per_call =
        double(stats_after.batches_written - stats_before.batches_written) / double(calls);
  engine->shutdown();
  engine.reset();
  remove_case_dir(spec.data_dir);

  result.seconds = timed_seconds;
  result.steps_per_s = result.seconds > 0 ? double(result.steps()) / result.seconds : 0;
  result.latency = fusee::bench::summarize_latencies(std::move(call_us));
  return result;
}

// query, signal and update: spec.runs sequential calls a round against one
// run that waits for signals (or updates) and answers a query, in this
// process, local mode, direct writes; each call timed alone, rounds as in
// run_case. A query reads the run's state on its shard (no record); a
// signal returns once its record is durable; an update once the code's
// answer to it is. durable_writes_per_call says which was which.
enum class CallKind { query, signal, update };
CaseResult run_call_case(const CaseSpec& spec, std::uint32_t shards, std::size_t raw_iterations, const RoundRule& rule,
                         CallKind kind) {
  CaseResult result;
  result.name = spec.name;
  result.local = true;
  result.runs = spec.runs;
  result.steps_per_run = 1;
  result.starters = 1;
  result.raw = make_case_dir(spec.data_dir, raw_iterations);
  auto engine = fusee::Engine::open(local_direct(spec.data_dir, shards));
  result.shards = engine->shard_count();
  const fusee::WorkflowRef<std::uint32_t, std::uint32_t> counter{"counter"};
  const fusee::Signal<std::uint32_t> add{"add"};
  const fusee::Update<std::uint32_t, std::uint32_t> add_update{"add"};
  engine->register_workflow(counter, [add, add_update, kind](fusee::Ctx& ctx,
                                                             std::uint32_t start) -> fusee::Task<std::uint32_t> {
    std::uint32_t total = start;
    ctx.on_query("total", [&total] { return total; });
    ctx.on_update(add_update);
    for (;;) {
      if (kind == CallKind::update) {
        auto request = co_await ctx.next_update(add_update);
        total += request.arg;
        co_await ctx.reply(request, total);
        if (request.arg == 0) break;
        continue;
      }
      auto value = co_await ctx.wait_for(add);
      if (!value || *value == 0) break;
      total += *value;
    }
    co_return total;
  });
  const std::string id = spec.name + "-run";
  (void)engine->start(counter, id, 0u);
  std::uint32_t expected = 0;
  auto call = [&] {
    switch (kind) {
      case CallKind::query:
        if (engine->query<std::uint32_t>(id, "total") != expected) throw std::runtime_error("a query answered wrong");
        break;
      case CallKind::signal:
        engine->signal(id, add, 1u);
        ++expected;
        break;
      case CallKind::update:
        if (engine->update(id, add_update, 1u) != ++expected) throw std::runtime_error("an update answered wrong");
        break;
    }
  };
  for (std::uint32_t warmup = 0; warmup < kWarmupSteps; ++warmup) call();
  auto stats_before = engine->stats();
  double timed_seconds = 0;
  auto call_us = time_sequential_rounds(
      spec.runs, rule, result, timed_seconds, [](std::uint32_t) {}, [&](std::uint32_t) { call(); });
  const std::uint64_t calls = call_us.size();
  auto stats_after = engine->stats();
  const auto batches = stats_after.batches_written - stats_before.batches_written;
  if (batches > 0)
    result.records_per_flush = double(stats_after.records_written - stats_before.records_written) / double(batches);
  result.durable_writes_per_call = calls > 0 ? double(batches) / double(calls) : 0;
  if (kind == CallKind::update) {
    (void)engine->update(id, add_update, 0u);
  } else {
    engine->signal(id, add, 0u);
  }
  (void)engine->result(counter, id);
  engine->shutdown();
  engine.reset();
  remove_case_dir(spec.data_dir);
  result.seconds = timed_seconds;
  result.steps_per_s = result.seconds > 0 ? double(calls) / result.seconds : 0;
  result.latency = fusee::bench::summarize_latencies(std::move(call_us));
  return result;
}

// queue: rounds of spec.runs one-step runs enqueued all at once into a queue
// with concurrency kQueueConcurrency; a round lasts from the first enqueue
// to the last result.
CaseResult run_queue_case(const CaseSpec& spec, std::uint32_t shards, std::size_t raw_iterations,
                          const RoundRule& rule) {
  CaseResult result;
  result.name = spec.name;
  result.local = true;
  result.runs = spec.runs;
  result.steps_per_run = 1;
  result.starters = 1;
  result.raw = make_case_dir(spec.data_dir, raw_iterations);
  auto engine = fusee::Engine::open(local_direct(spec.data_dir, shards));
  result.shards = engine->shard_count();
  engine->register_workflow(one_step_ref(), [](fusee::Ctx& ctx, std::uint32_t n) -> fusee::Task<std::uint32_t> {
    co_return co_await ctx.step("one", [n] { return n; });
  });
  engine->queue("bench", fusee::QueueOptions{.concurrency = kQueueConcurrency});
  auto round_of = [&](std::uint32_t round, std::vector<double>& latency_us) {
    std::vector<Clock::time_point> sent(spec.runs);
    std::vector<std::future<fusee::EnqueueOutcome>> enqueues;
    enqueues.reserve(spec.runs);
    for (std::uint32_t n = 0; n < spec.runs; ++n) {
      sent[n] = Clock::now();
      enqueues.push_back(engine->enqueue_json_async("bench", one_step_ref().name, fmt::format("q{}-{}", round, n), n));
    }
    for (auto& enqueued : enqueues) {
      if (enqueued.get() != fusee::EnqueueOutcome::queued) throw std::runtime_error("an enqueue found its run queued");
    }
    for (std::uint32_t n = 0; n < spec.runs; ++n) {
      if (engine->result(one_step_ref(), fmt::format("q{}-{}", round, n)) != n) throw std::runtime_error("a wrong result");
      latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - sent[n]).count());
    }
  };
  std::vector<double> warmup;
  round_of(UINT32_MAX, warmup);  // untimed
  auto stats_before = engine->stats();
  std::vector<double> all_us;
  for (std::uint32_t round = 0; rule.more(round, result.seconds); ++round) {
    std::vector<double> round_us;
    const auto began = Clock::now();
    round_of(round, round_us);
    const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
    result.seconds += seconds;
    result.round_steps_per_s.push_back(seconds > 0 ? double(spec.runs) / seconds : 0);
    result.round_p50_us.push_back(fusee::bench::summarize_latencies(round_us).p50_us);
    all_us.insert(all_us.end(), round_us.begin(), round_us.end());
    result.rounds = round + 1;
  }
  auto stats_after = engine->stats();
  if (auto batches = stats_after.batches_written - stats_before.batches_written; batches > 0)
    result.records_per_flush = double(stats_after.records_written - stats_before.records_written) / double(batches);
  engine->shutdown();
  engine.reset();
  remove_case_dir(spec.data_dir);
  result.steps_per_s = result.seconds > 0 ? double(result.steps()) / result.seconds : 0;
  result.latency = fusee::bench::summarize_latencies(std::move(all_us));
  return result;
}

// limit: rounds of spec.runs runs of spec.steps_per_run steps, every step
// under a limit of `rate` permits per second; a round lasts from the first
// start to the last result. The steps' latency: between a run's completions.
CaseResult run_limit_case(const CaseSpec& spec, std::uint32_t shards, std::size_t raw_iterations,
                          const RoundRule& rule, double rate) {
  CaseResult result;
  result.name = spec.name;
  result.local = true;
  result.runs = spec.runs;
  result.steps_per_run = spec.steps_per_run;
  result.starters = 1;
  result.limit_per_s = rate;
  result.transport = spec.transport;
  result.raw = make_case_dir(spec.data_dir, raw_iterations);
  // limit_split_unix: two workers split a log service's shards; the server
  // grants the permits to both. Runs are started and awaited through the
  // first, so half go through the server to the other.
  fusee::io::PosixFileSystem server_fs;
  std::unique_ptr<fusee::server::LogService> service;
  std::vector<std::unique_ptr<fusee::Engine>> workers;
  if (spec.split) {
    fusee::server::LogServiceOptions service_options;
    service_options.dir = spec.data_dir + "/server";
    service_options.listen = "unix:" + spec.data_dir + "/server.sock";
    service_options.shards = std::max(2u, shards != 0 ? shards : std::thread::hardware_concurrency());
    service_options.log = [](const std::string&) {};
    service = fusee::server::LogService::open(server_fs, service_options);
    for (int worker = 0; worker < 2; ++worker) {
      auto config = fusee::Config::remote(service->endpoint());
      config.server_shards_max = service_options.shards / 2;
      workers.push_back(fusee::Engine::open(config));
    }
  } else {
    workers.push_back(fusee::Engine::open(local_direct(spec.data_dir, shards)));
  }
  auto& engine = workers.front();
  result.shards = engine->shard_count();
  const fusee::WorkflowRef<std::uint32_t, std::uint32_t> limited{"bench.limited"};
  std::mutex mu;
  std::vector<double> step_us;
  for (auto& worker : workers) {
    worker->limit("bench", fusee::StepLimit{.per_second = rate});
    worker->register_workflow(limited, [&](fusee::Ctx& ctx, std::uint32_t steps) -> fusee::Task<std::uint32_t> {
    auto last = Clock::now();
    for (std::uint32_t n = 0; n < steps; ++n) {
      (void)co_await ctx.step("call", [n] { return n; }).limit("bench");
      auto now = Clock::now();
      {
        std::lock_guard lock(mu);
        step_us.push_back(std::chrono::duration<double, std::micro>(now - last).count());
      }
      last = now;
    }
    co_return steps;
  });
  }
  auto round_of = [&](std::uint32_t round) {
    std::vector<std::future<fusee::StartOutcome>> starts;
    for (std::uint32_t n = 0; n < spec.runs; ++n)
      starts.push_back(engine->start_async(limited, fmt::format("l{}-{}", round, n), spec.steps_per_run));
    for (auto& start : starts) (void)start.get();
    for (std::uint32_t n = 0; n < spec.runs; ++n) {
      if (engine->result(limited, fmt::format("l{}-{}", round, n)) != spec.steps_per_run)
        throw std::runtime_error("a wrong result");
    }
  };
  round_of(UINT32_MAX);  // untimed warm-up
  {
    std::lock_guard lock(mu);
    step_us.clear();
  }
  auto stats_before = engine->stats();
  for (std::uint32_t round = 0; rule.more(round, result.seconds); ++round) {
    const auto began = Clock::now();
    std::size_t first = 0;
    {
      std::lock_guard lock(mu);
      first = step_us.size();
    }
    round_of(round);
    const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
    result.seconds += seconds;
    result.round_steps_per_s.push_back(seconds > 0 ? double(spec.runs) * spec.steps_per_run / seconds : 0);
    std::lock_guard lock(mu);
    result.round_p50_us.push_back(
        fusee::bench::summarize_latencies(std::vector<double>(step_us.begin() + static_cast<std::ptrdiff_t>(first),
                                                              step_us.end()))
            .p50_us);
    result.rounds = round + 1;
  }
  auto stats_after = engine->stats();
  if (auto batches = stats_after.batches_written - stats_before.batches_written; batches > 0 && !spec.split)
    result.records_per_flush = double(stats_after.records_written - stats_before.records_written) / double(batches);
  for (auto& worker : workers) worker->shutdown();
  workers.clear();
  if (service) service->stop();
  service.reset();
  remove_case_dir(spec.data_dir);
  result.steps_per_s = result.seconds > 0 ? double(result.steps()) / result.seconds : 0;
  std::lock_guard lock(mu);
  result.latency = fusee::bench::summarize_latencies(std::move(step_us));
  return result;
}

using fusee::bench::Spread;
using fusee::bench::spread_of;

// ---------------------------------------------------------------------------
// parallel_steps and parallel_children: the same work started together
// (Future, Ctx::all) and one command after another, in the same engine, each
// way repeated in rounds as the other cases are. Local mode, direct writes.

// Resumes each coroutine that awaits after(d) about d later, on its own
// thread: a stand-in for an outside call a coroutine step waits on.
class WaitService {
 public:
  WaitService() : thread_([this] { loop(); }) {}
  ~WaitService() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  struct Awaiter {
    WaitService* service;
    std::chrono::milliseconds wait;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> waiter) {
      {
        std::lock_guard lock(service->mu_);
        service->due_.emplace(Clock::now() + wait, waiter);
      }
      service->changed_.notify_all();
    }
    void await_resume() const noexcept {}
  };
  Awaiter after(std::chrono::milliseconds wait) { return Awaiter{this, wait}; }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      if (due_.empty()) {
        changed_.wait(lock);
        continue;
      }
      auto next = due_.begin();
      if (Clock::now() < next->first) {
        changed_.wait_until(lock, next->first);
        continue;
      }
      auto waiter = next->second;
      due_.erase(next);
      lock.unlock();
      waiter.resume();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable changed_;
  std::multimap<Clock::time_point, std::coroutine_handle<>> due_;
  bool stopping_ = false;
  std::thread thread_;
};

struct ParallelResult {
  std::string name;
  std::string work;  // what one round does
  std::vector<double> together_ms;    // per round
  std::vector<double> one_by_one_ms;  // per round
  double aim_max_ms = std::nan("");   // parallel_steps: 2 waits + 4 raw flushes
  RawFloor raw;
};

const fusee::WorkflowRef<bool, std::uint32_t>& waiting_steps_ref() {
  static const fusee::WorkflowRef<bool, std::uint32_t> ref{"bench.waiting_steps"};
  return ref;
}
const fusee::WorkflowRef<bool, std::uint32_t>& parent_ref() {
  static const fusee::WorkflowRef<bool, std::uint32_t> ref{"bench.parent"};
  return ref;
}
const fusee::WorkflowRef<std::uint32_t, std::uint32_t>& child_ref() {
  static const fusee::WorkflowRef<std::uint32_t, std::uint32_t> ref{"bench.child"};
  return ref;
}

// Rounds of `one_round(together, round)` (its elapsed ms) each way until
// each way has its rounds by `rule`; the ways alternate, so a drift in the
// disk's speed touches both.
template <typename Round>
void alternate_rounds(ParallelResult& result, const RoundRule& rule, Round one_round) {
  double together_s = 0;
  double one_by_one_s = 0;
  for (std::uint32_t round = 0; rule.more(round, together_s) || rule.more(round, one_by_one_s); ++round) {
    if (rule.more(round, together_s)) {
      result.together_ms.push_back(one_round(true, round));
      together_s += result.together_ms.back() / 1000;
    }
    if (rule.more(round, one_by_one_s)) {
      result.one_by_one_ms.push_back(one_round(false, round));
      one_by_one_s += result.one_by_one_ms.back() / 1000;
    }
  }
}

ParallelResult run_parallel_case(const CaseSpec& spec, std::uint32_t shards, std::size_t raw_iterations,
                                 const RoundRule& rule) {
  ParallelResult result;
  result.name = spec.name;
  result.raw = make_case_dir(spec.data_dir, raw_iterations);
  WaitService waits;
  auto engine = fusee::Engine::open(local_direct(spec.data_dir, shards));

  auto waiting_steps = [&waits](fusee::Ctx& ctx, bool together) -> fusee::Task<std::uint32_t> {
    auto wait = [&waits]() -> fusee::Task<std::uint32_t> {
      co_await waits.after(kParallelStepWait);
      co_return 1;
    };
    std::uint32_t done = 0;
    if (together) {
      std::vector<fusee::Future<std::uint32_t>> started;
      for (std::uint32_t step = 0; step < kParallelSteps; ++step)
        started.push_back(ctx.step(fmt::format("wait-{}", step), wait).start());
      for (auto one : co_await ctx.all(started)) done += one;
    } else {
      for (std::uint32_t step = 0; step < kParallelSteps; ++step)
        done += co_await ctx.step(fmt::format("wait-{}", step), wait);
    }
    co_return done;
  };
  engine->register_workflow(waiting_steps_ref(), waiting_steps);
  engine->register_workflow(child_ref(), [](fusee::Ctx& ctx, std::uint32_t input) -> fusee::Task<std::uint32_t> {
    for (std::uint32_t step = 0; step < kParallelChildSteps; ++step)
      co_await ctx.step(fmt::format("noop-{}", step), [] {});
    co_return input;
  });
  engine->register_workflow(parent_ref(), [](fusee::Ctx& ctx, bool together) -> fusee::Task<std::uint32_t> {
    std::uint32_t sum = 0;
    if (together) {
      std::vector<fusee::Future<std::uint32_t>> children;
      for (std::uint32_t child = 0; child < kParallelChildrenPerParent; ++child)
        children.push_back(ctx.child(child_ref(), fmt::format("{}-{}", ctx.run_id(), child), 1).start());
      for (auto one : co_await ctx.all(children)) sum += one;
    } else {
      for (std::uint32_t child = 0; child < kParallelChildrenPerParent; ++child)
        sum += co_await ctx.child(child_ref(), fmt::format("{}-{}", ctx.run_id(), child), 1);
    }
    co_return sum;
  });

  if (spec.name == kCaseParallelSteps) {
    result.work = fmt::format("one run, {} coroutine steps each waiting {} ms", kParallelSteps,
                              kParallelStepWait.count());
    if (result.raw.measured)
      result.aim_max_ms = 2.0 * double(kParallelStepWait.count()) + 4 * result.raw.latency.p50_us / 1000;
    (void)engine->execute(waiting_steps_ref(), "warmup", true);
    alternate_rounds(result, rule, [&](bool together, std::uint32_t round) {
      auto id = fmt::format("{}-{}", together ? "together" : "one-by-one", round);
      auto started = Clock::now();
      if (engine->execute(waiting_steps_ref(), id, together) != kParallelSteps)
        throw std::runtime_error("parallel_steps: a run did not take every step");
      return std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    });
  } else {
    result.work = fmt::format("{} parents x {} children x {} steps", kParallelParents, kParallelChildrenPerParent,
                              kParallelChildSteps);
    (void)engine->execute(parent_ref(), "warmup", true);
    alternate_rounds(result, rule, [&](bool together, std::uint32_t round) {
      std::vector<std::string> ids;
      for (std::uint32_t parent = 0; parent < kParallelParents; ++parent)
        ids.push_back(fmt::format("{}-{}-{}", together ? "together" : "one-by-one", round, parent));
      auto started = Clock::now();
      std::vector<std::future<fusee::StartOutcome>> starts;
      for (const auto& id : ids) starts.push_back(engine->start_async(parent_ref(), id, together));
      for (auto& start : starts) (void)start.get();
      std::vector<std::future<std::uint32_t>> results;
      for (const auto& id : ids) results.push_back(engine->result_async(parent_ref(), id));
      for (auto& one : results) {
        if (one.get() != kParallelChildrenPerParent)
          throw std::runtime_error("parallel_children: a parent did not get every child's output");
      }
      return std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    });
  }
  engine->shutdown();
  engine.reset();
  remove_case_dir(spec.data_dir);
  return result;
}

void print_parallel(const std::vector<ParallelResult>& results) {
  if (results.empty()) return;
  fmt::print("\nthe same work started together and one after another (elapsed ms per round: median [min, max])\n");
  fmt::print("{:<18} {:>7} {:>24} {:>24} {:>8} {:>9}  {}\n", "case", "rounds", "together", "one by one", "speedup",
             "aim <=", "work");
  for (const auto& result : results) {
    Spread together = spread_of(result.together_ms);
    Spread one_by_one = spread_of(result.one_by_one_ms);
    auto cell = [](const Spread& spread) {
      return fmt::format("{:.1f} [{:.1f}, {:.1f}]", spread.median, spread.min, spread.max);
    };
    fmt::print("{:<18} {:>3}/{:<3} {:>24} {:>24} {:>8} {:>9}  {}\n", result.name, result.together_ms.size(),
               result.one_by_one_ms.size(), cell(together), cell(one_by_one),
               format_ratio(ratio(one_by_one.median, together.median)),
               std::isfinite(result.aim_max_ms) ? fmt::format("{:.1f}", result.aim_max_ms) : std::string("-"),
               result.work);
  }
}

void print_parallel_json(const ParallelResult& result) {
  Spread together = spread_of(result.together_ms);
  Spread one_by_one = spread_of(result.one_by_one_ms);
  JsonLine line("engine_parallel");
  line.field("case", result.name)
      .field("work", result.work)
      .field("rounds_together", result.together_ms.size())
      .field("rounds_one_by_one", result.one_by_one_ms.size())
      .field("together_ms_median", round_to_digits(together.median, 3))
      .field("together_ms_min", round_to_digits(together.min, 3))
      .field("together_ms_max", round_to_digits(together.max, 3))
      .field("one_by_one_ms_median", round_to_digits(one_by_one.median, 3))
      .field("one_by_one_ms_min", round_to_digits(one_by_one.min, 3))
      .field("one_by_one_ms_max", round_to_digits(one_by_one.max, 3))
      .field("speedup", round_to_digits(ratio(one_by_one.median, together.median), 3))
      .field("raw_p50_us", round_to_ns(result.raw.measured ? result.raw.latency.p50_us : std::nan("")));
  if (std::isfinite(result.aim_max_ms)) line.field("aim_max_ms", round_to_digits(result.aim_max_ms, 3));
  line.print();
}

// ---------------------------------------------------------------------------
// Output.

void print_table_header() {
  fmt::print("\nno-op steps (latency in us; raw = durable {} B write in the case's directory just before it)\n",
             fusee::bench::kRawFlushBlockBytes);
  fmt::print("{:<17} {:>6} {:>6} {:>6} {:>8} {:>8} {:>11} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8}\n", "case",
             "shards", "runs", "rounds", "steps", "seconds", "steps/s", "p50", "p99", "p99.9", "p99/p50", "raw p50",
             "raw p99", "p50/raw");
}

double raw_p50_us(const CaseResult& result) {
  return result.local && result.raw.measured ? result.raw.latency.p50_us : std::nan("");
}
double raw_p99_us(const CaseResult& result) {
  return result.local && result.raw.measured ? result.raw.latency.p99_us : std::nan("");
}

void print_table_row(const CaseResult& result) {
  auto us = [](double value) { return std::isfinite(value) ? fmt::format("{:.1f}", value) : std::string("-"); };
  std::string note;
  if (result.local && !result.raw.measured) note = fmt::format("  (raw unmeasured: {})", result.raw.note);
  if (result.local && result.raw.measured && result.raw.method != RawMethod::direct_dsync)
    note = fmt::format("  (raw is {}: {})", fusee::bench::flush_method_name(result.raw.method), result.raw.note);
  fmt::print("{:<17} {:>6} {:>6} {:>6} {:>8} {:>8.3f} {:>11.0f} {:>9.1f} {:>9.1f} {:>9.1f} {:>8} {:>9} {:>9} {:>8}{}\n",
             result.name, result.shards, result.runs, result.rounds, result.steps(), result.seconds, result.steps_per_s,
             result.latency.p50_us, result.latency.p99_us, result.latency.p999_us,
             format_ratio(result.p99_over_p50()), us(raw_p50_us(result)), us(raw_p99_us(result)),
             result.local ? format_ratio(ratio(result.latency.p50_us, raw_p50_us(result))) : std::string("-"), note);
}

void print_spread_table(const std::vector<CaseResult>& results) {
  fmt::print("\nspread over rounds (a round: the case's runs, started together; start's one after another; "
             "min / median / max)\n");
  fmt::print("{:<17} {:>6} {:>11} {:>11} {:>11} {:>9} {:>9} {:>9}\n", "case", "rounds", "steps/s min", "median",
             "max", "p50 min", "median", "max");
  for (const auto& result : results) {
    Spread rate = spread_of(result.round_steps_per_s);
    Spread p50 = spread_of(result.round_p50_us);
    fmt::print("{:<17} {:>6} {:>11.0f} {:>11.0f} {:>11.0f} {:>9.1f} {:>9.1f} {:>9.1f}\n", result.name, result.rounds,
               rate.min, rate.median, rate.max, p50.min, p50.median, p50.max);
  }
}

void print_raw_json(const std::string& for_case, const RawFloor& raw, const std::string& dir) {
  JsonLine line("raw_flush");
  line.field("case", fusee::bench::flush_method_name(raw.method))
      .field("for_case", for_case)
      .field("dir", dir)
      .field("block_bytes", fusee::bench::kRawFlushBlockBytes)
      .field("supported", raw.measured);
  if (raw.measured) {
    line.field("p50_us", round_to_ns(raw.latency.p50_us))
        .field("p99_us", round_to_ns(raw.latency.p99_us))
        .field("p999_us", round_to_ns(raw.latency.p999_us))
        .field("mean_us", round_to_ns(raw.latency.mean_us))
        .field("max_us", round_to_ns(raw.latency.max_us))
        .field("iterations", raw.latency.samples);
  }
  if (!raw.note.empty()) line.field("note", raw.note);
  line.print();
}

void print_case_json(const CaseResult& result) {
  JsonLine line("engine");
  line.field("case", result.name)
      .field("mode", !result.transport.empty() ? "remote_" + result.transport : result.local ? "local" : "memory")
      .field("shards", result.shards)
      .field("runs", result.runs)
      .field("steps_per_run", result.steps_per_run)
      .field("steps", result.steps())
      .field("starters", result.starters)
      .field("rounds", result.rounds)
      .field("seconds", round_to_digits(result.seconds, 6))
      .field("steps_per_s", round_to_digits(result.steps_per_s, 1))
      .field("p50_us", round_to_ns(result.latency.p50_us))
      .field("p99_us", round_to_ns(result.latency.p99_us))
      .field("p999_us", round_to_ns(result.latency.p999_us))
      .field("mean_us", round_to_ns(result.latency.mean_us))
      .field("max_us", round_to_ns(result.latency.max_us))
      .field("p99_over_p50", round_to_digits(result.p99_over_p50(), 3));
  Spread rate = spread_of(result.round_steps_per_s);
  Spread p50 = spread_of(result.round_p50_us);
  line.field("round_steps_per_s_min", round_to_digits(rate.min, 1))
      .field("round_steps_per_s_median", round_to_digits(rate.median, 1))
      .field("round_steps_per_s_max", round_to_digits(rate.max, 1))
      .field("round_p50_us_min", round_to_ns(p50.min))
      .field("round_p50_us_median", round_to_ns(p50.median))
      .field("round_p50_us_max", round_to_ns(p50.max));
  if (result.local) {
    // Unmeasured stays null, never a made-up zero.
    line.field("flush", "direct")
        .field("raw_method", fusee::bench::flush_method_name(result.raw.method))
        .field("raw_p50_us", round_to_ns(raw_p50_us(result)))
        .field("raw_p99_us", round_to_ns(raw_p99_us(result)))
        .field("p50_over_raw", round_to_digits(ratio(result.latency.p50_us, raw_p50_us(result)), 3))
        .field("p99_over_raw", round_to_digits(ratio(result.latency.p99_us, raw_p99_us(result)), 3))
        .field("records_per_flush", round_to_digits(result.records_per_flush, 2));
  }
  if (result.durable_writes_per_call) line.field("durable_writes_per_call", round_to_digits(*result.durable_writes_per_call, 3));
  if (result.upload_lag) {
    line.field("backup_target", result.upload_lag->target)
        .field("upload_interval_ms", kBackupUploadIntervalMs)
        .field("upload_lag_p50_ms", result.upload_lag->p50_ms)
        .field("upload_lag_p99_ms", result.upload_lag->p99_ms)
        .field("upload_lag_max_ms", result.upload_lag->max_ms)
        .field("uploads", result.upload_lag->uploads)
        .field("upload_failures", result.upload_lag->failures)
        .field("snapshots", result.upload_lag->snapshots);
  }
  if (result.limit_per_s) {
    line.field("limit_per_s", *result.limit_per_s)
        .field("achieved_over_limit", round_to_digits(ratio(result.steps_per_s, *result.limit_per_s), 4));
  }
  line.print();
}

struct AimFigure {
  std::string name;  // the JSON case, e.g. "chain/p50_over_raw"
  double value = 0;
  bool at_most = true;  // else at least
  double bound = 0;
};

const CaseResult* find_case(const std::vector<CaseResult>& results, std::string_view name) {
  for (const auto& result : results)
    if (result.name == name) return &result;
  return nullptr;
}

std::vector<AimFigure> compute_aims(const std::vector<CaseResult>& results) {
  std::vector<AimFigure> aims;
  if (const CaseResult* chain = find_case(results, kCaseChain)) {
    aims.push_back(
        {"chain/p50_over_raw", ratio(chain->latency.p50_us, raw_p50_us(*chain)), true, kChainP50OverRawAimMax});
  }
  if (const CaseResult* fanout = find_case(results, kCaseFanout)) {
    aims.push_back({"fanout/steps_per_s", fanout->steps_per_s, false, kFanoutStepsPerSecondAimMin});
  }
  if (const CaseResult* backed_up = find_case(results, kCaseFanoutBackup)) {
    if (const CaseResult* fanout = find_case(results, kCaseFanout)) {
      aims.push_back({"fanout_backup/steps_per_s_over_fanout", ratio(backed_up->steps_per_s, fanout->steps_per_s),
                      false, kFanoutBackupOverFanoutAimMin});
    }
  }
  if (const CaseResult* memory = find_case(results, kCaseMemory)) {
    aims.push_back({"memory/steps_per_s", memory->steps_per_s, false, kMemoryStepsPerSecondAimMin});
  }
  if (const CaseResult* fanout = find_case(results, kCaseFanoutLong)) {
    aims.push_back({"fanout_long/steps_per_s", fanout->steps_per_s, false, kFanoutStepsPerSecondAimMin});
  }
  if (const CaseResult* start = find_case(results, kCaseStart)) {
    aims.push_back(
        {"start/p50_over_raw", ratio(start->latency.p50_us, raw_p50_us(*start)), true, kStartP50OverRawAimMax});
    if (start->durable_writes_per_call) {
      aims.push_back({"start/durable_writes_per_call", *start->durable_writes_per_call, true,
                      kStartDurableWritesPerCallAimMax});
    }
  }
  for (auto name : {kCaseLimit, kCaseLimitSplitUnix}) {
    if (const CaseResult* limit = find_case(results, name); limit && limit->limit_per_s) {
      double achieved = ratio(limit->steps_per_s, *limit->limit_per_s);
      aims.push_back({fmt::format("{}/achieved_over_limit_min", name), achieved, false, 1 - kLimitAchievedAimTolerance});
      aims.push_back({fmt::format("{}/achieved_over_limit_max", name), achieved, true, 1 + kLimitAchievedAimTolerance});
    }
  }
  for (const auto& result : results) {
    if (result.latency.samples == 0) continue;
    aims.push_back({result.name + "/p99_over_p50", result.p99_over_p50(), true, kP99OverP50AimMax});
  }
  const CaseResult* chain = find_case(results, kCaseChain);
  if (const CaseResult* unix_chain = find_case(results, kCaseChainUnix); unix_chain && chain) {
    aims.push_back({"chain_unix/p50_extra_us", unix_chain->latency.p50_us - chain->latency.p50_us, true,
                    kServerStepExtraAimMaxUs});
  }
  if (const CaseResult* replicated = find_case(results, kCaseChainReplicated); replicated && chain) {
    aims.push_back({"chain_replicated/p50_over_local", ratio(replicated->latency.p50_us, chain->latency.p50_us), true,
                    kReplicatedChainP50OverLocalAimMax});
  }
  const CaseResult* fanout = find_case(results, kCaseFanout);
  if (const CaseResult* replicated = find_case(results, kCaseFanoutReplicated); replicated && fanout) {
    aims.push_back({"fanout_replicated/rate_over_local", ratio(replicated->steps_per_s, fanout->steps_per_s), false,
                    kReplicatedFanoutOverLocalAimMin});
  }
  return aims;
}

std::string_view aim_verdict(const AimFigure& aim) {
  if (!std::isfinite(aim.value)) return "n/a";
  bool met = aim.at_most ? aim.value <= aim.bound : aim.value >= aim.bound;
  return met ? "met" : "missed";
}

void print_aims(const std::vector<AimFigure>& aims) {
  if (aims.empty()) return;
  fmt::print("\naims (figures, not gates; the throughput aims assume 2 cores, this machine has {})\n",
             std::thread::hardware_concurrency());
  for (const auto& aim : aims) {
    bool rate = aim.name.ends_with("_per_s");
    std::string value = rate && std::isfinite(aim.value) ? fmt::format("{:.0f}", aim.value) : format_ratio(aim.value);
    std::string bound = rate ? fmt::format("{:.0f}", aim.bound) : fmt::format("{:.2f}", aim.bound);
    std::string_view verdict = aim_verdict(aim);
    fmt::print("{:<24} {:>10}  (aim {} {})  {}\n", aim.name, value, aim.at_most ? "<=" : ">=", bound, verdict);
  }
}

void print_aim_json(const AimFigure& aim) {
  fusee::bench::print_aim_line("engine_aims", aim.name, aim.value, aim.at_most, aim.bound);
}

// server_step_cost: each remote case beside its in-process twin, same run.
// Returns its JSON lines, printed after the tables.
std::vector<JsonLine> print_server_step_cost(const std::vector<CaseResult>& results) {
  std::vector<JsonLine> lines;
  const CaseResult* chain = find_case(results, kCaseChain);
  const CaseResult* fanout = find_case(results, kCaseFanout);
  bool header = false;
  for (const auto& result : results) {
    if (result.transport.empty()) continue;
    const CaseResult* twin = result.runs == 1 ? chain : fanout;
    if (!header) {
      fmt::print("\nserver_step_cost: remote mode (a log service in this process) beside local mode, same run\n");
      fmt::print("{:<17} {:>10} {:>10} {:>10} {:>12} {:>12}\n", "case", "p50 us", "local p50", "extra us",
                 "steps/s", "local steps/s");
      header = true;
    }
    double local_p50 = twin ? twin->latency.p50_us : std::nan("");
    double local_rate = twin ? twin->steps_per_s : std::nan("");
    fmt::print("{:<17} {:>10.1f} {:>10.1f} {:>10.1f} {:>12.0f} {:>12.0f}\n", result.name, result.latency.p50_us,
               local_p50, result.latency.p50_us - local_p50, result.steps_per_s, local_rate);
    JsonLine line("server_step_cost");
    line.field("case", result.name)
        .field("transport", result.transport)
        .field("runs", result.runs)
        .field("p50_us", round_to_ns(result.latency.p50_us))
        .field("p99_us", round_to_ns(result.latency.p99_us))
        .field("local_p50_us", round_to_ns(local_p50))
        .field("extra_p50_us", round_to_ns(result.latency.p50_us - local_p50))
        .field("steps_per_s", round_to_digits(result.steps_per_s, 1))
        .field("local_steps_per_s", round_to_digits(local_rate, 1))
        .field("raw_p50_us", round_to_ns(raw_p50_us(result)));
    lines.push_back(std::move(line));
  }
  return lines;
}

// replicated_step_cost: the replicated cases beside their local twins, same
// run. Returns its JSON lines, printed after the tables.
std::vector<JsonLine> print_replicated_step_cost(const std::vector<CaseResult>& results) {
  std::vector<JsonLine> lines;
  const std::pair<std::string_view, std::string_view> twins[] = {{kCaseChainReplicated, kCaseChain},
                                                                 {kCaseFanoutReplicated, kCaseFanout}};
  bool header = false;
  for (const auto& [name, twin_name] : twins) {
    const CaseResult* result = find_case(results, name);
    if (!result) continue;
    const CaseResult* twin = find_case(results, twin_name);
    if (!header) {
      fmt::print("\nreplicated_step_cost: three replicas in this process (a quorum of two holds each batch) beside "
                 "local mode, same run\n");
      fmt::print("{:<18} {:>9} {:>9} {:>9} {:>9} {:>8} {:>11} {:>11} {:>8}\n", "case", "p50 us", "p99 us", "local p50",
                 "local p99", "p50 x", "steps/s", "local st/s", "rate x");
      header = true;
    }
    const double local_p50 = twin ? twin->latency.p50_us : std::nan("");
    const double local_p99 = twin ? twin->latency.p99_us : std::nan("");
    const double local_rate = twin ? twin->steps_per_s : std::nan("");
    fmt::print("{:<18} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>8} {:>11.0f} {:>11.0f} {:>8}\n", result->name,
               result->latency.p50_us, result->latency.p99_us, local_p50, local_p99,
               format_ratio(ratio(result->latency.p50_us, local_p50)), result->steps_per_s, local_rate,
               format_ratio(ratio(result->steps_per_s, local_rate)));
    JsonLine line("replicated_step_cost");
    line.field("case", result->name)
        .field("runs", result->runs)
        .field("p50_us", round_to_ns(result->latency.p50_us))
        .field("p99_us", round_to_ns(result->latency.p99_us))
        .field("local_p50_us", round_to_ns(local_p50))
        .field("local_p99_us", round_to_ns(local_p99))
        .field("p50_over_local", round_to_digits(ratio(result->latency.p50_us, local_p50), 3))
        .field("steps_per_s", round_to_digits(result->steps_per_s, 1))
        .field("local_steps_per_s", round_to_digits(local_rate, 1))
        .field("steps_per_s_over_local", round_to_digits(ratio(result->steps_per_s, local_rate), 3))
        .field("raw_p50_us", round_to_ns(raw_p50_us(*result)));
    lines.push_back(std::move(line));
  }
  return lines;
}

int run(const Options& options) {
  std::error_code error;
  if (!std::filesystem::is_directory(options.dir, error)) {
    fmt::print(stderr, "engine_bench: --dir {} is not a directory\n", options.dir);
    return 1;
  }
  // The pid keeps concurrent runs apart; a directory of that name can only be
  // left by a dead run with the same pid, so it is cleared, not reused.
  std::string scratch_path =
      (std::filesystem::path(options.dir) / fmt::format(".fusee-engine-bench-{}", ::getpid())).string();
  std::filesystem::remove_all(scratch_path, error);
  if (!std::filesystem::create_directory(scratch_path, error) || error) {
    fmt::print(stderr, "engine_bench: cannot create {}: {}\n", scratch_path, error.message());
    return 1;
  }
  fusee::bench::ScratchDir scratch(scratch_path, "engine_bench");

  fmt::print("engine_bench in {}: cases {}, chain {} steps, fan-out {} runs x {} steps, {} starting threads, "
             "shards {}\n",
             options.dir, fmt::join(options.cases, ","), options.chain_steps, options.runs, options.steps,
             options.starters, options.shards == 0 ? std::string("default") : std::to_string(options.shards));

  std::vector<CaseSpec> specs;
  auto data_dir = [&](std::string_view name) { return (std::filesystem::path(scratch.path()) / name).string(); };
  if (options.wants(kCaseChain))
    specs.push_back({std::string(kCaseChain), true, data_dir(kCaseChain), 1, options.chain_steps, 1});
  if (options.wants(kCaseFanout))
    specs.push_back({std::string(kCaseFanout), true, data_dir(kCaseFanout), options.runs, options.steps,
                     options.starters});
  if (options.wants(kCaseFanoutBackup)) {
    specs.push_back({std::string(kCaseFanoutBackup), true, data_dir(kCaseFanoutBackup), options.runs, options.steps,
                     options.starters, "", false, true, options.backup_dir});
  }
  if (options.wants(kCaseMemory))
    specs.push_back({std::string(kCaseMemory), false, "", options.runs, options.steps, options.starters});
  if (options.wants(kCaseFanoutLong)) {
    specs.push_back({std::string(kCaseFanoutLong), true, data_dir(kCaseFanoutLong), options.runs, options.long_steps,
                     options.starters});
  }
  if (options.wants(kCaseMemoryLong)) {
    specs.push_back(
        {std::string(kCaseMemoryLong), false, "", options.runs, options.long_steps, options.starters});
  }
  if (options.wants(kCaseChainUnix))
    specs.push_back({std::string(kCaseChainUnix), true, data_dir(kCaseChainUnix), 1, options.chain_steps, 1, "unix"});
  if (options.wants(kCaseChainTcp))
    specs.push_back({std::string(kCaseChainTcp), true, data_dir(kCaseChainTcp), 1, options.chain_steps, 1, "tcp"});
  if (options.wants(kCaseFanoutUnix))
    specs.push_back({std::string(kCaseFanoutUnix), true, data_dir(kCaseFanoutUnix), options.runs, options.steps,
                     options.starters, "unix"});
  if (options.wants(kCaseFanoutSplitUnix))
    specs.push_back({std::string(kCaseFanoutSplitUnix), true, data_dir(kCaseFanoutSplitUnix), options.runs,
                     options.steps, options.starters, "unix", true});
  if (options.wants(kCaseChainReplicated)) {
    specs.push_back({std::string(kCaseChainReplicated), true, data_dir(kCaseChainReplicated), 1, options.chain_steps, 1,
                     "", false, false, "", true});
  }
  if (options.wants(kCaseFanoutReplicated)) {
    specs.push_back({std::string(kCaseFanoutReplicated), true, data_dir(kCaseFanoutReplicated), options.runs,
                     options.steps, options.starters, "", false, false, "", true});
  }
  if (options.wants(kCaseStart))
    specs.push_back({std::string(kCaseStart), true, data_dir(kCaseStart), options.start_runs, 1, 1});
  if (options.wants(kCaseQuery))
    specs.push_back({std::string(kCaseQuery), true, data_dir(kCaseQuery), options.start_runs, 1, 1});
  if (options.wants(kCaseSignal))
    specs.push_back({std::string(kCaseSignal), true, data_dir(kCaseSignal), options.start_runs, 1, 1});
  if (options.wants(kCaseUpdate))
    specs.push_back({std::string(kCaseUpdate), true, data_dir(kCaseUpdate), options.start_runs, 1, 1});
  if (options.wants(kCaseQueue))
    specs.push_back({std::string(kCaseQueue), true, data_dir(kCaseQueue), options.runs, 1, 1});
  if (options.wants(kCaseLimit))
    specs.push_back({std::string(kCaseLimit), true, data_dir(kCaseLimit), options.limit_runs, options.steps, 1});
  if (options.wants(kCaseLimitSplitUnix))
    specs.push_back({std::string(kCaseLimitSplitUnix), true, data_dir(kCaseLimitSplitUnix), options.limit_runs,
                     options.steps, 1, "unix", true});
  std::vector<CaseSpec> parallel_specs;
  if (options.wants(kCaseParallelSteps))
    parallel_specs.push_back(
        {std::string(kCaseParallelSteps), true, data_dir(kCaseParallelSteps), 1, kParallelSteps, 1});
  if (options.wants(kCaseParallelChildren))
    parallel_specs.push_back({std::string(kCaseParallelChildren), true, data_dir(kCaseParallelChildren),
                              kParallelParents, kParallelChildrenPerParent * kParallelChildSteps, 1});

  print_table_header();
  std::vector<CaseResult> results;
  for (const auto& spec : specs) {
    try {
      results.push_back(
          spec.name == kCaseStart ? run_start_case(spec, options.shards, options.raw_iterations, options.rounds)
          : spec.name == kCaseQueue ? run_queue_case(spec, options.shards, options.raw_iterations, options.rounds)
          : spec.name == kCaseLimit || spec.name == kCaseLimitSplitUnix
              ? run_limit_case(spec, options.shards, options.raw_iterations, options.rounds, options.limit_rate)
          : spec.name == kCaseQuery || spec.name == kCaseSignal || spec.name == kCaseUpdate
              ? run_call_case(spec, options.shards, options.raw_iterations, options.rounds,
                              spec.name == kCaseQuery    ? CallKind::query
                              : spec.name == kCaseSignal ? CallKind::signal
                                                         : CallKind::update)
              : run_case(spec, options.shards, options.raw_iterations, options.rounds));
    } catch (const std::exception& failure) {
      fmt::print(stderr, "engine_bench: {}: {}\n", spec.name, failure.what());
      return 1;
    }
    print_table_row(results.back());
    std::fflush(stdout);
  }
  std::vector<ParallelResult> parallel;
  for (const auto& spec : parallel_specs) {
    try {
      parallel.push_back(
          run_parallel_case(spec, options.shards, options.raw_iterations, options.rounds));
    } catch (const std::exception& failure) {
      fmt::print(stderr, "engine_bench: {}: {}\n", spec.name, failure.what());
      return 1;
    }
  }
  if (!results.empty()) print_spread_table(results);
  print_parallel(parallel);
  for (const auto& result : results) {
    if (result.local) fmt::print("{}: {:.1f} records per flush\n", result.name, result.records_per_flush);
    if (result.upload_lag) {
      fmt::print("{}: upload lag (publication to upload, every {} ms) p50 {} ms, p99 {} ms, max {} ms; {} uploads, "
                 "{} failed, {} snapshots of the run store\n",
                 result.name, kBackupUploadIntervalMs, result.upload_lag->p50_ms, result.upload_lag->p99_ms, result.upload_lag->max_ms,
                 result.upload_lag->uploads, result.upload_lag->failures, result.upload_lag->snapshots);
    }
    if (result.durable_writes_per_call)
      fmt::print("{}: {:.3f} durable writes per call\n", result.name, *result.durable_writes_per_call);
  }

  std::optional<fusee::bench::FailoverFigures> failover;
  if (options.wants(kCaseFailoverReplicated)) {
    fusee::bench::FailoverOptions failover_options;
    failover_options.dir = data_dir(kCaseFailoverReplicated);
    failover_options.self = options.self;
    failover_options.kills = options.failover_kills;
    try {
      failover = fusee::bench::run_failover(failover_options);
    } catch (const std::exception& failure) {
      fmt::print(stderr, "engine_bench: {}: {}\n", kCaseFailoverReplicated, failure.what());
      return 1;
    }
    const auto first = fusee::bench::spread_of(failover->first_step_ms);
    const auto resumed = fusee::bench::spread_of(failover->all_resumed_ms);
    fmt::print("\nfailover_replicated: three replica processes, the primary SIGKILLed {} times ({} runs parked on a "
               "wait each time), a {} ms etcd lease\n",
               failover->first_step_ms.size(), failover_options.parked_runs, failover_options.lease_ms);
    fmt::print("{:<34} {:>9} {:>9} {:>9}\n", "from the SIGKILL to", "min ms", "p50 ms", "max ms");
    fmt::print("{:<34} {:>9.0f} {:>9.0f} {:>9.0f}\n", "the first completed step", first.min, first.median, first.max);
    fmt::print("{:<34} {:>9.0f} {:>9.0f} {:>9.0f}\n", "every parked run resumed, finished", resumed.min,
               resumed.median, resumed.max);
    const auto opened = fusee::bench::spread_of(failover->open_ms);
    fmt::print("of which the next primary's opening (its log's opening to its engine's, as after a crash): "
               "min {:.1f} ms, p50 {:.1f} ms, max {:.1f} ms over {}\n",
               opened.min, opened.median, opened.max, failover->open_ms.size());
  }

  auto server_lines = print_server_step_cost(results);
  auto replicated_lines = print_replicated_step_cost(results);
  server_lines.insert(server_lines.end(), replicated_lines.begin(), replicated_lines.end());
  auto aims = compute_aims(results);
  print_aims(aims);
  fmt::print("\n");
  std::fflush(stdout);

  for (const auto& result : results) {
    if (result.local) print_raw_json(result.name, result.raw, options.dir);
    print_case_json(result);
  }
  for (auto& line : server_lines) line.print();
  if (failover) {
    const auto first = fusee::bench::spread_of(failover->first_step_ms);
    const auto resumed = fusee::bench::spread_of(failover->all_resumed_ms);
    fusee::bench::JsonLine line("engine");
    line.field("case", kCaseFailoverReplicated)
        .field("kills", failover->first_step_ms.size())
        .field("parked_runs", failover->parked_runs)
        .field("lease_ms", failover->lease_ms)
        .field("first_step_min_ms", round_to_digits(first.min, 1))
        .field("first_step_p50_ms", round_to_digits(first.median, 1))
        .field("first_step_max_ms", round_to_digits(first.max, 1))
        .field("all_resumed_min_ms", round_to_digits(resumed.min, 1))
        .field("all_resumed_p50_ms", round_to_digits(resumed.median, 1))
        .field("all_resumed_max_ms", round_to_digits(resumed.max, 1))
        .field("open_p50_ms", round_to_digits(fusee::bench::spread_of(failover->open_ms).median, 2))
        .field("open_max_ms", round_to_digits(fusee::bench::spread_of(failover->open_ms).max, 2));
    line.print();
  }
  for (const auto& result : parallel) {
    print_raw_json(result.name, result.raw, options.dir);
    print_parallel_json(result);
  }
  for (const auto& aim : aims) print_aim_json(aim);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // failover_replicated's replicas are this program, run again.
  if (argc > 1 && std::string_view(argv[1]) == "--failover-replica") {
    return fusee::bench::failover_replica_main(argc, argv);
  }
  Options options;
  {
    std::error_code error;
    options.self = std::filesystem::read_symlink("/proc/self/exe", error).string();
    if (error) options.self = argv[0];
  }
  CLI::App app{"Durable workflow step latency and throughput through the engine, beside the disk's raw flush."};
  app.add_option("--dir", options.dir, "directory on the disk to measure (a scratch directory is made inside)")
      ->capture_default_str();
  app.add_option("--cases", options.cases,
                 "cases to run, comma-separated: chain, fanout, fanout_backup, memory, fanout_long, memory_long, chain_unix, chain_tcp, fanout_unix, "
                 "fanout_split_unix, chain_replicated, fanout_replicated, failover_replicated, start, query, signal, "
                 "update, parallel_steps, "
                 "parallel_children, queue, limit, limit_split_unix")
      ->delimiter(',')
      ->check(CLI::IsMember({std::string(kCaseChain), std::string(kCaseFanout), std::string(kCaseFanoutBackup),
                             std::string(kCaseMemory), std::string(kCaseFanoutLong), std::string(kCaseMemoryLong),
                             std::string(kCaseChainUnix), std::string(kCaseChainTcp), std::string(kCaseFanoutUnix),
                             std::string(kCaseFanoutSplitUnix), std::string(kCaseChainReplicated),
                             std::string(kCaseFanoutReplicated), std::string(kCaseFailoverReplicated),
                             std::string(kCaseStart), std::string(kCaseQuery),
                             std::string(kCaseSignal), std::string(kCaseUpdate), std::string(kCaseParallelSteps),
                             std::string(kCaseParallelChildren), std::string(kCaseQueue), std::string(kCaseLimit),
                             std::string(kCaseLimitSplitUnix)}))
      ->capture_default_str();
  app.add_option("--failover-kills", options.failover_kills, "SIGKILLs of the primary in the failover_replicated case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--chain-steps", options.chain_steps, "sequential steps of the chain case's one run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--runs", options.runs, "concurrent runs of the fanout and memory cases")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", options.steps, "steps per run of the fanout and memory cases")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--long-steps", options.long_steps, "steps per run of the fanout_long and memory_long cases")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--start-runs", options.start_runs, "sequential execute() calls per round of the start case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--limit-runs", options.limit_runs, "concurrent runs of the limit case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--limit-rate", options.limit_rate, "the limit case's step limit, permits per second")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--shards", options.shards, "engine shards (0: the engine's default, the number of CPUs)")
      ->capture_default_str();
  app.add_option("--starters", options.starters, "threads starting and awaiting the fan-out's runs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--raw-iterations", options.raw_iterations, "timed raw flush writes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--backup-dir", options.backup_dir,
                 "fanout_backup's target goes in this directory (another disk, a tmpfs) instead of beside its data");
  app.add_option("--min-seconds", options.rounds.min_seconds,
                 "each case repeats its round until it has timed this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--min-rounds", options.rounds.min_rounds, "and at least this many rounds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return run(options);
}
