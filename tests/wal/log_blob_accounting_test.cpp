// The log's accounting of large records: a reservation in the blob area is
// given back when its append is refused, and a poison that lands while a
// blob is being written leaves the counters at zero, not wrapped around.
#include <doctest/doctest.h>

#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/log_workloads.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/errc.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"

using namespace fusee;
using namespace fusee::wal;
using namespace fusee::testing;

namespace {

// Descriptors of this process open on `path` (whether or not it was deleted).
int descriptors_on(const std::string& path) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    auto target = std::filesystem::read_symlink(entry.path(), error);
    if (error) continue;
    auto text = target.string();
    if (text == path || text == path + " (deleted)") ++count;
  }
  return count;
}

std::vector<std::byte> large(std::size_t bytes, char fill) { return std::vector<std::byte>(bytes, std::byte(fill)); }

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("a large append refused for a full stage gives its blob place back, so the blob file closes") {
  TempDir dir;
  io::PosixFileSystem fs;
  LogOptions options;
  options.dir = dir.path();
  options.shard_count = 1;
  options.payload_offload_bytes = 1024;
  options.blob_file_bytes_max = 64 * 1024;
  options.staged_bytes_max = 32 * 1024;
  options.warn = [](const std::string&) {};
  auto log = value_or_fail(Log::open(fs, options));
  auto file_1 = std::filesystem::canonical(dir.path()).string() + "/wal/blobs/0000000001.blob";

  // A goes to blob file 1, which stays open for the next blobs.
  ok_or_fail(log->wait_durable(0, value_or_fail(log->append(0, large(16 * 1024, 'a')))));
  CHECK(descriptors_on(file_1) == 1);
  // B is reserved in file 1, then refused: larger than the stage's bound.
  auto refused = log->append(0, large(40 * 1024, 'b'));
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == make_error_code(errc::queue_full));
  // C does not fit in file 1 and rolls to file 2. File 1 has nothing left
  // to write, so its descriptor closes (before, B's reservation kept it
  // open for good, past the file's retirement).
  ok_or_fail(log->wait_durable(0, value_or_fail(log->append(0, large(16 * 1024, 'c')))));
  CHECK(descriptors_on(file_1) == 0);
  CHECK(log->stats().blobs_pending == 0);
  CHECK(log->stats().staged_bytes == 0);
  ok_or_fail(log->close());
}

TEST_CASE("a poison while a blob is being written leaves the stage's counters at zero") {
  FaultFileSystem fs;
  auto options = fault_log_options(2, 3);
  options.payload_offload_bytes = 1024;
  options.writer_mode = LogWriterMode::threads;
  options.prepare_segments = false;  // the fault below is for a batch's write
  auto log = value_or_fail(Log::open(fs, options));

  // The blob thread's write waits until the log is poisoned; the log's
  // poison hook says when.
  std::mutex mu;
  std::condition_variable changed;
  bool blob_write_started = false;
  bool poisoned = false;
  log->set_poison_hook([&](std::error_code) {
    std::lock_guard lock(mu);
    poisoned = true;
    changed.notify_all();
  });
  auto fs_options = fs.options();
  fs_options.before_operation = [&](OpKind kind, const std::string& path, std::size_t) {
    if (kind != OpKind::write || !path.ends_with(".blob")) return;
    std::unique_lock lock(mu);
    blob_write_started = true;
    changed.notify_all();
    changed.wait(lock, [&] { return poisoned; });
  };
  fs.set_options(fs_options);

  auto blob_lsn = value_or_fail(log->append(0, large(8 * 1024, 'x')));
  {
    std::unique_lock lock(mu);
    changed.wait(lock, [&] { return blob_write_started; });
  }
  // A batch of shard 1 fails to write: the log poisons, with shard 0's
  // blob still being written.
  fs.inject(Fault{OpKind::write, 1, FaultEffect::io_error});
  auto small_lsn = value_or_fail(log->append(1, large(100, 's')));
  CHECK_FALSE(log->wait_durable(1, small_lsn));
  CHECK_FALSE(log->wait_durable(0, blob_lsn));
  CHECK(log->poison());
  // close() joins the blob thread once its write is done (the hook let it
  // go); the counters it would have taken back stay at zero.
  CHECK_FALSE(log->close());
  auto stats = log->stats();
  CHECK(stats.staged_bytes == 0);
  CHECK(stats.blobs_pending == 0);
}
}
