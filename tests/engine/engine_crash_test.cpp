// Crash-point enumeration and I/O error loops for the engine: a small
// multi-run workload (steps, a stream, a signal) on the fault-injecting file
// system, frozen at every operation boundary and crashed with several
// outcomes, or failed at every operation with each kind of I/O error; after
// reopening, the runs finish with the expected results and nothing
// acknowledged is lost.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>
#include <set>

#include "tests/support/crash_points.hpp"
#include "tests/support/crash_sample.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

constexpr int kRuns = 3;
const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kApproval{"approval"};

std::string run_name(int run) { return "run-" + std::to_string(run); }
int expected_result(int run) { return run * 10 + (run + 1); }
constexpr int kResentBonus = 100;  // added to a signal sent again after a crash

// What one life acknowledged, and which step functions ran in it.
struct Life {
  std::mutex mu;
  std::set<std::string> started;
  std::set<std::string> signalled;
  std::map<std::string, std::vector<int>> chunks;  // delivered, in offset order
  std::map<std::string, int> results;
  std::map<std::pair<std::string, std::string>, int> ran;  // (run, step) -> count
  // At the end of an uncrashed checkpoint workload: what retirement did.
  std::uint64_t segments_retired = 0;
  std::size_t blob_files_left = 0;
  std::uint64_t parked = 0;
  void note_ran(const std::string& run, const std::string& step) {
    std::lock_guard lock(mu);
    ran[{run, step}]++;
  }
  int ran_count(const std::string& run, const std::string& step) {
    std::lock_guard lock(mu);
    auto found = ran.find({run, step});
    return found == ran.end() ? 0 : found->second;
  }
};

// The workloads: a plain one, and one that checkpoints and retires across
// two opens, with small segments and every record but the smallest in the
// blob area.
// A third parks the waiting runs and wakes them by their signals. A fourth
// runs the workflow with commands in flight together: two steps at once
// (Ctx::all), then a timer and the approval wait at once (Ctx::any).
enum class Workload { plain, checkpoints, parking, concurrent };

Config config_for(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock, Workload workload = Workload::plain) {
  // A frozen disk makes checkpoints fail on purpose: crash_config's warn is quiet.
  auto config = crash_config(fs, clock);
  if (workload == Workload::checkpoints) {
    config.segment_bytes = 16 * 1024;
    config.payload_offload_bytes = 16;
    config.checkpoint_interval = std::chrono::milliseconds::zero();
  }
  if (workload == Workload::parking) {
    config.segment_bytes = 16 * 1024;
    config.checkpoint_interval = std::chrono::milliseconds::zero();
    config.park_after = std::chrono::milliseconds::zero();
  }
  return config;
}

void register_concurrent_order(Engine& engine, Life& life) {
  engine.register_workflow(kOrder, [&life](Ctx& ctx, int input) -> Task<int> {
    auto id = ctx.run_id();
    auto quote_fn = [&life, id, input] {
      life.note_ran(id, "quote");
      return input * 10;
    };
    auto stock_fn = [&life, id, input] {
      life.note_ran(id, "stock");
      return input;
    };
    Future<int> quoted = ctx.step("quote", quote_fn).start();
    Future<int> stocked = ctx.step("stock", stock_fn).start();
    auto both = co_await ctx.all(quoted, stocked);
    int quote = std::get<0>(both);
    co_await ctx.stream("progress").write(quote);
    // The clock never moves here: the approval always comes first.
    Future<void> patience = ctx.sleep("patience", std::chrono::hours(24)).start();
    Future<std::optional<int>> approved = ctx.wait_for(kApproval).start();
    std::optional<int> approval;
    if (co_await ctx.any(patience, approved) == 1) approval = co_await approved;
    auto total_fn = [&life, id, quote, approval] {
      life.note_ran(id, "total");
      return quote + approval.value_or(-1000);
    };
    int total = co_await ctx.step("total", total_fn);
    co_await ctx.stream("progress").write(total);
    co_return total;
  });
}

void register_order(Engine& engine, Life& life, Workload workload = Workload::plain) {
  if (workload == Workload::concurrent) {
    register_concurrent_order(engine, life);
    return;
  }
  engine.register_workflow(kOrder, [&life](Ctx& ctx, int input) -> Task<int> {
    auto id = ctx.run_id();
    int quote = co_await ctx.step("quote", [&life, id, input] {
      life.note_ran(id, "quote");
      return input * 10;
    });
    co_await ctx.stream("progress").write(quote);
    auto approval = co_await ctx.wait_for(kApproval);
    int total = co_await ctx.step("total", [&life, id, quote, approval] {
      life.note_ran(id, "total");
      return quote + approval.value_or(-1000);
    });
    co_await ctx.stream("progress").write(total);
    co_return total;
  });
}

// Chunks durable now, without waiting for more.
std::vector<int> durable_chunks(Engine& engine, const std::string& id) {
  auto reader = engine.read_stream(id, "progress", StreamFrom::earliest());
  std::vector<int> chunks;
  while (auto chunk = reader.try_next()) chunks.push_back(boost::json::value_to<int>(chunk->value));
  return chunks;
}

// The life that crashes: runs the workload until the file system freezes.
void crashing_life(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock, Life& life,
                   Workload workload = Workload::plain) {
  try {
    auto engine = Engine::open(config_for(fs, clock, workload));
    register_order(*engine, life, workload);
    // The checkpoint workload starts its last run in the second open.
    const int first_open_runs = workload == Workload::checkpoints ? kRuns - 1 : kRuns;
    for (int run = 0; run < first_open_runs; ++run) {
      auto id = run_name(run);
      engine->start(kOrder, id, run);
      life.started.insert(id);
    }
    if (workload == Workload::checkpoints) {
      // Checkpoint, close, and go on in a second open: its checkpoints
      // retire the first open's segments and blob file. The late run is
      // left out of the store by the next checkpoint while the others'
      // new records go in, so a recovery reads the log from before that
      // checkpoint and must skip the records the store holds.
      engine->checkpoint();
      engine->shutdown();
      engine = Engine::open(config_for(fs, clock, workload));
      register_order(*engine, life, workload);
      auto late = run_name(kRuns - 1);
      engine->start(kOrder, late, kRuns - 1);
      life.started.insert(late);
    }
    if (workload == Workload::parking) {
      // Each run waits for its approval once its first chunk is out: park
      // them (a run whose wait is not durable yet stays loaded).
      for (int run = 0; run < kRuns; ++run) {
        auto id = run_name(run);
        auto reader = engine->read_stream(id, "progress", StreamFrom::earliest());
        if (auto chunk = reader.next()) life.chunks[id] = {boost::json::value_to<int>(chunk->value)};
      }
      engine->checkpoint();
      life.parked = engine->stats().runs_parked;
    }
    for (int run = 0; run < kRuns; ++run) {
      auto id = run_name(run);
      engine->signal(id, kApproval, run + 1, "approval-" + id);
      life.signalled.insert(id);
      life.chunks[id] = durable_chunks(*engine, id);
    }
    if (workload != Workload::plain) engine->checkpoint();
    for (int run = 0; run < kRuns; ++run) {
      auto id = run_name(run);
      life.results[id] = engine->result(kOrder, id);
      life.chunks[id] = durable_chunks(*engine, id);
    }
    if (workload == Workload::checkpoints) {
      engine->checkpoint();
      for (int run = 0; run < kRuns; ++run) life.chunks[run_name(run)] = durable_chunks(*engine, run_name(run));
      life.segments_retired = engine->stats().segments_retired;
      auto blobs = fs.list("/data/wal/blobs");
      if (blobs) life.blob_files_left = blobs->size();
    }
  } catch (const Error& error) {
    // The frozen or faulty file system fails the log; what was acknowledged
    // is in life.
    CHECK_MESSAGE((fs.crashed() || fs.faults_fired() > 0), "an error without a fault: " << error.what());
  }
}

// Reopens after the crash, drives every run to its end as a client would
// (start again, signal again with the same id) and checks the promise.
void check_after_crash(FaultFileSystem& image, const std::shared_ptr<ManualClock>& clock, Life& before,
                       const std::string& where, bool reopen_twice = true, Workload workload = Workload::plain) {
  INFO(where);
  Life after;
  std::unique_ptr<Engine> engine;
  try {
    engine = Engine::open(config_for(image, clock, workload));
  } catch (const Error& error) {
    FAIL("a crash alone must reopen by itself: " << std::string(error.what()));
  }
  auto listed = engine->list_runs();
  std::set<std::string> known;
  for (const auto& info : listed) known.insert(info.id);
  for (const auto& id : before.started) CHECK_MESSAGE(known.contains(id), "acknowledged start of " << id << " lost");
  // A step function that ran in the crashed life ran once its run's start
  // and its own start were durable, or, the run's first step running ahead
  // of the disk, with them in one atomic group of the log: a run recovery
  // kept has that step's start, so its replay keeps the step's place and
  // key (docs/durability.md, "Running ahead").
  for (const auto& id : known) {
    for (const char* step : {"quote", "stock"}) {
      if (before.ran_count(id, step) == 0) continue;
      auto journal = engine->journal_json(id);
      CHECK_MESSAGE(journal.find(std::string("\"") + step + "\"") != std::string::npos,
                    "step " << std::string(step) << " of " << id << " ran, and recovery kept its run without the step's start: "
                            << journal);
    }
  }
  register_order(*engine, after, workload);
  std::map<std::string, int> engine_results;
  for (int run = 0; run < kRuns; ++run) {
    auto id = run_name(run);
    engine->start(kOrder, id, run);
    // The client sends the approval again under the same signal id, with
    // another value: if the first was acknowledged, it was durable, the
    // repeat is dropped and the first value decides the result.
    engine->signal(id, kApproval, run + 1 + kResentBonus, "approval-" + id);
    int result = engine->result(kOrder, id);
    if (before.signalled.contains(id)) {
      CHECK_MESSAGE(result == expected_result(run), "an acknowledged signal to " << id << " was lost");
    } else {
      CHECK((result == expected_result(run) || result == expected_result(run) + kResentBonus));
    }
    if (before.results.contains(id)) CHECK_MESSAGE(before.results[id] == result, "a reported result changed");
    engine_results[id] = result;
    auto reader = engine->read_stream(id, "progress", StreamFrom::earliest());
    std::vector<int> chunks;
    while (auto chunk = reader.next()) chunks.push_back(boost::json::value_to<int>(chunk->value));
    CHECK(chunks == std::vector<int>{run * 10, result});
    const auto& delivered = before.chunks[id];
    REQUIRE(delivered.size() <= chunks.size());
    for (std::size_t offset = 0; offset < delivered.size(); ++offset) {
      CHECK_MESSAGE(delivered[offset] == chunks[offset], "delivered chunk " << offset << " of " << id << " changed");
    }
    // A step whose result was durable never runs again. Evidence of
    // durability: a later step ran (it waits for the earlier records), a
    // chunk written after it was delivered, or the result was reported.
    bool total_durable = before.results.contains(id);
    bool quote_durable = total_durable || before.ran_count(id, "total") > 0 || !delivered.empty();
    if (quote_durable) CHECK_MESSAGE(after.ran_count(id, "quote") == 0, "step quote of " << id << " ran again");
    // The concurrent workflow's stock step: its record is before the first
    // chunk too (Ctx::all waits for both steps before the write).
    if (quote_durable) CHECK_MESSAGE(after.ran_count(id, "stock") == 0, "step stock of " << id << " ran again");
    if (total_durable) CHECK_MESSAGE(after.ran_count(id, "total") == 0, "step total of " << id << " ran again");
  }
  if (workload != Workload::plain) engine->checkpoint();  // finished runs to the store
  engine->shutdown();
  if (!reopen_twice) return;
  // Stable: the next recovery finds the same results without running anything.
  Life third;
  auto again = Engine::open(config_for(image, clock, workload));
  register_order(*again, third, workload);
  for (int run = 0; run < kRuns; ++run) {
    auto id = run_name(run);
    CHECK(again->result(kOrder, id) == engine_results[id]);
  }
  CHECK(third.ran.empty());
}

// The workload once whole (its end, crashed too, and how many operations
// it makes), then frozen at the points the sample picks
// (tests/support/crash_sample.hpp: in make test a seeded sample within
// `budget`, in make test-long every point), each crashed with every outcome.
void enumerate_crashes(Workload workload, const char* name, std::chrono::seconds budget) {
  auto clock = std::make_shared<ManualClock>();
  CrashSample sample(name, budget);
  std::uint64_t crash_points = 0;
  std::uint64_t crash_states = 0;
  auto check_point = [&](FaultFileSystem& fs, Life& life, std::uint64_t crash_at) {
    ++crash_points;
    auto pending = fs.pending_data_op_count();
    std::vector<CrashOutcome> outcomes;
    for (auto names : {CrashOutcome::Names::revert, CrashOutcome::Names::keep}) {
      outcomes.push_back(CrashOutcome::drop_all(names));
      outcomes.push_back(CrashOutcome::keep_all(names));
      if (pending > 1) outcomes.push_back(CrashOutcome::keep_first_k(pending / 2, names));
      outcomes.push_back(CrashOutcome::random_subset(crash_at, names));
      outcomes.push_back(CrashOutcome::tear(crash_at, names));
    }
    for (const auto& outcome : outcomes) {
      auto image = fs.crash_image(outcome);
      check_after_crash(*image, clock, life,
                        "crash after " + std::to_string(crash_at) + " ops, " + outcome.describe(), true, workload);
      ++crash_states;
    }
  };
  std::uint64_t last = 0;
  {
    FaultFileSystem fs;
    Life life;
    crashing_life(fs, clock, life, workload);
    REQUIRE(!fs.crashed());
    last = fs.operation_count();
    // The end of the workload. The second open retired the first one's
    // segments and its blob file.
    if (workload == Workload::checkpoints) {
      CHECK(life.segments_retired > 0);
      CHECK(life.blob_files_left == 1);
    }
    if (workload == Workload::parking) CHECK(life.parked > 0);
    check_point(fs, life, last);
  }
  while (auto crash_at = sample.next(last)) {
    if (*crash_at >= last) continue;  // the end: checked above
    FaultFileSystem fs;
    fs.set_crash_after_ops(*crash_at);
    Life life;
    crashing_life(fs, clock, life, workload);
    check_point(fs, life, *crash_at);
  }
  sample.report(crash_states);
  CHECK(crash_points > 10);
}

// Each kind of I/O error at the operations the sample picks (every one in
// make test-long), the budget shared among the kinds.
void error_loops(Workload workload, const char* name, std::chrono::seconds budget) {
  auto clock = std::make_shared<ManualClock>();
  struct Variant {
    FaultEffect effect;
    bool persistent;
    const char* name;
  };
  const Variant variants[] = {
      {FaultEffect::io_error, false, "EIO once"},
      {FaultEffect::io_error, true, "EIO persistent"},
      {FaultEffect::no_space, true, "ENOSPC persistent"},
      {FaultEffect::short_write, false, "short write once"},
      {FaultEffect::sync_loses_data, false, "sync loses data"},
  };
  std::uint64_t last = 0;
  {
    FaultFileSystem fs;
    Life life;
    crashing_life(fs, clock, life, workload);
    last = fs.operation_count();
  }
  std::uint64_t runs = 0;
  std::uint64_t fired = 0;
  for (const auto& variant : variants) {
    CrashSample sample(std::string(name) + ", " + variant.name, budget / std::size(variants));
    std::uint64_t states = 0;
    while (auto point = sample.next(last)) {
      const auto nth = *point + 1;  // operations count from 1 here
      FaultFileSystem fs;
      fs.inject(Fault{OpKind::any, nth, variant.effect, variant.persistent});
      Life life;
      crashing_life(fs, clock, life, workload);
      ++runs;
      if (fs.faults_fired() == 0) continue;  // past the workload's last operation this time
      ++fired;
      auto where = std::string(variant.name) + " at operation " + std::to_string(nth);
      // A power loss after the fault: only what was durable survives.
      auto lost_power = fs.crash_image(CrashOutcome::drop_all());
      check_after_crash(*lost_power, clock, life, where + ", then power loss", false, workload);
      // A plain restart: the process dies, the kernel keeps what it had.
      auto restarted = fs.crash_image(CrashOutcome::keep_all(CrashOutcome::Names::keep));
      check_after_crash(*restarted, clock, life, where + ", then restart", false, workload);
      states += 2;
    }
    sample.report(states);
  }
  std::cout << name << ": " << runs << " runs, " << fired << " with a fault fired\n";
  CHECK(fired > 50);
}

}  // namespace

// Every point of these takes 20 to 90 s each on 2 cores: make test checks
// a seeded sample within each case's budget, make test-long every point.
TEST_SUITE("crash") {
  TEST_CASE("engine: after a crash at any operation, runs finish with the same results and nothing acknowledged is lost") {
    enumerate_crashes(Workload::plain, "engine", std::chrono::seconds(6));
  }

  TEST_CASE("engine: crashes during checkpoints, retirement and blob deletion lose nothing acknowledged") {
    enumerate_crashes(Workload::checkpoints, "engine with checkpoints and retirement", std::chrono::seconds(6));
  }

  TEST_CASE("engine: crashes while a run has several commands in flight lose nothing acknowledged") {
    enumerate_crashes(Workload::concurrent, "engine, commands in flight together", std::chrono::seconds(6));
  }
  TEST_CASE("engine: crashes while runs are parked and woken lose nothing acknowledged") {
    enumerate_crashes(Workload::parking, "engine with parking", std::chrono::seconds(6));
  }

  TEST_CASE("engine: after an I/O error at any operation, nothing acknowledged is lost and every run finishes") {
    error_loops(Workload::plain, "engine I/O error loops", std::chrono::seconds(10));
  }

  TEST_CASE("engine: an I/O error during checkpoints and retirement loses nothing acknowledged") {
    error_loops(Workload::checkpoints, "engine I/O error loops with checkpoints and retirement",
                std::chrono::seconds(10));
  }
}
