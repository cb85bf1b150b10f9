// Segment rolls on the write path: the next segment is prepared ahead by the
// log's preparer thread (wal/log_prepare.cpp), so the threads that write
// batches never write a segment's zeros. Before, every roll created,
// zero-filled and synced the next segment on the sealing thread, under the
// seal lock (252 ms for 128 MiB, 549 ms for 256 MiB were measured).
#include <doctest/doctest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/log_workloads.hpp"
#include "tests/support/result_checks.hpp"
#include "wal/log.hpp"
#include "wal/segment_file.hpp"

using namespace fusee;
using namespace fusee::wal;
using namespace fusee::testing;

namespace {

// Holds the preparer's first write of zeros into segment 2 until a roll has
// asked that preparation to stop (LogOptions::on_preparation_cut), so the
// roll always comes while the preparation is under way; the guard lets it
// go at the end whatever happened, so the log's destructor can join it.
class HeldPreparation {
 public:
  void install(FaultFileSystem& fs, LogOptions& options) {
    auto fs_options = fs.options();
    fs_options.before_operation = [this](OpKind kind, const std::string& path, std::size_t bytes) {
      if (kind != OpKind::write || !path.ends_with("0000000002.seg") || bytes != kPrepareStepBytes) return;
      std::unique_lock lock(mu_);
      if (held_once_) return;
      held_once_ = true;
      changed_.wait(lock, [&] { return released_; });
    };
    fs.set_options(fs_options);
    options.on_preparation_cut = [this](std::uint64_t segment) {
      std::lock_guard lock(mu_);
      if (segment == 2) cut_ = true;
      released_ = true;
      changed_.notify_all();
    };
  }
  bool cut() {
    std::lock_guard lock(mu_);
    return cut_;
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    changed_.notify_all();
  }
  ~HeldPreparation() { release(); }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool held_once_ = false;
  bool released_ = false;
  bool cut_ = false;
};

// 4 MiB segments (four steps of zeros), 200 KiB records in the batches, a
// clock far slower than any disk (no growth, no early start): segment 2 is
// asked for at a quarter of segment 1 and still under way at the roll.
LogOptions late_roll_options(std::uint64_t seed) {
  auto options = fault_log_options(1, seed);
  options.segment_bytes = 4 * kMiB;
  options.payload_offload_bytes = 0;
  auto clock_us = std::make_shared<std::uint64_t>(0);
  options.now_us = [clock_us] { return *clock_us += 1'000'000; };
  return options;
}

constexpr std::size_t kLateRollRecordBytes = 200 * kKiB;

// Fills segment 1, rolls late into segment 2, and writes past the zeros the
// preparation got to (its first 1 MiB).
void run_late_roll(WorkloadContext& context, HeldPreparation& held) {
  auto log = context.open();
  if (!log) return;
  // A crash before the roll leaves the preparer held: let it go before the
  // log's destructor joins it (destroyed before `log`).
  struct Release {
    HeldPreparation& held;
    ~Release() { held.release(); }
  } release{held};
  while (log->stats().segments_created == 0) {
    auto lsn = log->last_lsn(0) + 1;
    if (!context.append_and_wait(*log, 0, test_record(0, lsn, kLateRollRecordBytes))) return;
  }
  for (int i = 0; i < 8; ++i) {
    auto lsn = log->last_lsn(0) + 1;
    if (!context.append_and_wait(*log, 0, test_record(0, lsn, kLateRollRecordBytes))) return;
  }
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("a roll that comes while the next segment is being prepared takes it unfinished, without waiting") {
  FaultFileSystem fs;
  auto options = late_roll_options(11);
  Ledger ledger(1);
  HeldPreparation held;
  held.install(fs, options);
  WorkloadContext context{fs, options, ledger};
  {
    auto log = context.open();
    REQUIRE(log);
    while (log->stats().segments_created == 0) {
      auto lsn = log->last_lsn(0) + 1;
      REQUIRE(context.append_and_wait(*log, 0, test_record(0, lsn, kLateRollRecordBytes)));
    }
    // Segment 2's preparation never finished (segment 3's comes later).
    CHECK(log->stats().segments_prepared == 0);
    for (int i = 0; i < 8; ++i) {
      auto lsn = log->last_lsn(0) + 1;
      REQUIRE(context.append_and_wait(*log, 0, test_record(0, lsn, kLateRollRecordBytes)));
    }
    // Before, the roll waited for all four steps of zeros while the
    // preparer was held: this case never got here.
    CHECK(held.cut());
    auto stats = log->stats();
    CHECK(stats.rolls_late == 1);
    CHECK(stats.rolls_unprepared == 0);
    CHECK(stats.segments_created == 1);
    ok_or_fail(log->close());
  }
  // A power loss after the close keeps every record: the segment taken
  // unfinished had its full size and its directory entry made durable.
  auto image = fs.crash_image(CrashOutcome::drop_all());
  check_recovery(*image, ledger, late_roll_options(11), "power loss after a late roll");
}

TEST_CASE("no thread that writes batches writes a segment's zeros: rolls find the next segment prepared") {
  FaultFileSystem fs;
  auto options = fault_log_options(1, 9);
  options.segment_bytes = 256 * kKiB;
  options.writer_mode = LogWriterMode::threads;
  options.payload_offload_bytes = 0;
  // A clock far slower than any disk: no segment grows past one step of
  // zeros, which a roll waits for (a larger one it would take unfinished,
  // or create, if the preparer had not got there: see the case above).
  auto clock_us = std::make_shared<std::uint64_t>(0);
  options.now_us = [clock_us] { return *clock_us += 1'000'000; };
  auto log = value_or_fail(Log::open(fs, options));

  // A segment's zeros come in writes of at least a whole small segment;
  // batches, headers and markers here are a few blocks.
  constexpr std::size_t kZerosMinBytes = 64 * kKiB;
  std::mutex mu;
  std::set<std::thread::id> zero_writers;
  std::set<std::thread::id> batch_writers;
  auto fs_options = fs.options();
  fs_options.before_operation = [&](OpKind kind, const std::string& path, std::size_t bytes) {
    if (kind != OpKind::write || !path.ends_with(".seg")) return;
    std::lock_guard lock(mu);
    (bytes >= kZerosMinBytes ? zero_writers : batch_writers).insert(std::this_thread::get_id());
  };
  fs.set_options(fs_options);

  Lsn lsn = 0;
  while (log->stats().segments_created < 6) {
    lsn = value_or_fail(log->append(0, std::vector<std::byte>(3000, std::byte{7})));
    ok_or_fail(log->wait_durable(0, lsn));
  }
  auto stats = log->stats();
  CHECK(stats.rolls_unprepared == 0);
  CHECK(stats.segments_prepared >= 6);
  CHECK(stats.rolls_late == 0);
  std::lock_guard lock(mu);
  CHECK_FALSE(zero_writers.empty());
  CHECK_FALSE(batch_writers.empty());
  for (const auto& id : zero_writers) CHECK_MESSAGE(!batch_writers.contains(id), "a batch writer wrote a segment's zeros");
}
}

TEST_SUITE("crash") {
TEST_CASE("a late roll that takes an unfinished segment: every crash point keeps what was acknowledged") {
  std::uint64_t crash_points = 0;
  std::uint64_t late_rolls = 0;
  for (std::uint64_t crash_at = 0;; ++crash_at) {
    FaultFileSystem fs;
    auto options = late_roll_options(0x1a7e);
    Ledger ledger(1);
    fs.set_crash_after_ops(crash_at);
    {
      HeldPreparation held;
      held.install(fs, options);
      WorkloadContext context{fs, options, ledger};
      run_late_roll(context, held);
      if (held.cut()) ++late_rolls;
    }
    ++crash_points;
    for (const auto& outcome : all_crash_outcomes(fs.pending_data_op_count(), 2)) {
      auto image = fs.crash_image(outcome);
      check_recovery(*image, ledger, late_roll_options(0x1a7e),
                     "crash after " + std::to_string(crash_at) + " ops, " + outcome.describe());
    }
    if (!fs.crashed()) break;
  }
  CHECK(late_rolls > 0);
  MESSAGE("late roll: " << crash_points << " crash points, " << late_rolls << " reached the late roll");
}
}
