// Mistakes a new user makes, each answered with a clear error instead of a
// hang or a silent surprise: a blocking Engine call from a workflow or a
// step, a stream read at shutdown, a stream the run never wrote.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kInner{"inner"};
const Signal<int> kGo{"go"};

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a blocking Engine call from a step or a workflow fails at once, pointing to child runs", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  std::weak_ptr<Engine> weak = engine;
  engine->register_workflow(kInner, [](Ctx&, int input) -> Task<int> { co_return input; });
  const WorkflowRef<int, int> from_step{"from-step"};
  engine->register_workflow(from_step, [weak](Ctx& ctx, int input) -> Task<int> {
    auto call = [weak, input] { return weak.lock()->execute(kInner, "inner-" + std::to_string(input), input); };
    co_return co_await ctx.step("call", call);
  });
  const WorkflowRef<int, int> from_code{"from-code"};
  engine->register_workflow(from_code, [weak](Ctx&, int) -> Task<int> {
    (void)weak.lock()->get_run("anything");
    co_return 0;
  });
  // Every id, whichever shard it lands on: the call never gets to wait.
  for (int run = 0; run < 4; ++run) {
    auto id = "s-" + std::to_string(run);
    (void)engine->start(from_step, id, run);
    auto message = error_message(errc::step_failed, [&] { (void)result_of(engine, from_step, id); });
    CHECK(contains(message, "Engine::execute was called from a workflow or a step"));
    CHECK(contains(message, "ctx.child"));
  }
  (void)engine->start(from_code, "c-1", 0);
  auto message = error_message(errc::wrong_thread, [&] { (void)result_of(engine, from_code, "c-1"); });
  CHECK(contains(message, "Engine::get_run"));
  // From the test's thread, the same calls work.
  CHECK(engine->execute(kInner, "inner-9", 9) == 9);
}

TEST_CASE_TEMPLATE("an update or an awakeable completion from a step fails at once instead of waiting on a shard", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  std::weak_ptr<Engine> weak = engine;
  const Update<int, int> kPoke{"poke"};
  const WorkflowRef<int, int> target{"target"};
  engine->register_workflow(target, [kPoke](Ctx& ctx, int) -> Task<int> {
    ctx.on_update(kPoke);
    auto request = co_await ctx.next_update(kPoke);
    co_await ctx.reply(request, request.arg);
    co_return request.arg;
  });
  const WorkflowRef<int, int> updater{"updater"};
  engine->register_workflow(updater, [weak, kPoke](Ctx& ctx, int) -> Task<int> {
    auto call = [weak, kPoke] { return weak.lock()->update("t-1", kPoke, 1); };
    co_return co_await ctx.step("call", call);
  });
  const WorkflowRef<int, int> completer{"completer"};
  engine->register_workflow(completer, [weak](Ctx& ctx, int) -> Task<int> {
    auto call = [weak] {
      weak.lock()->complete_awakeable("awk1.00.0.00000000000000000000000000000000", 1);
      return 0;
    };
    co_return co_await ctx.step("call", call);
  });
  (void)engine->start(target, "t-1", 0);
  for (int run = 0; run < 4; ++run) {
    auto id = "u-" + std::to_string(run);
    (void)engine->start(updater, id, run);
    CHECK(contains(error_message(errc::step_failed, [&] { (void)result_of(engine, updater, id); }),
                   "Engine::update was called from a workflow or a step"));
    id = "a-" + std::to_string(run);
    (void)engine->start(completer, id, run);
    CHECK(contains(error_message(errc::step_failed, [&] { (void)result_of(engine, completer, id); }),
                   "Engine::complete_awakeable was called from a workflow or a step"));
  }
  CHECK(engine->update("t-1", kPoke, 7) == 7);  // from the test's thread it works
}

TEST_CASE_TEMPLATE("a stream read waiting at shutdown ends with shut_down, as its header says", M, InMemory, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> waits{"waits"};
  engine->register_workflow(waits, [](Ctx& ctx, int) -> Task<int> {
    co_await ctx.stream("out").write(1);
    auto go = co_await ctx.wait_for(kGo);
    co_return go.value_or(0);
  });
  (void)engine->start(waits, "w-1", 0);
  auto reader = std::make_shared<StreamReader>(engine->read_stream("w-1", "out"));
  auto first = next_of(reader);
  REQUIRE(first.has_value());
  CHECK(first->offset == 0);
  auto pending = std::async(std::launch::async, [reader] { return reader->next(); });
  engine->shutdown();
  try {
    (void)pending.get();
    FAIL("next() returned at shutdown");
  } catch (const Error& error) {
    CHECK(error.error() == errc::shut_down);
  }
}

TEST_CASE_TEMPLATE("a finished run's stream that was never written reads as empty, not as missing", M, InMemory, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  engine->register_workflow(kInner, [](Ctx&, int input) -> Task<int> { co_return input; });
  CHECK(engine->execute(kInner, "i-1", 1) == 1);
  auto reader = engine->read_stream("i-1", "never");
  CHECK_FALSE(reader.next().has_value());
  engine->checkpoint();  // local mode: the finished run leaves memory for the run store
  auto stored = engine->read_stream("i-1", "never");
  CHECK_FALSE(stored.next().has_value());
  error_message(errc::not_found, [&] { (void)engine->read_stream("nobody", "never"); });
}
}
