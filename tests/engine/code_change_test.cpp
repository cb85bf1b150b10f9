// Exactly once across code changes and misuse (issue 35): a patch put in
// front of a step that was in flight when the process stopped leaves that
// step its position and key; patched() keeps one answer per patch id per
// run; a step function that calls Ctx is refused with an error naming it; a
// stuck run takes signals; a started step nobody awaits runs to its end
// before the run does.
#include <doctest/doctest.h>

#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tests/engine/engine_harness.hpp"
#include "tests/engine/gate.hpp"
#include "tests/engine/waits_workflow.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, std::string> kPay{"pay"};
const Signal<int> kGo{"go"};

// What the outside world saw: the keys each step's function ran under.
struct Ledger {
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> keys;  // step -> keys, one per call
  CallCounter calls;
  void note(const std::string& step, const std::string& key) {
    {
      std::lock_guard lock(mu);
      keys[step].push_back(key);
    }
    calls.add();
  }
  std::vector<std::string> of(const std::string& step) {
    std::lock_guard lock(mu);
    return keys[step];
  }
};

// Old code: quote, then charge. The charge notes its key, then waits -- an
// outside call that has not answered when the process stops.
void register_old_pay(Engine& engine, Ledger& ledger) {
  engine.register_workflow(kPay, [&ledger](Ctx& ctx, int input) -> Task<std::string> {
    auto quote = [input] { return input * 10; };
    int price = co_await ctx.step("quote", quote);
    auto charge = [&ledger, price](StepContext& step) -> Task<int> {
      ledger.note("charge", step.key());
      co_await UntilStopped{step.stop_token()};
      co_return price;
    };
    int charged = co_await ctx.step("charge", charge);
    co_return "charged " + std::to_string(charged);
  });
}

// New code: a fraud check under a patch before the charge, a receipt under
// another after it. The result says which patches the run took.
void register_new_pay(Engine& engine, Ledger& ledger) {
  engine.register_workflow(kPay, [&ledger](Ctx& ctx, int input) -> Task<std::string> {
    auto quote = [input] { return input * 10; };
    int price = co_await ctx.step("quote", quote);
    std::string path;
    if (ctx.patched("fraud")) {
      auto fraud = [&ledger](StepContext& step) {
        ledger.note("fraud", step.key());
        return true;
      };
      (void)co_await ctx.step("fraud", fraud);
      path += "fraud ";
    }
    auto charge = [&ledger, price](StepContext& step) {
      ledger.note("charge", step.key());
      return price;
    };
    int charged = co_await ctx.step("charge", charge);
    if (ctx.patched("receipt")) path += "receipt ";
    co_return path + "charged " + std::to_string(charged);
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a patch put before a step in flight at a clean stop leaves the step its position and key", M,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  Ledger ledger;
  {
    auto engine = harness.open();
    register_old_pay(*engine, ledger);
    (void)engine->start(kPay, "p-1", 1);
    ledger.calls.require(1);  // the charge is under way
    engine->shutdown();       // a routine deploy
  }
  auto engine = harness.open();
  register_new_pay(*engine, ledger);
  // The old code had begun the charge: the fraud check is not put before it
  // (the step keeps its key, a provider that deduplicates by key charges
  // once), and the receipt, which the old code never reached, is taken.
  CHECK(result_of(engine, kPay, "p-1") == "receipt charged 10");
  auto charges = ledger.of("charge");
  REQUIRE(charges.size() == 2);
  CHECK(charges[0] == charges[1]);
  CHECK(ledger.of("fraud").empty());
  // A run that starts on the new code takes both.
  (void)engine->start(kPay, "p-2", 1);
  CHECK(result_of(engine, kPay, "p-2") == "fraud receipt charged 10");
}
}

namespace {

const WorkflowRef<int, std::string> kLoop{"loop"};

// Three rounds of work, each waiting for "go". Stage 0 has no patch; stage
// 1 puts "extra" under a patch inside the loop.
void register_loop(Engine& engine, int stage) {
  engine.register_workflow(kLoop, [stage](Ctx& ctx, int) -> Task<std::string> {
    std::string path;
    for (int round = 0; round < 3; ++round) {
      if (stage >= 1 && ctx.patched("extra")) {
        auto extra = [] { return 1; };
        (void)co_await ctx.step("extra", extra);
        path += "new ";
      } else {
        path += "old ";
      }
      auto work = [round] { return round; };
      (void)co_await ctx.step("work", work);
      (void)co_await ctx.wait_for(kGo);
    }
    co_return path;
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("patched keeps one answer per patch id per run: in a loop a run never mixes the paths", M, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  {
    auto engine = harness.open();
    register_loop(*engine, 0);
    (void)engine->start(kLoop, "old", 0);
    engine->signal("old", kGo, 1, "go-1");
    // Two rounds done on the old code; the run waits in the second.
    CHECK(eventually([&] {
      auto journal = boost::json::parse(engine->journal_json("old")).as_object();
      return journal.at("commands").as_array().size() >= 4;
    }));
    engine->shutdown();
  }
  auto engine = harness.open();
  register_loop(*engine, 1);
  engine->signal("old", kGo, 2, "go-2");
  engine->signal("old", kGo, 3, "go-3");
  // The first call found the old code past it: false, and so every later
  // call in this run, also the live third round's.
  CHECK(result_of(engine, kLoop, "old") == "old old old ");
  (void)engine->start(kLoop, "new", 0);
  for (int k = 1; k <= 3; ++k) engine->signal("new", kGo, k, "n-" + std::to_string(k));
  CHECK(result_of(engine, kLoop, "new") == "new new new ");
  // The new run journaled one marker, at the first call.
  auto journal = boost::json::parse(engine->journal_json("new")).as_object();
  int markers = 0;
  for (const auto& record : journal.at("records").as_array()) markers += record.at("kind") == "patch_marked" ? 1 : 0;
  CHECK(markers == 1);
  // And replays so after a restart.
  engine->shutdown();
  engine = harness.open();
  register_loop(*engine, 1);
  CHECK(result_of(engine, kLoop, "new") == "new new new ");
  CHECK(result_of(engine, kLoop, "old") == "old old old ");
}
}

namespace {

const WorkflowRef<int, std::string> kMisuse{"misuse"};

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a step function that calls Ctx is refused at once, with an error that names the step", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  Gate resumed;
  CallCounter suspended;  // the coroutine step began
  engine->register_workflow(kMisuse, [&resumed, &suspended](Ctx& ctx, int which) -> Task<std::string> {
    if (which == 0) {
      // A plain step asks for the time.
      auto plain = [&ctx] {
        (void)ctx.now().start();
        return 0;
      };
      try {
        (void)co_await ctx.step("stamp", plain);
      } catch (const Error& error) {
        co_return std::string(error.what());
      }
      co_return "accepted";
    }
    if (which == 1) {
      // A plain step starts a step of its own.
      auto nested = [&ctx] {
        auto inner = [] { return 1; };
        (void)ctx.step("inner", inner).start();
        return 0;
      };
      try {
        (void)co_await ctx.step("outer", nested);
      } catch (const Error& error) {
        co_return std::string(error.what());
      }
      co_return "accepted";
    }
    // A coroutine step asks for a patch after it suspended: it runs on the
    // test's thread then (Gate::open resumes it there).
    auto late = [&ctx, &resumed, &suspended]() -> Task<int> {
      suspended.add();
      co_await resumed.wait();
      (void)ctx.patched("late");
      co_return 0;
    };
    try {
      (void)co_await ctx.step("late", late);
    } catch (const Error& error) {
      co_return std::string(error.what());
    }
    co_return "accepted";
  });
  (void)engine->start(kMisuse, "plain", 0);
  auto plain = result_of(engine, kMisuse, "plain");
  CHECK(contains(plain, "step 'stamp' called ctx.now"));
  CHECK(contains(plain, "a step function may not use the workflow's Ctx"));
  (void)engine->start(kMisuse, "nested", 1);
  CHECK(contains(result_of(engine, kMisuse, "nested"), "step 'outer' called ctx.step"));
  (void)engine->start(kMisuse, "late", 2);
  suspended.require(1);
  REQUIRE(eventually([&] { return resumed.has_waiter(); }));  // suspended: it resumes on this thread
  resumed.open();
  auto late = result_of(engine, kMisuse, "late");
  CHECK_MESSAGE(contains(late, "ctx.patched was called from another thread"), late);
  // Nothing of the refused calls was journaled: the runs replay as they ran.
  if (M::mode != Mode::memory) {
    engine->shutdown();
    engine = harness.open();
    engine->register_workflow(kMisuse, [](Ctx&, int) -> Task<std::string> { co_return "replayed"; });
    for (const char* id : {"plain", "nested", "late"}) CHECK(engine->get_run(id)->status == RunStatus::completed);
  }
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a stuck run takes signals, and the fixed code finds them", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  {
    auto engine = harness.open();
    register_waits(*engine, "a");
    (void)engine->start(kWaits, "s-1", 1);
    require_waiting(*engine, "s-1");  // the journal has step "a"
    engine->shutdown();
  }
  {
    auto config = harness.config();
    config.warn = [](const std::string&) {};
    auto engine = harness.open(config);
    register_waits(*engine, "renamed");  // the replay diverges: stuck
    error_message(errc::nondeterminism, [&] { (void)result_of(engine, kWaits, "s-1"); });
    REQUIRE(engine->get_run("s-1")->status == RunStatus::stuck);
    engine->signal("s-1", kGo, 41, "go-1");  // taken, not "it has finished"
    engine->signal("s-1", kGo, 41, "go-1");  // a repeat is acknowledged
    engine->shutdown();
  }
  auto engine = harness.open();
  register_waits(*engine, "a");
  CHECK(result_of(engine, kWaits, "s-1") == 42);
  // A finished run still refuses them, saying so.
  auto message = error_message(errc::not_found, [&] { engine->signal("s-1", kGo, 1, "go-2"); });
  CHECK(contains(message, "has finished"));
}
}

namespace {

const WorkflowRef<int, int> kLeaves{"leaves"};

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a started step nobody awaits runs to its end, once, before the run ends", M, InMemory, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  CallCounter sent;
  Gate reply;
  CallCounter entered;
  engine->register_workflow(kLeaves, [&sent, &reply, &entered](Ctx& ctx, int) -> Task<int> {
    auto notify = [&sent, &reply, &entered]() -> Task<int> {
      entered.add();
      co_await reply.wait();
      sent.add();
      co_return 1;
    };
    auto dropped = ctx.step("notify", notify).start();  // never awaited
    (void)dropped;
    auto timer = ctx.sleep("later", std::chrono::hours(1)).start();  // let go at the end
    (void)timer;
    co_return 7;
  });
  (void)engine->start(kLeaves, "l-1", 0);
  auto result = result_in_background(engine, kLeaves, "l-1");
  entered.require(1);
  CHECK_FALSE(result.ready(100ms));  // the run waits for its step
  CHECK(engine->get_run("l-1")->status == RunStatus::running);
  reply.open();
  CHECK(result.get() == 7);
  CHECK(sent.count() == 1);
  auto journal = boost::json::parse(engine->journal_json("l-1")).as_object();
  const auto& records = journal.at("records").as_array();
  // The step's completion comes before the run's end.
  std::vector<std::string> kinds;
  for (const auto& record : records) kinds.emplace_back(record.at("kind").as_string());
  REQUIRE(kinds.size() >= 3);
  CHECK(kinds.back() == "run_completed");
  CHECK(kinds[kinds.size() - 2] == "step_completed");
}
}

namespace {

const WorkflowRef<int, int> kCounter{"counter"};
const Signal<int> kAdd{"add"};
const Update<int, int> kInc{"inc"};
const WorkflowRef<int, int> kRounds{"rounds"};

// Counts what it is sent, continuing as new after each signal or update: 0
// ends it. An update answers the new count.
void register_counter(Engine& engine) {
  engine.register_workflow(kCounter, [](Ctx& ctx, int count) -> Task<int> {
    ctx.on_update(kInc);
    auto signal = ctx.wait_for(kAdd).start();
    auto update = ctx.next_update(kInc).start();
    std::size_t first = co_await ctx.any(signal, update);
    int by = 0;
    if (first == 0) {
      by = (co_await signal).value_or(0);
    } else {
      auto request = co_await update;
      by = request.arg;
      co_await ctx.reply(request, count + by);
    }
    if (by == 0) co_return count;
    ctx.continue_as_new(count + by);
  });
}

// An awakeable per generation, published as a query; three generations.
void register_rounds(Engine& engine) {
  engine.register_workflow(kRounds, [](Ctx& ctx, int round) -> Task<int> {
    auto paid = ctx.awakeable<int>("paid");
    ctx.on_query("token", [token = paid.token] { return token; });
    int value = co_await paid.future;
    if (round == 2) co_return value;
    ctx.continue_as_new(round + 1);
  });
}

int generation_of(Engine& engine, const std::string& id) { return static_cast<int>(engine.get_run(id)->generation); }

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("signal and update ids, and awakeable completions, are remembered across continue-as-new", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_counter(*engine);
  register_rounds(*engine);
  (void)engine->start(kCounter, "c-1", 0);
  engine->signal("c-1", kAdd, 5, "add-1");
  REQUIRE(eventually([&] { return generation_of(*engine, "c-1") == 2; }));
  // A client that lost the acknowledgement sends again: acknowledged, not counted.
  engine->signal("c-1", kAdd, 5, "add-1");
  CHECK(engine->update("c-1", kInc, 10, "inc-1") == 15);
  REQUIRE(eventually([&] { return generation_of(*engine, "c-1") == 3; }));
  CHECK(engine->update("c-1", kInc, 10, "inc-1") == 15);  // the same answer, not applied again
  engine->signal("c-1", kAdd, 5, "add-1");
  if (M::mode != Mode::memory) {
    engine->shutdown();
    engine = harness.open();
    register_counter(*engine);
    register_rounds(*engine);
    engine->signal("c-1", kAdd, 5, "add-1");
    CHECK(engine->update("c-1", kInc, 10, "inc-1") == 15);
  }
  CHECK(generation_of(*engine, "c-1") == 3);
  engine->signal("c-1", kAdd, 0, "end");
  CHECK(result_of(engine, kCounter, "c-1") == 15);
  // After the run ended, from what the last generation remembered.
  engine->signal("c-1", kAdd, 5, "add-1");
  CHECK(engine->update("c-1", kInc, 10, "inc-1") == 15);

  (void)engine->start(kRounds, "r-1", 0);
  auto first = engine->query<std::string>("r-1", "token");
  engine->complete_awakeable(first, 7);
  REQUIRE(eventually([&] { return generation_of(*engine, "r-1") == 2; }));
  engine->complete_awakeable(first, 7);  // a repeat: acknowledged
  auto message = error_message(errc::already_exists, [&] { engine->complete_awakeable(first, 8); });
  CHECK(contains(message, "already completed"));
  auto second = engine->query<std::string>("r-1", "token");
  CHECK(second != first);
  engine->complete_awakeable(second, 1);
  REQUIRE(eventually([&] { return generation_of(*engine, "r-1") == 3; }));
  engine->complete_awakeable(engine->query<std::string>("r-1", "token"), 42);
  CHECK(result_of(engine, kRounds, "r-1") == 42);
  engine->complete_awakeable(first, 7);  // two generations on, the run ended
  engine->complete_awakeable(second, 1);
}
}

namespace {

const WorkflowRef<int, int> kShop{"shop"};
const Update<int, int> kBuy{"buy"};

// Takes one update, prices it with a step that counts its calls, answers,
// then waits for "go".
void register_shop(Engine& engine, CallCounter& priced) {
  engine.register_workflow(kShop, [&priced](Ctx& ctx, int) -> Task<int> {
    ctx.on_update(kBuy);
    auto a = [] { return 1; };
    (void)co_await ctx.step("a", a);
    auto request = co_await ctx.next_update(kBuy);
    auto price = [&priced, arg = request.arg] { return arg * 1000 + priced.add(); };
    int answer = co_await ctx.step("price", price);
    co_await ctx.reply(request, answer);
    auto go = co_await ctx.wait_for(kGo);
    co_return answer + go.value_or(0);
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("after reset a repeated update id gets its first answer, and nothing runs again", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  CallCounter priced;
  auto engine = harness.open();
  register_shop(*engine, priced);
  (void)engine->start(kShop, "s-1", 0);
  CHECK(engine->update("s-1", kBuy, 66, "buy-1") == 66001);
  // Reset to before the update was taken: it was answered past the cut.
  engine->reset("s-1", ResetPoint::after("a"), "again");
  CHECK(engine->update("s-1", kBuy, 66, "buy-1") == 66001);  // not 66002
  CHECK(priced.count() == 1);
  // The new generation takes the next update, not the answered one again.
  CHECK(engine->update("s-1", kBuy, 67, "buy-2") == 67002);
  engine->signal("s-1", kGo, 0);
  CHECK(result_of(engine, kShop, "s-1") == 67002);
  CHECK(engine->update("s-1", kBuy, 66, "buy-1") == 66001);
  // Reset again to after the price: buy-2 was taken before the cut and
  // answered past it. The new code takes it again (its record is kept) and
  // answers again; its caller keeps the first answer. The wait takes the
  // "go" the dropped wait had taken (every signal is kept).
  engine->reset("s-1", ResetPoint::after("price"), "once more");
  CHECK(result_of(engine, kShop, "s-1") == 67002);
  CHECK(engine->update("s-1", kBuy, 67, "buy-2") == 67002);
  CHECK(engine->update("s-1", kBuy, 66, "buy-1") == 66001);
  CHECK(priced.count() == 2);
  if (M::mode != Mode::memory) {
    engine->checkpoint();
    engine->shutdown();
    engine = harness.open();
    register_shop(*engine, priced);
    CHECK(engine->update("s-1", kBuy, 66, "buy-1") == 66001);
    CHECK(engine->update("s-1", kBuy, 67, "buy-2") == 67002);
    CHECK(priced.count() == 2);
  }
}

TEST_CASE_TEMPLATE("reset keeps the run's deadline", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_waits(*engine, "a");
  StartOptions options;
  options.deadline = std::chrono::seconds(3);
  (void)engine->start(kWaits, "d-1", 1, options);
  // The reset names step "a": it must have completed first (a worker in
  // Remote mode runs it on its own time).
  REQUIRE(eventually([&] { return engine->journal_json("d-1").find("wait_started") != std::string::npos; }));
  engine->reset("d-1", ResetPoint::after("a"), "again");
  auto result = result_in_background(engine, kWaits, "d-1");
  advance_until_ready(harness.clock(), std::chrono::seconds(1), result);
  auto message = error_message(errc::timed_out, [&] { (void)result.get(); });
  CHECK(contains(message, "passed its deadline"));
  CHECK(engine->get_run("d-1")->generation == 2);
  if (M::mode != Mode::memory) {
    engine->shutdown();
    engine = harness.open();
    register_waits(*engine, "a");
    CHECK(engine->get_run("d-1")->status == RunStatus::failed);
  }
}
}

namespace {

const WorkflowRef<int, std::string> kTimed{"timed"};

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("an attempt timeout on a plain step is refused where it is written, naming the step", M, InMemory) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  engine->register_workflow(kTimed, [](Ctx& ctx, int) -> Task<std::string> {
    auto plain = [] { return 1; };
    RetryPolicy policy;
    policy.attempts = 3;
    policy.attempt_timeout = std::chrono::seconds(1);
    try {
      (void)co_await ctx.step("blocking", plain).retry(policy);
    } catch (const Error& error) {
      co_return std::string(errc_name(error.error())) + ": " + error.what();
    }
    co_return "ignored";
  });
  (void)engine->start(kTimed, "t-1", 0);
  auto message = result_of(engine, kTimed, "t-1");
  CHECK(contains(message, "invalid_argument: step 'blocking': RetryPolicy::attempt_timeout needs a coroutine step"));
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("reset to a position past the journal's end is refused, and changes nothing", M, InMemory, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_waits(*engine, "a");
  (void)engine->start(kWaits, "e-1", 1);  // step a at 0, the wait at 1
  REQUIRE(eventually([&] { return engine->journal_json("e-1").find("wait_started") != std::string::npos; }));
  auto message = error_message(errc::invalid_argument, [&] { engine->reset("e-1", ResetPoint::before_position(3), "x"); });
  CHECK(contains(message, "position 3 is past its end"));
  CHECK(engine->get_run("e-1")->generation == 1);
  engine->reset("e-1", ResetPoint::before_position(2), "at the end");  // keeps every command
  CHECK(engine->get_run("e-1")->generation == 2);
  engine->signal("e-1", kGo, 41);
  CHECK(result_of(engine, kWaits, "e-1") == 42);
}
}
