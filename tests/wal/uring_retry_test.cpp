// The io_uring queue retries io_uring_enter's transient failures (EINTR,
// EAGAIN, EBUSY) and returns every other one, which poisons the log. The
// failures are injected in place of the system call (enter_fault), since a
// real kernel gives them only under memory pressure.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/io/uring_write_queue.hpp"

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
    ok_or_fail(queue->submit({file.get(), 0, buffer.span(), 1}));
    std::vector<WriteCompletion> completions;
    auto waited = queue->submit_and_wait(completions);
    REQUIRE_FALSE(waited);
    CHECK(waited.error() == std::error_code(error, std::generic_category()));
    CHECK(calls == 1);
    // Destroying the queue still waits for the write, which the next
    // (real) enter submits.
  }
}
}
