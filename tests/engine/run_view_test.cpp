// What an operator sees of runs (issue 36): what a running run waits on
// (RunInfo::waiting_on) through get_run, list_runs and query_runs in every
// mode, also once it parked and across a reopen; where a stuck run left its
// journal (stuck_position); the counters EngineStats keeps as runs start,
// finish and complete steps; and the per-second history the console charts
// (Engine::activity, detail::ActivityHistory).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "sdk/facade/activity_history.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/engine/gate.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kNap{"nap"};
const WorkflowRef<int, int> kAwait{"await"};
const WorkflowRef<int, int> kSlow{"slow"};
const WorkflowRef<int, int> kParent{"parent"};
const WorkflowRef<int, int> kPaid{"paid"};
const WorkflowRef<int, int> kTwoSteps{"two-steps"};
const Signal<int> kGo{"go"};


void register_all(Engine& engine) {
  engine.register_workflow(kNap, [](Ctx& ctx, int input) -> Task<int> {
    co_await ctx.sleep("nap", std::chrono::hours(1));
    co_return input;
  });
  engine.register_workflow(kAwait, [](Ctx& ctx, int input) -> Task<int> {
    auto go = co_await ctx.wait_for(kGo).timeout(std::chrono::minutes(5));
    co_return input + go.value_or(-1);
  });
  // The step "slow" is an outside call that never answers (a coroutine
  // step: a plain one would hold the shard's thread); it ends when its run
  // stops.
  engine.register_workflow(kSlow, [](Ctx& ctx, int input) -> Task<int> {
    auto slow = [input](StepContext& step) -> Task<int> {
      co_await UntilStopped{step.stop_token()};
      co_return input;
    };
    co_return co_await ctx.step("slow", slow);
  });
  engine.register_workflow(kParent, [](Ctx& ctx, int input) -> Task<int> {
    co_return co_await ctx.child(kNap, fmt::format("child-of-{}", input), input);
  });
  engine.register_workflow(kPaid, [](Ctx& ctx, int) -> Task<int> {
    auto paid = ctx.awakeable<int>("paid");
    co_return co_await paid.future;
  });
  engine.register_workflow(kTwoSteps, [](Ctx& ctx, int input) -> Task<int> {
    int first = co_await ctx.step("first", [input] { return input; });
    co_return co_await ctx.step("second", [first] {
      if (first < 0) throw std::runtime_error("negative");
      return first * 2;
    });
  });
}

std::string described(const std::vector<PendingCommand>& waiting, TimePoint started) {
  std::string out;
  for (const auto& command : waiting) {
    out += fmt::format("{}:{} '{}'", command.position, command.command, command.name);
    if (command.due) out += fmt::format(" due +{} ms", milliseconds_between(started, *command.due));
    out += "; ";
  }
  return out;
}

// What each run waits on, as get_run, list_runs and query_runs say it;
// they must agree.
std::map<std::string, std::string> waits_of(Engine& engine, const std::vector<std::string>& ids) {
  std::map<std::string, std::string> by_get, by_list, by_query;
  for (const auto& id : ids) {
    auto run = engine.get_run(id);
    REQUIRE_MESSAGE(run, id);
    by_get[id] = described(run->waiting_on, run->started_at);
  }
  for (const auto& run : engine.list_runs()) {
    if (std::find(ids.begin(), ids.end(), run.id) != ids.end()) by_list[run.id] = described(run.waiting_on, run.started_at);
  }
  RunListQuery query;
  query.limit = 3;  // several pages
  for (;;) {
    auto page = engine.query_runs(query);
    for (const auto& run : page.runs) {
      if (std::find(ids.begin(), ids.end(), run.id) != ids.end()) {
        by_query[run.id] = described(run.waiting_on, run.started_at);
      }
    }
    if (page.next_cursor.empty()) break;
    query.cursor = page.next_cursor;
  }
  CHECK(by_list == by_get);
  CHECK(by_query == by_get);
  return by_get;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a running run says what it waits on -- a sleep, a signal, a step, a child, an awakeable -- and a "
                   "finished one nothing",
                   M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_all(*engine);
  (void)engine->start(kNap, "nap-1", 1);
  (void)engine->start(kAwait, "await-1", 1);
  (void)engine->start(kSlow, "slow-1", 1);
  (void)engine->start(kParent, "parent-1", 1);
  (void)engine->start(kPaid, "paid-1", 1);
  const std::vector<std::string> ids{"nap-1", "await-1", "slow-1", "parent-1", "paid-1", "child-of-1"};
  const std::map<std::string, std::string> expected{
      {"nap-1", "0:sleep 'nap' due +3600000 ms; "},
      {"await-1", "0:wait_for 'go' due +300000 ms; "},
      {"slow-1", "0:step 'slow'; "},
      {"parent-1", "0:child 'child-of-1'; "},
      {"paid-1", "0:awakeable 'paid'; "},
      {"child-of-1", "0:sleep 'nap' due +3600000 ms; "},
  };
  bool reached = eventually([&] { return waits_of(*engine, ids) == expected; });
  CHECK(waits_of(*engine, ids) == expected);
  REQUIRE(reached);
  // Once they end, nothing.
  engine->signal("await-1", kGo, 2);
  CHECK(result_of(engine, kAwait, "await-1") == 3);
  CHECK(engine->get_run("await-1")->waiting_on.empty());
  for (const auto& id : {"slow-1", "nap-1"}) {
    CAPTURE(id);
    engine->cancel(id, "no need");
    REQUIRE(eventually([&] { return engine->get_run(id)->status != RunStatus::running; }));
    CHECK(engine->get_run(id)->waiting_on.empty());
  }
}

TEST_CASE_TEMPLATE("a parked run says what it waits on and which version it runs, also after a reopen", M, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = std::chrono::seconds(10);
  auto engine = harness.open(config);
  register_all(*engine);
  (void)engine->start(kNap, "nap-1", 1);
  (void)engine->start(kAwait, "await-1", 1);
  const std::vector<std::string> ids{"nap-1", "await-1"};
  const std::map<std::string, std::string> expected{
      {"nap-1", "0:sleep 'nap' due +3600000 ms; "},
      {"await-1", "0:wait_for 'go' due +300000 ms; "},
  };
  REQUIRE(eventually([&] { return waits_of(*engine, ids) == expected; }));
  const auto version = engine->get_run("nap-1")->version;
  CHECK(version != 0);
  REQUIRE(eventually([&] {
    harness.clock().advance(std::chrono::seconds(11));
    engine->checkpoint();
    return engine->stats().runs_parked == 2;
  }));
  CHECK(waits_of(*engine, ids) == expected);
  CHECK(engine->get_run("nap-1")->version == version);
  // Reopened: the parked runs are read from the run store's rows alone.
  engine->shutdown();
  engine = harness.open(config);
  register_all(*engine);
  CHECK(waits_of(*engine, ids) == expected);
  for (const auto& id : ids) {
    CAPTURE(id);
    CHECK(engine->get_run(id)->version == version);
    auto page = engine->query_runs(RunListQuery{});
    auto found = std::find_if(page.runs.begin(), page.runs.end(), [&](const RunInfo& run) { return run.id == id; });
    REQUIRE(found != page.runs.end());
    CHECK(found->version == version);
  }
  // Woken, it goes on and says so.
  engine->signal("await-1", kGo, 2);
  CHECK(result_of(engine, kAwait, "await-1") == 3);
  CHECK(engine->get_run("await-1")->waiting_on.empty());
}

TEST_CASE_TEMPLATE("a stuck run says where its code left its journal, and stops saying it once it ends", M, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  {
    auto engine = harness.open();
    register_all(*engine);
    (void)engine->start(kAwait, "s-1", 1);
    REQUIRE(eventually([&] { return engine->journal_json("s-1").find("wait_started") != std::string::npos; }));
    engine->shutdown();
  }
  auto config = harness.config();
  config.warn = [](const std::string&) {};
  auto engine = harness.open(config);
  // The new code asks for a step where the journal has the wait.
  engine->register_workflow(kAwait, [](Ctx& ctx, int input) -> Task<int> {
    co_await ctx.step("first", [input] { return input; });
    co_return co_await ctx.step("second", [input] { return input; });
  }, kGo);
  REQUIRE(eventually([&] { return engine->get_run("s-1")->status == RunStatus::stuck; }));
  CHECK(engine->get_run("s-1")->stuck_position == std::optional<std::uint32_t>(0));
  CHECK(engine->get_run("s-1")->waiting_on.empty());
  RunListQuery stuck;
  stuck.status = RunStatus::stuck;
  auto page = engine->query_runs(stuck);
  REQUIRE(page.runs.size() == 1);
  CHECK(page.runs[0].stuck_position == std::optional<std::uint32_t>(0));
  engine->cancel("s-1", "give up");
  REQUIRE(eventually([&] { return engine->get_run("s-1")->status == RunStatus::cancelled; }));
  CHECK(!engine->get_run("s-1")->stuck_position);
}

TEST_CASE_TEMPLATE("the engine counts runs started, finished and failed and steps completed, a reset's copies not", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_all(*engine);
  const auto before = engine->stats();
  CHECK(before.runs_started == 0);
  for (int n = 1; n <= 4; ++n) {
    (void)engine->start(kTwoSteps, fmt::format("ok-{}", n), n);
    CHECK(result_of(engine, kTwoSteps, fmt::format("ok-{}", n)) == 2 * n);
  }
  (void)engine->start(kTwoSteps, "bad-1", -1);
  REQUIRE(eventually([&] { return engine->get_run("bad-1")->status == RunStatus::failed; }));
  auto stats = engine->stats();
  CHECK(stats.runs_started == 5);
  CHECK(stats.runs_finished == 5);
  CHECK(stats.runs_failed == 1);
  CHECK(stats.steps_completed == 9);  // bad-1's second step failed
  // A reset starts a generation and runs the step past the cut; the step
  // it keeps is a copy, not a step completed again.
  const auto first_started = engine->get_run("ok-1")->started_at;
  harness.clock().advance(std::chrono::seconds(5));
  engine->reset("ok-1", ResetPoint::after("first"), "again");
  REQUIRE(eventually([&] { return engine->get_run("ok-1")->generation == 2 &&
                                  engine->get_run("ok-1")->status == RunStatus::completed; }));
  stats = engine->stats();
  // The run_reset says when the generation it ended began.
  auto journal = boost::json::parse(engine->journal_json("ok-1")).as_object();
  bool found_reset = false;
  for (const auto& record : journal.at("records").as_array()) {
    if (record.at("kind") != "run_reset") continue;
    found_reset = true;
    CHECK(record.at("value").at("started_ms").to_number<std::int64_t>() ==
          std::chrono::duration_cast<std::chrono::milliseconds>(first_started.time_since_epoch()).count());
  }
  CHECK(found_reset);
  CHECK(stats.runs_started == 6);
  CHECK(stats.runs_finished == 6);
  CHECK(stats.steps_completed == 10);
  // Replay at open counts nothing.
  if (M::mode == Mode::memory) return;
  engine->shutdown();
  engine = harness.open();
  register_all(*engine);
  CHECK(engine->stats().runs_started == 0);
  CHECK(engine->stats().steps_completed == 0);
}

TEST_CASE("activity history: each reading after the first is one sample of the differences, ten minutes kept") {
  detail::ActivityHistory history;
  const TimePoint start{std::chrono::seconds(1'000'000)};
  EngineStats totals;
  totals.runs_started = 10;
  totals.batches_written = 100;
  history.read(start, totals);
  CHECK(history.samples().empty());  // the first reading is the baseline
  totals.runs_started = 13;
  totals.runs_finished = 2;
  totals.runs_failed = 1;
  totals.steps_completed = 7;
  totals.batches_written = 104;
  totals.flush_latency_counts[1] = 2;  // <= 100 us
  totals.flush_latency_counts[3] = 1;  // <= 500 us
  totals.flush_latency_counts[5] = 1;  // <= 2000 us
  totals.flush_latency_sum_us = 2'400;
  history.read(start + std::chrono::milliseconds(1'003), totals);
  auto samples = history.samples();
  REQUIRE(samples.size() == 1);
  CHECK(samples[0].interval == std::chrono::milliseconds(1'003));
  CHECK(samples[0].runs_started == 3);
  CHECK(samples[0].runs_finished == 2);
  CHECK(samples[0].runs_failed == 1);
  CHECK(samples[0].steps_completed == 7);
  CHECK(samples[0].flushes == 4);
  CHECK(samples[0].flush_mean_us == 600);
  CHECK(samples[0].flush_p50_us == 100);
  CHECK(samples[0].flush_p99_us == kFlushLatencyBoundsUs[5]);
  // A reading at or before the last one (a clock stepped back) is no
  // sample, and nothing counts twice.
  history.read(start, totals);
  CHECK(history.samples().size() == 1);
  // A quiet second: zeros, no flush figures.
  history.read(start + std::chrono::milliseconds(2'003), totals);
  samples = history.samples();
  REQUIRE(samples.size() == 2);
  CHECK(samples[1].runs_started == 0);
  CHECK(samples[1].flush_p99_us == 0);
  for (int second = 3; second < 1'000; ++second) {
    totals.steps_completed += 1;
    history.read(start + std::chrono::seconds(second), totals);
  }
  samples = history.samples();
  CHECK(samples.size() == detail::ActivityHistory::kSamplesMax);
  CHECK(samples.back().at == start + std::chrono::seconds(999));
  CHECK(samples.back().steps_completed == 1);
}

TEST_CASE("activity history: a quantile is the bound of the bucket that reaches it; past the last bound, the last") {
  std::array<std::uint64_t, kFlushLatencyBoundsUs.size() + 1> counts{};
  CHECK(detail::histogram_quantile_us(counts, 0.5) == 0);
  counts[0] = 99;
  counts.back() = 1;
  CHECK(detail::histogram_quantile_us(counts, 0.5) == kFlushLatencyBoundsUs[0]);
  CHECK(detail::histogram_quantile_us(counts, 0.99) == kFlushLatencyBoundsUs[0]);
  CHECK(detail::histogram_quantile_us(counts, 1.0) == kFlushLatencyBoundsUs.back());
}

TEST_CASE_TEMPLATE("Engine::activity has a sample a second of what the engine did", M, InMemory, OnDisk) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_all(*engine);
  for (int n = 1; n <= 3; ++n) {
    (void)engine->start(kTwoSteps, fmt::format("ok-{}", n), n);
    CHECK(result_of(engine, kTwoSteps, fmt::format("ok-{}", n)) == 2 * n);
  }
  // The sampler reads the totals once a second (wall time): wait for the
  // reading that holds the three runs.
  auto summed = [&] {
    std::uint64_t started = 0, steps = 0, finished = 0;
    for (const auto& sample : engine->activity()) {
      started += sample.runs_started;
      steps += sample.steps_completed;
      finished += sample.runs_finished;
    }
    return std::make_tuple(started, steps, finished);
  };
  REQUIRE(eventually([&] { return std::get<0>(summed()) == 3 && std::get<2>(summed()) == 3; }));
  CHECK(summed() == std::make_tuple(std::uint64_t{3}, std::uint64_t{6}, std::uint64_t{3}));
  auto samples = engine->activity();
  for (std::size_t k = 1; k < samples.size(); ++k) CHECK(samples[k - 1].at < samples[k].at);
}
}
