// Step limits (Engine::limit, ctx.step(...).limit): at most `concurrent`
// attempts of a limit run at once across the engine's shards; permits come
// at `per_second` by the engine's clock; waiting for a permit is not an
// attempt and is counted in the stats; a run that stops while waiting or
// holding a permit gives it back; an unknown limit fails the step.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "tests/engine/engine_harness.hpp"
#include "tests/engine/gate.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kPay{"pay"};

LimitStats stats_of(Engine& engine, const std::string& name) {
  for (const auto& limit : engine.stats().limits) {
    if (limit.name == name) return limit;
  }
  FAIL("no limit " << name);
  return {};
}

// Attempts waiting for the limit now (0 before anything asked for it).
std::uint64_t waiting_for(Engine& engine, const std::string& name) {
  for (const auto& limit : engine.stats().limits) {
    if (limit.name == name) return limit.waiting;
  }
  return 0;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a limit's concurrency holds across shards; the waiting attempts run as permits come back", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  engine->limit("payments", StepLimit{.concurrent = 2});
  constexpr int kRuns = 6;
  std::array<Gate, kRuns> gates;
  std::atomic<int> in_flight{0};
  std::atomic<int> most{0};
  CallCounter began;
  engine->register_workflow(kPay, [&](Ctx& ctx, int k) -> Task<int> {
    auto charge = [&, k](StepContext& step) -> Task<int> {
      CHECK(step.attempt() == 1);  // the wait was no attempt
      int now = ++in_flight;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      began.add();
      co_await gates[static_cast<std::size_t>(k)].wait();
      --in_flight;
      co_return k;
    };
    co_return co_await ctx.step("charge", charge).limit("payments");
  });
  for (int k = 0; k < kRuns; ++k) (void)engine->start(kPay, "pay-" + std::to_string(k), k);
  REQUIRE(began.wait_for(2, kPatience));
  CHECK(eventually([&] { return waiting_for(*engine, "payments") == kRuns - 2; }));
  auto stats = stats_of(*engine, "payments");
  CHECK(stats.in_use == 2);
  CHECK(stats.limit.concurrent == 2);
  CHECK_FALSE(began.wait_for(3, kReactionTime));
  // Opening the gates lets the others through as permits come back, never
  // more than two at once (most, below).
  for (auto& gate : gates) gate.open();
  for (int k = 0; k < kRuns; ++k) CHECK(result_of(engine, kPay, "pay-" + std::to_string(k)) == k);
  CHECK(most.load() == 2);
  stats = stats_of(*engine, "payments");
  CHECK(stats.granted == kRuns);
  CHECK(stats.in_use == 0);
  CHECK(stats.waiting == 0);
  CHECK(stats.waited_us > 0);
}

TEST_CASE_TEMPLATE("permits come at the limit's rate by the engine's clock", M, InMemory, OnDisk) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  engine->limit("api", StepLimit{.per_second = 10});  // one per 100 ms
  std::mutex mu;
  std::vector<TimePoint> ran;
  engine->register_workflow(kPay, [&](Ctx& ctx, int k) -> Task<int> {
    auto call = [&, k] {
      std::lock_guard lock(mu);
      ran.push_back(harness.clock().now());
      return k;
    };
    co_return co_await ctx.step("call", call).limit("api");
  });
  auto start = harness.clock().now();
  constexpr int kRuns = 5;
  for (int k = 0; k < kRuns; ++k) (void)engine->start(kPay, "api-" + std::to_string(k), k);
  auto count = [&] {
    std::lock_guard lock(mu);
    return ran.size();
  };
  // Two at once (the pace allows one ahead), then one per 100 ms.
  CHECK(eventually([&] { return count() == 2; }));
  advance_until(harness.clock(), std::chrono::milliseconds(25), [&](std::chrono::milliseconds wait) {
    CallCounter never;
    (void)never.wait_for(1, wait);
    return count() == kRuns;
  });
  std::lock_guard lock(mu);
  std::sort(ran.begin(), ran.end());
  for (std::size_t k = 1; k < ran.size(); ++k) {
    INFO("permit " << k);
    CHECK(milliseconds_between(start, ran[k]) >= static_cast<std::int64_t>((k - 1) * 100));
  }
  CHECK(milliseconds_between(start, ran.back()) < 400);  // and not slower than the pace
}

TEST_CASE_TEMPLATE("a run cancelled while it waits for a permit gives its place up", M, InMemory, OnDisk) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  engine->limit("one", StepLimit{.concurrent = 1});
  Gate gate;
  CallCounter began;
  engine->register_workflow(kPay, [&](Ctx& ctx, int k) -> Task<int> {
    auto work = [&, k]() -> Task<int> {
      began.add();
      if (k == 0) co_await gate.wait();
      co_return k;
    };
    co_return co_await ctx.step("work", work).limit("one");
  });
  (void)engine->start(kPay, "holder", 0);
  REQUIRE(began.wait_for(1, kPatience));
  (void)engine->start(kPay, "waiter", 1);
  CHECK(eventually([&] { return waiting_for(*engine, "one") == 1; }));
  engine->cancel("waiter", "not needed");
  (void)error_message(errc::cancelled, [&] { (void)result_of(engine, kPay, "waiter"); });
  (void)engine->start(kPay, "third", 2);
  gate.open();
  CHECK(result_of(engine, kPay, "holder") == 0);
  CHECK(result_of(engine, kPay, "third") == 2);
  CHECK(began.count() == 2);  // the cancelled one never ran
  CHECK(eventually([&] { return stats_of(*engine, "one").in_use == 0; }));
  CHECK(stats_of(*engine, "one").waiting == 0);
}

TEST_CASE_TEMPLATE("a step naming a limit not set waits until it is set, and the operator is told", M, InMemory,
                   OnDisk) {
  EngineHarness harness(M::mode);
  std::mutex mu;
  std::vector<std::string> warnings;
  auto config = harness.config();
  config.warn = [&](const std::string& text) {
    std::lock_guard lock(mu);
    warnings.push_back(text);
  };
  auto engine = harness.open(config);
  engine->register_workflow(kPay, [](Ctx& ctx, int k) -> Task<int> {
    auto work = [k](StepContext& step) {
      CHECK(step.attempt() == 1);
      return k;
    };
    co_return co_await ctx.step("work", work).retry(RetryPolicy{.attempts = 1}).limit("late");
  });
  (void)engine->start(kPay, "early", 7);
  CHECK(eventually([&] { return waiting_for(*engine, "late") == 1; }));
  // The warning follows the ask: wait for it too.
  CHECK(eventually([&] {
    std::lock_guard lock(mu);
    return !warnings.empty();
  }));
  {
    std::lock_guard lock(mu);
    REQUIRE(warnings.size() == 1);
    CHECK_MESSAGE(contains(warnings[0], "step 'work' waits for limit 'late', which is not set"), warnings[0]);
  }
  engine->limit("late", StepLimit{.concurrent = 1});
  CHECK(result_of(engine, kPay, "early") == 7);
  (void)error_message(errc::invalid_argument, [&] { engine->limit("bad", StepLimit{.per_second = -1}); });
}

TEST_CASE_TEMPLATE("a run terminated while its step holds a permit gives it back", M, InMemory, OnDisk) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  engine->limit("one", StepLimit{.concurrent = 1});
  Gate gate;
  CallCounter began;
  engine->register_workflow(kPay, [&](Ctx& ctx, int k) -> Task<int> {
    auto work = [&, k]() -> Task<int> {
      began.add();
      if (k == 0) co_await gate.wait();
      co_return k;
    };
    co_return co_await ctx.step("work", work).limit("one");
  });
  (void)engine->start(kPay, "stuck", 0);
  REQUIRE(began.wait_for(1, kPatience));
  engine->terminate("stuck", "stop it");
  CHECK(eventually([&] { return stats_of(*engine, "one").in_use == 0; }));
  CHECK(engine->execute(kPay, "next", 1) == 1);
  gate.open();  // the abandoned coroutine ends; nothing waits for it
}
}
