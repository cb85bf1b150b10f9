// A large record's blob place is reserved before the log stages its
// reference under its lock. Retirement that ran in that gap once saw the
// blob's file as older than the current one, referenced only by retired
// segments and with nothing staged, and deleted it: the blob was then
// written into the unlinked file, the append acknowledged, and the next
// open refused ("blob file .../0000000001.blob is missing"). The appender
// is parked in that gap here (LogOptions::after_blob_reserved) while another
// append rolls the blob area to a new file and retirement runs, on a real
// disk and then at every crash point of the same script.
#include <doctest/doctest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/log_workloads.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/blob_store.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"

using namespace fusee;
using namespace fusee::wal;
using namespace fusee::testing;

namespace {

constexpr std::uint64_t kParkedFile = 1;

// Holds the first appender that reserves in blob file 1 once armed, until
// released.
class Park {
 public:
  void arm() {
    std::lock_guard lock(mu_);
    armed_ = true;
  }
  void maybe_park(std::uint64_t blob_file) {
    std::unique_lock lock(mu_);
    if (!armed_ || blob_file != kParkedFile) return;
    armed_ = false;
    parked_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_; });
  }
  void wait_parked() {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return parked_ || released_; });
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    armed_ = false;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool armed_ = false;
  bool parked_ = false;
  bool released_ = false;
};

// What one run of the script submitted and had acknowledged past the
// checkpoint it retired up to.
struct RaceOutcome {
  bool reached_retire = false;
  Lsn floor = 0;                    // the checkpoint: every LSN up to it may retire
  std::uint64_t keep_from = 0;      // the sequence retirement kept from
  std::vector<std::vector<std::byte>> past_floor;  // submitted after the floor, in LSN order
  std::size_t acked_past_floor = 0;
  bool parked_file_kept = false;    // blob file 1 still present after retirement
  std::uint64_t blob_files_retired = 0;
};

LogOptions race_options(LogOptions options) {
  options.shard_count = 1;
  options.segment_bytes = kSegmentBytesMin;
  options.payload_offload_bytes = 1024;
  options.blob_file_bytes_max = 16 * 1024;
  options.warn = [](const std::string&) {};
  return options;
}

// 1. X goes to blob file 1; small records roll the log past X's segment.
// 2. A reserves its place in blob file 1 and is parked before the log's lock.
// 3. B does not fit in file 1: the blob area rolls to file 2; B is durable.
// 4. Retirement up to B: X's segment goes, and with the old rule blob file 1.
// 5. A goes on and is acknowledged; its blob is in file 1.
RaceOutcome run_race(io::FileSystem& fs, const std::string& wal_dir, LogOptions options) {
  RaceOutcome outcome;
  Park park;
  options.after_blob_reserved = [&park](std::uint64_t file) { park.maybe_park(file); };
  auto opened = Log::open(fs, options);
  if (!opened) return outcome;
  auto& log = **opened;
  auto append_and_wait = [&](std::size_t bytes) -> std::optional<Lsn> {
    auto lsn = log.append(0, test_record(0, log.last_lsn(0) + 1, bytes));
    if (!lsn || !log.wait_durable(0, *lsn)) return std::nullopt;
    return *lsn;
  };
  if (!append_and_wait(3000)) return outcome;  // X, blob file 1
  while (log.stats().segments_created == 0)
    if (!append_and_wait(800)) return outcome;  // below the offload threshold: in the batches
  outcome.floor = log.durable_lsn(0);

  park.arm();
  std::optional<Result<Lsn>> a_appended;
  auto a_record = test_record(0, outcome.floor + 2, 3000);
  std::thread appender([&] { a_appended = log.append(0, a_record); });
  park.wait_parked();
  // B takes LSN floor + 1: A has not staged its reference yet.
  auto b_record = test_record(0, outcome.floor + 1, 14000);
  outcome.past_floor = {b_record, a_record};
  auto b_lsn = log.append(0, b_record);
  bool b_durable = b_lsn && *b_lsn == outcome.floor + 1 && log.wait_durable(0, *b_lsn);
  if (b_durable) {
    outcome.acked_past_floor = 1;
    outcome.keep_from = log.keep_from_sequence(0, outcome.floor);
    auto retired = log.retire(outcome.keep_from);
    outcome.reached_retire = retired.has_value() && retired->segments > 0;
    if (retired) outcome.blob_files_retired = retired->blob_files;
    auto exists = fs.exists(io::join_path(blob_dir_of(wal_dir), blob_file_name(kParkedFile)));
    outcome.parked_file_kept = exists && *exists;
  }
  park.release();
  appender.join();
  if (b_durable && a_appended && *a_appended && **a_appended == outcome.floor + 2 &&
      log.wait_durable(0, **a_appended))
    outcome.acked_past_floor = 2;
  (void)log.close();
  return outcome;
}

LogOptions reopen_options(LogOptions options, const RaceOutcome& outcome) {
  options.base.first_sequence_max = outcome.keep_from;
  options.base.shard_lsn_floors = {outcome.floor};
  return options;
}

// Reopens and checks the promise past the floor: every acknowledged record
// is there byte for byte, and what is there is a prefix of what was
// submitted.
void check_past_floor(io::FileSystem& fs, const LogOptions& options, const RaceOutcome& outcome,
                      const std::string& where) {
  CAPTURE(where);
  RecoveryPlan plan;
  auto reopened = Log::open(fs, reopen_options(options, outcome), &plan);
  if (!reopened) FAIL("the log does not reopen: " << reopened.error().message() << "; " << plan.refusal);
  std::vector<std::vector<std::byte>> read;
  ok_or_fail((*reopened)->read(0, outcome.floor + 1, outcome.floor + 10,
                               [&](Lsn, std::span<const std::byte> bytes) { read.emplace_back(bytes.begin(), bytes.end()); }));
  CHECK(read.size() >= outcome.acked_past_floor);
  REQUIRE(read.size() <= outcome.past_floor.size());
  for (std::size_t i = 0; i < read.size(); ++i) CHECK(read[i] == outcome.past_floor[i]);
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("a blob file that an append has reserved a place in is not retired before the reference is staged") {
  TempDir dir;
  io::PosixFileSystem fs;
  LogOptions options;
  options.dir = dir.path();
  options = race_options(options);
  auto outcome = run_race(fs, dir.path() + "/wal", options);
  REQUIRE(outcome.reached_retire);
  REQUIRE(outcome.acked_past_floor == 2);
  // The reservation kept file 1 through the retirement that came in the gap.
  CHECK(outcome.parked_file_kept);
  CHECK(outcome.blob_files_retired == 0);
  check_past_floor(fs, options, outcome, "real disk");
}
}

TEST_SUITE("crash") {
TEST_CASE("a blob reserved while retirement runs: every crash point keeps what was acknowledged") {
  std::uint64_t crash_points = 0;
  bool reached = false;
  for (std::uint64_t crash_at = 0;; ++crash_at) {
    FaultFileSystem fs;
    auto options = race_options(fault_log_options(1, 0x5eed7a00));
    fs.set_crash_after_ops(crash_at);
    auto outcome = run_race(fs, "/data/wal", options);
    ++crash_points;
    reached = reached || (outcome.reached_retire && outcome.acked_past_floor == 2);
    if (outcome.reached_retire) {
      for (const auto& crash : all_crash_outcomes(fs.pending_data_op_count(), 2)) {
        auto image = fs.crash_image(crash);
        check_past_floor(*image, options, outcome,
                         "crash after " + std::to_string(crash_at) + " ops, " + crash.describe());
      }
    }
    if (!fs.crashed()) {
      // The script ran to its end: the file it parked in is still there.
      CHECK(outcome.parked_file_kept);
      break;
    }
  }
  CHECK(reached);
  MESSAGE("blob reservation against retirement: " << crash_points << " crash points");
}
}
