// Crash-point enumeration over a schedule's fire, and over a queue's
// admission: on the fault-injecting file system frozen at every operation
// boundary and crashed four ways. After reopening, the schedule exists if
// making it was acknowledged, every due time runs once under its own id and
// no other run appears; every acknowledged enqueue's run starts, once, and
// nothing else does.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>

#include "schedule/due_plan.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;
using std::chrono::minutes;

namespace {

const WorkflowRef<int, int> kTick{"tick"};

struct Life {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  CallCounter ran;  // tick runs' code (a replay counts again)
  bool scheduled = false;
  bool fired = false;        // the first due time's run finished, and the life saw it
  std::set<std::string> enqueued;  // acknowledged enqueues
};

void register_tick(Engine& engine, Life& life) {
  engine.register_workflow(kTick, [&life](Ctx& ctx, int n) -> Task<int> {
    auto mark = [n] { return n; };
    int value = co_await ctx.step("mark", mark);
    life.ran.add();
    co_return value;
  });
}

// Waits for count without hanging a life whose file system crashed.
bool wait_or_crashed(CallCounter& counter, int count, FaultFileSystem& fs) {
  for (auto waited = std::chrono::milliseconds(0); waited < kPatience; waited += kReactionTime) {
    if (counter.wait_for(count, kReactionTime)) return true;
    if (fs.crashed()) return false;
  }
  return false;
}

// The result of run `id` once it exists (its start may still be on the way);
// `starter` is the run that starts it, whose journal a failure shows.
int result_when_started(const std::shared_ptr<Engine>& engine, const std::string& id,
                        const std::string& starter = "schedule:s") {
  CallCounter never;
  for (auto waited = std::chrono::milliseconds(0); !engine->get_run(id) && waited < kPatience; waited += kReactionTime) {
    (void)never.wait_for(1, kReactionTime);
  }
  if (!engine->get_run(id)) {
    std::string journal;
    try {
      journal = engine->journal_json(starter);
    } catch (const Error&) {
      journal = "(no run " + starter + ")";
    }
    REQUIRE_MESSAGE(engine->get_run(id), "run " << id << " never started; " << starter << "'s journal: " << journal);
  }
  return result_of(engine, kTick, id);
}

std::set<std::string> tick_runs(Engine& engine) {
  RunFilter filter;
  filter.workflow = "tick";
  std::set<std::string> ids;
  for (const auto& run : engine.list_runs(filter)) ids.insert(run.id);
  return ids;
}

void schedule_life(FaultFileSystem& fs, Life& life) {
  try {
    auto engine = Engine::open(crash_config(fs, life.clock));
    register_tick(*engine, life);
    ScheduleSpec spec;
    spec.every = minutes(1);
    engine->schedule("s", spec, kTick, 1);
    life.scheduled = true;
    life.clock->advance(minutes(1));
    if (!wait_or_crashed(life.ran, 1, fs)) return;
    (void)engine->result(kTick, schedule::run_id_of("s", life.clock->now()));
    life.fired = true;
    engine->checkpoint();
  } catch (const Error& error) {
    CHECK_MESSAGE(fs.crashed(), "an error without a crash: " << error.what());
  }
}

void check_schedule(FaultFileSystem& image, Life& before, const std::string& where) {
  INFO(where);
  Life after;
  // Where the life left it; its own, since each crash image of a point is
  // checked in turn and this check moves it.
  after.clock = std::make_shared<ManualClock>(before.clock->now());
  std::shared_ptr<Engine> engine = Engine::open(crash_config(image, after.clock));
  register_tick(*engine, after);
  // The first due time: a minute after the schedule was made, at the
  // clock's start. The life moved the clock there, unless it crashed first.
  const auto first_due = ManualClock().now() + minutes(1);
  if (after.clock->now() < first_due) after.clock->advance(minutes(1));
  auto schedules = engine->list_schedules();
  if (before.scheduled) REQUIRE_MESSAGE(schedules.size() == 1, "an acknowledged schedule was lost");
  if (schedules.empty()) {
    CHECK(tick_runs(*engine).empty());
    return;
  }
  // The first due time runs (again, or for the first time: it is due now),
  // then the next one, each once, and nothing else.
  if (before.fired) CHECK(engine->get_run(schedule::run_id_of("s", first_due))->status == RunStatus::completed);
  CHECK(result_when_started(engine, schedule::run_id_of("s", first_due)) == 1);
  // The schedule learns that run ended from its child's completion, a
  // message of its own: the next due time may come only once it has, or
  // overlap "skip" rightly skips it (a stress run found the plan for the
  // next due time journaled before the child's end, and no start).
  REQUIRE(eventually([&] { return engine->describe_schedule("s").running.empty(); }));
  after.clock->advance(minutes(1));
  CHECK(result_when_started(engine, schedule::run_id_of("s", first_due + minutes(1))) == 1);
  CHECK(tick_runs(*engine) ==
        std::set<std::string>{schedule::run_id_of("s", first_due), schedule::run_id_of("s", first_due + minutes(1))});
  CHECK(engine->describe_schedule("s").started >= 1);
}

void queue_life(FaultFileSystem& fs, Life& life) {
  try {
    auto engine = Engine::open(crash_config(fs, life.clock));
    register_tick(*engine, life);
    engine->queue("q", QueueOptions{.concurrency = 1});
    for (const char* id : {"a", "b"}) {
      (void)engine->enqueue("q", kTick, id, 1);
      life.enqueued.insert(id);
    }
    if (!wait_or_crashed(life.ran, 2, fs)) return;
    engine->checkpoint();
  } catch (const Error& error) {
    CHECK_MESSAGE(fs.crashed(), "an error without a crash: " << error.what());
  }
}

void check_queue(FaultFileSystem& image, Life& before, const std::string& where) {
  INFO(where);
  Life after;
  std::shared_ptr<Engine> engine = Engine::open(crash_config(image, after.clock));
  register_tick(*engine, after);
  engine->queue("q", QueueOptions{.concurrency = 1});
  // Whatever was acknowledged runs; nothing runs that was not enqueued.
  for (const auto& id : before.enqueued) {
    CHECK_MESSAGE(result_when_started(engine, id, "queue:q") == 1, "enqueued " << id << " lost");
  }
  // An entry whose enqueue was durable but not acknowledged runs too, once
  // the one before it ended: the count waits for the queue to be idle
  // (counted earlier, a start in between made it one short).
  REQUIRE(eventually([&] {
    auto idle = engine->describe_queue("q");
    return idle.waiting.empty() && idle.running.empty();
  }));
  auto ids = tick_runs(*engine);
  for (const auto& id : ids) CHECK_MESSAGE((id == "a" || id == "b"), "a run nobody enqueued: " << id);
  auto info = engine->describe_queue("q");
  CHECK(info.started == ids.size());
  // The queue goes on: one more runs.
  (void)engine->enqueue("q", kTick, "c", 1);
  CHECK(result_when_started(engine, "c", "queue:q") == 1);
}

}  // namespace

// Every point takes about 40 s for each workload on 2 cores: make test
// checks a seeded sample within the budget, make test-long every point
// (crash_sample.hpp).
void schedule_points() {
  auto crash_points = enumerate_life_crash_points<Life>(
      "schedule", std::chrono::seconds(5), [&](FaultFileSystem& fs, Life& life) { schedule_life(fs, life); },
      [&](FaultFileSystem& image, Life& life, const std::string& where) { check_schedule(image, life, where); });
  CHECK(crash_points > 10);
}

void queue_points() {
  auto crash_points = enumerate_life_crash_points<Life>(
      "queue", std::chrono::seconds(5), [&](FaultFileSystem& fs, Life& life) { queue_life(fs, life); },
      [&](FaultFileSystem& image, Life& life, const std::string& where) { check_queue(image, life, where); });
  CHECK(crash_points > 10);
}

TEST_SUITE("crash") {
  TEST_CASE("schedule: crashes around a due time's fire start its run once, by its id, and lose no schedule") {
    schedule_points();
  }
  TEST_CASE("queue: crashes around enqueues and admission lose no acknowledged run and start none twice") {
    queue_points();
  }
}
