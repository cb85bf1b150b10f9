// Resets and recovery (issue 38): what a crash or a checkpoint can leave
// of a reset of a running run -- its first records without its run_reset,
// records a checkpoint left in the log, checkpoints in the window where the
// reset is durable only in part -- and a reset refused before anything is
// journaled. The log and the store are written by hand, or the window is
// forced with a test hook, so that each case happens every time.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/command_cursor.hpp"
#include "engine/data_dir.hpp"
#include "engine/journal_json.hpp"
#include "engine/journal_record.hpp"
#include "engine/kept_journal.hpp"
#include "engine/run_hash.hpp"
#include "engine/shard.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/engine/slow_log.hpp"
#include "tests/engine/waits_workflow.hpp"
#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

// A data directory opened by hand, with no engine, to write what a crash or
// a checkpoint can leave (the file system outlives the log and the store).
struct ByHand {
  io::PosixFileSystem fs;
  engine::DataDir dir;
  explicit ByHand(const std::string& path) : dir(open(fs, path)) {}

 private:
  static engine::DataDir open(io::PosixFileSystem& fs, const std::string& path) {
    wal::LogOptions options;
    options.direct_io = false;
    return engine::open_data_dir(fs, path, 0, std::move(options), false);
  }
};

// What the engine tells the operator (Config::warn), kept for the test.
struct Warnings {
  std::mutex mu;
  std::vector<std::string> lines;
  void attach(Config& config) {
    config.warn = [this](const std::string& line) {
      std::lock_guard lock(mu);
      lines.push_back(line);
    };
  }
  bool any(const std::string& text) {
    std::lock_guard lock(mu);
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& line) { return contains(line, text); });
  }
};

// What a crash can leave of a reset of `id` to generation 2 (code
// register_waits, input 1): its start and the kept step "a", appended to
// the shard's log by hand and made durable. Returns the first and the last
// record's LSN.
std::pair<wal::Lsn, wal::Lsn> append_reset_start(engine::DataDir& dir, std::uint32_t shard, const std::string& id) {
  auto record = [&id](engine::RecordKind kind, std::uint32_t position, const std::string& name) {
    engine::JournalRecord out;
    out.kind = kind;
    out.run_id = id;
    out.generation = 2;
    out.position = position;
    out.name = name;
    out.at_ms = 1;
    return out;
  };
  auto started = record(engine::RecordKind::run_started, engine::kResetStartMarker, "waits");
  started.detail = "1";
  started.value = 1;
  auto step_started = record(engine::RecordKind::step_started, 0, "a");
  auto step_completed = record(engine::RecordKind::step_completed, 0, "a");
  step_completed.value = 1;
  wal::Lsn first = 0;
  wal::Lsn last = 0;
  for (const auto& written : {started, step_started, step_completed}) {
    auto lsn = dir.log->append(shard, engine::encode_record(written));
    REQUIRE(lsn.has_value());
    if (first == 0) first = *lsn;
    last = *lsn;
  }
  REQUIRE(dir.log->wait_durable(shard, last).has_value());
  return {first, last};
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("a reset a crash cut short before its run_reset is dropped at recovery: the older generation goes on") {
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_waits(*engine, "a");
    (void)engine->start(kWaits, "w-1", 1);
    REQUIRE(eventually([&] { return engine->journal_json("w-1").find("wait_started") != std::string::npos; }));
    engine->shutdown();
  }
  {
    // What a crash can leave of a reset: its start and kept records made
    // it to the disk, its run_reset did not (a batch ended between them).
    ByHand by_hand(harness.data_dir());
    auto& dir = by_hand.dir;
    const auto shard = engine::shard_of("w-1", dir.shards);
    (void)append_reset_start(dir, shard, "w-1");
    REQUIRE(dir.log->close().has_value());
  }
  Warnings warnings;
  auto config = harness.config();
  warnings.attach(config);
  auto engine = harness.open(config);
  register_waits(*engine, "a");
  CHECK(engine->get_run("w-1")->generation == 1);  // not the half-written reset's
  engine->signal("w-1", kWaitsGo, 41);
  CHECK(result_of(engine, kWaits, "w-1") == 42);
  engine->shutdown();
  CHECK(warnings.any("run 'w-1': a reset to generation 2 was cut short"));
}
}

TEST_SUITE("unit") {
TEST_CASE("a reset of a running run whose records a checkpoint left in the log recovers as the new generation") {
  // The older generation's journal is in the run store (it was running at
  // a checkpoint); the reset's first records are at or below the next
  // checkpoint's LSN but left out of the store (deferred: most runs end
  // by the next one), and its run_reset is past it. Recovery must not take
  // the store's older generation for the holder of the newer one's records
  // (it skipped them, and the run_reset then met generation 1: the open
  // failed as corrupt).
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_waits(*engine, "a");
    (void)engine->start(kWaits, "w-2", 1);
    require_waiting(*engine, "w-2");
    engine->shutdown();  // its last checkpoint stores w-2's journal: it goes on
  }
  {
    ByHand by_hand(harness.data_dir());
    auto& dir = by_hand.dir;
    const auto shard = engine::shard_of("w-2", dir.shards);
    const auto [first, last] = append_reset_start(dir, shard, "w-2");
    // The checkpoint taken then: its LSN covers the reset's first records,
    // which it left in the log (replay_from), and the store still holds
    // generation 1's journal.
    auto before = dir.store->checkpoint(shard);
    REQUIRE(before.has_value());
    REQUIRE(before->has_value());
    engine::Checkpoint checkpoint = **before;
    checkpoint.lsn = last;
    checkpoint.replay_from = first;
    engine::RunStore::Batch batch;
    batch.put_checkpoint(checkpoint);
    REQUIRE(dir.store->write(std::move(batch)).has_value());
    engine::JournalRecord reset;
    reset.kind = engine::RecordKind::run_reset;
    reset.run_id = "w-2";
    reset.generation = 2;
    reset.at_ms = 1;
    reset.detail = "again";
    reset.number = 1;
    reset.value = boost::json::object{{"position", 1}, {"started_ms", 1}, {"dropped", boost::json::array{}}};
    auto lsn = dir.log->append(shard, engine::encode_record(reset));
    REQUIRE(lsn.has_value());
    REQUIRE(dir.log->wait_durable(shard, *lsn).has_value());
    REQUIRE(dir.log->close().has_value());
  }
  auto engine = harness.open();
  register_waits(*engine, "a");
  REQUIRE(engine->get_run("w-2").has_value());
  CHECK(engine->get_run("w-2")->generation == 2);
  engine->signal("w-2", kWaitsGo, 41);
  CHECK(result_of(engine, kWaits, "w-2") == 42);
  CHECK(contains(engine->journal_json("w-2"), "\"run_reset\""));
}
}

TEST_SUITE("unit") {
TEST_CASE("checkpoints while a reset of a running run is durable only in part store none of it, and the reset recovers") {
  // The older generation's journal is in the run store (live). The reset's
  // first records are durable, its run_reset is not (its sync is held),
  // and two checkpoints run in that window: the second would store the
  // first records beside the older generation, and once the run_reset is
  // durable the next checkpoint erases the older generation by the run's
  // id -- the newer one's first records with it -- and stores the
  // run_reset alone: the next open failed as corrupt. The test hook makes
  // the window every time: it waits in the reset, on the shard's thread,
  // for the first records to be durable, and arms the hold of the next sync.
  SlowLog slow;
  FaultFileSystem fs(slowed_by(slow));
  auto clock = std::make_shared<ManualClock>();
  auto config = crash_config(fs, clock);
  config.shards = 1;
  config.checkpoint_interval = std::chrono::milliseconds::zero();  // only the test's
  {
    auto engine = Engine::open(config);
    register_waits(*engine, "a");
    (void)engine->start(kWaits, "w-3", 1);
    require_waiting(*engine, "w-3");
    engine->checkpoint();
    engine->checkpoint();  // a running run's journal goes to the store at its second
    std::atomic<bool> window{false};
    engine::Shard::reset_window_hook_for_tests = [&](engine::Shard& shard, wal::Lsn appended) {
      window = eventually([&] { return shard.durable_lsn() >= appended; });
      slow.arm(0);  // the run_reset's sync is held
    };
    auto reset = std::async(std::launch::async, [&] { engine->reset("w-3", ResetPoint::before_position(1), "again"); });
    REQUIRE(slow.wait_holding());
    engine::Shard::reset_window_hook_for_tests = nullptr;
    REQUIRE(window);
    engine->checkpoint();
    engine->checkpoint();
    slow.release();
    reset.get();
    CHECK(engine->get_run("w-3")->generation == 2);
    engine->checkpoint();  // the older generation leaves the store
    engine->checkpoint();
    engine->shutdown();
  }
  CHECK_FALSE(slow.held_a_shard);
  auto again = crash_config(fs, clock);
  again.shards = 1;
  auto engine = Engine::open(again);
  register_waits(*engine, "a");
  REQUIRE(engine->get_run("w-3").has_value());
  CHECK(engine->get_run("w-3")->generation == 2);
  INFO(engine->journal_json("w-3"));
  engine->signal("w-3", kWaitsGo, 41);
  CHECK(engine->result(kWaits, "w-3") == 42);
}
}

TEST_SUITE("unit") {
TEST_CASE("a reset whose kept journal does not replay is refused before any of it is journaled") {
  // A finished run's kept journal that decodes but does not replay (a step
  // far past every position). The reset used to journal its start and the
  // kept records up to the one refused, then answer the error: the log held
  // a reset with no run_reset, which the next open dropped with a warning.
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_waits(*engine, "a");
    (void)engine->start(kWaits, "w-4", 1);
    require_waiting(*engine, "w-4");
    engine->signal("w-4", kWaitsGo, 41);
    CHECK(result_of(engine, kWaits, "w-4") == 42);
    engine->shutdown();  // its last checkpoint stores the finished run's journal
  }
  const std::uint32_t far = engine::CommandCursor::kPositionsAheadMax + 5;
  {
    ByHand by_hand(harness.data_dir());
    auto& dir = by_hand.dir;
    auto text = dir.store->journal_of_finished("w-4");
    REQUIRE(text.has_value());
    REQUIRE(text->has_value());
    auto records = engine::records_of_kept_journal(**text);
    REQUIRE(records.has_value());
    REQUIRE(records->size() >= 3);
    auto stray = (*records)[1];  // step "a" at 0
    stray.position = far;
    records->insert(records->end() - 1, stray);  // before the run's end
    engine::RunStore::Batch batch;
    // As JSON text, the form builds before engine/kept_journal.hpp's stored:
    // it still reads.
    batch.put_journal_of_finished("w-4", engine::journal_json(*records));
    REQUIRE(dir.store->write(std::move(batch)).has_value());
    REQUIRE(dir.log->close().has_value());
  }
  Warnings warnings;
  auto config = harness.config();
  warnings.attach(config);
  {
    auto engine = harness.open(config);
    register_waits(*engine, "a");
    auto message = error_message(errc::storage, [&] { engine->reset("w-4", ResetPoint::before_position(far + 1), "x"); });
    CHECK(contains(message, "does not replay"));
    CHECK(contains(message, "nothing was reset"));
    CHECK(engine->get_run("w-4")->generation == 1);
    engine->shutdown();
  }
  auto engine = harness.open(config);
  register_waits(*engine, "a");
  CHECK(engine->get_run("w-4")->generation == 1);
  CHECK(engine->get_run("w-4")->status == RunStatus::completed);
  CHECK_FALSE(warnings.any("cut short"));
}
}
