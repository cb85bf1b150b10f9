// Signals in memory and local mode: wait_for with and without a timeout, delivery order and buffering, dedup by signal id, unknown and finished runs, and signals across a reopen.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<std::string> kApprove{"approve"};
const Signal<std::string> kData{"data"};

// Waits for `count` values of "data", in order.
const WorkflowRef<int, std::vector<std::string>> kCollect{"collect"};

void register_collect(Engine& engine) {
  engine.register_workflow(kCollect, [](Ctx& ctx, int count) -> Task<std::vector<std::string>> {
    std::vector<std::string> values;
    for (int i = 0; i < count; ++i) {
      std::optional<std::string> value = co_await ctx.wait_for(kData);
      values.push_back(value.value_or("<none>"));
    }
    co_return values;
  });
}

// Waits for "approve" for at most `timeout_ms`; returns the value or
// "timed out after <ms the run saw pass>".
const WorkflowRef<int, std::string> kApproveWithin{"approve-within"};

void register_approve_within(Engine& engine) {
  engine.register_workflow(kApproveWithin, [](Ctx& ctx, int timeout_ms) -> Task<std::string> {
    TimePoint before = co_await ctx.now();
    std::optional<std::string> value = co_await ctx.wait_for(kApprove).timeout(std::chrono::milliseconds(timeout_ms));
    TimePoint after = co_await ctx.now();
    if (value) co_return *value;
    co_return "timed out after " + std::to_string(milliseconds_between(before, after));
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("wait_for returns the value a signal sent", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_collect(*engine);

  (void)engine->start(kCollect, "c-1", 1);
  engine->signal("c-1", kData, std::string("hello"));
  CHECK(result_of(engine, kCollect, "c-1") == std::vector<std::string>{"hello"});
}

TEST_CASE_TEMPLATE("signals of one name reach successive wait_for calls in the order they were sent", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_collect(*engine);

  (void)engine->start(kCollect, "c-1", 4);
  for (const char* value : {"one", "two", "three", "four"}) engine->signal("c-1", kData, std::string(value));
  CHECK(result_of(engine, kCollect, "c-1") == std::vector<std::string>{"one", "two", "three", "four"});
}

TEST_CASE_TEMPLATE("a signal sent before the run waits for it is kept, and names do not mix", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::string> ref{"approve-then-data"};
  engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<std::string> {
    std::optional<std::string> approval = co_await ctx.wait_for(kApprove);
    std::optional<std::string> data = co_await ctx.wait_for(kData);
    co_return approval.value_or("?") + "+" + data.value_or("?");
  });

  (void)engine->start(ref, "ad-1", 0);
  engine->signal("ad-1", kData, std::string("payload"));  // before the run waits for "data"
  engine->signal("ad-1", kApprove, std::string("yes"));
  CHECK(result_of(engine, ref, "ad-1") == "yes+payload");
}

TEST_CASE_TEMPLATE("wait_for with a timeout returns nothing once the timeout passes on the engine clock", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_approve_within(*engine);

  (void)engine->start(kApproveWithin, "a-1", 60'000);
  auto pending = result_in_background(engine, kApproveWithin, "a-1");
  CHECK_FALSE(pending.ready(50ms));  // the clock stands still: the timeout cannot pass
  advance_until_ready(harness.clock(), 15s, pending);
  std::string out = pending.get();
  REQUIRE(contains(out, "timed out after "));
  CHECK(std::stoll(out.substr(std::string("timed out after ").size())) >= 60'000);
}

TEST_CASE_TEMPLATE("wait_for with a timeout returns the value when the signal comes in time", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_approve_within(*engine);

  (void)engine->start(kApproveWithin, "a-1", 60'000);
  engine->signal("a-1", kApprove, std::string("approved"));
  CHECK(result_of(engine, kApproveWithin, "a-1") == "approved");
}

TEST_CASE_TEMPLATE("the timeout of a wait that got its signal never fires into a later wait", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::vector<std::string>> ref{"two-waits"};
  engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<std::vector<std::string>> {
    std::optional<std::string> first = co_await ctx.wait_for(kData).timeout(1min);
    std::optional<std::string> second = co_await ctx.wait_for(kData);
    co_return std::vector<std::string>{first.value_or("<none>"), second.value_or("<none>")};
  });

  (void)engine->start(ref, "tw-1", 0);
  engine->signal("tw-1", kData, std::string("in time"));
  auto pending = result_in_background(engine, ref, "tw-1");
  harness.clock().advance(2min);  // the first wait's timeout is due now
  CHECK_FALSE(pending.ready(50ms));
  engine->signal("tw-1", kData, std::string("later"));
  CHECK(pending.get() == std::vector<std::string>{"in time", "later"});
}

TEST_CASE_TEMPLATE("a signal id is delivered once however often it is sent", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_collect(*engine);

  (void)engine->start(kCollect, "c-1", 3);
  engine->signal("c-1", kData, std::string("first"), "sig-1");
  engine->signal("c-1", kData, std::string("first again"), "sig-1");  // acknowledged, dropped
  engine->signal("c-1", kData, std::string("second"), "sig-2");
  engine->signal("c-1", kData, std::string("second again"), "sig-2");
  engine->signal("c-1", kData, std::string("third"));  // no id: never deduplicated
  CHECK(result_of(engine, kCollect, "c-1") == std::vector<std::string>{"first", "second", "third"});
}

TEST_CASE_TEMPLATE("a signal id is deduplicated per run, not across runs", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_collect(*engine);

  (void)engine->start(kCollect, "c-1", 1);
  (void)engine->start(kCollect, "c-2", 1);
  engine->signal("c-1", kData, std::string("to one"), "shared-id");
  engine->signal("c-2", kData, std::string("to two"), "shared-id");
  CHECK(result_of(engine, kCollect, "c-1") == std::vector<std::string>{"to one"});
  CHECK(result_of(engine, kCollect, "c-2") == std::vector<std::string>{"to two"});
}

TEST_CASE_TEMPLATE("signals without an id are all delivered, even with equal values", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_collect(*engine);

  (void)engine->start(kCollect, "c-1", 2);
  engine->signal("c-1", kData, std::string("same"));
  engine->signal("c-1", kData, std::string("same"));
  CHECK(result_of(engine, kCollect, "c-1") == std::vector<std::string>{"same", "same"});
}

TEST_CASE_TEMPLATE("a signal to an unknown run throws not_found", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_collect(*engine);

  std::string message =
      error_message(errc::not_found, [&] { engine->signal("nobody-17", kData, std::string("x")); });
  CHECK(contains(message, "nobody-17"));
}

TEST_CASE_TEMPLATE("a signal to a finished run throws not_found", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_collect(*engine);

  (void)engine->start(kCollect, "c-1", 0);
  CHECK(result_of(engine, kCollect, "c-1").empty());
  error_message(errc::not_found, [&] { engine->signal("c-1", kData, std::string("late")); });
}

TEST_CASE("local mode: an acknowledged signal survives a shutdown and reaches the run after a reopen") {
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_collect(*engine);
    (void)engine->start(kCollect, "c-1", 2);
    engine->signal("c-1", kData, std::string("before shutdown"), "sig-1");
    engine->shutdown();
  }
  auto engine = harness.open();
  register_collect(*engine);
  engine->signal("c-1", kData, std::string("duplicate after reopen"), "sig-1");  // still deduplicated
  engine->signal("c-1", kData, std::string("after reopen"), "sig-2");
  CHECK(result_of(engine, kCollect, "c-1") == std::vector<std::string>{"before shutdown", "after reopen"});
}

TEST_CASE("local mode: a signal to a run whose workflow is not registered yet after a reopen is kept") {
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_collect(*engine);
    (void)engine->start(kCollect, "c-1", 1);
    engine->shutdown();
  }
  auto engine = harness.open();
  engine->signal("c-1", kData, std::string("early"));
  register_collect(*engine);
  CHECK(result_of(engine, kCollect, "c-1") == std::vector<std::string>{"early"});
}

TEST_CASE("local mode: a wait_for timeout keeps its due time across a reopen and replays as timed out") {
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, std::string> ref{"timeout-then-data"};
  CallCounter armed, timed_out_seen;
  auto register_it = [&](Engine& engine) {
    engine.register_workflow(ref, [&armed, &timed_out_seen](Ctx& ctx, int) -> Task<std::string> {
      co_await ctx.step("about-to-wait", [&armed] { armed.add(); });
      std::optional<std::string> approval = co_await ctx.wait_for(kApprove).timeout(1min);
      if (!approval) timed_out_seen.add();
      std::optional<std::string> data = co_await ctx.wait_for(kData);
      co_return approval.value_or("<timed out>") + "+" + data.value_or("<none>");
    });
  };
  {
    auto engine = harness.open();
    register_it(*engine);
    (void)engine->start(ref, "t-1", 0);
    armed.require(1);
    engine->shutdown();
  }
  harness.clock().advance(2min);  // the timeout came due while the engine was down
  {
    auto engine = harness.open();
    register_it(*engine);
    timed_out_seen.require(1);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_it(*engine);
  engine->signal("t-1", kApprove, std::string("too late"));
  engine->signal("t-1", kData, std::string("payload"));
  CHECK(result_of(engine, ref, "t-1") == "<timed out>+payload");
  CHECK(timed_out_seen.count() == 2);  // the second reopen replays the recorded timeout
}
}
