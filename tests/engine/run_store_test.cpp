// The run store: finished runs, the list_runs index with filters and pages,
// checkpoints, parked journals and retention, across reopening.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <rocksdb/db.h>

#include "engine/run_store.hpp"
#include "wal/errc.hpp"
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

// A journal record's stand-in: the text's bytes.
std::vector<std::byte> bytes(const std::string& text) {
  return std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                reinterpret_cast<const std::byte*>(text.data()) + text.size());
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

namespace {
// A parked run waiting on a signal with a timeout and a child.
ParkedRun waiting_parked() {
  ParkedRun run{"w", "order", 2, 10, 5'000};
  run.version = 3;
  run.waiting.push_back(PendingCommand{4, "wait_for", "approval", TimePoint(std::chrono::milliseconds(5'000))});
  run.waiting.push_back(PendingCommand{5, "child", "w-child", std::nullopt});
  return run;
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

  TEST_CASE("journals are kept per shard and place, and parked runs are found by id and by wake time") {
    testing::TempDir dir;
    auto store = open_store(dir.path());
    RunStore::Batch batch;
    batch.put_journal_record(JournalPlace::live, 0, "a", 1, bytes("a1"));
    batch.put_journal_record(JournalPlace::live, 0, "a", 3, bytes("a3"));
    batch.put_journal_record(JournalPlace::live, 0, "ab", 2, bytes("ab2"));
    batch.put_journal_record(JournalPlace::live, 1, "a", 9, bytes("other shard"));
    batch.put_journal_record(JournalPlace::parked, 0, "sleeper", 4, bytes("s4"));
    ParkedRun late{"late", "order", 1, 10, 5000};
    ParkedRun early{"sleeper", "order", 2, 20, 1000};
    ParkedRun waiting{"waiter", "order", 1, 30, std::nullopt};
    batch.put_parked(0, late);
    batch.put_parked(0, early);
    batch.put_parked(0, waiting);
    REQUIRE(store->write(std::move(batch)).has_value());

    std::vector<std::string> seen;
    auto collect = [&](const std::string& id, std::uint64_t lsn, std::span<const std::byte> record) -> Result<void> {
      seen.push_back(id + "@" + std::to_string(lsn) + "=" +
                     std::string(reinterpret_cast<const char*>(record.data()), record.size()));
      return ok();
    };
    REQUIRE(store->load_journals(0, collect).has_value());
    CHECK(seen == std::vector<std::string>{"a@1=a1", "a@3=a3", "ab@2=ab2"});  // not the parked one, not shard 1
    seen.clear();
    REQUIRE(store->read_journal(JournalPlace::parked, 0, "sleeper", collect).has_value());
    CHECK(seen == std::vector<std::string>{"sleeper@4=s4"});

    auto found = store->parked(0, "sleeper");
    REQUIRE(found.has_value());
    REQUIRE(found->has_value());
    CHECK(**found == early);
    std::vector<std::string> by_wake;
    REQUIRE(store->parked_by_wake(0, 0, [&](const ParkedRun& run) {
      by_wake.push_back(run.id);
      return true;
    }).has_value());
    CHECK(by_wake == std::vector<std::string>{"sleeper", "late"});  // the waiter has no timer
    std::size_t all = 0;
    REQUIRE(store->all_parked(0, [&](const ParkedRun&) { ++all; }).has_value());
    CHECK(all == 3);

    RunStore::Batch wake;
    wake.erase_parked(0, early);
    wake.erase_journal(JournalPlace::parked, 0, "sleeper");
    wake.erase_journal(JournalPlace::live, 0, "a");
    REQUIRE(store->write(std::move(wake)).has_value());
    auto gone = store->parked(0, "sleeper");
    REQUIRE(gone.has_value());
    CHECK_FALSE(gone->has_value());
    seen.clear();
    REQUIRE(store->load_journals(0, collect).has_value());
    CHECK(seen == std::vector<std::string>{"ab@2=ab2"});  // "a" went, "ab" (a longer id) did not
  }

  TEST_CASE("a run's records put as one chunk read back one by one in LSN order, beside single ones, and go with the run") {
    testing::TempDir dir;
    auto store = open_store(dir.path());
    auto a5 = bytes("a5"), a6 = bytes("a6"), a9 = bytes(std::string(300, 'x'));  // a length of two varint bytes
    auto ab2 = bytes("ab2"), ab4 = bytes("ab4"), s7 = bytes("s7");
    using Stored = RunStore::Batch::StoredRecord;
    RunStore::Batch batch;
    // A store written before chunks holds one record a value; a run may
    // have both (records stored by an older build, then chunks).
    batch.put_journal_record(JournalPlace::live, 0, "a", 1, bytes("a1"));
    batch.put_journal_record(JournalPlace::live, 0, "a", 3, bytes("a3"));
    std::vector<Stored> a_chunk{{5, a5}, {6, a6}, {9, a9}};
    batch.put_journal_records(JournalPlace::live, 0, "a", a_chunk);
    std::vector<Stored> ab_chunk{{2, ab2}, {4, ab4}};
    batch.put_journal_records(JournalPlace::live, 0, "ab", ab_chunk);
    std::vector<Stored> s_chunk{{7, s7}};
    batch.put_journal_records(JournalPlace::parked, 0, "s", s_chunk);
    batch.put_journal_records(JournalPlace::live, 0, "none", std::span<const Stored>{});  // puts nothing
    REQUIRE(store->write(std::move(batch)).has_value());

    std::vector<std::string> seen;
    auto collect = [&](const std::string& id, std::uint64_t lsn, std::span<const std::byte> record) -> Result<void> {
      seen.push_back(id + "@" + std::to_string(lsn) + "=" +
                     std::string(reinterpret_cast<const char*>(record.data()), std::min<std::size_t>(record.size(), 3)));
      return ok();
    };
    REQUIRE(store->load_journals(0, collect).has_value());
    CHECK(seen == std::vector<std::string>{"a@1=a1", "a@3=a3", "a@5=a5", "a@6=a6", "a@9=xxx", "ab@2=ab2", "ab@4=ab4"});
    seen.clear();
    REQUIRE(store->read_journal(JournalPlace::parked, 0, "s", collect).has_value());
    CHECK(seen == std::vector<std::string>{"s@7=s7"});
    // Reopened (RocksDB's log replayed), the same.
    store.reset();
    store = open_store(dir.path());
    seen.clear();
    REQUIRE(store->read_journal(JournalPlace::live, 0, "a", collect).has_value());
    CHECK(seen.size() == 5);

    RunStore::Batch finish;
    finish.erase_journal(JournalPlace::live, 0, "a");
    REQUIRE(store->write(std::move(finish)).has_value());
    seen.clear();
    REQUIRE(store->load_journals(0, collect).has_value());
    CHECK(seen == std::vector<std::string>{"ab@2=ab2", "ab@4=ab4"});  // "a"'s singles and chunk went together
  }

  TEST_CASE("a damaged journal chunk is refused as corrupt, not read as records it does not hold") {
    // A value starting with 0x00 is a chunk (a record starts with its
    // format version): each of these is one that cannot be whole.
    const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> damaged{
        {"the marker alone", {0x00}},
        {"a first record not at the key's LSN", {0x00, 0x01, 0x01, 'r'}},
        {"a second record at the same LSN", {0x00, 0x00, 0x01, 'r', 0x00, 0x01, 's'}},
        {"a length past the end", {0x00, 0x00, 0x05, 'r'}},
        {"an empty record", {0x00, 0x00, 0x00}},
        {"a length cut inside its varint", {0x00, 0x00, 0x80}},
        {"an LSN step past 64 bits", {0x00, 0x00, 0x01, 'r', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                                      0x01, 's'}},
    };
    for (const auto& entry : damaged) {
      const auto& what = entry.first;
      const auto& value = entry.second;
      CAPTURE(what);
      testing::TempDir dir;
      auto store = open_store(dir.path());
      RunStore::Batch batch;
      std::vector<std::byte> bytes;
      for (auto byte : value) bytes.push_back(std::byte{byte});
      batch.put_journal_record(JournalPlace::live, 0, "run", 5, bytes);
      REQUIRE(store->write(std::move(batch)).has_value());
      std::size_t visited = 0;
      auto count = [&](const std::string&, std::uint64_t, std::span<const std::byte>) -> Result<void> {
        ++visited;
        return ok();
      };
      auto loaded = store->load_journals(0, count);
      REQUIRE_FALSE(loaded.has_value());
      CHECK(loaded.error() == make_error_code(wal::errc::corrupt));
      auto read = store->read_journal(JournalPlace::live, 0, "run", count);
      REQUIRE_FALSE(read.has_value());
      CHECK(read.error() == make_error_code(wal::errc::corrupt));
    }
  }

  TEST_CASE("a batch sent as bytes (remote mode) writes what the original would, and damaged bytes are refused") {
    testing::TempDir dir;
    auto record = std::vector<std::byte>{std::byte{1}, std::byte{2}, std::byte{3}};
    RunStore::Batch batch;
    batch.put_finished(make_run(4));
    batch.put_journal_record(JournalPlace::live, 2, "a", 7, record);
    batch.put_parked(5, ParkedRun{"p", "order", 1, 10, 99});
    batch.put_parked(5, waiting_parked());
    batch.erase_journal(JournalPlace::parked, 5, "p");
    batch.put_checkpoint(Checkpoint{2, 7, 0, "state", 3});
    CHECK(batch.shards() == std::vector<std::uint32_t>{2, 5});
    auto bytes = batch.encode();
    auto decoded = RunStore::Batch::decode(bytes);
    REQUIRE(decoded.has_value());
    // The shards come from the keys themselves, not from a list beside them.
    CHECK(decoded->shards() == std::vector<std::uint32_t>{2, 5});
    REQUIRE(decoded->checkpoints().size() == 1);
    decoded->checkpoints()[0].keep_from_sequence = 11;  // the server fills it in
    auto store = open_store(dir.path());
    REQUIRE(store->write(std::move(*decoded)).has_value());
    CHECK(**store->finished("run-4") == make_run(4));
    CHECK(**store->checkpoint(2) == Checkpoint{2, 7, 11, "state", 3});
    CHECK(**store->parked(5, "p") == ParkedRun{"p", "order", 1, 10, 99});
    // What it waits on and its version, kept with it (a row without them,
    // as older ones are, reads as version 0 and nothing).
    CHECK(**store->parked(5, "w") == waiting_parked());
    std::size_t records = 0;
    REQUIRE(store->load_journals(2, [&](const std::string&, std::uint64_t lsn, std::span<const std::byte> got) -> Result<void> {
      CHECK(lsn == 7);
      CHECK(std::vector<std::byte>(got.begin(), got.end()) == record);
      ++records;
      return ok();
    }).has_value());
    CHECK(records == 1);
    // Every shorter prefix is refused.
    for (std::size_t size = 0; size < bytes.size(); ++size) {
      CAPTURE(size);
      CHECK_FALSE(RunStore::Batch::decode(std::span(bytes.data(), size)).has_value());
    }
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

  TEST_CASE("where a replica's store stands reads back, its run-store LSN too; a value written before the LSN was "
            "kept reads with LSN 0, and one of another size is corrupt") {
    testing::TempDir dir;
    {
      auto store = open_store(dir.path());
      RunStore::Batch batch;
      batch.put_replica_applied(ReplicaApplied{7, 2, 41});
      REQUIRE(store->write(std::move(batch)).has_value());
      CHECK(store->replica_applied().value() == ReplicaApplied{7, 2, 41});
    }
    // The value as an earlier build wrote it (batch 9, 3 records: 12 bytes),
    // and one that is no such value, put behind the store's back.
    auto put_raw = [&](const std::string& value) {
      rocksdb::DB* raw = nullptr;
      rocksdb::Options options;
      REQUIRE(rocksdb::DB::Open(options, dir.path() + "/runs", &raw).ok());
      std::unique_ptr<rocksdb::DB> db(raw);
      REQUIRE(db->Put(rocksdb::WriteOptions(), "R", value).ok());
    };
    const std::string earlier{"\0\0\0\0\0\0\0\x09\0\0\0\x03", 12};
    put_raw(earlier);
    {
      auto store = open_store(dir.path());
      CHECK(store->replica_applied().value() == ReplicaApplied{9, 3, 0});
    }
    put_raw("short");
    {
      auto store = open_store(dir.path());
      CHECK(store->replica_applied().error() == make_error_code(wal::errc::corrupt));
    }
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
