// Durable timers in memory and local mode, driven by a ManualClock: sleep, deadlines, and timers that come due while the engine is shut down.
#include <doctest/doctest.h>

#include <string>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<std::string> kGo{"go"};

// Sleeps `ms` and returns how long the run saw pass (journaled now()). A
// step before the sleep tells the test the run got that far.
const WorkflowRef<std::int64_t, std::int64_t> kNap{"nap"};

void register_nap(Engine& engine, CallCounter& reached_sleep) {
  engine.register_workflow(kNap, [&reached_sleep](Ctx& ctx, std::int64_t ms) -> Task<std::int64_t> {
    TimePoint before = co_await ctx.now();
    co_await ctx.step("about-to-sleep", [&reached_sleep] { reached_sleep.add(); });
    co_await ctx.sleep("nap", std::chrono::milliseconds(ms));
    TimePoint after = co_await ctx.now();
    co_return milliseconds_between(before, after);
  });
}

// Waits for "go" forever; returns its value.
const WorkflowRef<int, std::string> kAwaitGo{"await-go"};

void register_await_go(Engine& engine) {
  engine.register_workflow(kAwaitGo, [](Ctx& ctx, int) -> Task<std::string> {
    std::optional<std::string> value = co_await ctx.wait_for(kGo);
    co_return value.value_or("<none>");
  });
}

constexpr std::int64_t kMinute = 60'000;
constexpr std::int64_t kHour = 60 * kMinute;

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("sleep resumes the run only once the engine clock has passed its duration", M, InMemory, OnDisk, Remote) {
  CallCounter reached_sleep;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_nap(*engine, reached_sleep);

  (void)engine->start(kNap, "n-1", kHour);
  auto pending = result_in_background(engine, kNap, "n-1");
  reached_sleep.require(1);
  CHECK_FALSE(pending.ready(50ms));  // the clock stands still: the timer cannot fire
  advance_until_ready(harness.clock(), 10min, pending);
  CHECK(pending.get() >= kHour);
}

TEST_CASE_TEMPLATE("sleep_until fires at its time by the engine clock, and at once for a time passed", M, InMemory,
                   OnDisk) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<std::int64_t, std::int64_t> until{"until"};
  engine->register_workflow(until, [](Ctx& ctx, std::int64_t at_ms) -> Task<std::int64_t> {
    auto due = TimePoint(std::chrono::milliseconds(at_ms));
    co_await ctx.sleep_until("at", due);
    co_return std::chrono::duration_cast<std::chrono::milliseconds>((co_await ctx.now()).time_since_epoch()).count();
  });
  auto start_ms = std::chrono::duration_cast<std::chrono::milliseconds>(harness.clock().now().time_since_epoch()).count();
  // Passed already: at once, the clock standing still.
  (void)engine->start(until, "past", start_ms - kHour);
  CHECK(result_of(engine, until, "past") == start_ms);
  (void)engine->start(until, "later", start_ms + kHour);
  auto pending = result_in_background(engine, until, "later");
  CHECK_FALSE(pending.ready(50ms));
  advance_until_ready(harness.clock(), 10min, pending);
  CHECK(pending.get() >= start_ms + kHour);
}

TEST_CASE_TEMPLATE("a zero-length sleep completes without the clock moving", M, InMemory, OnDisk, Remote) {
  CallCounter reached_sleep;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_nap(*engine, reached_sleep);

  (void)engine->start(kNap, "n-0", std::int64_t{0});
  CHECK(result_of(engine, kNap, "n-0") == 0);
}

TEST_CASE_TEMPLATE("a short sleep wakes without waiting for a longer one in another run", M, InMemory, OnDisk, Remote) {
  CallCounter reached_sleep;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_nap(*engine, reached_sleep);

  (void)engine->start(kNap, "long", 10 * kHour);
  (void)engine->start(kNap, "short", kHour);
  auto long_nap = result_in_background(engine, kNap, "long");
  auto short_nap = result_in_background(engine, kNap, "short");
  reached_sleep.require(2);
  advance_until_ready(harness.clock(), 15min, short_nap);
  CHECK(short_nap.get() >= kHour);
  CHECK_FALSE(long_nap.ready(kReactionTime));
  advance_until_ready(harness.clock(), 15min, long_nap);
  CHECK(long_nap.get() >= 10 * kHour);
}

TEST_CASE_TEMPLATE("a run cancelled while it sleeps runs none of its code when its timer comes due", M, InMemory,
                   OnDisk, Remote) {
  CallCounter reached_sleep, after_sleep;
  EngineHarness harness(M::mode, 1);
  auto engine = harness.open();
  register_nap(*engine, reached_sleep);
  const WorkflowRef<int, int> nap_then_step{"nap-then-step"};
  engine->register_workflow(nap_then_step, [&after_sleep](Ctx& ctx, int) -> Task<int> {
    co_await ctx.sleep("nap", 1h);
    co_return co_await ctx.step("after-sleep", [&after_sleep] { return after_sleep.add(); });
  });

  (void)engine->start(nap_then_step, "cancelled", 0);
  engine->cancel("cancelled", "no longer needed");
  error_message(errc::cancelled, [&] { (void)result_of(engine, nap_then_step, "cancelled"); });
  // Another run on the only shard with a timer due at the same time: once it
  // has woken, the cancelled run's timer came due too.
  (void)engine->start(kNap, "witness", kHour);
  auto witness = result_in_background(engine, kNap, "witness");
  advance_until_ready(harness.clock(), 30min, witness);
  CHECK(witness.get() >= kHour);
  CHECK(after_sleep.count() == 0);
  error_message(errc::cancelled, [&] { (void)result_of(engine, nap_then_step, "cancelled"); });
}

TEST_CASE_TEMPLATE("a deadline fails a run that has not finished with timed_out", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_await_go(*engine);
  StartOptions options;
  options.deadline = 10s;

  (void)engine->start(kAwaitGo, "d-1", 0, options);
  auto pending = result_in_background(engine, kAwaitGo, "d-1");
  CHECK_FALSE(pending.ready(50ms));
  advance_until_ready(harness.clock(), 1s, pending);
  error_message(errc::timed_out, [&] { (void)pending.get(); });

  std::vector<RunInfo> runs = engine->list_runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].status != RunStatus::running);
  CHECK(runs[0].status != RunStatus::completed);
  REQUIRE(runs[0].finished_at.has_value());
  CHECK(milliseconds_between(runs[0].started_at, *runs[0].finished_at) >= 10'000);
  error_message(errc::not_found, [&] { engine->signal("d-1", kGo, std::string("too late")); });
}

TEST_CASE_TEMPLATE("a run that finishes before its deadline keeps its result after the deadline passes", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_await_go(*engine);
  StartOptions options;
  options.deadline = 10s;

  (void)engine->start(kAwaitGo, "d-1", 0, options);
  engine->signal("d-1", kGo, std::string("in time"));
  CHECK(result_of(engine, kAwaitGo, "d-1") == "in time");
  harness.clock().advance(20s);
  CHECK(result_of(engine, kAwaitGo, "d-1") == "in time");
  CHECK(engine->list_runs().at(0).status == RunStatus::completed);
}

TEST_CASE("local mode: a timer that came due while the engine was shut down fires at the next open") {
  CallCounter reached_sleep;
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_nap(*engine, reached_sleep);
    (void)engine->start(kNap, "n-1", kHour);
    reached_sleep.require(1);
    engine->shutdown();
  }
  harness.clock().advance(2h);  // past the due time, with no engine running
  auto engine = harness.open();
  register_nap(*engine, reached_sleep);
  // The clock does not move again: the recorded due time has passed, so the
  // timer fires on its own, and the run sees exactly the two hours.
  CHECK(result_of(engine, kNap, "n-1") == 2 * kHour);
  CHECK(reached_sleep.count() == 1);
}

TEST_CASE("local mode: a sleep cut by a shutdown keeps its due time across the reopen") {
  CallCounter reached_sleep;
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_nap(*engine, reached_sleep);
    (void)engine->start(kNap, "n-1", kHour);
    reached_sleep.require(1);
    engine->shutdown();
  }
  harness.clock().advance(50min);
  auto engine = harness.open();
  register_nap(*engine, reached_sleep);
  auto pending = result_in_background(engine, kNap, "n-1");
  advance_until_ready(harness.clock(), 5min, pending);
  // Due an hour after the sleep began, not an hour after the reopen (110 min).
  std::int64_t slept = pending.get();
  CHECK(slept >= kHour);
  CHECK(slept < 100 * kMinute);
}

TEST_CASE("local mode: a deadline counts from the run's start across a reopen") {
  EngineHarness harness(Mode::local);
  StartOptions options;
  options.deadline = 10s;
  {
    auto engine = harness.open();
    register_await_go(*engine);
    (void)engine->start(kAwaitGo, "d-1", 0, options);
    engine->shutdown();
  }
  harness.clock().advance(11s);
  auto engine = harness.open();
  register_await_go(*engine);
  error_message(errc::timed_out, [&] { (void)result_of(engine, kAwaitGo, "d-1"); });
}
}
