// Concurrency inside a run: commands started with .start() are in flight
// together (coroutine steps overlap their waits, children run at once),
// Ctx::all gives results in argument order and the first failure in argument
// order once every future settled, Ctx::any gives the first to complete and
// the journal keeps that winner for replay, and a replay that waits for
// another set of commands is reported as nondeterminism.
#include <doctest/doctest.h>

#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <tuple>
#include <vector>

#include "tests/engine/engine_harness.hpp"
#include "tests/engine/gate.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<int> kGo{"go"};

// A coroutine step that counts its entry, waits at `gate`, then returns value.
auto gated_step(Gate& gate, CallCounter& entered, int value) {
  return [&gate, &entered, value]() -> Task<int> {
    entered.add();
    co_await gate.wait();
    co_return value;
  };
}

// pair: starts steps a (waits at gate a, then gives 1) and b (gate b, 2)
// together. Without `any` it returns a x 10 + b from Ctx::all. With `any` it
// notes which finished first, waits for both (counting `settled`), then for
// a "go" signal, and returns 10 x (the winner's index) + the winner's value.
struct PairGates {
  Gate a, b;
  CallCounter entered, decided, settled;
};
const WorkflowRef<bool, int> kPair{"pair"};

void register_pair(Engine& engine, PairGates& gates) {
  engine.register_workflow(kPair, [&gates](Ctx& ctx, bool any) -> Task<int> {
    auto step_a = gated_step(gates.a, gates.entered, 1);
    auto step_b = gated_step(gates.b, gates.entered, 2);
    Future<int> a = ctx.step("a", step_a).start();
    Future<int> b = ctx.step("b", step_b).start();
    if (!any) {
      auto [x, y] = co_await ctx.all(a, b);
      co_return x * 10 + y;
    }
    std::size_t first = co_await ctx.any(a, b);
    gates.decided.add();
    (void)co_await ctx.all(a, b);
    gates.settled.add();
    (void)co_await ctx.wait_for(kGo);
    int value = first == 0 ? co_await a : co_await b;
    co_return int(first) * 10 + value;
  });
}

// Runs pair "p-1" with `any` until both steps completed, b first (so the
// journal says b won), and it waits for "go"; then shuts the engine down.
void run_pair_until_go(EngineHarness& harness, PairGates& gates) {
  auto engine = harness.open();
  register_pair(*engine, gates);
  (void)engine->start(kPair, "p-1", true);
  gates.entered.require(2);
  gates.b.open();
  gates.decided.require(1);
  gates.a.open();
  gates.settled.require(1);
  engine->shutdown();
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("started steps are in flight together and all gives their results in argument order", M, InMemory,
                   OnDisk, Remote) {
  PairGates gates;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_pair(*engine, gates);

  (void)engine->start(kPair, "p-1", false);
  auto result = result_in_background(engine, kPair, "p-1");
  gates.entered.require(2);  // both steps run before either has finished
  gates.b.open();            // the second finishes first
  CHECK_FALSE(result.ready(50ms));
  gates.a.open();
  CHECK(result.get() == 12);
}

TEST_CASE_TEMPLATE("any gives the command that completed first, and the others go on", M, InMemory, OnDisk, Remote) {
  PairGates gates;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_pair(*engine, gates);

  (void)engine->start(kPair, "p-1", true);
  auto result = result_in_background(engine, kPair, "p-1");
  gates.entered.require(2);
  gates.b.open();
  gates.decided.require(1);  // any is decided; a is still in flight
  gates.a.open();
  engine->signal("p-1", kGo, 0);
  CHECK(result.get() == 12);  // b (index 1) won, with its value 2
}

TEST_CASE_TEMPLATE("a reopened run replays any's journaled winner, not the order its futures replay in", M, OnDisk,
                   Remote) {
  PairGates gates;
  EngineHarness harness(M::mode);
  run_pair_until_go(harness, gates);
  // On replay both steps complete at once, a first: only the journal says b won.
  PairGates replay_gates;
  auto engine = harness.open();
  register_pair(*engine, replay_gates);
  engine->signal("p-1", kGo, 0);
  CHECK(result_of(engine, kPair, "p-1") == 12);
  CHECK(replay_gates.entered.count() == 0);  // neither step ran again
}

TEST_CASE_TEMPLATE("all throws the first failure in argument order, once every future has settled", M, InMemory,
                   OnDisk, Remote) {
  Gate gate;
  CallCounter entered;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::string> ref{"all-fails"};
  engine->register_workflow(ref, [&](Ctx& ctx, int) -> Task<std::string> {
    auto fails = []() -> int { throw std::runtime_error("card declined"); };
    auto waits = gated_step(gate, entered, 5);
    auto later_fails = []() -> int { throw std::runtime_error("out of stock"); };
    Future<int> first = ctx.step("charge", fails).start();
    Future<int> second = ctx.step("reserve", waits).start();
    Future<int> third = ctx.step("ship", later_fails).start();
    try {
      (void)co_await ctx.all(first, second, third);
      co_return std::string("no failure");
    } catch (const Error& error) {
      co_return std::string(error.what());
    }
  });

  (void)engine->start(ref, "f-1", 0);
  auto result = result_in_background(engine, ref, "f-1");
  entered.require(1);
  CHECK_FALSE(result.ready(50ms));  // two failed, one still runs: all waits
  gate.open();
  auto message = result.get();
  CHECK(message.find("card declined") != std::string::npos);
}

TEST_CASE_TEMPLATE("children started together all run before any finishes, and all gives their outputs", M,
                   InMemory, OnDisk, Remote) {
  CallCounter children_started;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> child{"child"};
  const WorkflowRef<int, int> parent{"parent"};
  engine->register_workflow(child, [&children_started](Ctx& ctx, int input) -> Task<int> {
    children_started.add();
    auto go = co_await ctx.wait_for(kGo);
    co_return input * 100 + go.value_or(-1);
  });
  engine->register_workflow(parent, [&](Ctx& ctx, int count) -> Task<int> {
    std::vector<Future<int>> children;
    for (int index = 0; index < count; ++index)
      children.push_back(ctx.child(child, ctx.run_id() + "-" + std::to_string(index), index).start());
    auto outputs = co_await ctx.all(children);
    int sum = 0;
    for (int output : outputs) sum += output;
    co_return sum;
  });

  (void)engine->start(parent, "p-1", 4);
  auto result = result_in_background(engine, parent, "p-1");
  children_started.require(4);  // every child runs while none has finished (each waits for "go")
  for (int index = 0; index < 4; ++index) engine->signal("p-1-" + std::to_string(index), kGo, 1);
  CHECK(result.get() == (0 + 100 + 200 + 300) + 4);
}

TEST_CASE_TEMPLATE("a sleep and a signal wait started together: any gives whichever came first", M, InMemory, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> ref{"deadline"};
  engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<int> {
    Future<void> timer = ctx.sleep("patience", 1h).start();
    Future<std::optional<int>> reply = ctx.wait_for(kGo).start();
    std::size_t first = co_await ctx.any(timer, reply);
    if (first == 0) co_return -1;
    co_return (co_await reply).value_or(-2);
  });

  (void)engine->start(ref, "answered", 0);
  engine->signal("answered", kGo, 7);
  CHECK(result_of(engine, ref, "answered") == 7);

  (void)engine->start(ref, "timed-out", 0);
  auto result = result_in_background(engine, ref, "timed-out");
  advance_until_ready(harness.clock(), 30min, result);
  CHECK(result.get() == -1);
}

TEST_CASE("local mode: a replay whose any waits for other commands stops with nondeterminism naming both sets") {
  PairGates gates;
  EngineHarness harness(Mode::local);
  run_pair_until_go(harness, gates);
  auto engine = harness.open();
  engine->register_workflow(kPair, [](Ctx& ctx, bool) -> Task<int> {
    auto quick = [] { return 1; };
    Future<int> a = ctx.step("a", quick).start();
    Future<int> b = ctx.step("b", quick).start();
    (void)co_await ctx.any(b, a);  // the other way round
    co_return 0;
  });
  std::string message = error_message(errc::nondeterminism, [&] { (void)result_of(engine, kPair, "p-1"); });
  CHECK(message.find("[0, 1]") != std::string::npos);
  CHECK(message.find("[1, 0]") != std::string::npos);
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a coroutine step past its attempt timeout is asked to stop, and the retry policy tries again", M,
                   InMemory, OnDisk, Remote) {
  Gate first_attempt_gate;
  CallCounter entered;
  std::mutex tokens_mu;
  std::vector<std::stop_token> tokens;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> ref{"slow-then-quick"};
  engine->register_workflow(ref, [&](Ctx& ctx, int) -> Task<int> {
    auto call = [&](StepContext& step) -> Task<int> {
      {
        std::lock_guard lock(tokens_mu);
        tokens.push_back(step.stop_token());
      }
      entered.add();
      if (step.attempt() == 1) co_await first_attempt_gate.wait();  // an outside call that hangs
      co_return static_cast<int>(step.attempt());
    };
    RetryPolicy policy;
    policy.attempts = 3;
    policy.attempt_timeout = 30s;
    policy.initial_backoff = 1s;
    co_return co_await ctx.step("call", call).retry(policy);
  });

  (void)engine->start(ref, "t-1", 0);
  auto result = result_in_background(engine, ref, "t-1");
  entered.require(1);
  advance_until_ready(harness.clock(), 10s, result);
  CHECK(result.get() == 2);
  {
    std::lock_guard lock(tokens_mu);
    REQUIRE(tokens.size() == 2);
    CHECK(tokens[0].stop_requested());  // the abandoned attempt was asked to stop
    CHECK_FALSE(tokens[1].stop_requested());
  }
  first_attempt_gate.open();  // the first attempt ends late: its value is dropped
  CHECK(result_of(engine, ref, "t-1") == 2);
}

TEST_CASE_TEMPLATE("a step's deadline across attempts ends its retries with step_failed", M, InMemory, OnDisk, Remote) {
  CallCounter attempts;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::string> ref{"always-fails"};
  engine->register_workflow(ref, [&](Ctx& ctx, int) -> Task<std::string> {
    auto flaky = [&attempts]() -> int {
      attempts.add();
      throw std::runtime_error("supplier down");
    };
    RetryPolicy policy;
    policy.attempts = 100;
    policy.initial_backoff = 1s;
    policy.multiplier = 1.0;
    policy.deadline = 3500ms;
    try {
      co_await ctx.step("order", flaky).retry(policy);
      co_return std::string("no failure");
    } catch (const Error& error) {
      co_return std::string(errc_name(error.error())) + "|" + error.what();
    }
  });

  (void)engine->start(ref, "d-1", 0);
  auto result = result_in_background(engine, ref, "d-1");
  advance_until_ready(harness.clock(), 500ms, result);
  auto message = result.get();
  CHECK(message.starts_with("step_failed|"));
  CHECK(message.find("its deadline passed") != std::string::npos);
  // At 0, 1, 2 and 3 s when the engine keeps up with the clock (a slow
  // reaction moves a retry later); never the 100 the policy allows.
  CHECK(attempts.count() >= 2);
  CHECK(attempts.count() <= 4);
}

TEST_CASE_TEMPLATE("a future's timeout gives nothing when time runs out first, and the command goes on", M, InMemory,
                   OnDisk, Remote) {
  CallCounter timed_out;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> ref{"reply-or-not"};
  engine->register_workflow(ref, [&timed_out](Ctx& ctx, int) -> Task<int> {
    Future<std::optional<int>> reply = ctx.wait_for(kGo).start();
    auto in_time = co_await reply.timeout(1h);
    if (in_time) co_return in_time->value_or(-2);
    timed_out.add();
    // Too late for the timeout, but the wait goes on: a later signal ends it.
    auto late = co_await reply;
    co_return 1000 + late.value_or(-2);
  });

  (void)engine->start(ref, "prompt", 0);
  engine->signal("prompt", kGo, 7);
  CHECK(result_of(engine, ref, "prompt") == 7);

  (void)engine->start(ref, "slow", 0);
  auto result = result_in_background(engine, ref, "slow");
  // The timeout fires (the clock moves until it has); the run still waits.
  advance_until(harness.clock(), 30min, [&](std::chrono::milliseconds wait) { return timed_out.wait_for(1, wait); });
  CHECK_FALSE(result.ready(50ms));
  engine->signal("slow", kGo, 9);
  CHECK(result.get() == 1009);
}
}
