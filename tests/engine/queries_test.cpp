// Queries: a running run answers from its current state through its
// handlers (Ctx::on_query), nothing journaled; a parked or reopened run
// answers after its replay registered them again; a handler cannot start a
// command; unknown queries, finished runs and bad arguments get clear errors.
#include <doctest/doctest.h>

#include <string>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<int> kAdd{"add"};
// Adds up the values of "add" signals until one is 0; answers "total" and
// "times" (the total times an argument).
const WorkflowRef<int, int> kCounter{"counter"};

void register_counter(Engine& engine) {
  engine.register_workflow(kCounter, [](Ctx& ctx, int start) -> Task<int> {
    int total = start;
    ctx.on_query("total", [&total] { return total; });
    ctx.on_query<int>("times", [&total](int factor) { return total * factor; });
    ctx.on_query("meddle", [&ctx] {
      auto nothing = [] { return 0; };
      (void)ctx.step("sneaky", nothing).start();  // refused: queries read
      return 0;
    });
    ctx.on_query("patch", [&ctx] { return ctx.patched("sneaky"); });  // refused too
    // Throws what is no std::exception: once it ended the whole process.
    ctx.on_query("odd", []() -> int { throw "not ready"; });
    for (;;) {
      auto value = co_await ctx.wait_for(kAdd);
      if (!value || *value == 0) break;
      total += *value;
    }
    co_return total;
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a query answers from the run's current state, and journals nothing", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_counter(*engine);
  (void)engine->start(kCounter, "c-1", 5);
  CHECK(engine->query<int>("c-1", "total") == 5);
  engine->signal("c-1", kAdd, 3);
  CHECK(engine->query<int>("c-1", "total") == 8);  // a signal is delivered once durable, before it returns
  CHECK(engine->query<int>("c-1", "times", 10) == 80);
  auto records = boost::json::parse(engine->journal_json("c-1")).at("records").as_array().size();
  (void)engine->query<int>("c-1", "total");
  CHECK(boost::json::parse(engine->journal_json("c-1")).at("records").as_array().size() == records);

  auto message = error_message(errc::not_found, [&] { (void)engine->query<int>("c-1", "nothing"); });
  CHECK(contains(message, "run 'c-1' has no query 'nothing' (it answers 'meddle', 'odd', 'patch', 'times', 'total')"));
  message = error_message(errc::failed, [&] { (void)engine->query<int>("c-1", "odd"); });
  CHECK(contains(message, "query 'odd' failed: it threw something that is not a std::exception"));
  message = error_message(errc::invalid_argument, [&] { (void)engine->query<int>("c-1", "meddle"); });
  CHECK(contains(message, "a query handler cannot start commands"));
  message = error_message(errc::invalid_argument, [&] { (void)engine->query<bool>("c-1", "patch"); });
  CHECK(contains(message, "a query handler cannot ask ctx.patched"));
  message = error_message(errc::invalid_argument, [&] { (void)engine->query<int>("c-1", "times", "ten"); });
  CHECK(contains(message, "does not fit its type"));
  CHECK(engine->query<int>("c-1", "total") == 8);  // the refused ones changed nothing

  engine->signal("c-1", kAdd, 0);
  CHECK(result_of(engine, kCounter, "c-1") == 8);
  message = error_message(errc::not_found, [&] { (void)engine->query<int>("c-1", "total"); });
  CHECK(contains(message, "has finished"));
  error_message(errc::not_found, [&] { (void)engine->query<int>("nobody", "total"); });
}

TEST_CASE_TEMPLATE("a parked or reopened run answers queries after its replay", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = std::chrono::seconds(10);
  {
    auto engine = harness.open(config);
    register_counter(*engine);
    (void)engine->start(kCounter, "c-1", 5);
    engine->signal("c-1", kAdd, 4);
    auto give_up = std::chrono::steady_clock::now() + kPatience;
    while (engine->stats().runs_parked == 0) {
      harness.clock().advance(std::chrono::seconds(11));
      engine->checkpoint();
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < give_up, "the run never parked");
    }
    CHECK(engine->query<int>("c-1", "total") == 9);  // woken, replayed, answered
    engine->shutdown();
  }
  auto engine = harness.open(config);
  auto message = error_message(errc::unavailable, [&] { (void)engine->query<int>("c-1", "total"); });
  CHECK(contains(message, "is not registered"));
  register_counter(*engine);
  CHECK(engine->query<int>("c-1", "total") == 9);
}
}
