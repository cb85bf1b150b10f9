// The Engine's run API in memory and local mode: start, execute, result, list_runs, cancel, id policies, JSON payloads of user types, busy shards, open errors and shutdown.
#include <doctest/doctest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<std::string, std::string> kGreet{"greet"};
const WorkflowRef<std::string, std::string> kAwaitGo{"await-go"};
const WorkflowRef<std::string, std::string> kThrows{"throws"};
const Signal<std::string> kGo{"go"};

// greet: "hello <input>", counting its calls.
void register_greet(Engine& engine, CallCounter& calls) {
  engine.register_workflow(kGreet, [&calls](Ctx&, std::string name) -> Task<std::string> {
    calls.add();
    co_return "hello " + name;
  });
}

// await-go: waits for the signal "go", then returns "<input>:<value>"; a step
// after the wait counts how often the code past the wait ran.
void register_await_go(Engine& engine, CallCounter& calls, CallCounter& after_wait) {
  engine.register_workflow(kAwaitGo, [&calls, &after_wait](Ctx& ctx, std::string input) -> Task<std::string> {
    calls.add();
    std::optional<std::string> value = co_await ctx.wait_for(kGo);
    co_await ctx.step("after-wait", [&after_wait] { return after_wait.add(); });
    co_return input + ":" + value.value_or("<none>");
  });
}

void register_throws(Engine& engine) {
  engine.register_workflow(kThrows, [](Ctx&, std::string input) -> Task<std::string> {
    if (!input.empty()) throw std::runtime_error("kaboom: " + input);
    co_return input;
  });
}

std::vector<RunInfo> runs_with_id(Engine& engine, const std::string& id) {
  std::vector<RunInfo> found;
  for (RunInfo& info : engine.list_runs()) {
    if (info.id == id) found.push_back(std::move(info));
  }
  return found;
}

// The run's newest generation; fails the test if list_runs does not have it.
RunInfo run_info(Engine& engine, const std::string& id) {
  std::vector<RunInfo> found = runs_with_id(engine, id);
  REQUIRE_MESSAGE(!found.empty(), "list_runs has no run " << id);
  return *std::max_element(found.begin(), found.end(),
                           [](const RunInfo& a, const RunInfo& b) { return a.generation < b.generation; });
}

std::vector<std::string> ids_of(const std::vector<RunInfo>& runs) {
  std::vector<std::string> ids;
  for (const RunInfo& info : runs) ids.push_back(info.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// A user type crossing the API as JSON through Boost.JSON's tag_invoke.
struct Order {
  std::string item;
  int quantity = 0;
};

void tag_invoke(boost::json::value_from_tag, boost::json::value& json, const Order& order) {
  json = {{"item", order.item}, {"quantity", order.quantity}};
}

Order tag_invoke(boost::json::value_to_tag<Order>, const boost::json::value& json) {
  const boost::json::object& object = json.as_object();
  return {boost::json::value_to<std::string>(object.at("item")), boost::json::value_to<int>(object.at("quantity"))};
}

const WorkflowRef<Order, Order> kDoubleOrder{"double-order"};

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("execute runs the workflow once and result returns the same output afterwards", M, InMemory,
                   OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);

  Background<std::string> execute([engine] { return engine->execute(kGreet, "g-1", std::string("ada")); });
  CHECK(execute.get() == "hello ada");
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  CHECK(calls.count() == 1);
}

TEST_CASE_TEMPLATE("execute_json_then answers the start, then the result; a refused start answers only the start", M,
                   InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);
  std::mutex mu;
  std::condition_variable changed;
  std::vector<std::string> events;
  auto note = [&](std::string event) {
    {
      std::lock_guard lock(mu);
      events.push_back(std::move(event));
    }
    changed.notify_all();
  };
  auto wait_for_events = [&](std::size_t count) {
    std::unique_lock lock(mu);
    CHECK(changed.wait_for(lock, kPatience, [&] { return events.size() >= count; }));
    return events;
  };
  engine->execute_json_then(
      "greet", "x-1", "ada", {},
      [&](std::variant<StartOutcome, Error> started) {
        auto* outcome = std::get_if<StartOutcome>(&started);
        note(outcome != nullptr && *outcome == StartOutcome::started ? "started" : "start failed");
      },
      [&](std::variant<boost::json::value, Error> ended) {
        auto* value = std::get_if<boost::json::value>(&ended);
        note(value != nullptr && *value == "hello ada" ? "ended" : "ended wrong");
      });
  CHECK(wait_for_events(2) == std::vector<std::string>{"started", "ended"});

  {
    std::lock_guard lock(mu);
    events.clear();
  }
  StartOptions reject;
  reject.if_finished = IfFinished::reject;
  engine->execute_json_then(
      "greet", "x-1", "bob", reject,
      [&](std::variant<StartOutcome, Error> started) {
        auto* error = std::get_if<Error>(&started);
        note(error != nullptr && error->code() == errc::already_exists ? "refused" : "not refused");
      },
      [&](std::variant<boost::json::value, Error>) { note("ended"); });
  CHECK(wait_for_events(1) == std::vector<std::string>{"refused"});
  // A result asked for after the refusal would have been answered before
  // this call's, made later on the same shard.
  CHECK(result_of(engine, kGreet, "x-1") == "hello ada");
  CHECK(wait_for_events(1) == std::vector<std::string>{"refused"});
  CHECK(calls.count() == 1);
}

TEST_CASE_TEMPLATE("start returns started and result waits until the run finishes", M, InMemory, OnDisk, Remote) {
  CallCounter calls, after_wait;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_await_go(*engine, calls, after_wait);

  CHECK(engine->start(kAwaitGo, "w-1", std::string("input")) == StartOutcome::started);
  auto pending = result_in_background(engine, kAwaitGo, "w-1");
  CHECK_FALSE(pending.ready(50ms));  // nothing lets the run finish before the signal
  engine->signal("w-1", kGo, std::string("go-value"));
  CHECK(pending.get() == "input:go-value");
  CHECK(after_wait.count() == 1);
}

TEST_CASE_TEMPLATE("starting an id that is running attaches by default, says when the input differs, and the first "
                   "input wins", M, InMemory, OnDisk, Remote) {
  CallCounter calls, after_wait;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_await_go(*engine, calls, after_wait);

  CHECK(engine->start(kAwaitGo, "w-1", std::string("first")) == StartOutcome::started);
  CHECK(engine->start(kAwaitGo, "w-1", std::string("first")) == StartOutcome::attached);
  CHECK(engine->start(kAwaitGo, "w-1", std::string("second")) == StartOutcome::attached_other_input);
  StartOptions strict;
  strict.if_input_differs = IfInputDiffers::reject;
  CHECK(engine->start(kAwaitGo, "w-1", std::string("first"), strict) == StartOutcome::attached);
  auto message = error_message(errc::conflict, [&] { (void)engine->start(kAwaitGo, "w-1", std::string("second"), strict); });
  CHECK(contains(message, "run 'w-1' of workflow 'await-go' has another input: \"first\""));
  engine->signal("w-1", kGo, std::string("v"));
  CHECK(result_of(engine, kAwaitGo, "w-1") == "first:v");
  CHECK(calls.count() == 1);
  CHECK(runs_with_id(*engine, "w-1").size() == 1);
}

TEST_CASE_TEMPLATE("IfRunning::reject refuses an id that is running with already_exists", M, InMemory, OnDisk, Remote) {
  CallCounter calls, after_wait;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_await_go(*engine, calls, after_wait);

  CHECK(engine->start(kAwaitGo, "w-1", std::string("first")) == StartOutcome::started);
  StartOptions reject;
  reject.if_running = IfRunning::reject;
  std::string message =
      error_message(errc::already_exists, [&] { (void)engine->start(kAwaitGo, "w-1", std::string("second"), reject); });
  CHECK(contains(message, "w-1"));

  engine->signal("w-1", kGo, std::string("v"));
  CHECK(result_of(engine, kAwaitGo, "w-1") == "first:v");
  CHECK(calls.count() == 1);
}

TEST_CASE_TEMPLATE("starting a finished id attaches by default without running the workflow again", M, InMemory,
                   OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);

  CHECK(engine->start(kGreet, "g-1", std::string("ada")) == StartOutcome::started);
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  CHECK(engine->start(kGreet, "g-1", std::string("bob")) == StartOutcome::attached_other_input);
  CHECK(engine->start(kGreet, "g-1", std::string("ada")) == StartOutcome::attached);
  StartOptions strict;
  strict.if_input_differs = IfInputDiffers::reject;
  error_message(errc::conflict, [&] { (void)engine->start(kGreet, "g-1", std::string("bob"), strict); });
  engine->checkpoint();  // local mode: the finished run's input, from the run store
  CHECK(engine->start(kGreet, "g-1", std::string("bob")) == StartOutcome::attached_other_input);
  CHECK(engine->start(kGreet, "g-1", std::string("ada")) == StartOutcome::attached);
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  CHECK(calls.count() == 1);
  CHECK(run_info(*engine, "g-1").generation == 1);
}

TEST_CASE_TEMPLATE("IfFinished::reject refuses a finished id with already_exists and keeps its result", M, InMemory,
                   OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);

  CHECK(engine->start(kGreet, "g-1", std::string("ada")) == StartOutcome::started);
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  StartOptions reject;
  reject.if_finished = IfFinished::reject;
  error_message(errc::already_exists, [&] { (void)engine->start(kGreet, "g-1", std::string("bob"), reject); });
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  CHECK(calls.count() == 1);
}

TEST_CASE_TEMPLATE("IfFinished::start_anew runs a finished id again as its next generation", M, InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);

  CHECK(engine->start(kGreet, "g-1", std::string("ada")) == StartOutcome::started);
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  StartOptions anew;
  anew.if_finished = IfFinished::start_anew;
  CHECK(engine->start(kGreet, "g-1", std::string("bob"), anew) == StartOutcome::started);
  CHECK(result_of(engine, kGreet, "g-1") == "hello bob");
  CHECK(calls.count() == 2);
  RunInfo info = run_info(*engine, "g-1");
  CHECK(info.generation == 2);
  CHECK(info.status == RunStatus::completed);
}

TEST_CASE_TEMPLATE("list_runs reports workflow, status, generation, times and errors, and filters", M, InMemory,
                   OnDisk, Remote) {
  CallCounter calls, waits, after_wait;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);
  register_await_go(*engine, waits, after_wait);
  register_throws(*engine);
  const TimePoint t0 = harness.clock().now();

  (void)engine->start(kGreet, "done-1", std::string("ada"));
  CHECK(result_of(engine, kGreet, "done-1") == "hello ada");
  harness.clock().advance(1s);
  (void)engine->start(kAwaitGo, "waiting-1", std::string("w"));
  (void)engine->start(kAwaitGo, "cancelled-1", std::string("c"));
  engine->cancel("cancelled-1", "operator said stop");
  error_message(errc::cancelled, [&] { (void)result_of(engine, kAwaitGo, "cancelled-1"); });
  (void)engine->start(kThrows, "failed-1", std::string("x"));
  error_message(errc::failed, [&] { (void)result_of(engine, kThrows, "failed-1"); });

  CHECK(ids_of(engine->list_runs()) == std::vector<std::string>{"cancelled-1", "done-1", "failed-1", "waiting-1"});

  RunInfo done = run_info(*engine, "done-1");
  CHECK(done.workflow == "greet");
  CHECK(done.status == RunStatus::completed);
  CHECK(done.generation == 1);
  CHECK(done.started_at == t0);
  REQUIRE(done.finished_at.has_value());
  CHECK(*done.finished_at == t0);
  CHECK(done.error.empty());

  RunInfo waiting = run_info(*engine, "waiting-1");
  CHECK(waiting.workflow == "await-go");
  CHECK(waiting.status == RunStatus::running);
  CHECK(waiting.generation == 1);
  CHECK(waiting.started_at == t0 + 1s);
  CHECK_FALSE(waiting.finished_at.has_value());

  RunInfo cancelled = run_info(*engine, "cancelled-1");
  CHECK(cancelled.status == RunStatus::cancelled);
  CHECK(contains(cancelled.error, "operator said stop"));
  CHECK(cancelled.finished_at.has_value());

  RunInfo failed = run_info(*engine, "failed-1");
  CHECK(failed.workflow == "throws");
  CHECK(failed.status == RunStatus::failed);
  CHECK(contains(failed.error, "kaboom: x"));
  CHECK(failed.finished_at.has_value());

  RunFilter by_workflow;
  by_workflow.workflow = "await-go";
  CHECK(ids_of(engine->list_runs(by_workflow)) == std::vector<std::string>{"cancelled-1", "waiting-1"});
  RunFilter running;
  running.status = RunStatus::running;
  CHECK(ids_of(engine->list_runs(running)) == std::vector<std::string>{"waiting-1"});
  RunFilter both;
  both.workflow = "greet";
  both.status = RunStatus::failed;
  CHECK(engine->list_runs(both).empty());
  CHECK(std::string(run_status_name(RunStatus::completed)) == "completed");
}

TEST_CASE_TEMPLATE("cancel stops a waiting run: result throws cancelled with the reason and its code stops", M,
                   InMemory, OnDisk, Remote) {
  CallCounter calls, after_wait;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_await_go(*engine, calls, after_wait);

  (void)engine->start(kAwaitGo, "w-1", std::string("input"));
  auto pending = result_in_background(engine, kAwaitGo, "w-1");
  engine->cancel("w-1", "customer withdrew");
  std::string message = error_message(errc::cancelled, [&] { (void)pending.get(); });
  CHECK(contains(message, "customer withdrew"));
  error_message(errc::cancelled, [&] { (void)result_of(engine, kAwaitGo, "w-1"); });
  error_message(errc::not_found, [&] { engine->signal("w-1", kGo, std::string("too late")); });
  CHECK(after_wait.count() == 0);
  CHECK(run_info(*engine, "w-1").status == RunStatus::cancelled);
}

TEST_CASE_TEMPLATE("cancel of a finished run changes nothing", M, InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);

  (void)engine->start(kGreet, "g-1", std::string("ada"));
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  engine->cancel("g-1", "too late");
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");
  CHECK(run_info(*engine, "g-1").status == RunStatus::completed);
}

TEST_CASE_TEMPLATE("a workflow that throws fails its run with errc::failed carrying the exception's message", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_throws(*engine);

  (void)engine->start(kThrows, "t-1", std::string("bad input"));
  std::string message = error_message(errc::failed, [&] { (void)result_of(engine, kThrows, "t-1"); });
  CHECK(contains(message, "kaboom: bad input"));
  CHECK(run_info(*engine, "t-1").status == RunStatus::failed);
}

TEST_CASE_TEMPLATE("start of an unregistered workflow throws unknown_workflow and records no run", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<std::string, std::string> nobody{"nobody-registered-this"};

  std::string message =
      error_message(errc::unknown_workflow, [&] { (void)engine->start(nobody, "n-1", std::string("x")); });
  CHECK(contains(message, "nobody-registered-this"));
  CHECK(runs_with_id(*engine, "n-1").empty());
}

TEST_CASE_TEMPLATE("result and signal of an unknown id throw not_found", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();

  error_message(errc::not_found, [&] { (void)result_of(engine, kGreet, "no-such-run"); });
  error_message(errc::not_found, [&] { engine->signal("no-such-run", kGo, std::string("x")); });
}

TEST_CASE_TEMPLATE("a start with an empty id or a deadline that is not positive throws invalid_argument", M,
                   InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);

  error_message(errc::invalid_argument, [&] { (void)engine->start(kGreet, "", std::string("x")); });
  StartOptions zero;
  zero.deadline = 0ms;
  error_message(errc::invalid_argument, [&] { (void)engine->start(kGreet, "g-1", std::string("x"), zero); });
  CHECK(engine->list_runs().empty());
  CHECK(calls.count() == 0);
}

TEST_CASE_TEMPLATE("registering a workflow name twice throws", M, InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);
  CHECK_THROWS_AS(register_greet(*engine, calls), Error);
}

TEST_CASE_TEMPLATE("after shutdown every call throws shut_down and shutdown may be called again", M, InMemory,
                   OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);
  (void)engine->start(kGreet, "g-1", std::string("ada"));
  CHECK(result_of(engine, kGreet, "g-1") == "hello ada");

  engine->shutdown();
  engine->shutdown();
  error_message(errc::shut_down, [&] { (void)engine->start(kGreet, "g-2", std::string("x")); });
  error_message(errc::shut_down, [&] { (void)result_of(engine, kGreet, "g-1"); });
  error_message(errc::shut_down, [&] { engine->signal("g-1", kGo, std::string("x")); });
  error_message(errc::shut_down, [&] { engine->cancel("g-1", "x"); });
  error_message(errc::shut_down, [&] { (void)engine->list_runs(); });
  error_message(errc::shut_down, [&] { (void)engine->read_stream("g-1", "s"); });
}

TEST_CASE_TEMPLATE("a result() waiting when the engine shuts down is released with shut_down", M, InMemory, OnDisk, Remote) {
  CallCounter calls, after_wait;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_await_go(*engine, calls, after_wait);

  (void)engine->start(kAwaitGo, "w-1", std::string("input"));
  auto pending = result_in_background(engine, kAwaitGo, "w-1");
  CHECK_FALSE(pending.ready(20ms));
  engine->shutdown();
  error_message(errc::shut_down, [&] { (void)pending.get(); });
  CHECK(after_wait.count() == 0);
}

TEST_CASE_TEMPLATE("user types travel as JSON through tag_invoke, as input, step value and output", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  engine->register_workflow(kDoubleOrder, [](Ctx& ctx, Order order) -> Task<Order> {
    // A named lambda: GCC 12 frees a closure with non-trivial captures twice
    // when it is built inside the co_await expression itself.
    auto double_it = [order] { return Order{order.item, order.quantity * 2}; };
    Order doubled = co_await ctx.step("double", double_it);
    doubled.item += " (doubled)";
    co_return doubled;
  });

  Order out = [&] {
    Background<Order> execute([engine] { return engine->execute(kDoubleOrder, "o-1", Order{"tea", 21}); });
    return execute.get();
  }();
  CHECK(out.item == "tea (doubled)");
  CHECK(out.quantity == 42);
  boost::json::value json = engine->result_json("o-1");
  CHECK(json == boost::json::value{{"item", "tea (doubled)"}, {"quantity", 42}});
}

TEST_CASE_TEMPLATE("the untyped JSON API starts and reads runs of typed workflows", M, InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_greet(*engine, calls);

  CHECK(engine->start_json("greet", "j-1", boost::json::value("json")) == StartOutcome::started);
  Background<boost::json::value> result([engine] { return engine->result_json("j-1"); });
  CHECK(result.get() == boost::json::value("hello json"));
}

TEST_CASE_TEMPLATE("many runs started from several threads on every shard finish with their own results", M,
                   InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode, 4);
  auto engine = harness.open();
  register_greet(*engine, calls);
  constexpr int kThreads = 4;
  constexpr int kRunsPerThread = 25;

  std::vector<std::unique_ptr<Background<std::vector<std::string>>>> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.push_back(std::make_unique<Background<std::vector<std::string>>>([engine, t] {
      std::vector<std::string> mismatches;
      for (int i = 0; i < kRunsPerThread; ++i) {
        std::string name = std::to_string(t) + "-" + std::to_string(i);
        std::string out = engine->execute(kGreet, "many-" + name, name);
        if (out != "hello " + name) mismatches.push_back(name + " -> " + out);
      }
      return mismatches;
    }));
  }
  for (auto& thread : threads) CHECK(thread->get().empty());
  CHECK(calls.count() == kThreads * kRunsPerThread);
  CHECK(engine->list_runs().size() == kThreads * kRunsPerThread);
}

TEST_CASE_TEMPLATE("a shard whose request queue is full answers busy and records nothing", M, InMemory, OnDisk, Remote) {
  // A step that blocks its shard's thread (what a step must never do) holds
  // the only shard while two starts arrive for a queue of one.
  std::mutex mu;
  std::condition_variable released_cv;
  bool released = false;
  CallCounter blocking, calls;
  EngineHarness harness(M::mode, 1);
  Config config = harness.config();
  config.shard_queue_max = 1;
  auto engine = harness.open(config);
  register_greet(*engine, calls);
  const WorkflowRef<int, int> blocker{"blocker"};
  engine->register_workflow(blocker, [&](Ctx& ctx, int) -> Task<int> {
    co_return co_await ctx.step("block-the-shard", [&] {
      blocking.add();
      std::unique_lock lock(mu);
      released_cv.wait(lock, [&] { return released; });
      return 1;
    });
  });
  auto release = [&] {
    std::lock_guard lock(mu);
    released = true;
    released_cv.notify_all();
  };

  // In local mode the blocker's first step runs ahead of its start's flush,
  // so its start is answered only once the step returns: from a thread.
  Background<StartOutcome> blocker_start([engine, blocker] { return engine->start(blocker, "blocker-1", 0); });
  blocking.require(1);
  Background<StartOutcome> first([engine] { return engine->start(kGreet, "r-1", std::string("one")); });
  Background<StartOutcome> second([engine] { return engine->start(kGreet, "r-2", std::string("two")); });
  bool one_answered = false;
  for (auto until = std::chrono::steady_clock::now() + kPatience; !one_answered;) {
    one_answered = first.ready(5ms) || second.ready(5ms);
    if (std::chrono::steady_clock::now() > until) break;
  }
  if (!one_answered) release();
  REQUIRE_MESSAGE(one_answered, "neither start was refused while the queue was full");
  Background<StartOutcome>& refused = first.ready() ? first : second;
  Background<StartOutcome>& queued = first.ready() ? second : first;
  const std::string refused_id = &refused == &first ? "r-1" : "r-2";
  const std::string queued_id = &refused == &first ? "r-2" : "r-1";
  std::string message = error_message(errc::busy, [&] { (void)refused.get(); });
  CHECK(contains(message, "busy"));
  CHECK_FALSE(queued.ready());
  release();
  CHECK(blocker_start.get() == StartOutcome::started);
  CHECK(queued.get() == StartOutcome::started);
  CHECK(result_of(engine, blocker, "blocker-1") == 1);
  CHECK(result_of(engine, kGreet, queued_id).rfind("hello ", 0) == 0);
  CHECK(runs_with_id(*engine, refused_id).empty());
  CHECK(calls.count() == 1);
}

TEST_CASE_TEMPLATE("shard_count reports the configured count", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode, 3);
  auto engine = harness.open();
  CHECK(engine->shard_count() == 3);
}

TEST_CASE("local mode: the shard count is fixed per directory and another count is refused naming fusee reshard") {
  EngineHarness harness(Mode::local, 2);
  {
    auto engine = harness.open();
    CHECK(engine->shard_count() == 2);
    engine->shutdown();
  }
  Config three = harness.config();
  three.shards = 3;
  std::string message = error_message(errc::wrong_shard_count, [&] { (void)Engine::open(three); });
  CHECK(contains(message, "fusee reshard"));

  Config recorded = harness.config();
  recorded.shards = 0;  // the count recorded in fusee.meta
  auto engine = harness.open(recorded);
  CHECK(engine->shard_count() == 2);
}

TEST_CASE("local mode: a second engine on a data directory that is open is refused") {
  EngineHarness harness(Mode::local);
  auto engine = harness.open();
  try {
    auto second = Engine::open(harness.config());
    second->shutdown();
    FAIL_CHECK("a second engine opened " << harness.data_dir()
                                         << " while another had it open: both append to one log and lose runs");
  } catch (const Error& error) {
    CHECK(contains(error.what(), harness.data_dir()));
  }
}

TEST_CASE("local mode: a run started anew resumes as its new generation after a reopen") {
  CallCounter calls, after_wait;
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_await_go(*engine, calls, after_wait);
    (void)engine->start(kAwaitGo, "w-1", std::string("first"));
    engine->signal("w-1", kGo, std::string("one"), "sig-1");
    CHECK(result_of(engine, kAwaitGo, "w-1") == "first:one");
    StartOptions anew;
    anew.if_finished = IfFinished::start_anew;
    CHECK(engine->start(kAwaitGo, "w-1", std::string("second"), anew) == StartOutcome::started);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_await_go(*engine, calls, after_wait);
  RunInfo info = run_info(*engine, "w-1");
  CHECK(info.generation == 2);
  CHECK(info.status == RunStatus::running);
  engine->signal("w-1", kGo, std::string("two"), "sig-2");
  CHECK(result_of(engine, kAwaitGo, "w-1") == "second:two");
}

TEST_CASE("local mode: opening without a data directory throws invalid_argument") {
  Config config = Config::local("");
  config.clock = std::make_shared<ManualClock>();
  error_message(errc::invalid_argument, [&] { (void)Engine::open(config); });
}

TEST_CASE("local mode: opening a directory that is a regular file throws an Error") {
  TempDir dir;
  std::ofstream(dir.sub("not-a-dir")) << "x";
  Config config = Config::local(dir.sub("not-a-dir"));
  config.shards = 1;
  config.flush = FlushMethod::buffered;
  config.clock = std::make_shared<ManualClock>();
  try {
    (void)Engine::open(config);
    FAIL_CHECK("open succeeded on a regular file");
  } catch (const Error& error) {
    CHECK_MESSAGE((error.error() == errc::storage || error.error() == errc::invalid_argument),
                  "got errc::" << errc_name(error.error()) << ": " << error.what());
    CHECK(contains(error.what(), "not-a-dir"));
  }
}
}
