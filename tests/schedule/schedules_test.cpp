// Schedules through the engine (Engine::schedule), in every mode, on the
// harness's manual clock: one run per due time with the due time in its id;
// each overlap policy; the catch-up window after downtime; a cron schedule
// across a daylight-saving change; pause, resume, trigger, backfill,
// update, delete, describe and list; bad specs refused with their reason;
// a schedule continues as new and keeps going.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "schedule/due_plan.hpp"
#include "schedule/schedule_state.hpp"
#include "schedule/schedule_workflow.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/schedule/times_text.hpp"

using namespace fusee;
using namespace fusee::testing;
using fusee::schedule::testing::utc;
using std::chrono::minutes;

namespace {

// Ends at once; counts its runs.
const WorkflowRef<int, int> kTick{"tick"};
// Runs until signalled "finish"; a cancel ends it cancelled.
const WorkflowRef<int, int> kJob{"job"};
const Signal<int> kFinish{"finish"};

struct Targets {
  CallCounter ticks;
  CallCounter jobs;
};

void register_targets(Engine& engine, Targets& targets) {
  engine.register_workflow(kTick, [&targets](Ctx&, int n) -> Task<int> {
    targets.ticks.add();
    co_return n;
  });
  engine.register_workflow(kJob, [&targets](Ctx& ctx, int n) -> Task<int> {
    targets.jobs.add();
    co_return (co_await ctx.wait_for(kFinish)).value_or(0) + n;
  });
}

ScheduleSpec every_minute() {
  ScheduleSpec spec;
  spec.every = minutes(1);
  return spec;
}

// A spec that is never due while a test runs (the overlap tests trigger).
ScheduleSpec yearly() {
  ScheduleSpec spec;
  spec.cron = "0 0 1 1 *";
  return spec;
}

std::set<std::string> run_ids(Engine& engine, const std::string& workflow) {
  RunFilter filter;
  filter.workflow = workflow;
  std::set<std::string> ids;
  for (const auto& run : engine.list_runs(filter)) ids.insert(run.id);
  return ids;
}

RunStatus status_of(Engine& engine, const std::string& id) {
  auto info = engine.get_run(id);
  REQUIRE_MESSAGE(info, "no run " << id);
  return info->status;
}

// Waits (moving nothing) until the run has ended.
void wait_ended(const std::shared_ptr<Engine>& engine, const std::string& id) {
  Background<bool> ended([engine, id] {
    try {
      (void)engine->result_json(id);
    } catch (const Error&) {
    }
    return true;
  });
  CHECK(ended.get());
}

// The minute boundaries after `from`, as run ids of schedule `id`.
std::string due_id(const std::string& id, TimePoint due) { return schedule::run_id_of(id, due); }

// Moves the clock to the schedule's next due time, `count` times, each
// once the last one's run started and ended (as the schedule knows: one
// still running makes it skip the next, Overlap::skip) and the next is
// planned. A clock moved
// on a timeout runs ahead of a loaded machine's schedule, which then takes
// the due times it missed as downtime (catch_up = 1: only the latest
// runs), and a case that counts them fails (one did, due time 1 missing).
void walk_due_times(Engine& engine, ManualClock& clock, const std::string& id, const CallCounter& ticks, int count) {
  const int before = ticks.count();
  std::optional<TimePoint> next;
  auto settled = [&] {
    auto info = engine.describe_schedule(id);
    next = info.next_due;
    return info.running.empty() && next && *next > clock.now();
  };
  for (int k = 0; k < count; ++k) {
    INFO("due time " << k << " of schedule " << id);
    REQUIRE(eventually(settled));
    clock.advance(std::chrono::duration_cast<std::chrono::milliseconds>(*next - clock.now()));
    REQUIRE(ticks.wait_for(before + k + 1, kPatience));
  }
  // Planned past the last: nothing more starts while the clock stands.
  REQUIRE(eventually(settled));
}

TimePoint next_minute(TimePoint after) {
  auto floored = std::chrono::floor<minutes>(after);
  return floored + minutes(1);
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a schedule starts one run per due time, named by the due time", M, InMemory, OnDisk, Remote) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, targets);
  auto created = harness.clock().now();
  engine->schedule("every-minute", every_minute(), kTick, 7);
  auto first = next_minute(created);
  // Before the clock moves, the schedule's run has planned: on a loaded
  // machine it may not have run yet, and a plan made after the clock moved
  // starts from a later minute (this case flaked with due time 0 missing).
  REQUIRE(eventually([&] { return engine->describe_schedule("every-minute").next_due.has_value(); }));
  CHECK(*engine->describe_schedule("every-minute").next_due == first);
  walk_due_times(*engine, harness.clock(), "every-minute", targets.ticks, 3);
  auto info = engine->describe_schedule("every-minute");
  // Each run's id is its due time; the first is the first minute after the
  // schedule was made.
  auto ids = run_ids(*engine, "tick");
  REQUIRE(ids.size() >= 3);
  for (int k = 0; k < 3; ++k) {
    CHECK_MESSAGE(ids.contains(due_id("every-minute", first + minutes(k))), "no run for due time " << k);
  }
  CHECK(info.started == ids.size());
  CHECK(info.workflow == "tick");
  CHECK(info.input == 7);
  REQUIRE(info.next_due);
  CHECK(*info.next_due > harness.clock().now());
  CHECK(result_of(engine, kTick, *ids.begin()) == 7);
  // Listed among the schedules; the schedule's own run is a run too.
  auto listed = engine->list_schedules();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].id == "every-minute");
  CHECK(status_of(*engine, "schedule:every-minute") == RunStatus::running);
}

TEST_CASE_TEMPLATE("refusals: a spec that is not one, an unknown workflow, a second schedule of the same id", M,
                   InMemory, OnDisk) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, targets);
  ScheduleSpec bad;
  bad.cron = "61 * * * *";
  auto message = error_message(errc::invalid_argument, [&] { engine->schedule("s", bad, kTick, 1); });
  CHECK_MESSAGE(contains(message, "61"), message);
  ScheduleSpec zone = yearly();
  zone.time_zone = "Mars/Olympus";
  message = error_message(errc::invalid_argument, [&] { engine->schedule("s", zone, kTick, 1); });
  CHECK_MESSAGE(contains(message, "Mars/Olympus"), message);
  ScheduleSpec both = every_minute();
  both.cron = "* * * * *";
  (void)error_message(errc::invalid_argument, [&] { engine->schedule("s", both, kTick, 1); });
  message = error_message(errc::unknown_workflow,
                          [&] { engine->schedule("s", yearly(), WorkflowRef<int, int>("nothing"), 1); });
  CHECK_MESSAGE(contains(message, "nothing"), message);
  engine->schedule("s", yearly(), kTick, 1);
  message = error_message(errc::already_exists, [&] { engine->schedule("s", yearly(), kTick, 1); });
  CHECK_MESSAGE(contains(message, "schedule 's' already exists"), message);
  message = error_message(errc::not_found, [&] { (void)engine->describe_schedule("none"); });
  CHECK_MESSAGE(contains(message, "no schedule 'none'"), message);
  message = error_message(errc::rejected, [&] {
    (void)engine->change_schedule_json("s", {{"action", "explode"}});
  });
  CHECK_MESSAGE(contains(message, "no action \"explode\""), message);
  message = error_message(errc::rejected, [&] {
    (void)engine->change_schedule_json("s", {{"action", "backfill"}, {"from_ms", 5}, {"to_ms", 1}});
  });
  CHECK_MESSAGE(contains(message, "from_ms must be before to_ms"), message);
}

TEST_CASE_TEMPLATE("overlap: skip, buffer_one and buffer_all while the last run is running", M, InMemory, OnDisk,
                   Remote) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, targets);
  auto trigger = [&](const std::string& id) {
    harness.clock().advance(std::chrono::seconds(1));  // a due time of its own
    auto runs = engine->trigger_schedule(id);
    REQUIRE(runs.size() <= 1);
    return runs.empty() ? std::string() : runs[0];
  };
  ScheduleOptions options;
  options.overlap = Overlap::skip;
  engine->schedule("skip", yearly(), kJob, 1, options);
  auto first = trigger("skip");
  // A child starts once the schedule's records are durable: after the answer.
  REQUIRE(targets.jobs.wait_for(1, kPatience));
  CHECK(status_of(*engine, first) == RunStatus::running);
  CHECK(trigger("skip").empty());  // skipped
  auto info = engine->describe_schedule("skip");
  CHECK(info.started == 1);
  CHECK(info.skipped == 1);
  CHECK(info.running == std::vector<std::string>{first});

  options.overlap = Overlap::buffer_one;
  engine->schedule("one", yearly(), kJob, 2, options);
  auto running = trigger("one");
  REQUIRE(targets.jobs.wait_for(2, kPatience));
  auto buffered = trigger("one");
  CHECK(trigger("one").empty());  // one is buffered already: this one passes
  info = engine->describe_schedule("one");
  CHECK(info.buffered == std::vector<std::string>{buffered});
  CHECK(info.skipped == 1);
  CHECK_FALSE(engine->get_run(buffered));
  engine->signal(running, kFinish, 0);
  CHECK(result_of(engine, kJob, running) == 2);
  // The buffered one starts once the running one has ended.
  REQUIRE(targets.jobs.wait_for(3, kPatience));
  engine->signal(buffered, kFinish, 10);
  CHECK(result_of(engine, kJob, buffered) == 12);

  options.overlap = Overlap::buffer_all;
  engine->schedule("all", yearly(), kJob, 3, options);
  running = trigger("all");
  REQUIRE(targets.jobs.wait_for(4, kPatience));
  auto second = trigger("all");
  auto third = trigger("all");
  CHECK(engine->describe_schedule("all").buffered == std::vector<std::string>{second, third});
  engine->signal(running, kFinish, 0);
  REQUIRE(targets.jobs.wait_for(5, kPatience));
  engine->signal(second, kFinish, 0);
  CHECK(result_of(engine, kJob, second) == 3);
  REQUIRE(targets.jobs.wait_for(6, kPatience));
  engine->signal(third, kFinish, 0);
  CHECK(result_of(engine, kJob, third) == 3);
  CHECK(engine->describe_schedule("all").skipped == 0);
}

TEST_CASE_TEMPLATE("overlap: cancel_other, terminate_other and allow_all", M, InMemory, OnDisk, Remote) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, targets);
  auto trigger = [&](const std::string& id) {
    harness.clock().advance(std::chrono::seconds(1));
    auto runs = engine->trigger_schedule(id);
    REQUIRE(runs.size() == 1);
    return runs[0];
  };
  ScheduleOptions options;
  options.overlap = Overlap::cancel_other;
  engine->schedule("cancel", yearly(), kJob, 1, options);
  auto old = trigger("cancel");
  REQUIRE(targets.jobs.wait_for(1, kPatience));
  auto next = trigger("cancel");
  // The old one is cancelled; the new one starts once it has ended.
  wait_ended(engine, old);
  CHECK(status_of(*engine, old) == RunStatus::cancelled);
  REQUIRE(targets.jobs.wait_for(2, kPatience));
  engine->signal(next, kFinish, 5);
  CHECK(result_of(engine, kJob, next) == 6);

  options.overlap = Overlap::terminate_other;
  engine->schedule("terminate", yearly(), kJob, 1, options);
  old = trigger("terminate");
  REQUIRE(targets.jobs.wait_for(3, kPatience));
  next = trigger("terminate");
  // Terminated before the new one started.
  CHECK(status_of(*engine, old) != RunStatus::running);
  REQUIRE(targets.jobs.wait_for(4, kPatience));
  CHECK(status_of(*engine, next) == RunStatus::running);
  engine->signal(next, kFinish, 1);
  CHECK(result_of(engine, kJob, next) == 2);

  options.overlap = Overlap::allow_all;
  engine->schedule("allow", yearly(), kJob, 1, options);
  auto a = trigger("allow");
  auto b = trigger("allow");
  REQUIRE(targets.jobs.wait_for(6, kPatience));
  CHECK(status_of(*engine, a) == RunStatus::running);
  CHECK(status_of(*engine, b) == RunStatus::running);
  CHECK(engine->describe_schedule("allow").started == 2);
}

TEST_CASE_TEMPLATE("after downtime a schedule runs the latest catch_up due times and lets the rest pass", M, OnDisk,
                   Remote) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto created = harness.clock().now();
  {
    auto engine = harness.open();
    register_targets(*engine, targets);
    ScheduleOptions options;
    options.catch_up = 2;
    // The caught-up due times go through the overlap policy too: buffered,
    // each runs (with skip, the second would pass while the first runs).
    options.overlap = Overlap::buffer_all;
    engine->schedule("nightly", every_minute(), kTick, 1, options);
    engine->shutdown();
  }
  harness.clock().advance(minutes(10));  // ten due times pass while it is down
  auto engine = harness.open();
  register_targets(*engine, targets);
  REQUIRE(targets.ticks.wait_for(2, kPatience));
  auto info = engine->describe_schedule("nightly");
  auto ids = run_ids(*engine, "tick");
  CHECK(ids.size() == 2);
  auto first = next_minute(created);
  CHECK(ids.contains(due_id("nightly", first + minutes(8))));
  CHECK(ids.contains(due_id("nightly", first + minutes(9))));
  CHECK(info.skipped == 8);
  CHECK(info.started == 2);
}

TEST_CASE_TEMPLATE("a cron schedule across the spring-forward change runs once, at the gap's end", M, InMemory,
                   OnDisk) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, targets);
  // Europe/Paris skips 02:00-03:00 on 2026-03-29.
  auto start = utc("2026-03-27 12:00:00");
  REQUIRE(harness.clock().now() < start);
  harness.clock().advance(std::chrono::duration_cast<std::chrono::milliseconds>(start - harness.clock().now()));
  ScheduleSpec spec;
  spec.cron = "30 2 * * *";
  spec.time_zone = "Europe/Paris";
  engine->schedule("paris", spec, kTick, 1);
  walk_due_times(*engine, harness.clock(), "paris", targets.ticks, 3);
  auto ids = run_ids(*engine, "tick");
  CHECK(ids.contains("paris@2026-03-28T01:30:00.000Z"));  // 02:30 CET
  CHECK(ids.contains("paris@2026-03-29T01:00:00.000Z"));  // 03:00 CEST: the gap's end
  CHECK(ids.contains("paris@2026-03-30T00:30:00.000Z"));  // 02:30 CEST
  CHECK(ids.size() == 3);
}

TEST_CASE_TEMPLATE("pause, resume, backfill, update and delete", M, InMemory, OnDisk, Remote) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, targets);
  auto created = harness.clock().now();
  engine->schedule("s", every_minute(), kTick, 1);
  auto info = engine->pause_schedule("s", "maintenance");
  CHECK(info.options.paused);
  CHECK(info.options.note == "maintenance");
  CHECK_FALSE(info.next_due);
  harness.clock().advance(minutes(5));
  // Paused: nothing is due. Resumed: it goes on from now, the paused due
  // times passed.
  info = engine->resume_schedule("s");
  CHECK_FALSE(info.options.paused);
  REQUIRE(info.next_due);
  CHECK(*info.next_due > harness.clock().now());
  CHECK(targets.ticks.count() == 0);

  // Backfill: the due times in a past range, each once (again: the same runs).
  auto first = next_minute(created);
  auto runs = engine->backfill_schedule("s", first - minutes(1), first + minutes(2), Overlap::allow_all);
  CHECK(runs == std::vector<std::string>{due_id("s", first), due_id("s", first + minutes(1)),
                                         due_id("s", first + minutes(2))});
  REQUIRE(targets.ticks.wait_for(3, kPatience));
  (void)engine->backfill_schedule("s", first - minutes(1), first + minutes(2), Overlap::allow_all);
  CHECK(run_ids(*engine, "tick").size() == 3);

  // Update: another workflow, input and interval.
  ScheduleSpec hourly;
  hourly.every = std::chrono::hours(1);
  ScheduleOptions options;
  options.overlap = Overlap::allow_all;
  info = engine->update_schedule("s", hourly, "job", 9, options);
  CHECK(info.workflow == "job");
  CHECK(info.spec.every == std::chrono::hours(1));
  CHECK(info.options.overlap == Overlap::allow_all);
  advance_until(harness.clock(), minutes(10),
                [&](std::chrono::milliseconds wait) { return targets.jobs.wait_for(1, wait); });
  auto jobs = run_ids(*engine, "job");
  REQUIRE(jobs.size() == 1);
  engine->signal(*jobs.begin(), kFinish, 1);
  CHECK(result_of(engine, kJob, *jobs.begin()) == 10);

  // Delete: the schedule's run ends; describing it says there is none.
  engine->delete_schedule("s");
  auto message = error_message(errc::not_found, [&] { (void)engine->describe_schedule("s"); });
  CHECK_MESSAGE(contains(message, "no schedule 's'"), message);
  CHECK(engine->list_schedules().empty());
  // Made anew under the same id.
  engine->schedule("s", yearly(), kTick, 2);
  CHECK(engine->describe_schedule("s").input == 2);
}

TEST_CASE_TEMPLATE("a schedule continues as new every so many turns and keeps its state", M, InMemory, OnDisk) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, targets);
  engine->schedule("often", every_minute(), kTick, 1);
  const int fires = schedule::kTurnsPerGeneration + 10;
  advance_until(harness.clock(), std::chrono::seconds(30),
                [&](std::chrono::milliseconds wait) { return targets.ticks.wait_for(fires, wait); });
  auto info = engine->describe_schedule("often");
  CHECK(info.started >= static_cast<std::uint64_t>(fires));
  CHECK(info.recent.size() == schedule::kRecentRuns);
  auto run = engine->get_run("schedule:often");
  REQUIRE(run);
  CHECK(run->generation >= 2);
  // Every run it started has its own due time: none twice.
  CHECK(run_ids(*engine, "tick").size() == static_cast<std::size_t>(targets.ticks.count()));
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("jitter: a due time's run starts its fixed delay after it, and keeps the due time's id", M, InMemory,
                   OnDisk) {
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_targets(*engine, targets);
  auto spec = every_minute();
  spec.jitter = std::chrono::seconds(50);
  auto first = next_minute(harness.clock().now());
  auto delay = schedule::jitter_of("jittery", first, spec.jitter);
  REQUIRE(delay >= std::chrono::seconds(1));  // (fixed by the id and the due time)
  engine->schedule("jittery", spec, kTick, 1);
  // Up to a millisecond before its delay: nothing.
  harness.clock().advance(std::chrono::duration_cast<std::chrono::milliseconds>(first - harness.clock().now()) + delay -
                          std::chrono::milliseconds(1));
  CHECK_FALSE(targets.ticks.wait_for(1, kReactionTime * 5));
  CHECK(run_ids(*engine, "tick").empty());
  harness.clock().advance(std::chrono::milliseconds(1));
  REQUIRE(targets.ticks.wait_for(1, kPatience));
  CHECK(run_ids(*engine, "tick") == std::set<std::string>{due_id("jittery", first)});
  auto started = engine->get_run(due_id("jittery", first))->started_at;
  CHECK(started == first + delay);
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a schedule and a queue go on past park_after and checkpoints, and across a reopen", M, OnDisk,
                   Remote) {
  // They wait in Ctx::any (a timer, an update, a run's end), which does not
  // park: they stay in memory, and every due time and admission still
  // happens once.
  Targets targets;  // outlives the engine, whose runs use it to the end
  EngineHarness harness(M::mode);
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = std::chrono::seconds(1);
  auto engine = harness.open(config);
  register_targets(*engine, targets);
  auto first = next_minute(harness.clock().now());
  engine->schedule("parked", every_minute(), kTick, 1);
  engine->queue("line", QueueOptions{.concurrency = 1});
  (void)engine->enqueue("line", kJob, "job-1", 1);
  (void)engine->enqueue("line", kJob, "job-2", 2);
  REQUIRE(targets.jobs.wait_for(1, kPatience));
  for (int round = 0; round < 3; ++round) {
    harness.clock().advance(std::chrono::seconds(2));
    engine->checkpoint();
  }
  CHECK(engine->get_run("schedule:parked")->status == RunStatus::running);
  auto waiting = engine->describe_queue("line").waiting;
  REQUIRE(waiting.size() == 1);
  CHECK(waiting[0].id == "job-2");
  harness.clock().advance(std::chrono::duration_cast<std::chrono::milliseconds>(first - harness.clock().now()));
  REQUIRE(targets.ticks.wait_for(1, kPatience));
  engine->signal("job-1", kFinish, 0);
  REQUIRE(targets.jobs.wait_for(2, kPatience));
  engine->shutdown();
  engine = harness.open(config);
  register_targets(*engine, targets);
  engine->queue("line", QueueOptions{.concurrency = 1});
  engine->signal("job-2", kFinish, 0);
  CHECK(result_of(engine, kJob, "job-2") == 2);
  harness.clock().advance(minutes(1));
  REQUIRE(targets.ticks.wait_for(2, kPatience));
  CHECK(run_ids(*engine, "tick") ==
        std::set<std::string>{due_id("parked", first), due_id("parked", first + minutes(1))});
}
}
