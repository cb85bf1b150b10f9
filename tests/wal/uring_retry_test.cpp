// The io_uring queue retries io_uring_enter's transient failures (EINTR,
// EAGAIN, EBUSY) and returns every other one, which poisons the log. The
// failures are injected in place of the system call (enter_fault), since a
// real kernel gives them only under memory pressure.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/errc.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/io/uring_write_queue.hpp"
#include "wal/log.hpp"

using namespace fusee;
using namespace fusee::io;
using namespace fusee::testing;

namespace {

// A queue whose io_uring_enter calls first fail with `errors`, in order,
// then go to the kernel; nullptr where io_uring is unavailable here.
std::unique_ptr<WriteQueue> queue_failing_with(PosixFileSystem& fs, std::vector<int> errors, int* calls) {
  auto queue = open_uring_write_queue(fs, 2, [errors, calls]() {
    int call = (*calls)++;
    return call < static_cast<int>(errors.size()) ? -errors[static_cast<std::size_t>(call)] : 0;
  });
  if (!queue && queue.error() == std::errc::function_not_supported) {
    MESSAGE("io_uring is unavailable here: nothing to check");
    return nullptr;
  }
  return value_or_fail(std::move(queue));
}

// The real file system, except that its io_uring's enter calls fail with
// EAGAIN once `refusing` is set, as a kernel short of memory answers: the
// writes submitted after that never reach the kernel.
class RefusingRingFileSystem final : public FileSystem {
 public:
  std::atomic<bool> refusing{false};

  Result<std::unique_ptr<File>> open(const std::string& path, OpenOptions options) override {
    return posix_.open(path, options);
  }
  Result<void> rename(const std::string& from, const std::string& to) override { return posix_.rename(from, to); }
  Result<void> remove(const std::string& path) override { return posix_.remove(path); }
  Result<void> create_dir(const std::string& path) override { return posix_.create_dir(path); }
  Result<void> remove_dir(const std::string& path) override { return posix_.remove_dir(path); }
  Result<std::vector<std::string>> list(const std::string& path) override { return posix_.list(path); }
  Result<bool> exists(const std::string& path) override { return posix_.exists(path); }
  Result<void> sync_dir(const std::string& path) override { return posix_.sync_dir(path); }
  Result<bool> is_memory_backed(const std::string& path) override { return posix_.is_memory_backed(path); }
  Result<std::unique_ptr<Lock>> lock_exclusive(const std::string& path) override {
    return posix_.lock_exclusive(path);
  }
  Result<std::unique_ptr<WriteQueue>> open_write_queue(std::size_t depth) override {
    return open_uring_write_queue(posix_, depth, [this] { return refusing.load() ? -EAGAIN : 0; });
  }

 private:
  PosixFileSystem posix_;
};

// Submits one 4 KiB write of `buffer` to `file` and returns what the
// submit-and-wait that should fail answered.
Result<void> submit_one(WriteQueue& queue, File& file, AlignedBuffer& buffer) {
  ok_or_fail(queue.submit({&file, 0, buffer.span(), 1}));
  std::vector<WriteCompletion> completions;
  return queue.submit_and_wait(completions);
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("a write queue retries io_uring_enter's EINTR, EAGAIN and EBUSY and completes the write") {
  TempDir dir;
  PosixFileSystem fs;
  auto file = value_or_fail(fs.open(dir.path() + "/f", {.write = true, .create = true}));
  int calls = 0;
  auto queue = queue_failing_with(fs, {EAGAIN, EBUSY, EINTR, EAGAIN}, &calls);
  if (!queue) return;
  AlignedBuffer buffer(4096);
  std::memset(buffer.data(), 'q', buffer.size());
  ok_or_fail(queue->submit({file.get(), 0, buffer.span(), 7}));
  std::vector<WriteCompletion> completions;
  ok_or_fail(queue->submit_and_wait(completions));
  CHECK(calls >= 5);  // four injected failures, then the kernel
  REQUIRE(completions.size() == 1);
  CHECK(completions[0].token == 7);
  CHECK_FALSE(completions[0].error);
  CHECK(completions[0].bytes_written == buffer.size());
  std::vector<std::byte> back(buffer.size());
  CHECK(value_or_fail(file->read_at(0, back)) == back.size());
  CHECK(back[4095] == std::byte('q'));
}

TEST_CASE("a write queue returns any other io_uring_enter failure") {
  TempDir dir;
  PosixFileSystem fs;
  auto file = value_or_fail(fs.open(dir.path() + "/f", {.write = true, .create = true}));
  for (int error : {EIO, ENOMEM, EBADF}) {
    CAPTURE(error);
    int calls = 0;
    auto queue = queue_failing_with(fs, {error}, &calls);
    if (!queue) return;
    AlignedBuffer buffer(4096);
    auto waited = submit_one(*queue, *file, buffer);
    REQUIRE_FALSE(waited);
    CHECK(waited.error() == std::error_code(error, std::generic_category()));
    CHECK(calls == 1);
    // Destroying the queue still waits for the write, which the next
    // (real) enter submits.
  }
}

TEST_CASE("a write queue whose ring refuses every call gives up draining and says what the kernel may hold") {
  TempDir dir;
  PosixFileSystem fs;
  auto file = value_or_fail(fs.open(dir.path() + "/f", {.write = true, .create = true}));
  int calls = 0;
  // Every call refused: the write is queued in the ring, never submitted.
  auto queue = queue_failing_with(fs, std::vector<int>(1'000'000, EAGAIN), &calls);
  if (!queue) return;
  AlignedBuffer buffer(4096);
  auto waited = submit_one(*queue, *file, buffer);
  REQUIRE_FALSE(waited);
  CHECK(waited.error() == std::errc::resource_unavailable_try_again);
  // Before, drain() retried forever without a pause, and so did the
  // queue's destructor: this line never returned.
  auto held = queue->drain();
  CHECK(held >= 1);  // the write (and the wake read) may still be in the kernel's hands
  CHECK(queue->drain() == held);
  keep_for_the_kernel(std::move(buffer));
  queue.reset();
}

TEST_CASE("a log whose ring keeps refusing poisons, and closes and is destroyed without hanging") {
  TempDir dir;
  RefusingRingFileSystem fs;
  {
    auto probe = fs.open_write_queue(2);
    if (!probe && probe.error() == std::errc::function_not_supported) {
      MESSAGE("io_uring is unavailable here: nothing to check");
      return;
    }
  }
  std::mutex warnings_mu;
  std::vector<std::string> warnings;
  wal::LogOptions options;
  options.dir = dir.path();
  options.writer_mode = wal::LogWriterMode::owner;
  options.inline_writes = false;  // every batch through the ring
  options.prepare_segments = false;
  options.warn = [&](const std::string& line) {
    std::lock_guard lock(warnings_mu);
    warnings.push_back(line);
  };
  wal::Lsn acked = 0;
  {
    auto log = value_or_fail(wal::Log::open(fs, options));
    if (!log->stats().owner_thread) {
      MESSAGE("the log runs without its io_uring owner here (no O_DIRECT): nothing to check");
      return;
    }
    // Two records through the ring while it works, the second batch too
    // (the first batch of a segment is written outside the ring).
    for (int i = 0; i < 2; ++i) {
      acked = value_or_fail(log->append(0, as_bytes("before the ring refuses")));
      ok_or_fail(log->wait_durable(0, acked));
    }
    fs.refusing = true;
    auto lsn = value_or_fail(log->append(0, as_bytes("while it refuses")));
    auto waited = log->wait_durable(0, lsn);
    REQUIRE_FALSE(waited);
    CHECK(waited.error() == std::errc::resource_unavailable_try_again);
    CHECK_FALSE(log->close());
  }  // ~Log: the owner is gone, the ring still holds the write; the drain gives up
  {
    std::lock_guard lock(warnings_mu);
    bool said = false;
    for (const auto& line : warnings) said = said || line.find("the kernel still held") != std::string::npos;
    CHECK(said);
  }
  // The next life (the ring working again) has every acknowledged record.
  fs.refusing = false;
  auto log = value_or_fail(wal::Log::open(fs, options));
  CHECK(log->durable_lsn(0) >= acked);
  ok_or_fail(log->close());
}
}
