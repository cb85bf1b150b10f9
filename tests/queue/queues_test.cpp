// Durable queues through the engine (Engine::queue, Engine::enqueue), in
// every mode: the queue's concurrency, per-partition concurrency and rate
// hold; smaller priority starts first, then the order runs came in; a dedup
// id is refused while its run waits or runs; an enqueue sent again is
// already_queued; waiting runs survive a restart and each starts once; a
// queue continues as new and keeps going.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <vector>

#include "queue/queue_workflow.hpp"
#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

// Runs until signalled "finish".
const WorkflowRef<int, int> kJob{"job"};
const Signal<int> kFinish{"finish"};
// Ends at once.
const WorkflowRef<int, int> kTick{"tick"};

struct Ledger {
  std::mutex mu;
  std::vector<std::string> started;  // job runs, in the order their code began
  std::map<std::string, int> runs;   // code runs by id (a replay runs it again: only first runs count here)
  CallCounter jobs;
  CallCounter ticks;
  void note(const std::string& id) {
    {
      std::lock_guard lock(mu);
      if (runs[id]++ == 0) started.push_back(id);
    }
    jobs.add();
  }
  std::vector<std::string> order() {
    std::lock_guard lock(mu);
    return started;
  }
};

void register_targets(Engine& engine, Ledger& ledger) {
  engine.register_workflow(kJob, [&ledger](Ctx& ctx, int n) -> Task<int> {
    ledger.note(ctx.run_id());
    co_return (co_await ctx.wait_for(kFinish)).value_or(0) + n;
  });
  engine.register_workflow(kTick, [&ledger](Ctx&, int n) -> Task<int> {
    ledger.ticks.add();
    co_return n;
  });
}

std::vector<std::string> ids_of(const std::vector<QueuedRun>& runs) {
  std::vector<std::string> ids;
  for (const auto& run : runs) ids.push_back(run.id);
  return ids;
}

void finish(const std::shared_ptr<Engine>& engine, const std::string& id) {
  engine->signal(id, kFinish, 0);
  (void)result_of(engine, kJob, id);
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a queue runs at most `concurrency` at once, the rest in the order they came", M, InMemory, OnDisk,
                   Remote) {
  Ledger ledger;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, ledger);
  engine->queue("work", QueueOptions{.concurrency = 2});
  for (int k = 0; k < 5; ++k) {
    CHECK(engine->enqueue("work", kJob, "j" + std::to_string(k), k) == EnqueueOutcome::queued);
  }
  REQUIRE(ledger.jobs.wait_for(2, kPatience));
  CHECK_FALSE(ledger.jobs.wait_for(3, kReactionTime));
  auto info = engine->describe_queue("work");
  CHECK(ids_of(info.running) == std::vector<std::string>{"j0", "j1"});
  CHECK(ids_of(info.waiting) == std::vector<std::string>{"j2", "j3", "j4"});
  CHECK(info.options.concurrency == 2);
  // The same enqueue again: already there, nothing twice.
  CHECK(engine->enqueue("work", kJob, "j3", 3) == EnqueueOutcome::queued);  // the same update: the same answer
  CHECK(engine->enqueue_json("work", "job", "j4", 4, {}) == EnqueueOutcome::queued);
  // Each one ends only once the one the previous end let in has begun:
  // two ends close together would let two in together, and those begin in
  // either order.
  for (int k = 0; k < 5; ++k) {
    REQUIRE(ledger.jobs.wait_for(std::min(k + 2, 5), kPatience));
    finish(engine, "j" + std::to_string(k));
  }
  // j0 and j1 start together (on their shards, in either order); each
  // later one once one before it ended.
  auto order = ledger.order();
  REQUIRE(order.size() == 5);
  CHECK(std::set<std::string>{order[0], order[1]} == std::set<std::string>{"j0", "j1"});
  CHECK(std::vector<std::string>(order.begin() + 2, order.end()) == std::vector<std::string>{"j2", "j3", "j4"});
  info = engine->describe_queue("work");
  CHECK(info.running.empty());
  CHECK(info.waiting.empty());
  CHECK(info.started == 5);
  auto listed = engine->list_queues();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].name == "work");
}

TEST_CASE_TEMPLATE("smaller priority starts first; a full partition lets the next one by", M, InMemory, OnDisk) {
  Ledger ledger;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, ledger);
  engine->queue("prio", QueueOptions{.concurrency = 1});
  (void)engine->enqueue("prio", kJob, "first", 0);
  REQUIRE(ledger.jobs.wait_for(1, kPatience));
  (void)engine->enqueue("prio", kJob, "low", 0, EnqueueOptions{.priority = 5});
  (void)engine->enqueue("prio", kJob, "high-1", 0, EnqueueOptions{.priority = 1});
  (void)engine->enqueue("prio", kJob, "high-2", 0, EnqueueOptions{.priority = 1});
  CHECK(ids_of(engine->describe_queue("prio").waiting) == std::vector<std::string>{"high-1", "high-2", "low"});
  for (int k = 0; k < 4; ++k) {
    REQUIRE(ledger.jobs.wait_for(k + 1, kPatience));
    finish(engine, ledger.order().back());
  }
  CHECK(ledger.order() == std::vector<std::string>{"first", "high-1", "high-2", "low"});

  engine->queue("parts", QueueOptions{.partition_concurrency = 1});
  (void)engine->enqueue("parts", kJob, "a-1", 0, EnqueueOptions{.partition = "a"});
  (void)engine->enqueue("parts", kJob, "a-2", 0, EnqueueOptions{.partition = "a"});
  (void)engine->enqueue("parts", kJob, "b-1", 0, EnqueueOptions{.partition = "b"});
  REQUIRE(ledger.jobs.wait_for(6, kPatience));
  auto info = engine->describe_queue("parts");
  CHECK(ids_of(info.running) == std::vector<std::string>{"a-1", "b-1"});
  CHECK(ids_of(info.waiting) == std::vector<std::string>{"a-2"});
  finish(engine, "a-1");
  REQUIRE(ledger.jobs.wait_for(7, kPatience));
  CHECK(ledger.order().back() == "a-2");
}

TEST_CASE_TEMPLATE("a queue starts runs at its rate by the engine's clock", M, InMemory, OnDisk) {
  Ledger ledger;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, ledger);
  engine->queue("paced", QueueOptions{.per_second = 10});  // one per 100 ms
  auto start = harness.clock().now();
  for (int k = 0; k < 5; ++k) (void)engine->enqueue("paced", kTick, "t" + std::to_string(k), k);
  // The clock moves in 25 ms steps, each once the starts its rate allows
  // by then have come (two at once, then one per 100 ms): a clock moved on
  // a timeout would run ahead of a loaded machine and make the starts late.
  for (std::int64_t at_ms = 0;; at_ms += 25) {
    const int allowed = static_cast<int>(std::min<std::int64_t>(5, 2 + at_ms / 100));
    INFO("at " << at_ms << " ms");
    REQUIRE(ledger.ticks.wait_for(allowed, kPatience));
    if (allowed == 5) break;
    harness.clock().advance(std::chrono::milliseconds(25));
  }
  std::vector<std::int64_t> started_ms;
  for (int k = 0; k < 5; ++k) {
    auto info = engine->get_run("t" + std::to_string(k));
    REQUIRE(info);
    started_ms.push_back(milliseconds_between(start, info->started_at));
  }
  std::sort(started_ms.begin(), started_ms.end());
  // Each at the first moment its rate allows, not before.
  CHECK(started_ms == std::vector<std::int64_t>{0, 0, 100, 200, 300});
}

TEST_CASE_TEMPLATE("a dedup id is refused while its run waits or runs; refusals say why", M, InMemory, OnDisk) {
  Ledger ledger;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, ledger);
  engine->queue("once", QueueOptions{.concurrency = 1});
  (void)engine->enqueue("once", kJob, "a", 0, EnqueueOptions{.dedup_id = "order-7"});
  auto message = error_message(errc::rejected, [&] {
    (void)engine->enqueue("once", kJob, "b", 0, EnqueueOptions{.dedup_id = "order-7"});
  });
  CHECK_MESSAGE(contains(message, "queue 'once' refused it: dedup id 'order-7' is taken by run 'a'"), message);
  message = error_message(errc::not_found, [&] { (void)engine->enqueue("nowhere", kJob, "c", 0); });
  CHECK_MESSAGE(contains(message, "no queue 'nowhere'"), message);
  message = error_message(errc::unknown_workflow,
                          [&] { (void)engine->enqueue("once", WorkflowRef<int, int>("nothing"), "d", 0); });
  CHECK_MESSAGE(contains(message, "nothing"), message);
  (void)error_message(errc::invalid_argument, [&] { engine->queue("bad", QueueOptions{.per_second = -1}); });
  REQUIRE(ledger.jobs.wait_for(1, kPatience));
  finish(engine, "a");
  // Once its run has ended, the dedup id is free again.
  CHECK(engine->enqueue("once", kJob, "b", 0, EnqueueOptions{.dedup_id = "order-7"}) == EnqueueOutcome::queued);
}

TEST_CASE_TEMPLATE("waiting runs survive a restart and each starts once", M, OnDisk, Remote) {
  Ledger ledger;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  {
    auto engine = harness.open();
    register_targets(*engine, ledger);
    engine->queue("durable", QueueOptions{.concurrency = 1});
    for (int k = 0; k < 3; ++k) (void)engine->enqueue("durable", kJob, "d" + std::to_string(k), k);
    REQUIRE(ledger.jobs.wait_for(1, kPatience));
    engine->shutdown();
  }
  auto engine = harness.open();
  register_targets(*engine, ledger);
  engine->queue("durable", QueueOptions{.concurrency = 1});
  auto info = engine->describe_queue("durable");
  CHECK(ids_of(info.running) == std::vector<std::string>{"d0"});
  CHECK(ids_of(info.waiting) == std::vector<std::string>{"d1", "d2"});
  for (int k = 0; k < 3; ++k) {
    auto id = "d" + std::to_string(k);
    // d0's code ran before the restart and again after it (a replay); then
    // one run each.
    REQUIRE(ledger.jobs.wait_for(k + 2, kPatience));
    finish(engine, id);
  }
  std::lock_guard lock(ledger.mu);
  CHECK(ledger.started == std::vector<std::string>{"d0", "d1", "d2"});
}

TEST_CASE_TEMPLATE("a queue continues as new every so many turns and keeps its runs", M, InMemory, OnDisk) {
  Ledger ledger;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, ledger);
  engine->queue("busy", QueueOptions{.concurrency = 5});
  const int runs = queue::kTurnsPerGeneration + 20;
  for (int k = 0; k < runs; ++k) (void)engine->enqueue("busy", kTick, "b" + std::to_string(k), k);
  REQUIRE(ledger.ticks.wait_for(runs, kPatience));
  for (int k = 0; k < runs; ++k) CHECK(result_of(engine, kTick, "b" + std::to_string(k)) == k);
  auto run = engine->get_run("queue:busy");
  REQUIRE(run);
  CHECK(run->generation >= 2);
  auto info = engine->describe_queue("busy");
  CHECK(info.started == static_cast<std::uint64_t>(runs));
  CHECK(info.waiting.empty());
  CHECK(ledger.ticks.count() == runs);
}
}

TEST_SUITE("unit") {
TEST_CASE("a queue refuses an enqueue that would make its state too large to carry, and takes it once some ran") {
  Ledger ledger;
  EngineHarness harness(Mode::memory);
  auto engine = harness.open();
  const WorkflowRef<std::string, int> big{"big"};
  engine->register_workflow(big, [&ledger](Ctx& ctx, std::string text) -> Task<int> {
    ledger.note(ctx.run_id());
    co_return static_cast<int>(text.size()) + (co_await ctx.wait_for(kFinish)).value_or(0) * 0;
  });
  engine->queue("heavy", QueueOptions{.concurrency = 1});
  const std::string text(3u << 20, 'x');
  (void)engine->enqueue("heavy", big, "h-1", text);
  (void)engine->enqueue("heavy", big, "h-2", text);
  auto message = error_message(errc::rejected, [&] { (void)engine->enqueue("heavy", big, "h-3", text); });
  CHECK_MESSAGE(contains(message, "queue 'heavy' holds"), message);
  REQUIRE(ledger.jobs.wait_for(1, kPatience));
  engine->signal("h-1", kFinish, 0);
  CHECK(result_of(engine, big, "h-1") == static_cast<int>(text.size()));
  CHECK(engine->enqueue("heavy", big, "h-3", text) == EnqueueOutcome::queued);
  for (const char* id : {"h-2", "h-3"}) {
    REQUIRE(ledger.jobs.wait_for(id == std::string("h-2") ? 2 : 3, kPatience));
    engine->signal(id, kFinish, 0);
    CHECK(result_of(engine, big, id) == static_cast<int>(text.size()));
  }
}
}
