// WriteQueue: the io_uring queue against a real directory (round trips, the
// depth bound, wake with a write stuck in flight) and the FaultFileSystem's
// queue (completion order, durability only at completion, faults at
// completion, crashes with writes in flight).
#include "tests/support/result_checks.hpp"
#include "wal/io/write_queue.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace {

using fusee::Result;
using fusee::io::AlignedBuffer;
using fusee::io::File;
using fusee::io::kDirectAlignment;
using fusee::io::kWriteQueueDepthMax;
using fusee::io::OpenOptions;
using fusee::io::PosixFileSystem;
using fusee::io::QueuedWrite;
using fusee::io::WriteCompletion;
using fusee::io::WriteQueue;
using fusee::testing::all_crash_outcomes;
using fusee::testing::CrashOutcome;
using fusee::testing::FaultEffect;
using fusee::testing::FaultFileSystem;
using fusee::testing::FaultFileSystemOptions;
using fusee::testing::OpKind;
using fusee::testing::TempDir;

using fusee::testing::ok_or_fail;
using fusee::testing::value_or_fail;
using fusee::testing::as_bytes;

std::string text_of(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::string read_string(File& file, std::uint64_t offset, std::size_t size_bytes) {
  std::string out(size_bytes, '\0');
  auto got = value_or_fail(file.read_at(offset, std::as_writable_bytes(std::span(out))));
  out.resize(got);
  return out;
}

// Calls submit_and_wait until `count` completions have come (a call may end
// with none after a wake), and returns them sorted by token.
std::vector<WriteCompletion> reap(WriteQueue& queue, std::size_t count) {
  std::vector<WriteCompletion> out;
  for (int calls = 0; out.size() < count; ++calls) {
    REQUIRE(calls < 1000);
    ok_or_fail(queue.submit_and_wait(out));
  }
  CHECK(out.size() == count);
  std::sort(out.begin(), out.end(),
            [](const WriteCompletion& a, const WriteCompletion& b) { return a.token < b.token; });
  return out;
}

constexpr OpenOptions kCreate{.write = true, .create = true};

// The io_uring queue, or nullptr where this kernel or sandbox allows no
// io_uring; then the refusal must be function_not_supported, the cue for the
// caller to fall back to blocking writes.
std::unique_ptr<WriteQueue> open_posix_queue(PosixFileSystem& fs, std::size_t depth) {
  auto queue = fs.open_write_queue(depth);
  if (!queue && queue.error() == std::errc::function_not_supported) {
    MESSAGE("io_uring is unavailable here: checked only that open_write_queue says "
            "function_not_supported");
    return nullptr;
  }
  return value_or_fail(std::move(queue));
}

// Whether thread `tid` of this process is blocked in io_uring_enter, from
// /proc/self/task/<tid>/syscall ("426 0x..." while in that call, "running"
// otherwise). Nullopt where that file cannot be read.
std::optional<bool> in_io_uring_enter(pid_t tid) {
  std::ifstream syscall_file("/proc/self/task/" + std::to_string(tid) + "/syscall");
  std::string first;
  if (!(syscall_file >> first)) return std::nullopt;
  return first == std::to_string(SYS_io_uring_enter);
}

// --- FaultFileSystem helpers ---

// A file system with /d synced into the root and /d/f's name durable, the
// file holding `durable` synced.
struct FaultSetup {
  std::unique_ptr<FaultFileSystem> fs;
  std::unique_ptr<File> file;
};

FaultSetup fault_setup(const std::string& durable, FaultFileSystemOptions options = {}) {
  FaultSetup setup;
  setup.fs = std::make_unique<FaultFileSystem>(options);
  ok_or_fail(setup.fs->create_dir("/d"));
  ok_or_fail(setup.fs->sync_dir("/"));
  setup.file = value_or_fail(setup.fs->open("/d/f", kCreate));
  ok_or_fail(setup.fs->sync_dir("/d"));
  if (!durable.empty()) {
    REQUIRE(value_or_fail(setup.file->write_at(0, as_bytes(durable), fusee::io::WriteFlags::none)) ==
            durable.size());
    ok_or_fail(setup.file->sync_data());
  }
  return setup;
}

std::string contents(const FaultFileSystem& fs) { return text_of(fs.contents("/d/f").value()); }
std::string durable(const FaultFileSystem& fs) {
  return text_of(fs.durable_contents("/d/f").value());
}
std::string crashed(const FaultFileSystem& fs, const CrashOutcome& outcome) {
  auto data = fs.crash_image(outcome)->contents("/d/f");
  REQUIRE_MESSAGE(data.has_value(), outcome.describe());
  return text_of(*data);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("posix write queue: durable writes round-trip, buffered and direct") {
    TempDir dir;
    PosixFileSystem fs;
    auto queue = open_posix_queue(fs, 2);
    if (!queue) return;
    CHECK(queue->depth() == 2);

    auto file = value_or_fail(fs.open(dir.sub("buffered"), kCreate));
    std::string first = "hello, ";
    std::string second = "durable world";
    ok_or_fail(queue->submit({file.get(), 0, as_bytes(first), 7}));
    ok_or_fail(queue->submit({file.get(), first.size(), as_bytes(second), 9}));
    auto done = reap(*queue, 2);
    CHECK(done[0].token == 7);
    CHECK_FALSE(done[0].error);
    CHECK(done[0].bytes_written == first.size());
    CHECK(done[1].token == 9);
    CHECK_FALSE(done[1].error);
    CHECK(done[1].bytes_written == second.size());
    auto reader = value_or_fail(fs.open(dir.sub("buffered"), OpenOptions{}));
    CHECK(read_string(*reader, 0, 64) == "hello, durable world");

    // Slots are reused once reaped.
    std::string again = "HELLO";
    ok_or_fail(queue->submit({file.get(), 0, as_bytes(again), 11}));
    CHECK(reap(*queue, 1)[0].bytes_written == again.size());
    CHECK(read_string(*reader, 0, 64) == "HELLO, durable world");

    auto direct = fs.open(dir.sub("direct"), OpenOptions{.write = true, .create = true, .direct = true});
    if (!direct && direct.error() == std::errc::invalid_argument) {
      MESSAGE("O_DIRECT refused here (tmpfs?): direct queued writes not checked");
      return;
    }
    auto direct_file = value_or_fail(std::move(direct));
    AlignedBuffer blocks(2 * kDirectAlignment);
    std::memset(blocks.data(), 'd', blocks.size());
    ok_or_fail(queue->submit({direct_file.get(), kDirectAlignment, blocks.span(), 1}));
    auto direct_done = reap(*queue, 1);
    CHECK_FALSE(direct_done[0].error);
    CHECK(direct_done[0].bytes_written == blocks.size());
    CHECK(value_or_fail(direct_file->size()) == 3 * kDirectAlignment);

    // A misaligned direct write fails in its completion, as the kernel says.
    ok_or_fail(queue->submit({direct_file.get(), 1, blocks.span(), 2}));
    CHECK(reap(*queue, 1)[0].error == std::errc::invalid_argument);
  }

  TEST_CASE("posix write queue refuses a submit beyond its depth until one is reaped") {
    TempDir dir;
    PosixFileSystem fs;
    CHECK(fs.open_write_queue(0).error() == std::errc::invalid_argument);
    CHECK(fs.open_write_queue(kWriteQueueDepthMax + 1).error() == std::errc::invalid_argument);
    auto queue = open_posix_queue(fs, 2);
    if (!queue) return;

    auto file = value_or_fail(fs.open(dir.sub("data"), kCreate));
    std::string data = "abc";
    ok_or_fail(queue->submit({file.get(), 0, as_bytes(data), 1}));
    ok_or_fail(queue->submit({file.get(), 3, as_bytes(data), 2}));
    CHECK(queue->submit({file.get(), 6, as_bytes(data), 3}).error() ==
          std::errc::resource_unavailable_try_again);
    reap(*queue, 2);
    CHECK(value_or_fail(file->size()) == 6);  // the refused write never went in
    ok_or_fail(queue->submit({file.get(), 6, as_bytes(data), 3}));
    CHECK(reap(*queue, 1)[0].token == 3);
    CHECK(value_or_fail(file->size()) == 9);
  }

  TEST_CASE("posix write queue with nothing in flight returns at once, wake or not") {
    PosixFileSystem fs;
    auto queue = open_posix_queue(fs, 1);
    if (!queue) return;
    std::vector<WriteCompletion> out;
    ok_or_fail(queue->submit_and_wait(out));
    CHECK(out.empty());
    queue->wake();
    ok_or_fail(queue->submit_and_wait(out));
    CHECK(out.empty());
  }

  TEST_CASE("posix write queue: wake() ends a wait while a write stays in flight") {
    TempDir dir;
    PosixFileSystem fs;
    auto queue = open_posix_queue(fs, 1);
    if (!queue) return;

    // A write to a full fifo stays in flight until someone reads: the test
    // fills and drains it through a descriptor of its own.
    std::string path = dir.sub("fifo");
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    auto fifo = value_or_fail(fs.open(path, OpenOptions{.write = true}));
    int side = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    REQUIRE(side >= 0);
    std::vector<char> chunk(4096, 'f');
    while (::write(side, chunk.data(), chunk.size()) > 0) {
    }
    REQUIRE(errno == EAGAIN);

    std::string message(512, 'm');
    ok_or_fail(queue->submit({fifo.get(), 0, as_bytes(message), 1}));
    auto waiter = static_cast<pid_t>(::syscall(SYS_gettid));
    std::atomic<bool> returned{false};
    bool woke_mid_wait = false;
    std::thread waker([&] {
      // Wake once the owner is blocked in the ring if /proc can say so (a
      // wake before the wait must work too, and is what happens otherwise).
      while (!returned.load()) {
        auto blocked = in_io_uring_enter(waiter);
        if (!blocked) break;
        if (*blocked) {
          woke_mid_wait = true;
          break;
        }
        std::this_thread::yield();
      }
      queue->wake();
    });
    std::vector<WriteCompletion> out;
    ok_or_fail(queue->submit_and_wait(out));
    returned.store(true);
    waker.join();
    CHECK(out.empty());
    if (!woke_mid_wait) MESSAGE("the wake may have come before the wait (latched path)");

    std::vector<char> sink(1 << 16);
    while (::read(side, sink.data(), sink.size()) > 0) {
    }
    auto done = reap(*queue, 1);
    CHECK(done[0].token == 1);
    CHECK_FALSE(done[0].error);
    CHECK(done[0].bytes_written == message.size());
    ::close(side);
  }

  TEST_CASE("fault write queue completes writes in submission order and counts each completion") {
    auto [fs, file] = fault_setup("");
    auto queue = value_or_fail(fs->open_write_queue(3));
    std::string a = "aaaa";
    std::string b = "bbbb";
    std::string c = "cc";
    ok_or_fail(queue->submit({file.get(), 0, as_bytes(a), 30}));
    ok_or_fail(queue->submit({file.get(), 4, as_bytes(b), 10}));
    ok_or_fail(queue->submit({file.get(), 8, as_bytes(c), 20}));
    CHECK(queue->submit({file.get(), 10, as_bytes(c), 40}).error() ==
          std::errc::resource_unavailable_try_again);
    // Queued is not yet written: invisible, uncounted.
    auto ops_before = fs->operation_count();
    CHECK(contents(*fs).empty());
    CHECK(fs->pending_data_op_count() == 0);

    std::vector<WriteCompletion> out;
    ok_or_fail(queue->submit_and_wait(out));
    REQUIRE(out.size() == 3);
    CHECK(out[0].token == 30);
    CHECK(out[1].token == 10);
    CHECK(out[2].token == 20);
    for (const auto& completion : out) CHECK_FALSE(completion.error);
    CHECK(out[2].bytes_written == 2);
    CHECK(fs->operation_count() == ops_before + 3);
    CHECK(durable(*fs) == "aaaabbbbcc");
    CHECK(fs->pending_data_op_count() == 0);

    out.clear();
    ok_or_fail(queue->submit_and_wait(out));  // nothing in flight: at once
    CHECK(out.empty());
  }

  TEST_CASE("fault write queue: a write is durable only once its completion is reaped") {
    // A seed that sometimes completes only the first of two leaves the second
    // in flight between calls: visible, pending, lost by a crash.
    bool saw_partial = false;
    bool saw_full = false;
    for (std::uint64_t seed = 0; seed < 16; ++seed) {
      CAPTURE(seed);
      FaultFileSystemOptions options;
      options.write_queue_seed = seed;
      auto [fs, file] = fault_setup("....", options);
      auto queue = value_or_fail(fs->open_write_queue(2));
      std::string first = "1";
      std::string second = "2";
      ok_or_fail(queue->submit({file.get(), 0, as_bytes(first), 1}));
      ok_or_fail(queue->submit({file.get(), 1, as_bytes(second), 2}));
      std::vector<WriteCompletion> out;
      ok_or_fail(queue->submit_and_wait(out));
      REQUIRE_FALSE(out.empty());
      CHECK(out[0].token == 1);
      if (out.size() == 2) {
        saw_full = true;
        CHECK(crashed(*fs, CrashOutcome::drop_all()) == "12..");
        continue;
      }
      saw_partial = true;
      CHECK(contents(*fs) == "12..");
      CHECK(durable(*fs) == "1...");
      CHECK(fs->pending_data_op_count() == 1);
      CHECK(crashed(*fs, CrashOutcome::drop_all()) == "1...");
      CHECK(crashed(*fs, CrashOutcome::keep_all()) == "12..");
      ok_or_fail(queue->submit_and_wait(out));
      REQUIRE(out.size() == 2);
      CHECK(out[1].token == 2);
      CHECK(crashed(*fs, CrashOutcome::drop_all()) == "12..");
    }
    CHECK(saw_partial);
    CHECK(saw_full);
  }

  TEST_CASE("fault write queue: EIO and ENOSPC at completion drop the write") {
    auto effect = FaultEffect::io_error;
    auto expected = std::errc::io_error;
    SUBCASE("EIO") {}
    SUBCASE("ENOSPC") {
      effect = FaultEffect::no_space;
      expected = std::errc::no_space_on_device;
    }
    auto [fs, file] = fault_setup("....");
    auto queue = value_or_fail(fs->open_write_queue(2));
    fs->inject({OpKind::write, 1, effect});
    std::string lost = "LOST";
    ok_or_fail(queue->submit({file.get(), 0, as_bytes(lost), 1}));
    std::vector<WriteCompletion> out;
    ok_or_fail(queue->submit_and_wait(out));
    REQUIRE(out.size() == 1);
    CHECK(out[0].error == expected);
    CHECK(out[0].bytes_written == 0);
    CHECK(fs->faults_fired() == 1);
    CHECK(contents(*fs) == "....");
    CHECK(fs->pending_data_op_count() == 0);
    CHECK(crashed(*fs, CrashOutcome::keep_all()) == "....");

    // The fault was not persistent: the next write goes through.
    std::string kept = "KEPT";
    ok_or_fail(queue->submit({file.get(), 0, as_bytes(kept), 2}));
    out.clear();
    ok_or_fail(queue->submit_and_wait(out));
    REQUIRE(out.size() == 1);
    CHECK_FALSE(out[0].error);
    CHECK(durable(*fs) == "KEPT");
  }

  TEST_CASE("fault write queue: a short write at completion keeps only the first half, durably") {
    auto [fs, file] = fault_setup("");
    auto queue = value_or_fail(fs->open_write_queue(1));
    fs->inject({OpKind::write, 1, FaultEffect::short_write});
    std::string data = "0123456789";
    ok_or_fail(queue->submit({file.get(), 0, as_bytes(data), 5}));
    std::vector<WriteCompletion> out;
    ok_or_fail(queue->submit_and_wait(out));
    REQUIRE(out.size() == 1);
    CHECK_FALSE(out[0].error);
    CHECK(out[0].bytes_written == 5);
    CHECK(contents(*fs) == "01234");
    CHECK(durable(*fs) == "01234");
    CHECK(fs->pending_data_op_count() == 0);
  }

  TEST_CASE("fault write queue: misaligned direct writes fail at completion and write nothing") {
    auto fs = std::make_unique<FaultFileSystem>();
    auto file = value_or_fail(fs->open("/f", OpenOptions{.write = true, .create = true, .direct = true}));
    auto queue = value_or_fail(fs->open_write_queue(1));
    AlignedBuffer block(kDirectAlignment);
    ok_or_fail(queue->submit({file.get(), 512, block.span(), 1}));
    std::vector<WriteCompletion> out;
    ok_or_fail(queue->submit_and_wait(out));
    REQUIRE(out.size() == 1);
    CHECK(out[0].error == std::errc::invalid_argument);
    CHECK(value_or_fail(file->size()) == 0);
  }

  TEST_CASE("fault write queue: a crash with writes in flight keeps every completed write") {
    // Three 1 KiB writes over a synced file of 'z'. The crash comes after k
    // completions (k = 0: before the call, so nothing even goes in flight);
    // every crash outcome must keep the completed writes intact, and the
    // outcomes that do not tear keep or drop each write in flight whole.
    constexpr std::size_t kWriteBytes = 1024;
    const std::string old_bytes(3 * kWriteBytes, 'z');
    const std::string fills = "abc";
    for (std::uint64_t completed = 0; completed <= 3; ++completed) {
      CAPTURE(completed);
      auto [fs, file] = fault_setup(old_bytes);
      auto queue = value_or_fail(fs->open_write_queue(3));
      std::vector<std::string> data;
      for (char fill : fills) data.emplace_back(kWriteBytes, fill);
      for (std::size_t i = 0; i < 3; ++i) {
        ok_or_fail(queue->submit({file.get(), i * kWriteBytes, as_bytes(data[i]), i}));
      }
      fs->set_crash_after_ops(fs->operation_count() + completed);
      std::vector<WriteCompletion> out;
      auto waited = queue->submit_and_wait(out);
      if (completed == 0) {
        CHECK(waited.error() == std::errc::io_error);
      } else {
        ok_or_fail(waited);
      }
      REQUIRE(out.size() == completed);
      for (std::size_t i = 0; i < completed; ++i) CHECK(out[i].token == i);
      CHECK(fs->crashed());
      CHECK(queue->submit_and_wait(out).error() == std::errc::io_error);

      std::size_t in_flight = completed == 0 ? 0 : 3 - completed;
      REQUIRE(fs->pending_data_op_count() == in_flight);
      for (const auto& outcome : all_crash_outcomes(in_flight, 8)) {
        CAPTURE(outcome.describe());
        std::string after = crashed(*fs, outcome);
        REQUIRE(after.size() == old_bytes.size());
        for (std::size_t i = 0; i < 3; ++i) {
          std::string region = after.substr(i * kWriteBytes, kWriteBytes);
          if (i < completed) {
            CHECK(region == data[i]);
            continue;
          }
          if (completed == 0) {
            CHECK(region == old_bytes.substr(0, kWriteBytes));
            continue;
          }
          std::size_t pending_index = i - completed;
          switch (outcome.data) {
            case CrashOutcome::Data::drop_all:
              CHECK(region == old_bytes.substr(0, kWriteBytes));
              break;
            case CrashOutcome::Data::keep_all:
              CHECK(region == data[i]);
              break;
            case CrashOutcome::Data::keep_first_k:
              CHECK(region == (pending_index < outcome.keep_count ? data[i]
                                                                  : old_bytes.substr(0, kWriteBytes)));
              break;
            case CrashOutcome::Data::random_subset:
              CHECK((region == data[i] || region == old_bytes.substr(0, kWriteBytes)));
              break;
            case CrashOutcome::Data::tear:
              break;  // any sector may hold anything: only the completed writes are promised
          }
        }
      }
    }
  }

  TEST_CASE("fault write queue: a crashed file system refuses submits and waits") {
    auto [fs, file] = fault_setup("");
    auto queue = value_or_fail(fs->open_write_queue(1));
    fs->set_crash_after_ops(fs->operation_count());
    std::string data = "x";
    CHECK(queue->submit({file.get(), 0, as_bytes(data), 1}).error() == std::errc::io_error);
    std::vector<WriteCompletion> out;
    CHECK(queue->submit_and_wait(out).error() == std::errc::io_error);
    queue->wake();  // harmless: the fault queue never blocks
  }
}
