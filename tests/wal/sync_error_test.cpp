// A failed fdatasync, as Linux reports it: once per open file description,
// with the failed pages left readable in the page cache. Each case forces
// the interleaving that lost an acknowledged record (or accepted bytes that
// are not on disk) before the log's SyncGate and recovery's drop of the
// cache, and checks the promise on what a power loss leaves.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
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

namespace {

// How long a forced interleaving waits for a step that the mended code
// never takes (it serialises the syncs). Not a performance bound: either
// way the outcome checked is the same.
constexpr auto kStepWait = std::chrono::seconds(1);

// The segment the batches go to.
bool is_segment(const std::string& path) { return path.ends_with("0000000001.seg"); }

LogOptions buffered_options() {
  auto options = fault_log_options(1, 7);
  options.writer_mode = LogWriterMode::threads;
  options.inline_writes = false;  // two log threads, one batch each
  options.payload_offload_bytes = 0;
  // No segment preparation: its writes and syncs would take the faults
  // these cases arm for a batch's.
  options.prepare_segments = false;
  return options;
}

std::vector<std::byte> record(char fill) { return std::vector<std::byte>(100, std::byte(fill)); }

// The durable position each shard recovers to from image.
Lsn recovered_lsn(FaultFileSystem& image, const LogOptions& options) {
  auto log = value_or_fail(Log::open(image, options));
  return log->durable_lsn(0);
}

// Steps of the forced interleaving, shared by the hooks and the test.
struct Steps {
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false;
  int syncs_started = 0;   // segment syncs since armed
  bool first_in_sync = false;
  std::thread::id first_thread;
  bool lost_batch_published = false;

  template <typename Predicate>
  void wait(std::unique_lock<std::mutex>& lock, Predicate predicate) {
    cv.wait_for(lock, kStepWait, predicate);
  }
};

}  // namespace

TEST_SUITE("crash") {
TEST_CASE("a sync error reported to another thread's concurrent sync never acknowledges the lost batch") {
  // Batch 1 (thread A) and batch 2 (thread B) share the segment's
  // descriptor. B's fdatasync fails and drops both batches' pages; the error
  // is reported to B's call only, so A's fdatasync through the same
  // descriptor returns 0. Before the SyncGate, A published batch 1 before B
  // poisoned the log: an acknowledged record that no disk holds.
  FaultFileSystem fs(FaultFileSystemOptions{.refuse_direct_open = true});
  auto options = buffered_options();
  auto log = value_or_fail(Log::open(fs, options));
  ok_or_fail(log->wait_durable(0, value_or_fail(log->append(0, record('w')))));
  Steps steps;
  log->set_durable_hook([&](ShardId, Lsn lsn) {
    std::lock_guard lock(steps.mu);
    if (lsn >= 2) steps.lost_batch_published = true;
    steps.cv.notify_all();
  });
  auto fs_options = fs.options();
  fs_options.before_operation = [&](OpKind kind, const std::string& path, std::size_t) {
    if (kind != OpKind::sync_data || !is_segment(path)) return;
    std::unique_lock lock(steps.mu);
    if (!steps.armed) return;
    if (++steps.syncs_started == 1) {
      // Thread A: let B's sync fail first.
      steps.first_in_sync = true;
      steps.first_thread = std::this_thread::get_id();
      steps.cv.notify_all();
      steps.wait(lock, [&] { return fs.faults_fired() > 0; });
    }
  };
  fs_options.after_operation = [&](OpKind kind, const std::string& path, std::size_t) {
    if (kind != OpKind::sync_data || !is_segment(path)) return;
    std::unique_lock lock(steps.mu);
    if (!steps.armed || fs.faults_fired() == 0 || steps.first_thread == std::this_thread::get_id()) return;
    // Thread B, its sync failed: hold its report back until A's batch is
    // published (which the mended log never does).
    steps.cv.notify_all();
    steps.wait(lock, [&] { return steps.lost_batch_published; });
  };
  fs.set_options(fs_options);
  fs.inject(Fault{OpKind::sync_data, 1, FaultEffect::sync_loses_data});
  {
    std::lock_guard lock(steps.mu);
    steps.armed = true;
  }

  auto first = value_or_fail(log->append(0, record('a')));
  {
    std::unique_lock lock(steps.mu);
    steps.wait(lock, [&] { return steps.first_in_sync; });
    REQUIRE(steps.first_in_sync);
  }
  auto second = value_or_fail(log->append(0, record('b')));
  auto first_durable = log->wait_durable(0, first);
  auto second_durable = log->wait_durable(0, second);
  CHECK(fs.faults_fired() == 1);
  CHECK_FALSE(first_durable);
  CHECK_FALSE(second_durable);
  CHECK(log->poison());
  log.reset();

  // Whatever was acknowledged must be on the disk.
  auto image = fs.crash_image(CrashOutcome::drop_all());
  Lsn acknowledged = first_durable ? (second_durable ? 3 : 2) : 1;
  CHECK(recovered_lsn(*image, options) >= acknowledged);
}

TEST_CASE("a reopen after a failed flush reads the disk, not the failed pages left in the cache") {
  // The log poisons on a failed fdatasync; the engine may reopen it in the
  // same boot. The failed batch's pages are still in the cache, marked
  // clean: read through the cache, recovery would take the batch into the
  // chain and report its record durable, and apply()'s sync would write
  // nothing. A power loss then takes it away.
  for (bool direct : {false, true}) {
    CAPTURE(direct);
    // Direct mode writes batches with RWF_DSYNC; its segment headers and
    // fallbacks are buffered. The failed flush here is a buffered one, so
    // the direct case runs with O_DIRECT refused at the write (the log
    // falls back to buffered writes) to reach it.
    FaultFileSystem fs(FaultFileSystemOptions{.refuse_direct_write = direct});
    auto options = buffered_options();
    options.direct_io = direct;
    {
      auto log = value_or_fail(Log::open(fs, options));
      auto first = value_or_fail(log->append(0, record('a')));
      ok_or_fail(log->wait_durable(0, first));
      fs.inject(Fault{OpKind::sync_data, 1, FaultEffect::sync_loses_data});
      auto second = value_or_fail(log->append(0, record('b')));
      CHECK_FALSE(log->wait_durable(0, second));
      CHECK(fs.faults_fired() == 1);
    }
    fs.clear_faults();
    // The failed pages are readable through the cache: the model is as
    // unkind as Linux here.
    auto segment = "/data/wal/0000000001.seg";
    auto cached = value_or_fail(fs.contents(segment));
    auto on_disk = value_or_fail(fs.durable_contents(segment));
    CHECK(cached != on_disk);

    Lsn reported = 0;
    {
      auto log = value_or_fail(Log::open(fs, options));
      reported = log->durable_lsn(0);
      CHECK(reported == 1);
    }
    auto image = fs.crash_image(CrashOutcome::drop_all());
    CHECK(recovered_lsn(*image, options) >= reported);
  }
}
}

TEST_SUITE("unit") {
TEST_CASE("the fault file system reports a failed writeback once per open file description") {
  FaultFileSystem fs;
  ok_or_fail(fs.create_dir("/d"));
  auto a = value_or_fail(fs.open("/d/f", {.write = true, .create = true}));
  auto b = value_or_fail(fs.open("/d/f", {.write = true}));
  auto bytes = record('x');
  CHECK(value_or_fail(a->write_at(0, bytes, io::WriteFlags::none)) == bytes.size());
  fs.inject(Fault{OpKind::sync_data, 1, FaultEffect::sync_loses_data});
  CHECK_FALSE(a->sync_data());  // the failure, reported to a
  CHECK(a->sync_data());        // a second sync through a: nothing to report
  CHECK_FALSE(b->sync_data());  // b was open before: reports it once
  CHECK(b->sync_data());
  auto c = value_or_fail(fs.open("/d/f", {}));
  CHECK(c->sync_data());  // opened after it was reported: nothing

  // The failed pages are readable through the cache, not on the disk.
  std::vector<std::byte> read(bytes.size());
  CHECK(value_or_fail(c->read_at(0, read)) == bytes.size());
  CHECK(read == bytes);
  CHECK(value_or_fail(fs.durable_contents("/d/f")).empty());
  // A later successful sync does not write them; dropping the cache shows
  // the disk.
  ok_or_fail(c->drop_cache());
  CHECK(value_or_fail(c->read_at(0, read)) == 0);
}

TEST_CASE("a write to a page whose writeback failed dirties the whole page again") {
  FaultFileSystem fs;
  ok_or_fail(fs.create_dir("/d"));
  auto file = value_or_fail(fs.open("/d/f", {.write = true, .create = true}));
  auto bytes = record('x');
  CHECK(value_or_fail(file->write_at(0, bytes, io::WriteFlags::none)) == bytes.size());
  fs.inject(Fault{OpKind::sync_data, 1, FaultEffect::sync_loses_data});
  CHECK_FALSE(file->sync_data());
  // Rewriting a later part of the same page: the whole cached page,
  // stale bytes included, goes to the disk at the next sync.
  auto more = record('y');
  CHECK(value_or_fail(file->write_at(200, more, io::WriteFlags::none)) == more.size());
  ok_or_fail(file->sync_data());
  auto durable = value_or_fail(fs.durable_contents("/d/f"));
  REQUIRE(durable.size() >= 300);
  CHECK(durable[0] == std::byte('x'));
  CHECK(durable[200] == std::byte('y'));
}
}
