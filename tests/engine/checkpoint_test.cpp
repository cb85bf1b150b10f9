// Checkpoints, the run store and retirement through the Engine API, in local
// mode and in remote mode (where the store and the log are the server's and
// the server retires): finished runs leave memory and are still answered from the run
// store; the log retires what checkpoints cover and stays bounded; a reopen
// replays only past the checkpoints and unfinished runs carry on.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <set>
#include <string>
#include <thread>

#include "engine/journal_record.hpp"
#include "engine/run_hash.hpp"
#include "engine/run_store.hpp"
#include "engine/shard.hpp"
#include "sdk/facade/engine_impl.hpp"
#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kCount{"count"};
const WorkflowRef<int, int> kGated{"gated"};
const Signal<int> kGo{"go"};

// count: `input` steps, each adding its index; streams every tenth sum.
void register_count(Engine& engine, CallCounter& steps) {
  engine.register_workflow(kCount, [&steps](Ctx& ctx, int input) -> Task<int> {
    int sum = 0;
    for (int i = 0; i < input; ++i) {
      sum = co_await ctx.step("add-" + std::to_string(i), [&steps, sum, i] {
        steps.add();
        return sum + i;
      });
      if (i % 10 == 0) co_await ctx.stream("sums").write(sum);
    }
    co_return sum;
  });
}

// gated: a step, a wait for "go", then `input` more steps.
void register_gated(Engine& engine, CallCounter& steps) {
  engine.register_workflow(kGated, [&steps](Ctx& ctx, int input) -> Task<int> {
    int first = co_await ctx.step("first", [&steps, input] {
      steps.add();
      return input;
    });
    auto go = co_await ctx.wait_for(kGo);
    int sum = first + go.value_or(0);
    for (int i = 0; i < input; ++i) {
      sum = co_await ctx.step("after-" + std::to_string(i), [&steps, sum] {
        steps.add();
        return sum + 1;
      });
    }
    co_return sum;
  });
}

int count_sum(int steps) { return steps * (steps - 1) / 2; }

std::size_t files_in(const std::string& dir, const std::string& suffix) {
  std::size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().string().ends_with(suffix)) ++count;
  }
  return count;
}

Config small_segments(EngineHarness& harness) {
  auto config = harness.config();
  config.segment_bytes = 64 * 1024;
  config.checkpoint_interval = std::chrono::milliseconds::zero();  // only when asked or on rolls
  return config;
}

// Opening the harness's directory fails with errc::storage, saying `why`.
void check_open_refused(EngineHarness& harness, const char* opened, const char* why) {
  try {
    Engine::open(small_segments(harness));
    FAIL(opened);
  } catch (const Error& error) {
    CHECK(error.code() == errc::storage);
    INFO(error.what());
    CHECK(contains(error.what(), why));
  }
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("finished runs leave memory at a checkpoint and are answered from the run store", M, OnDisk, Remote) {
  EngineHarness harness(M::mode, 2, 64 * 1024);
  CallCounter steps;
  {
    auto engine = harness.open(small_segments(harness));
    register_count(*engine, steps);
    for (int run = 0; run < 20; ++run) {
      CHECK(engine->execute(kCount, "run-" + std::to_string(run), run + 1) == count_sum(run + 1));
    }
    engine->checkpoint();
    CHECK(engine->stats().checkpoints >= 2);
    // From the run store now: result, listing, streams, id policies.
    CHECK(engine->result(kCount, "run-7") == count_sum(8));
    auto listed = engine->list_runs();
    CHECK(listed.size() == 20);
    for (const auto& info : listed) CHECK(info.status == RunStatus::completed);
    auto reader = engine->read_stream("run-19", "sums", StreamFrom::earliest());
    std::vector<int> sums;
    while (auto chunk = reader.next()) sums.push_back(boost::json::value_to<int>(chunk->value));
    CHECK(sums == std::vector<int>{0, 55});
    auto tail = engine->read_stream("run-19", "sums", StreamFrom::at(1));
    auto last = tail.next();
    REQUIRE(last);
    CHECK(last->offset == 1);
    CHECK_FALSE(tail.next());
    auto before = steps.count();
    CHECK(engine->start(kCount, "run-3", 4) == StartOutcome::attached);
    error_message(errc::already_exists, [&] {
      engine->start(kCount, "run-3", 4, StartOptions{.if_finished = IfFinished::reject});
    });
    CHECK(steps.count() == before);
    error_message(errc::not_found, [&] { engine->signal("run-3", kGo, 1); });
    engine->cancel("run-3", "too late");  // finished: nothing to cancel
    // start_anew: generation 2, and the listing shows only the new run.
    CHECK(engine->start(kCount, "run-3", 2, StartOptions{.if_finished = IfFinished::start_anew}) ==
          StartOutcome::started);
    CHECK(engine->result(kCount, "run-3") == count_sum(2));
    engine->checkpoint();
    auto again = engine->list_runs(RunFilter{.workflow = "count"});
    CHECK(again.size() == 20);
    auto third = std::find_if(again.begin(), again.end(), [](const RunInfo& info) { return info.id == "run-3"; });
    REQUIRE(third != again.end());
    CHECK(third->generation == 2);
    engine->shutdown();
  }
  // After a reopen, the same answers without running anything.
  auto before = steps.count();
  auto engine = harness.open(small_segments(harness));
  register_count(*engine, steps);
  CHECK(engine->result(kCount, "run-3") == count_sum(2));
  CHECK(engine->result(kCount, "run-19") == count_sum(20));
  CHECK(engine->list_runs().size() == 20);
  CHECK(steps.count() == before);
}

TEST_CASE_TEMPLATE("a signal repeated under its id is acknowledged after the run left memory", M, OnDisk, Remote) {
  EngineHarness harness(M::mode, 2, 64 * 1024);
  CallCounter steps;
  auto engine = harness.open(small_segments(harness));
  register_gated(*engine, steps);
  engine->start(kGated, "gated", 3);
  engine->signal("gated", kGo, 10, "go-1");
  CHECK(engine->result(kGated, "gated") == 16);
  engine->checkpoint();
  engine->signal("gated", kGo, 99, "go-1");  // the repeat: acknowledged, dropped
  error_message(errc::not_found, [&] { engine->signal("gated", kGo, 99, "go-2"); });
}

TEST_CASE_TEMPLATE("segments retire as checkpoints cover them, and unfinished runs resume from the checkpoint", M, OnDisk, Remote) {
  EngineHarness harness(M::mode, 2, 64 * 1024);
  CallCounter steps;
  auto wal_dir = harness.wal_dir();
  {
    auto engine = harness.open(small_segments(harness));
    register_gated(*engine, steps);
    register_count(*engine, steps);
    // Waiting runs whose first records sit in the oldest segments.
    for (int run = 0; run < 10; ++run) engine->start(kGated, "gated-" + std::to_string(run), run);
    for (int run = 0; run < 60; ++run) {
      CHECK(engine->execute(kCount, "count-" + std::to_string(run), 30) == count_sum(30));
    }
    engine->checkpoint();
    CHECK(harness.segments_retired(*engine) > 0);
    CHECK(harness.segments_live(*engine) <= 2);
    // Every retired segment's file is gone; one more may be there, the next
    // segment prepared ahead of the roll (wal/log_prepare.cpp).
    auto seg_files = files_in(wal_dir, ".seg");
    CHECK(seg_files >= harness.segments_live(*engine));
    CHECK(seg_files <= harness.segments_live(*engine) + 1);
    // Half the waiting runs go on now, the rest after the reopen.
    for (int run = 0; run < 5; ++run) engine->signal("gated-" + std::to_string(run), kGo, 100);
    for (int run = 0; run < 5; ++run) CHECK(engine->result(kGated, "gated-" + std::to_string(run)) == 100 + 2 * run);
    engine->shutdown();  // with a last checkpoint
  }
  auto before = steps.count();
  auto engine = harness.open(small_segments(harness));
  register_gated(*engine, steps);
  register_count(*engine, steps);
  CHECK(steps.count() == before);  // nothing durable runs again
  for (int run = 5; run < 10; ++run) engine->signal("gated-" + std::to_string(run), kGo, 100);
  for (int run = 0; run < 10; ++run) CHECK(engine->result(kGated, "gated-" + std::to_string(run)) == 100 + 2 * run);
  CHECK(steps.count() == before + 35);  // the five resumed runs' steps after the wait: 5+6+7+8+9
  CHECK(engine->list_runs().size() == 70);
}

TEST_CASE_TEMPLATE("segment rolls ask lagging shards for checkpoints, so the log stays bounded without an interval", M, OnDisk, Remote) {
  EngineHarness harness(M::mode, 2, 64 * 1024);
  CallCounter steps;
  auto engine = harness.open(small_segments(harness));
  register_count(*engine, steps);
  std::uint64_t peak_segments = 0;
  for (int run = 0; run < 200; ++run) {
    CHECK(engine->execute(kCount, "run-" + std::to_string(run), 20) == count_sum(20));
    peak_segments = std::max(peak_segments, harness.segments_live(*engine));
  }
  auto retired = harness.segments_retired(*engine);
  MESSAGE("200 runs of 20 steps: " << engine->stats().checkpoints << " checkpoints, " << retired
                                   << " segments retired, at most " << peak_segments << " live");
  CHECK(retired > 10);
  CHECK(peak_segments < retired);
}

TEST_CASE("a data directory whose run store was removed after a retirement refuses to open, saying why") {
  EngineHarness harness(Mode::local);
  CallCounter steps;
  {
    auto engine = harness.open(small_segments(harness));
    register_count(*engine, steps);
    for (int run = 0; run < 60; ++run) engine->execute(kCount, "run-" + std::to_string(run), 30);
    engine->checkpoint();
    REQUIRE(engine->stats().segments_retired > 0);
    engine->shutdown();
  }
  std::filesystem::remove_all(harness.data_dir() + "/runs");
  check_open_refused(harness, "opened without the checkpoints that retired the log's start",
                     "no segment holds sequences 1 to");
}
}

TEST_SUITE("unit") {
TEST_CASE("a run store holding records past its shard's checkpoint refuses to open, saying why") {
  EngineHarness harness(Mode::local);
  CallCounter steps;
  {
    auto engine = harness.open(small_segments(harness));
    register_gated(*engine, steps);
    engine->start(kGated, "waiting", 1);
    engine->shutdown();  // a last checkpoint: the waiting run's records are in the store
  }
  {
    // What a damaged or mismatched directory could hold: a record past the checkpoint.
    std::string why;
    auto store = engine::RunStore::open(harness.data_dir(), &why);
    REQUIRE_MESSAGE(store.has_value(), why);
    auto checkpoint = (*store)->checkpoint(engine::shard_of("stray", 2));
    REQUIRE(checkpoint.has_value());
    auto lsn = *checkpoint ? (*checkpoint)->lsn : 0;
    engine::JournalRecord record;
    record.run_id = "stray";
    record.name = "gated";
    engine::RunStore::Batch batch;
    batch.put_journal_record(engine::JournalPlace::live, engine::shard_of("stray", 2), "stray", lsn + 5,
                             engine::encode_record(record));
    REQUIRE((*store)->write(std::move(batch)).has_value());
  }
  check_open_refused(harness, "opened a store whose records the log does not reach", "past its checkpoint");
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("finished runs page by finish time, filtered by workflow, status and time range", M, InMemory,
                   OnDisk) {
  EngineHarness harness(M::mode);
  CallCounter steps;
  auto engine = harness.open(small_segments(harness));
  register_count(*engine, steps);
  register_gated(*engine, steps);
  auto begin = harness.clock().now();
  for (int run = 0; run < 25; ++run) {
    engine->execute(kCount, "count-" + std::to_string(run), 2);
    harness.clock().advance(std::chrono::seconds(1));
  }
  engine->start(kGated, "still-running", 1);
  engine->checkpoint();  // local mode: finished runs join the index
  std::vector<std::string> ids;
  std::size_t pages = 0;
  std::string cursor;
  do {
    auto page = engine->list_finished_runs(RunFilter{.workflow = "count"}, 10, cursor);
    for (const auto& run : page.runs) ids.push_back(run.id);
    cursor = page.next_cursor;
    ++pages;
  } while (!cursor.empty());
  CHECK(pages == 3);
  REQUIRE(ids.size() == 25);
  for (int run = 0; run < 25; ++run) CHECK(ids[run] == "count-" + std::to_string(run));  // by finish time
  // Runs 5 to 9 finished in [begin + 5 s, begin + 10 s).
  RunFilter window{.finished_from = begin + std::chrono::seconds(5), .finished_to = begin + std::chrono::seconds(10)};
  auto page = engine->list_finished_runs(window, 100);
  REQUIRE(page.runs.size() == 5);
  CHECK(page.runs.front().id == "count-5");
  CHECK(page.next_cursor.empty());
  CHECK(engine->list_runs(window).size() == 5);
  CHECK(engine->list_finished_runs(RunFilter{.status = RunStatus::failed}, 10).runs.empty());
  CHECK(engine->list_runs(RunFilter{.status = RunStatus::running}).size() == 1);
  error_message(errc::invalid_argument,
                [&] { engine->list_finished_runs(RunFilter{.status = RunStatus::running}, 10); });
}
}

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("shards checkpoint on their interval without being asked", M, OnDisk, Remote) {
  EngineHarness harness(M::mode, 2, 64 * 1024);
  CallCounter steps;
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds(20);
  auto engine = harness.open(config);
  register_count(*engine, steps);
  engine->execute(kCount, "one", 3);
  auto give_up = std::chrono::steady_clock::now() + kPatience;
  // Nothing to wait on but the interval itself: each round asks every shard
  // for its list (a round trip through its inbox) until the checkpoints come
  // and the finished run is in the store's index. (Four checkpoints alone
  // are not enough: under load one shard may take them all before the
  // other, the run's, takes its first after the run's end.)
  auto indexed = [&] { return engine->list_finished_runs(RunFilter{}, 10).runs.size(); };
  while ((engine->stats().checkpoints < 4 || indexed() < 1) && std::chrono::steady_clock::now() < give_up) {
    (void)engine->list_runs();
  }
  CHECK(engine->stats().checkpoints >= 4);
  CHECK(indexed() == 1);
}

TEST_CASE_TEMPLATE("a busy shard checkpoints every so many finished runs, with no interval and no segment roll", M,
                   OnDisk, Remote) {
  // Without the bound, a shard finishing 8,000 runs a second held them all
  // for its 5 s interval and then spent a 300 ms turn taking the checkpoint
  // and 100 ms more unloading after it: every run of the shard waited.
  EngineHarness harness(M::mode, 1, 64u << 20);
  CallCounter steps;
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  auto engine = harness.open(config);
  register_count(*engine, steps);
  const auto runs = 2 * engine::Shard::kCheckpointFinishedRunsMax + 10;
  for (std::size_t run = 0; run < runs; ++run) engine->start(kCount, "run-" + std::to_string(run), 2);
  for (std::size_t run = 0; run < runs; ++run) CHECK(engine->result(kCount, "run-" + std::to_string(run)) == 1);
  auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (engine->stats().checkpoints < 2 && std::chrono::steady_clock::now() < give_up) {
    (void)engine->list_runs();
  }
  CHECK(engine->stats().checkpoints >= 2);
  // The runs that left memory are answered from the store.
  CHECK(engine->result(kCount, "run-0") == 1);
  CHECK(engine->get_run("run-5")->status == RunStatus::completed);
}

TEST_CASE("open does not wait to index the stored finished runs, and a list asked meanwhile waits for all of them") {
  // At a million finished runs, reading them into the index took seconds of
  // every open. The fill now runs after open returns; the hook holds it
  // until a list is waiting on it, which then must see every run.
  EngineHarness harness(Mode::local);
  CallCounter steps;
  const int runs = 50;
  {
    auto engine = harness.open();
    register_count(*engine, steps);
    for (int run = 0; run < runs; ++run) CHECK(engine->execute(kCount, "run-" + std::to_string(run), 2) == 1);
    engine->shutdown();  // the last checkpoints store them all as finished
  }
  std::promise<void> opened;
  auto opened_future = opened.get_future().share();
  bool list_waited = false;
  Engine::Impl::index_fill_hook_for_tests = [&](engine::RunIndex& index) {
    opened_future.wait();
    auto give_up = std::chrono::steady_clock::now() + kPatience;
    while (index.waiting_for_fill() == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    list_waited = index.waiting_for_fill() > 0;
  };
  auto engine = harness.open();
  register_count(*engine, steps);
  // Served while the index fills: a finished run's result (from the store).
  CHECK(engine->result(kCount, "run-7") == 1);
  // query_runs answers from the index (what the console and GET /v1/runs
  // list; list_runs and list_finished_runs read the shards and the store).
  auto listed = std::async(std::launch::async, [&] {
    RunListQuery query;
    query.limit = 1000;
    return engine->query_runs(query);
  });
  opened.set_value();
  auto page = listed.get();
  CHECK(page.runs.size() == std::size_t(runs));
  CHECK(page.total == std::uint64_t(runs));
  Engine::Impl::index_fill_hook_for_tests = nullptr;
  CHECK(list_waited);
}

TEST_CASE_TEMPLATE("finished runs past their retention are expired from the run store", M, OnDisk, Remote) {
  EngineHarness harness(M::mode, 2, 64 * 1024);
  CallCounter steps;
  auto config = small_segments(harness);
  config.finished_retention = std::chrono::hours(1);
  auto engine = harness.open(config);
  register_count(*engine, steps);
  engine->execute(kCount, "old", 2);
  harness.clock().advance(std::chrono::minutes(90));
  engine->execute(kCount, "recent", 2);
  engine->checkpoint();  // stores both, then expires what finished over an hour ago
  error_message(errc::not_found, [&] { engine->result(kCount, "old"); });
  CHECK(engine->result(kCount, "recent") == 1);
  auto listed = engine->list_runs();
  REQUIRE(listed.size() == 1);
  CHECK(listed.front().id == "recent");
  // The id is free again: a new first run.
  CHECK(engine->start(kCount, "old", 3) == StartOutcome::started);
  CHECK(engine->result(kCount, "old") == 3);
}
}
