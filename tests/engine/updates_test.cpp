// Updates: a run declares the updates it takes (Ctx::on_update, with an
// optional validator), its code takes them in order (Ctx::next_update) and
// answers them (Ctx::reply); the caller gets the answer once durable. A
// refused update records nothing; the same update id gets the same answer,
// across a reopen and after the run ended; update-with-start starts the run
// first; an update reaches a parked run; unanswered updates fail when the
// run ends.
#include <doctest/doctest.h>

#include <future>
#include <string>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

// An order's quantity: "set_quantity" changes it (refused once shipped or
// when not positive) and answers the new quantity after a journaled step;
// "ship" ends the run after answering; "ignore" is declared and never taken.
const WorkflowRef<int, int> kOrder{"order"};
const Update<int, int> kSetQuantity{"set_quantity"};
const Update<std::string, void> kShip{"ship"};
const Update<int, int> kIgnored{"ignore"};
const Update<int, int> kOdd{"odd"};  // its validator throws what is no std::exception

struct Counters {
  std::atomic<int> steps{0};
  // Set by the "ignore" validator: the update is accepted in the same turn
  // of its shard, ahead of any request sent after this is seen.
  std::promise<void> ignore_checked;
  std::atomic<bool> ignore_seen{false};
};

void register_order(Engine& engine, Counters& counters) {
  engine.register_workflow(kOrder, [&counters](Ctx& ctx, int quantity) -> Task<int> {
    bool shipped = false;
    ctx.on_query("quantity", [&quantity] { return quantity; });
    ctx.on_update(kSetQuantity, [&shipped](const int& wanted) -> std::string {
      if (shipped) return "the order has shipped";
      return wanted > 0 ? "" : "the quantity must be positive";
    });
    ctx.on_update(kShip);
    ctx.on_update(kOdd, [](const int&) -> std::string { throw 42; });
    ctx.on_update(kIgnored, [&counters](const int&) {
      if (!counters.ignore_seen.exchange(true)) counters.ignore_checked.set_value();
      return std::string();
    });
    auto change = ctx.next_update(kSetQuantity).start();
    auto ship = ctx.next_update(kShip).start();
    for (;;) {
      auto first = co_await ctx.any(change, ship);
      if (first == 1) break;
      auto request = co_await change;
      auto record = [&counters, wanted = request.arg] {
        ++counters.steps;
        return wanted;
      };
      quantity = co_await ctx.step("record quantity", record);
      if (quantity == 13) {
        co_await ctx.reply_error(request, "13 is unlucky");
      } else {
        co_await ctx.reply(request, quantity);
      }
      change = ctx.next_update(kSetQuantity).start();
    }
    auto request = co_await ship;
    shipped = true;
    co_await ctx.reply(request);
    co_return quantity;
  });
}

std::size_t record_count(Engine& engine, const std::string& id) {
  return boost::json::parse(engine.journal_json(id)).at("records").as_array().size();
}

bool has_record(Engine& engine, const std::string& id, const std::string& kind) {
  auto journal = boost::json::parse(engine.journal_json(id));
  for (const auto& record : journal.at("records").as_array()) {
    if (record.at("kind").as_string() == kind) return true;
  }
  return false;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("an update is validated, journaled, taken by the code and answered once durable", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  Counters counters;
  auto engine = harness.open();
  register_order(*engine, counters);
  (void)engine->start(kOrder, "o-1", 1);
  CHECK(engine->update("o-1", kSetQuantity, 5, "u-1") == 5);
  CHECK(engine->query<int>("o-1", "quantity") == 5);
  CHECK(has_record(*engine, "o-1", "update_accepted"));
  CHECK(has_record(*engine, "o-1", "update_taken"));
  CHECK(has_record(*engine, "o-1", "update_answered"));

  // Refused ones record nothing.
  auto records = record_count(*engine, "o-1");
  auto message = error_message(errc::rejected, [&] { (void)engine->update("o-1", kSetQuantity, 0); });
  CHECK(contains(message, "run 'o-1' rejected update 'set_quantity': the quantity must be positive"));
  message = error_message(errc::not_found, [&] { (void)engine->update("o-1", Update<int, int>("nothing"), 1); });
  CHECK(contains(message, "run 'o-1' takes no update 'nothing' (it takes 'ignore', 'odd', 'set_quantity', 'ship')"));
  // Once it ended the whole process (terminate: 'int').
  message = error_message(errc::rejected, [&] { (void)engine->update("o-1", kOdd, 1); });
  CHECK(contains(message, "the validator of update 'odd' failed: it threw something that is not a std::exception"));
  message = error_message(errc::invalid_argument, [&] {
    (void)engine->update("o-1", Update<std::string, int>("set_quantity"), std::string("five"));
  });
  CHECK(contains(message, "does not fit its type"));
  CHECK(record_count(*engine, "o-1") == records);

  // The code's own failure reaches the caller as errc::failed.
  message = error_message(errc::failed, [&] { (void)engine->update("o-1", kSetQuantity, 13); });
  CHECK(contains(message, "update 'set_quantity' failed: 13 is unlucky"));

  // The same id: the same answer, and the step did not run again.
  int steps = counters.steps;
  CHECK(engine->update("o-1", kSetQuantity, 7, "u-1") == 5);
  CHECK(counters.steps == steps);
  CHECK(engine->query<int>("o-1", "quantity") == 13);

  engine->update("o-1", kShip, std::string("now"));
  CHECK(result_of(engine, kOrder, "o-1") == 13);
  // After the end: the same answer for a known id, a clear refusal otherwise.
  CHECK(engine->update("o-1", kSetQuantity, 8, "u-1") == 5);
  message = error_message(errc::not_found, [&] { (void)engine->update("o-1", kSetQuantity, 8, "u-new"); });
  CHECK(contains(message, "run 'o-1' has finished; it takes no more updates"));
  error_message(errc::not_found, [&] { (void)engine->update("nobody", kSetQuantity, 8); });
}

TEST_CASE_TEMPLATE("an update the run ends without answering fails, and says so again for its id", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  Counters counters;
  auto engine = harness.open();
  register_order(*engine, counters);
  (void)engine->start(kOrder, "o-2", 1);
  Background<int> waiting([engine] { return engine->update("o-2", kIgnored, 1, "never"); });
  // Accepted (journaled) before the run ends: its validator ran, and the
  // ship update, sent after, reaches the same shard after it.
  REQUIRE(counters.ignore_checked.get_future().wait_for(kPatience) == std::future_status::ready);
  engine->update("o-2", kShip, std::string("now"));
  auto message = error_message(errc::failed, [&] { (void)waiting.get(); });
  CHECK(contains(message, "run 'o-2' ended before it answered update 'ignore' (id 'never')"));
  engine->checkpoint();  // the answers go to the run store with the finished run
  message = error_message(errc::failed, [&] { (void)engine->update("o-2", kIgnored, 1, "never"); });
  CHECK(contains(message, "ended before it answered"));
}

TEST_CASE_TEMPLATE("an update's id gets the same answer after a reopen and from the run store", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  Counters counters;
  {
    auto engine = harness.open();
    register_order(*engine, counters);
    (void)engine->start(kOrder, "o-3", 1);
    CHECK(engine->update("o-3", kSetQuantity, 4, "u-4") == 4);
    engine->shutdown();
  }
  {
    auto engine = harness.open();
    register_order(*engine, counters);
    int steps = counters.steps;
    CHECK(engine->update("o-3", kSetQuantity, 9, "u-4") == 4);
    CHECK(engine->update("o-3", kSetQuantity, 6, "u-6") == 6);
    CHECK(counters.steps == steps + 1);
    engine->update("o-3", kShip, std::string("now"));
    CHECK(result_of(engine, kOrder, "o-3") == 6);
    engine->checkpoint();
    engine->shutdown();
  }
  auto engine = harness.open();
  register_order(*engine, counters);
  CHECK(engine->update("o-3", kSetQuantity, 1, "u-4") == 4);
  CHECK(engine->update("o-3", kSetQuantity, 1, "u-6") == 6);
}

TEST_CASE_TEMPLATE("update-with-start starts the run, then delivers the update", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  Counters counters;
  auto engine = harness.open();
  register_order(*engine, counters);
  CHECK(engine->update_with_start(kOrder, "o-4", 1, kSetQuantity, 3) == 3);
  CHECK(engine->get_run("o-4")->status == RunStatus::running);
  // A running run is attached to (the input is not used).
  CHECK(engine->update_with_start(kOrder, "o-4", 100, kSetQuantity, 4) == 4);
  StartOptions reject;
  reject.if_running = IfRunning::reject;
  error_message(errc::already_exists,
                [&] { (void)engine->update_with_start(kOrder, "o-4", 1, kSetQuantity, 5, "", reject); });
  CHECK(engine->query<int>("o-4", "quantity") == 4);
  auto message = error_message(errc::unknown_workflow, [&] {
    (void)engine->update_with_start(WorkflowRef<int, int>("nothing"), "o-5", 1, kSetQuantity, 5);
  });
  CHECK(contains(message, "no workflow named 'nothing'"));
}

TEST_CASE_TEMPLATE("an update wakes a parked run, which replays and takes it", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  Counters counters;
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = std::chrono::seconds(10);
  auto engine = harness.open(config);
  register_order(*engine, counters);
  // A run waiting only on updates: one next_update at a time.
  const WorkflowRef<int, int> kSimple{"simple"};
  engine->register_workflow(kSimple, [](Ctx& ctx, int start) -> Task<int> {
    ctx.on_update(kSetQuantity);
    auto request = co_await ctx.next_update(kSetQuantity);
    co_await ctx.reply(request, request.arg + start);
    co_return request.arg;
  });
  (void)engine->start(kSimple, "p-1", 100);
  auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (engine->stats().runs_parked == 0) {
    harness.clock().advance(std::chrono::seconds(11));
    engine->checkpoint();
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < give_up, "the run never parked");
  }
  CHECK(engine->update("p-1", kSetQuantity, 5) == 105);
  CHECK(result_of(engine, kSimple, "p-1") == 5);
}
}
