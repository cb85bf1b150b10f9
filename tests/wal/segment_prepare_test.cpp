// Segment rolls on the write path: the next segment is prepared ahead by the
// log's preparer thread (wal/log_prepare.cpp), so the threads that write
// batches never write a segment's zeros. Before, every roll created,
// zero-filled and synced the next segment on the sealing thread, under the
// seal lock (252 ms for 128 MiB, 549 ms for 256 MiB were measured).
#include <doctest/doctest.h>

#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/log_workloads.hpp"
#include "tests/support/result_checks.hpp"
#include "wal/log.hpp"

using namespace fusee;
using namespace fusee::wal;
using namespace fusee::testing;

TEST_SUITE("unit") {
TEST_CASE("no thread that writes batches writes a segment's zeros: rolls find the next segment prepared") {
  FaultFileSystem fs;
  auto options = fault_log_options(1, 9);
  options.segment_bytes = 256 * kKiB;
  options.writer_mode = LogWriterMode::threads;
  options.payload_offload_bytes = 0;
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
  // Segments grow on this fast disk (past 1 MiB, more than one step of
  // zeros), and a roll that comes before the preparer is done cuts it short
  // and takes the file unfinished rather than wait: counted as late.
  CHECK(stats.segments_prepared + stats.rolls_late >= 6);
  std::lock_guard lock(mu);
  CHECK_FALSE(zero_writers.empty());
  CHECK_FALSE(batch_writers.empty());
  for (const auto& id : zero_writers) CHECK_MESSAGE(!batch_writers.contains(id), "a batch writer wrote a segment's zeros");
}
}
