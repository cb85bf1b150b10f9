// Parking (local and remote mode): runs waiting at a sleep or a wait_for leave memory at
// a checkpoint and come back by replay when their timer, a signal or a
// request wakes them, also after a reopen; a memory budget parks early.
#include <doctest/doctest.h>

#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kNap{"nap"};
const WorkflowRef<int, int> kAwait{"await"};
const Signal<int> kGo{"go"};

// nap: a step, an hour's sleep, a step.
void register_nap(Engine& engine, CallCounter& steps) {
  engine.register_workflow(kNap, [&steps](Ctx& ctx, int input) -> Task<int> {
    int before = co_await ctx.step("before", [&steps, input] {
      steps.add();
      return input;
    });
    co_await ctx.sleep("nap", std::chrono::hours(1));
    co_return co_await ctx.step("after", [&steps, before] {
      steps.add();
      return before * 2;
    });
  });
}

// await: a step, a wait for "go" (no timeout), a step adding the value.
void register_await(Engine& engine, CallCounter& steps) {
  engine.register_workflow(kAwait, [&steps](Ctx& ctx, int input) -> Task<int> {
    int before = co_await ctx.step("before", [&steps, input] {
      steps.add();
      return input;
    });
    auto go = co_await ctx.wait_for(kGo);
    co_return co_await ctx.step("after", [&steps, before, go] {
      steps.add();
      return before + go.value_or(-1);
    });
  });
}

// twice: waits for "go" two times; the result holds both values.
void register_twice(Engine& engine, const WorkflowRef<int, int>& ref, CallCounter& steps) {
  engine.register_workflow(ref, [&steps](Ctx& ctx, int) -> Task<int> {
    auto first = co_await ctx.wait_for(kGo);
    steps.add();
    auto second = co_await ctx.wait_for(kGo);
    steps.add();
    co_return first.value_or(0) * 10 + second.value_or(0);
  });
}

Config parking_config(EngineHarness& harness) {
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = std::chrono::seconds(10);
  return config;
}

// Waits until `count` step functions ran.
void wait_for_steps(CallCounter& steps, int count) { REQUIRE(steps.wait_for(count, kPatience)); }

// Moves the clock past park_after and checkpoints until `count` runs were
// parked in all: a run parks once the record of its wait is durable, a
// moment after its step ran.
void park(EngineHarness& harness, Engine& engine, std::uint64_t count) {
  auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (true) {
    harness.clock().advance(std::chrono::seconds(11));
    engine.checkpoint();
    if (engine.stats().runs_parked >= count) break;
    // Each checkpoint() is a round trip to every shard: the runs' waits
    // become durable meanwhile.
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < give_up, "only " << engine.stats().runs_parked << " parked");
  }
  CHECK(engine.stats().runs_parked == count);
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("sleeping runs leave memory after park_after and their timers wake them", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  CallCounter steps;
  auto engine = harness.open(parking_config(harness));
  register_nap(*engine, steps);
  constexpr int kRuns = 50;
  for (int run = 0; run < kRuns; ++run) engine->start(kNap, "nap-" + std::to_string(run), run);
  wait_for_steps(steps, kRuns);
  engine->checkpoint();
  CHECK(engine->stats().runs_parked == 0);  // not waiting long enough yet
  park(harness, *engine, kRuns);
  auto listed = engine->list_runs(RunFilter{.status = RunStatus::running});
  CHECK(listed.size() == kRuns);
  // The hour passes: every run is loaded back, replays and finishes.
  harness.clock().advance(std::chrono::hours(1));
  for (int run = 0; run < kRuns; ++run) CHECK(result_of(engine, kNap, "nap-" + std::to_string(run)) == 2 * run);
  CHECK(engine->stats().runs_woken == kRuns);
  CHECK(steps.count() == 2 * kRuns);  // replay ran no step again
}

TEST_CASE_TEMPLATE("a signal, result, cancel or stream read wakes a parked run, also after a reopen", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  CallCounter steps;
  {
    auto engine = harness.open(parking_config(harness));
    register_await(*engine, steps);
    for (int run = 0; run < 4; ++run) engine->start(kAwait, "await-" + std::to_string(run), run);
    wait_for_steps(steps, 4);
    park(harness, *engine, 4);
    engine->signal("await-0", kGo, 100, "go-0");
    CHECK(engine->result(kAwait, "await-0") == 100);
    engine->signal("await-0", kGo, 7, "go-0");  // a repeat, after the run finished
    engine->shutdown();
  }
  auto engine = harness.open(parking_config(harness));
  register_await(*engine, steps);
  CHECK(engine->list_runs(RunFilter{.status = RunStatus::running}).size() == 3);
  CHECK(engine->stats().runs_woken == 0);  // parked runs stay in the store at open
  engine->cancel("await-1", "not needed");
  error_message(errc::cancelled, [&] { engine->result(kAwait, "await-1"); });
  auto reader = engine->read_stream("await-2", "none", StreamFrom::earliest());
  engine->signal("await-2", kGo, 10);
  engine->signal("await-3", kGo, 20);
  CHECK(engine->result(kAwait, "await-2") == 12);
  CHECK(engine->result(kAwait, "await-3") == 23);
  CHECK(steps.count() == 4 + 3);  // each "after" once (await-1 was cancelled)
}

TEST_CASE_TEMPLATE("a run woken by a signal and parked again keeps every record", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  CallCounter steps;
  const WorkflowRef<int, int> twice{"twice"};
  auto engine = harness.open(parking_config(harness));
  register_twice(*engine, twice, steps);
  engine->start(twice, "twice", 0);
  park(harness, *engine, 1);
  engine->signal("twice", kGo, 3);
  REQUIRE(steps.wait_for(1, kPatience));
  park(harness, *engine, 2);
  engine->shutdown();
  auto reopened = harness.open(parking_config(harness));
  register_twice(*reopened, twice, steps);
  reopened->signal("twice", kGo, 4);
  CHECK(reopened->result(twice, "twice") == 34);
}

TEST_CASE_TEMPLATE("past the memory budget the longest-waiting runs are parked early", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  CallCounter steps;
  auto config = parking_config(harness);
  config.park_after = std::chrono::hours(24);  // only the budget parks
  config.run_memory_budget_bytes = 2 * 200 * 1024;  // two shards of 200 KiB: ~60 runs each
  auto engine = harness.open(config);
  register_nap(*engine, steps);
  constexpr int kRuns = 1000;
  for (int run = 0; run < kRuns; ++run) {
    engine->start(kNap, "nap-" + std::to_string(run), run);
    if (run % 100 == 99) harness.clock().advance(std::chrono::milliseconds(1));
  }
  wait_for_steps(steps, kRuns);
  engine->checkpoint();
  auto parked = engine->stats().runs_parked;
  MESSAGE(parked << " of " << kRuns << " sleeping runs parked by the budget");
  CHECK(parked >= kRuns / 2);
  harness.clock().advance(std::chrono::hours(1));
  for (int run = 0; run < kRuns; ++run) CHECK(result_of(engine, kNap, "nap-" + std::to_string(run)) == 2 * run);
  CHECK(steps.count() == 2 * kRuns);
}
}

namespace {

// The process's resident and peak resident set, in MiB (/proc/self/status).
std::pair<double, double> resident_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  double rss = 0;
  double peak = 0;
  while (std::getline(status, line)) {
    if (line.starts_with("VmRSS:")) rss = std::stod(line.substr(6)) / 1024;
    if (line.starts_with("VmHWM:")) peak = std::stod(line.substr(6)) / 1024;
  }
  return {rss, peak};
}

}  // namespace

TEST_SUITE("slow") {
TEST_CASE("a million runs sleep in bounded memory, and every one wakes and finishes") {
  constexpr int kRuns = 1'000'000;
  constexpr int kInFlight = 20'000;
  EngineHarness harness(Mode::local);
  CallCounter steps;
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds(500);
  config.park_after = std::chrono::hours(24);   // only the budget parks here
  config.run_memory_budget_bytes = 64u << 20;  // for both shards
  auto engine = harness.open(config);
  register_nap(*engine, steps);
  auto started_at = std::chrono::steady_clock::now();
  for (int first = 0; first < kRuns; first += kInFlight) {
    std::vector<std::future<StartOutcome>> starts;
    for (int run = first; run < std::min(kRuns, first + kInFlight); ++run) {
      starts.push_back(engine->start_async(kNap, "nap-" + std::to_string(run), run));
    }
    for (auto& start : starts) REQUIRE(start.get() == StartOutcome::started);
    // A client pacing itself: shards past their budget park on their own,
    // a checkpoint between batches just keeps the peak down.
    engine->checkpoint();
  }
  REQUIRE(steps.wait_for(kRuns, std::chrono::minutes(5)));
  // Every run but what the budget holds goes to the store.
  const auto loaded_max = static_cast<std::uint64_t>(config.run_memory_budget_bytes / 2048);
  for (int tries = 0; engine->stats().runs_parked + loaded_max < kRuns && tries < 1000; ++tries) {
    engine->checkpoint();
  }
  auto [asleep_rss, asleep_peak] = resident_mib();
  auto asleep = engine->stats();
  auto slept_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at).count();
  MESSAGE(kRuns << " runs asleep after " << slept_s << " s: " << asleep.runs_parked << " parked, resident "
                << asleep_rss << " MiB (peak " << asleep_peak << " MiB), run store "
                << asleep.run_store_bytes / (1 << 20) << " MiB, log " << asleep.wal_bytes / (1 << 20) << " MiB");
  CHECK(asleep.runs_parked + loaded_max >= kRuns);
  // The hour passes: every run wakes (a batch at a time, within the budget)
  // and finishes.
  harness.clock().advance(std::chrono::hours(1));
  for (int first = 0; first < kRuns; first += kInFlight) {
    std::vector<std::future<int>> results;
    for (int run = first; run < std::min(kRuns, first + kInFlight); ++run) {
      results.push_back(engine->result_async(kNap, "nap-" + std::to_string(run)));
    }
    for (int run = first; auto& result : results) REQUIRE(result.get() == 2 * run++);
  }
  auto [done_rss, done_peak] = resident_mib();
  auto done = engine->stats();
  auto total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at).count();
  MESSAGE("all " << kRuns << " finished after " << total_s << " s: " << done.runs_woken << " woken, resident "
                 << done_rss << " MiB (peak " << done_peak << " MiB)");
  CHECK(steps.count() == 2 * kRuns);
}
}
