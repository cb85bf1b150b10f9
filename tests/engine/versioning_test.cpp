// Changing a workflow's code under running runs: a run whose code diverges
// from its journal is `stuck` everywhere it shows (get, list, the status
// filter) and warned about once; a cancel of a stuck run is durable; patches
// (Ctx::patched, Ctx::deprecate_patch) let new code take a new path only in
// runs that reach it with the new code.
#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<int> kGo{"go"};
const WorkflowRef<int, int> kFlow{"flow"};

// step "a", wait for "go", step "b": the code every run here starts with.
void register_original(Engine& engine) {
  engine.register_workflow(kFlow, [](Ctx& ctx, int input) -> Task<int> {
    auto a = [input] { return input + 1; };
    int x = co_await ctx.step("a", a);
    auto go = co_await ctx.wait_for(kGo);
    auto b = [x] { return x * 10; };
    co_return co_await ctx.step("b", b) + go.value_or(0);
  });
}

// The same, with step "a" renamed: a replay of an original run diverges.
void register_renamed(Engine& engine) {
  engine.register_workflow(kFlow, [](Ctx& ctx, int input) -> Task<int> {
    auto a = [input] { return input + 1; };
    int x = co_await ctx.step("a2", a);
    co_return x;
  });
}

// Config::warn's lines, kept.
struct Warnings {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mu);
      lines.push_back(line);
    };
  }
  std::vector<std::string> matching(const std::string& part) {
    std::lock_guard lock(mu);
    std::vector<std::string> out;
    for (const auto& line : lines) {
      if (line.find(part) != std::string::npos) out.push_back(line);
    }
    return out;
  }
};

// Starts "r-1" with the original code, then reopens with the renamed code.
std::shared_ptr<Engine> reopen_stuck(EngineHarness& harness, Warnings& warnings) {
  {
    auto engine = harness.open();
    register_original(*engine);
    (void)engine->start(kFlow, "r-1", 1);
    require_waiting(*engine, "r-1");  // the journal has step "a"
    engine->shutdown();
  }
  auto config = harness.config();
  config.warn = warnings.sink();
  auto engine = harness.open(config);
  register_renamed(*engine);
  error_message(errc::nondeterminism, [&] { (void)result_of(engine, kFlow, "r-1"); });
  return engine;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a run whose code diverged is stuck in get and list, and the operator is told once", M, OnDisk,
                   Remote) {
  Warnings warnings;  // outlives the harness, whose engines warn until they shut down
  EngineHarness harness(M::mode);
  auto engine = reopen_stuck(harness, warnings);
  auto info = engine->get_run("r-1");
  REQUIRE(info.has_value());
  CHECK(info->status == RunStatus::stuck);
  CHECK(contains(info->error, "position 0"));
  CHECK(contains(info->error, "step 'a'"));
  CHECK(contains(info->error, "step 'a2'"));
  RunFilter stuck;
  stuck.status = RunStatus::stuck;
  auto listed = engine->list_runs(stuck);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].id == "r-1");
  RunFilter running;
  running.status = RunStatus::running;
  CHECK(engine->list_runs(running).empty());
  auto lines = warnings.matching("r-1");
  REQUIRE(lines.size() == 1);
  CHECK(contains(lines[0], "step 'a2'"));
  CHECK(contains(lines[0], "stuck"));
}

TEST_CASE_TEMPLATE("a cancel of a stuck run ends it durably: the next open with fixed code finds it cancelled", M,
                   OnDisk, Remote) {
  Warnings warnings;  // outlives the harness, whose engines warn until they shut down
  EngineHarness harness(M::mode);
  {
    auto engine = reopen_stuck(harness, warnings);
    engine->cancel("r-1", "bad deploy");
    auto message = error_message(errc::cancelled, [&] { (void)result_of(engine, kFlow, "r-1"); });
    CHECK(contains(message, "was cancelled while stuck"));
    CHECK(engine->get_run("r-1")->status == RunStatus::cancelled);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_original(*engine);
  CHECK(engine->get_run("r-1")->status == RunStatus::cancelled);
  error_message(errc::cancelled, [&] { (void)result_of(engine, kFlow, "r-1"); });
}

TEST_CASE_TEMPLATE("a stuck run goes on once the journal's code is back", M, OnDisk, Remote) {
  Warnings warnings;  // outlives the harness, whose engines warn until they shut down
  EngineHarness harness(M::mode);
  {
    auto engine = reopen_stuck(harness, warnings);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_original(*engine);
  CHECK(engine->get_run("r-1")->status == RunStatus::running);
  engine->signal("r-1", kGo, 5);
  CHECK(result_of(engine, kFlow, "r-1") == 25);
}
}

namespace {

// Waits for "go" (declared as a Signal<int> when `declare`), and returns
// its value; a value that does not convert gives -1.
const WorkflowRef<int, int> kTyped{"typed"};

void register_typed(Engine& engine, bool declare) {
  auto code = [](Ctx& ctx, int) -> Task<int> {
    try {
      auto go = co_await ctx.wait_for(kGo);
      co_return go.value_or(0);
    } catch (const Error& error) {
      if (error.error() != errc::invalid_argument) throw;
    }
    co_return -1;
  };
  if (declare) {
    engine.register_workflow(kTyped, code, kGo);
  } else {
    engine.register_workflow(kTyped, code);
  }
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a declared signal whose value does not fit, or an undeclared one, is refused before it is recorded",
                   M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_typed(*engine, true);
  (void)engine->start(kTyped, "t-1", 0);
  auto message = error_message(errc::invalid_argument, [&] {
    engine->signal_json("t-1", "go", boost::json::value("ten"));
  });
  CHECK(contains(message, "signal 'go': the value \"ten\" does not fit the type workflow 'typed' takes"));
  message = error_message(errc::invalid_argument, [&] { engine->signal_json("t-1", "stop", 1); });
  CHECK(contains(message, "workflow 'typed' takes no signal 'stop' (it takes 'go')"));
  engine->signal("t-1", kGo, 7);  // the refused ones left nothing behind
  CHECK(result_of(engine, kTyped, "t-1") == 7);
}

TEST_CASE_TEMPLATE("an undeclared signal's value that does not fit throws an error the workflow can catch", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_typed(*engine, false);
  (void)engine->start(kTyped, "t-1", 0);
  engine->signal_json("t-1", "go", boost::json::value("ten"));
  CHECK(result_of(engine, kTyped, "t-1") == -1);
}

TEST_CASE_TEMPLATE("a run replays on the version it started with; without that code it is stuck until it comes", M,
                   OnDisk, Remote) {
  Warnings warnings;  // outlives the harness
  EngineHarness harness(M::mode);
  {
    auto engine = harness.open();
    register_original(*engine);  // version 1
    (void)engine->start(kFlow, "r-1", 1);
    CHECK(engine->get_run("r-1")->version == 1);
    engine->shutdown();
  }
  auto config = harness.config();
  config.warn = warnings.sink();
  auto engine = harness.open(config);
  engine->register_workflow(kFlow, 2, [](Ctx& ctx, int input) -> Task<int> {
    auto renamed = [input] { return input + 100; };
    co_return co_await ctx.step("a2", renamed);
  });
  // The old run waits for its code, visibly; new runs take version 2.
  auto info = engine->get_run("r-1");
  REQUIRE(info.has_value());
  CHECK(info->status == RunStatus::stuck);
  CHECK(info->version == 1);
  CHECK(contains(info->error, "version 1 of workflow 'flow'"));
  CHECK(warnings.matching("r-1").size() == 1);
  CHECK(engine->execute(kFlow, "r-2", 1) == 101);
  CHECK(engine->get_run("r-2")->version == 2);
  // Version 1's code comes back: the old run goes on with it.
  engine->register_workflow(kFlow, 1, [](Ctx& ctx, int input) -> Task<int> {
    auto a = [input] { return input + 1; };
    int x = co_await ctx.step("a", a);
    auto go = co_await ctx.wait_for(kGo);
    auto b = [x] { return x * 10; };
    co_return co_await ctx.step("b", b) + go.value_or(0);
  });
  engine->signal("r-1", kGo, 5);
  CHECK(result_of(engine, kFlow, "r-1") == 25);
  CHECK(engine->get_run("r-1")->version == 1);
  error_message(errc::invalid_argument, [&] {
    engine->register_workflow(kFlow, 2, [](Ctx&, int) -> Task<int> { co_return 0; });
  });
}
}

namespace {

const WorkflowRef<int, int> kPatched{"patched"};

// step "a", then (stage 1) the bonus step only under ctx.patched("bonus"),
// (stage 2) always, after deprecate_patch; then wait for "go", step "b".
// The original (stage 0) has no bonus step at all.
void register_stage(Engine& engine, int stage) {
  engine.register_workflow(kPatched, [stage](Ctx& ctx, int input) -> Task<int> {
    auto a = [input] { return input + 1; };
    int x = co_await ctx.step("a", a);
    bool bonus = false;
    if (stage == 1) bonus = ctx.patched("bonus");
    if (stage == 2) {
      ctx.deprecate_patch("bonus");
      bonus = true;
    }
    if (bonus) {
      auto add = [x] { return x + 1000; };
      x = co_await ctx.step("bonus", add);
    }
    auto go = co_await ctx.wait_for(kGo);
    auto b = [x] { return x * 10; };
    co_return co_await ctx.step("b", b) + go.value_or(0);
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a patch: runs from before it keep the old path, new runs take the new one, and neither flips", M,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  {
    auto engine = harness.open();
    register_stage(*engine, 0);
    (void)engine->start(kPatched, "old", 1);  // waits for "go" past the patch point
    // The start is acknowledged once durable, before its code runs: until
    // the run waits for "go" it has not passed the patch point, and the next
    // code would decide it (under load the shutdown came first, and "old"
    // took the new path).
    require_waiting(*engine, "old");
    engine->shutdown();
  }
  {
    auto engine = harness.open();
    register_stage(*engine, 1);
    (void)engine->start(kPatched, "new", 1);  // reaches the patch point with the new code
    engine->shutdown();
  }
  {
    // Both replay on stage 1's code: each keeps its path.
    auto engine = harness.open();
    register_stage(*engine, 1);
    engine->signal("old", kGo, 0);
    engine->signal("new", kGo, 0);
    CHECK(result_of(engine, kPatched, "old") == 20);
    CHECK(result_of(engine, kPatched, "new") == 10020);
    (void)engine->start(kPatched, "waits", 1);  // has the marker, and waits
    require_waiting(*engine, "waits");
    engine->shutdown();
  }
  // Stage 2: only the new path; a run with the marker still finds it.
  auto engine = harness.open();
  register_stage(*engine, 2);
  engine->signal("waits", kGo, 0);
  CHECK(result_of(engine, kPatched, "waits") == 10020);
  (void)engine->start(kPatched, "fresh", 1);  // records no marker, takes the new path
  engine->signal("fresh", kGo, 3);
  CHECK(result_of(engine, kPatched, "fresh") == 10023);
}
}

namespace {

boost::json::object journal_of(Engine& engine, const std::string& id) {
  return boost::json::parse(engine.journal_json(id)).as_object();
}

// The commands of a journal: "command name outcome" each.
std::vector<std::string> commands_of(const boost::json::object& journal) {
  std::vector<std::string> out;
  for (const auto& command : journal.at("commands").as_array()) {
    const auto& entry = command.as_object();
    out.push_back(std::string(entry.at("command").as_string()) + " " + std::string(entry.at("name").as_string()) +
                  " " + std::string(entry.at("outcome").as_string()));
  }
  return out;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a run's journal reads the same running, finished, checkpointed and reopened", M, InMemory, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_original(*engine);
  (void)engine->start(kFlow, "r-1", 1);
  auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (commands_of(journal_of(*engine, "r-1")).size() < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  CHECK(commands_of(journal_of(*engine, "r-1")) ==
        std::vector<std::string>{"step a completed", "wait_for go waiting"});
  engine->signal("r-1", kGo, 5);
  CHECK(result_of(engine, kFlow, "r-1") == 25);
  const std::vector<std::string> finished{"step a completed", "wait_for go completed", "step b completed"};
  auto journal = journal_of(*engine, "r-1");
  CHECK(commands_of(journal) == finished);
  const auto& records = journal.at("records").as_array();
  CHECK(records.front().at("kind") == "run_started");
  CHECK(records.back().at("kind") == "run_completed");
  CHECK(journal.at("commands").as_array()[0].at("value") == 2);
  CHECK(journal.at("commands").as_array()[0].at("attempts") == 1);
  engine->checkpoint();  // local and remote mode: the run leaves memory for the run store
  CHECK(commands_of(journal_of(*engine, "r-1")) == finished);
  if (M::mode != Mode::memory) {
    engine->shutdown();
    engine = harness.open();
    CHECK(commands_of(journal_of(*engine, "r-1")) == finished);
  }
  error_message(errc::not_found, [&] { (void)engine->journal_json("nobody"); });
}

TEST_CASE_TEMPLATE("a run's journal says when each command began and ended and how long each step attempt ran", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> kTimed{"timed"};
  // The step holds until the test lets it go, and times itself on the
  // monotonic clock: the journaled attempt took at least that, whatever the
  // engine clock (manual here) says.
  std::promise<void> entered;
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<std::int64_t> held_us{0};
  engine->register_workflow(kTimed, [&entered, released, &held_us](Ctx& ctx, int input) -> Task<int> {
    auto slow = [input, &entered, released, &held_us] {
      const auto began = std::chrono::steady_clock::now();
      entered.set_value();
      released.wait();
      held_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began).count();
      return input + 1;
    };
    int x = co_await ctx.step("slow", slow);
    auto go = co_await ctx.wait_for(kGo);
    co_return x + go.value_or(0);
  });
  const std::int64_t started_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(harness.clock().now().time_since_epoch()).count();
  // In local mode the step runs ahead of the start's flush, and the start
  // is answered once it returns: started from a thread.
  Background<StartOutcome> start([&engine, &kTimed] { return engine->start(kTimed, "t-1", 1); });
  REQUIRE(entered.get_future().wait_for(kPatience) == std::future_status::ready);
  release.set_value();
  CHECK(start.get() == StartOutcome::started);
  auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (commands_of(journal_of(*engine, "t-1")).size() < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  harness.clock().advance(std::chrono::seconds(5));
  engine->signal("t-1", kGo, 10);
  CHECK(result_of(engine, kTimed, "t-1") == 12);
  auto check = [&](const boost::json::object& journal) {
    const auto& commands = journal.at("commands").as_array();
    REQUIRE(commands.size() == 2);
    const auto& step = commands[0].as_object();
    CHECK(step.at("took_us").to_number<std::int64_t>() >= held_us.load());
    CHECK(step.at("last_at_ms") == started_ms);  // the engine clock did not move during it
    CHECK(step.at("began_at_ms").to_number<std::int64_t>() <= started_ms);
    const auto& wait = commands[1].as_object();
    CHECK(wait.at("began_at_ms") == started_ms);
    CHECK(wait.at("last_at_ms") == started_ms + 5000);
    CHECK_FALSE(wait.contains("took_us"));
    for (const auto& record : journal.at("records").as_array()) {
      CHECK(record.at("at_ms").to_number<std::int64_t>() >= started_ms);
    }
  };
  check(journal_of(*engine, "t-1"));
  engine->checkpoint();
  check(journal_of(*engine, "t-1"));
  if (M::mode != Mode::memory) {
    engine->shutdown();
    engine = harness.open();
    check(journal_of(*engine, "t-1"));
  }
}

TEST_CASE_TEMPLATE("with keep_finished_journals off, a finished run keeps its summary and no journal", M, OnDisk,
                   Remote) {
  EngineHarness harness(M::mode);
  auto config = harness.config();
  config.keep_finished_journals = false;
  auto engine = harness.open(config);
  register_original(*engine);
  (void)engine->start(kFlow, "r-1", 1);
  engine->signal("r-1", kGo, 5);
  CHECK(result_of(engine, kFlow, "r-1") == 25);
  engine->checkpoint();
  auto message = error_message(errc::not_found, [&] { (void)engine->journal_json("r-1"); });
  CHECK(contains(message, "keep_finished_journals"));
  CHECK(engine->get_run("r-1")->status == RunStatus::completed);
}
}

namespace {

const WorkflowRef<int, int> kBilling{"billing"};

// quote (counted), then charge: broken (throws) or fixed.
void register_billing(Engine& engine, std::uint32_t version, bool fixed, CallCounter& quotes) {
  engine.register_workflow(kBilling, version, [fixed, &quotes](Ctx& ctx, int input) -> Task<int> {
    auto quote = [&quotes, input] {
      quotes.add();
      return input * 10;
    };
    int price = co_await ctx.step("quote", quote);
    auto charge = [fixed, price]() -> int {
      if (!fixed) throw std::runtime_error("charge: off by one");
      return price + 1;
    };
    co_return co_await ctx.step("charge", charge);
  });
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("reset: a failed run runs again from after a step on the code registered now", M, InMemory, OnDisk,
                   Remote) {
  CallCounter quotes;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_billing(*engine, 1, false, quotes);
  (void)engine->start(kBilling, "b-1", 4);
  error_message(errc::step_failed, [&] { (void)result_of(engine, kBilling, "b-1"); });
  engine->checkpoint();  // local and remote: the finished run and its journal go to the run store
  register_billing(*engine, 2, true, quotes);  // the fix
  engine->reset("b-1", ResetPoint::after("quote"), "charge fixed");
  CHECK(result_of(engine, kBilling, "b-1") == 41);
  CHECK(quotes.count() == 1);  // the kept quote was not run again
  auto info = engine->get_run("b-1");
  REQUIRE(info.has_value());
  CHECK(info->generation == 2);
  CHECK(info->version == 2);
  CHECK(info->status == RunStatus::completed);
  // The new generation's journal says where it came from, and keeps the old one's dropped records.
  auto journal = journal_of(*engine, "b-1");
  bool reset_seen = false;
  for (const auto& record : journal.at("records").as_array()) {
    if (record.at("kind") != "run_reset") continue;
    reset_seen = true;
    CHECK(record.at("detail") == "charge fixed");
    CHECK(record.at("number") == 1);
    CHECK(record.at("value").at("position") == 1);
    CHECK(record.at("value").at("dropped").as_array().size() >= 1);
  }
  CHECK(reset_seen);
  error_message(errc::invalid_argument, [&] { engine->reset("b-1", ResetPoint::after("nothing"), "x"); });
  error_message(errc::not_found, [&] { engine->reset("nobody", ResetPoint::before_position(0), "x"); });
  if (M::mode != Mode::memory) {
    engine->shutdown();
    CallCounter again;
    engine = harness.open();
    register_billing(*engine, 2, true, again);
    CHECK(result_of(engine, kBilling, "b-1") == 41);
    CHECK(again.count() == 0);
  }
}

TEST_CASE_TEMPLATE("reset: a waiting run keeps its signals for the new generation", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_original(*engine);
  (void)engine->start(kFlow, "r-1", 1);
  engine->signal("r-1", kGo, 5);
  CHECK(result_of(engine, kFlow, "r-1") == 25);
  // Reset to after step a: the wait for "go" runs again and finds the signal.
  engine->reset("r-1", ResetPoint::after("a"), "again");
  CHECK(result_of(engine, kFlow, "r-1") == 25);
  CHECK(engine->get_run("r-1")->generation == 2);
}

TEST_CASE_TEMPLATE("reset: a stuck run starts over on the code registered now", M, OnDisk, Remote) {
  Warnings warnings;
  EngineHarness harness(M::mode);
  auto engine = reopen_stuck(harness, warnings);  // the renamed code is registered
  engine->reset("r-1", ResetPoint::before_position(0), "new code");
  CHECK(result_of(engine, kFlow, "r-1") == 2);
  CHECK(engine->get_run("r-1")->status == RunStatus::completed);
  engine->shutdown();
  engine = harness.open();
  register_renamed(*engine);
  CHECK(result_of(engine, kFlow, "r-1") == 2);
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("new runs take the newest version, and a live run that reaches a patch journals it", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_stage(*engine, 1);  // version 1: the patch
  engine->register_workflow(kFlow, 3, [](Ctx&, int input) -> Task<int> { co_return input * 3; });
  engine->register_workflow(kFlow, 2, [](Ctx&, int input) -> Task<int> { co_return input * 2; });
  CHECK(engine->execute(kFlow, "v-1", 5) == 15);
  CHECK(engine->get_run("v-1")->version == 3);
  (void)engine->start(kPatched, "p-1", 1);
  engine->signal("p-1", kGo, 0);
  CHECK(result_of(engine, kPatched, "p-1") == 10020);
  auto journal = journal_of(*engine, "p-1");
  CHECK(commands_of(journal) == std::vector<std::string>{"step a completed", "patch bonus completed",
                                                         "step bonus completed", "wait_for go completed",
                                                         "step b completed"});
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a parked run's journal reads as a loaded one's", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = std::chrono::seconds(10);
  auto engine = harness.open(config);
  register_original(*engine);
  (void)engine->start(kFlow, "r-1", 1);
  // Parked once its wait is durable and park_after has passed.
  auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (engine->stats().runs_parked == 0) {
    harness.clock().advance(std::chrono::seconds(11));
    engine->checkpoint();
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < give_up, "the run never parked");
  }
  CHECK(commands_of(journal_of(*engine, "r-1")) ==
        std::vector<std::string>{"step a completed", "wait_for go waiting"});
  engine->signal("r-1", kGo, 5);
  CHECK(result_of(engine, kFlow, "r-1") == 25);
}
}
