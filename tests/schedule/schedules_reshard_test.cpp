// A schedule and a queue across an offline reshard (engine/reshard.hpp):
// their runs move to other shards with everything else, and go on there:
// the schedule's next due time runs once under its id, the queue's waiting
// run starts once the running one ends.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <set>

#include "engine/reshard.hpp"
#include "schedule/due_plan.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;
using std::chrono::minutes;

namespace {

const WorkflowRef<int, int> kTick{"tick"};
const WorkflowRef<int, int> kJob{"job"};
const Signal<int> kFinish{"finish"};

struct Counts {
  CallCounter ticks;
  CallCounter jobs;
};

Config config_for(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock, std::uint32_t shards) {
  auto config = Config::local("/data");
  config.warn = [](const std::string&) {};
  config.file_system = &fs;
  config.flush = FlushMethod::buffered;
  config.segment_bytes = 64 * 1024;
  config.shards = shards;
  config.clock = clock;
  return config;
}

std::shared_ptr<Engine> open_with(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock,
                                  std::uint32_t shards, Counts& counts) {
  std::shared_ptr<Engine> engine = Engine::open(config_for(fs, clock, shards));
  engine->register_workflow(kTick, [&counts](Ctx& ctx, int n) -> Task<int> {
    auto mark = [n] { return n; };
    int value = co_await ctx.step("mark", mark);
    counts.ticks.add();
    co_return value;
  });
  engine->register_workflow(kJob, [&counts](Ctx& ctx, int n) -> Task<int> {
    counts.jobs.add();
    co_return (co_await ctx.wait_for(kFinish)).value_or(0) + n;
  });
  engine->queue("q", QueueOptions{.concurrency = 1});
  return engine;
}

std::set<std::string> runs_of(Engine& engine, const std::string& workflow) {
  RunFilter filter;
  filter.workflow = workflow;
  std::set<std::string> ids;
  for (const auto& run : engine.list_runs(filter)) ids.insert(run.id);
  return ids;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("a schedule and a queue go on after an offline reshard 2 -> 5, each due time and queued run once") {
  Counts counts;
  FaultFileSystem fs;
  auto clock = std::make_shared<ManualClock>();
  const auto first_due = clock->now() + minutes(1);
  {
    auto engine = open_with(fs, clock, 2, counts);
    ScheduleSpec spec;
    spec.every = minutes(1);
    engine->schedule("s", spec, kTick, 1);
    clock->advance(minutes(1));
    REQUIRE(counts.ticks.wait_for(1, kPatience));
    (void)engine->enqueue("q", kJob, "j1", 1);
    (void)engine->enqueue("q", kJob, "j2", 2);
    REQUIRE(counts.jobs.wait_for(1, kPatience));
    engine->shutdown();
  }
  std::string problem;
  engine::ReshardOptions options;
  options.shards = 5;
  options.segment_bytes = 64 * 1024;
  options.direct_io = false;
  auto report = engine::reshard(fs, "/data", options, &problem);
  REQUIRE_MESSAGE(report.has_value(), problem);
  CHECK(report->changed);

  auto engine = open_with(fs, clock, 5, counts);
  CHECK(engine->shard_count() == 5);
  CHECK(engine->describe_schedule("s").started == 1);
  auto queue = engine->describe_queue("q");
  REQUIRE(queue.running.size() == 1);
  CHECK(queue.running[0].id == "j1");
  // The next due time runs, once.
  clock->advance(minutes(1));
  REQUIRE(counts.ticks.wait_for(2, kPatience));
  CHECK(result_of(engine, kTick, schedule::run_id_of("s", first_due + minutes(1))) == 1);
  CHECK(runs_of(*engine, "tick") ==
        std::set<std::string>{schedule::run_id_of("s", first_due), schedule::run_id_of("s", first_due + minutes(1))});
  // The queue starts j2 once j1 has ended (j1's code ran again on the reopen: a replay).
  REQUIRE(counts.jobs.wait_for(2, kPatience));
  engine->signal("j1", kFinish, 0);
  CHECK(result_of(engine, kJob, "j1") == 1);
  REQUIRE(counts.jobs.wait_for(3, kPatience));
  engine->signal("j2", kFinish, 0);
  CHECK(result_of(engine, kJob, "j2") == 2);
  CHECK(counts.ticks.count() == 2);
  CHECK(engine->describe_queue("q").started == 2);
}
}
