// The run store: finished runs, the list_runs index with filters and pages,
// checkpoints, parked journals and retention, across reopening.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "engine/run_store.hpp"
#include "tests/support/temp_dir.hpp"

using namespace fusee;
using namespace fusee::engine;

namespace {

FinishedRun make_run(int n) {
  FinishedRun run;
  run.id = "run-" + std::to_string(n);
  run.generation = 1 + n % 2;
  run.workflow = n % 3 == 0 ? "order" : "refund";
  run.input = boost::json::object{{"n", n}};
  run.status = n % 4 == 0 ? RunStatus::failed : RunStatus::completed;
  if (run.status == RunStatus::completed) {
    run.result = n * 10;
  } else {
    run.error_code = "step_failed";
    run.message = "step 'charge' failed";
  }
  run.started_ms = 1000 * n - 5;
  run.finished_ms = 1000 * n;
  return run;
}

std::unique_ptr<RunStore> open_store(const std::string& dir) {
  std::string why;
  auto store = RunStore::open(dir, &why);
  REQUIRE_MESSAGE(store.has_value(), why);
  return std::move(*store);
}

// Every page of a query, in order.
std::vector<std::string> all_pages(RunStore& store, RunQuery query, std::size_t* pages = nullptr) {
  std::vector<std::string> ids;
  std::size_t count = 0;
  for (;;) {
    auto page = store.list(query);
    REQUIRE(page.has_value());
    ++count;
    for (const auto& run : page->runs) ids.push_back(run.id);
    if (page->next_cursor.empty()) break;
    query.cursor = page->next_cursor;
  }
  if (pages) *pages = count;
  return ids;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("a finished run written to the run store reads back whole after reopening") {
    testing::TempDir dir;
    {
      auto store = open_store(dir.path());
      RunStore::Batch batch;
      for (int n = 1; n <= 3; ++n) batch.put_finished(make_run(n));
      REQUIRE(store->write(std::move(batch)).has_value());
    }
    auto store = open_store(dir.path());
    for (int n = 1; n <= 3; ++n) {
      auto run = store->finished("run-" + std::to_string(n));
      REQUIRE(run.has_value());
      REQUIRE(run->has_value());
      CHECK(**run == make_run(n));
    }
    auto missing = store->finished("run-99");
    REQUIRE(missing.has_value());
    CHECK_FALSE(missing->has_value());
  }

  TEST_CASE("list pages through runs by finish time, workflow and status, each run once, in order") {
    testing::TempDir dir;
    auto store = open_store(dir.path());
    RunStore::Batch batch;
    for (int n = 1; n <= 50; ++n) batch.put_finished(make_run(n));
    REQUIRE(store->write(std::move(batch)).has_value());

    auto expect = [](auto keep) {
      std::vector<std::string> ids;
      for (int n = 1; n <= 50; ++n) {
        if (keep(make_run(n))) ids.push_back(make_run(n).id);
      }
      return ids;
    };
    for (std::size_t limit : {1u, 3u, 7u, 50u, 100u}) {
      RunQuery all;
      all.limit = limit;
      std::size_t pages = 0;
      CHECK(all_pages(*store, all, &pages) == expect([](const FinishedRun&) { return true; }));
      CHECK(pages == (50 + limit - 1) / limit);

      RunQuery orders = all;
      orders.workflow = "order";
      CHECK(all_pages(*store, orders) == expect([](const FinishedRun& r) { return r.workflow == "order"; }));

      RunQuery failed = all;
      failed.status = RunStatus::failed;
      CHECK(all_pages(*store, failed) == expect([](const FinishedRun& r) { return r.status == RunStatus::failed; }));

      RunQuery failed_orders = orders;
      failed_orders.status = RunStatus::failed;
      CHECK(all_pages(*store, failed_orders) == expect([](const FinishedRun& r) {
              return r.workflow == "order" && r.status == RunStatus::failed;
            }));

      RunQuery window = all;
      window.finished_from_ms = 10'000;
      window.finished_to_ms = 20'000;
      CHECK(all_pages(*store, window) == expect([](const FinishedRun& r) {
              return r.finished_ms >= 10'000 && r.finished_ms < 20'000;
            }));
    }
  }

  TEST_CASE("checkpoints are per shard and the latest one wins") {
    testing::TempDir dir;
    {
      auto store = open_store(dir.path());
      for (std::uint64_t lsn : {10u, 20u}) {
        RunStore::Batch batch;
        batch.put_checkpoint(Checkpoint{0, lsn, lsn / 2, std::string("state\0at ", 9) + std::to_string(lsn)});
        REQUIRE(store->write(std::move(batch)).has_value());
      }
    }
    auto store = open_store(dir.path());
    auto zero = store->checkpoint(0);
    REQUIRE(zero.has_value());
    REQUIRE(zero->has_value());
    CHECK(**zero == Checkpoint{0, 20, 10, std::string("state\0at ", 9) + "20"});
    auto one = store->checkpoint(1);
    REQUIRE(one.has_value());
    CHECK_FALSE(one->has_value());
  }

  TEST_CASE("a parked journal is kept until erased") {
    testing::TempDir dir;
    auto store = open_store(dir.path());
    RunStore::Batch park;
    park.put_parked("sleeper", std::string("\x01\x02\x00journal", 10));
    REQUIRE(store->write(std::move(park)).has_value());
    auto parked = store->parked("sleeper");
    REQUIRE(parked.has_value());
    REQUIRE(parked->has_value());
    CHECK(**parked == std::string("\x01\x02\x00journal", 10));
    RunStore::Batch wake;
    wake.erase_parked("sleeper");
    REQUIRE(store->write(std::move(wake)).has_value());
    auto gone = store->parked("sleeper");
    REQUIRE(gone.has_value());
    CHECK_FALSE(gone->has_value());
  }

  TEST_CASE("retention removes runs that finished before the cutoff and their index entries") {
    testing::TempDir dir;
    auto store = open_store(dir.path());
    RunStore::Batch batch;
    for (int n = 1; n <= 20; ++n) batch.put_finished(make_run(n));
    REQUIRE(store->write(std::move(batch)).has_value());
    auto expired = store->expire_finished(10'500);
    REQUIRE(expired.has_value());
    CHECK(*expired == 10);
    RunQuery query;
    auto ids = all_pages(*store, query);
    REQUIRE(ids.size() == 10);
    CHECK(ids.front() == "run-11");
    RunQuery orders;
    orders.workflow = "order";
    for (const auto& id : all_pages(*store, orders)) CHECK(id >= "run-11");
    auto old = store->finished("run-3");
    REQUIRE(old.has_value());
    CHECK_FALSE(old->has_value());
  }

  TEST_CASE("a run store whose files are damaged is refused with RocksDB's reason") {
    testing::TempDir dir;
    {
      auto store = open_store(dir.path());
      RunStore::Batch batch;
      batch.put_finished(make_run(1));
      REQUIRE(store->write(std::move(batch)).has_value());
    }
    // CURRENT names the manifest; point it at one that does not exist.
    std::ofstream(dir.path() + "/runs/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";
    std::string why;
    auto store = RunStore::open(dir.path(), &why);
    CHECK_FALSE(store.has_value());
    CHECK_FALSE(why.empty());
  }
}
