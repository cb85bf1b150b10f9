// The shared log on a real disk: append, durability, reading back, reopening,
// segment rolls, limits and group commit.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.hpp"
#include "wal/errc.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"

using namespace fusee;
using namespace fusee::wal;

namespace {

std::vector<std::byte> payload(ShardId shard, Lsn lsn, std::size_t size = 24) {
  std::string text = "s" + std::to_string(shard) + "-l" + std::to_string(lsn) + "-";
  std::vector<std::byte> out(std::max(size, text.size()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::byte(i < text.size() ? text[i] : char('a' + (lsn + i) % 26));
  return out;
}

std::vector<std::vector<std::byte>> read_all(Log& log, ShardId shard) {
  std::vector<std::vector<std::byte>> out;
  auto result = log.read(shard, 1, ~Lsn{0}, [&](Lsn lsn, std::span<const std::byte> bytes) {
    CHECK(lsn == out.size() + 1);
    out.emplace_back(bytes.begin(), bytes.end());
  });
  REQUIRE(result);
  return out;
}

LogOptions options_for(const std::string& dir, std::uint32_t shards = 4) {
  LogOptions options;
  options.dir = dir;
  options.shard_count = shards;
  options.warn = [](const std::string&) {};
  options.verify_writes = true;
  return options;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("appended records become durable and read back in order after a reopen") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  {
    auto log = Log::open(fs, options_for(dir.path()));
    REQUIRE(log);
    for (Lsn lsn = 1; lsn <= 20; ++lsn) {
      for (ShardId shard = 0; shard < 4; ++shard) {
        auto appended = (*log)->append(shard, payload(shard, lsn));
        REQUIRE(appended);
        CHECK(*appended == lsn);
      }
    }
    for (ShardId shard = 0; shard < 4; ++shard) REQUIRE((*log)->wait_durable(shard, 20));
    CHECK((*log)->durable_lsn(2) == 20);
    CHECK(read_all(**log, 3).size() == 20);
  }  // no close: like a crash after the acknowledgements
  auto log = Log::open(fs, options_for(dir.path()));
  REQUIRE(log);
  for (ShardId shard = 0; shard < 4; ++shard) {
    auto records = read_all(**log, shard);
    REQUIRE(records.size() == 20);
    for (Lsn lsn = 1; lsn <= 20; ++lsn) CHECK(records[lsn - 1] == payload(shard, lsn));
    CHECK((*log)->durable_lsn(shard) == 20);
  }
  auto next = (*log)->append(1, payload(1, 21));
  REQUIRE(next);
  CHECK(*next == 21);
}

TEST_CASE("records cross many segment rolls and survive reopening, buffered and direct") {
  for (bool direct : {true, false}) {
    CAPTURE(direct);
    testing::TempDir dir;
    io::PosixFileSystem fs;
    auto options = options_for(dir.path(), 2);
    options.segment_bytes = kSegmentBytesMin;
    options.direct_io = direct;
    {
      auto log = Log::open(fs, options);
      REQUIRE(log);
      for (Lsn lsn = 1; lsn <= 200; ++lsn) {
        REQUIRE((*log)->append(lsn % 2, payload(lsn % 2, (lsn + 1) / 2, 700)));
        if (lsn % 7 == 0) REQUIRE((*log)->wait_durable(lsn % 2, (lsn + 1) / 2));
      }
      REQUIRE((*log)->wait_durable(0, 100));
      REQUIRE((*log)->wait_durable(1, 100));
      CHECK((*log)->stats().segments_created > 5);
      REQUIRE((*log)->close());
    }
    RecoveryPlan plan;
    auto log = Log::open(fs, options, &plan);
    REQUIRE(log);
    CHECK(plan.segments.size() > 5);
    CHECK(plan.ends_with_close);
    CHECK(plan.chain_records == 200);
    for (ShardId shard = 0; shard < 2; ++shard) {
      auto records = read_all(**log, shard);
      REQUIRE(records.size() == 100);
      for (Lsn lsn = 1; lsn <= 100; ++lsn) CHECK(records[lsn - 1] == payload(shard, lsn, 700));
    }
  }
}

TEST_CASE("appends past the staging bound, oversized records and bad shards are refused") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  auto options = options_for(dir.path(), 2);
  options.staged_bytes_max = 100;
  auto log = Log::open(fs, options);
  REQUIRE(log);
  auto too_much = (*log)->append(0, std::vector<std::byte>(200));
  REQUIRE_FALSE(too_much);
  CHECK(too_much.error() == errc::queue_full);
  auto huge = (*log)->append(0, std::vector<std::byte>(kRecordBytesMax + 1));
  REQUIRE_FALSE(huge);
  CHECK(huge.error() == errc::record_too_large);
  auto bad_shard = (*log)->append(2, payload(2, 1));
  REQUIRE_FALSE(bad_shard);
  CHECK(bad_shard.error() == errc::invalid_argument);
  // Nothing refused took an LSN.
  auto first = (*log)->append(0, payload(0, 1));
  REQUIRE(first);
  CHECK(*first == 1);
  CHECK_FALSE((*log)->wait_durable(0, 5));  // an LSN never handed out
}

TEST_CASE("a closed log refuses appends and reopens with its close marker last") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  {
    auto log = Log::open(fs, options_for(dir.path()));
    REQUIRE(log);
    REQUIRE((*log)->append(0, payload(0, 1)));
    REQUIRE((*log)->close());
    auto late = (*log)->append(0, payload(0, 2));
    REQUIRE_FALSE(late);
    CHECK(late.error() == errc::closed);
  }
  RecoveryPlan plan;
  auto log = Log::open(fs, options_for(dir.path()), &plan);
  REQUIRE(log);
  CHECK(plan.ends_with_close);
  CHECK(plan.chain_batches == 2);
  CHECK(plan.tail.empty());
}

TEST_CASE("an open group is written with nothing else's flush; a group past its cap ends there") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  auto log = Log::open(fs, options_for(dir.path(), 2));
  REQUIRE(log);
  auto& wal = **log;
  wal.begin_group(0);
  CHECK(wal.in_group(0));
  REQUIRE(wal.append(0, payload(0, 1)));
  REQUIRE(wal.append(0, payload(0, 2)));
  // Another shard's flush leaves the open group staged.
  auto other = wal.append(1, payload(1, 1));
  REQUIRE(other);
  REQUIRE(wal.wait_durable(1, *other));
  CHECK(wal.durable_lsn(0) == 0);
  wal.end_group(0);
  CHECK_FALSE(wal.in_group(0));
  REQUIRE(wal.wait_durable(0, 2));
  CHECK(wal.stats().groups == 1);

  // The append that would take a group past group_bytes_max() ends the group
  // first, and goes after it.
  wal.begin_group(0);
  const auto record_bytes = wal.group_bytes_max() / 3;
  REQUIRE(wal.append(0, payload(0, 3, record_bytes)));
  REQUIRE(wal.append(0, payload(0, 4, record_bytes)));
  CHECK(wal.in_group(0));
  REQUIRE(wal.append(0, payload(0, 5, record_bytes)));
  CHECK_FALSE(wal.in_group(0));
  CHECK(wal.stats().groups_cut_at_cap == 1);
  wal.end_group(0);  // nothing open: nothing to do
  REQUIRE(wal.wait_durable(0, 5));
  CHECK(read_all(wal, 0).size() == 5);
  REQUIRE(wal.close());
}

TEST_CASE("a blob reference counts against its group's bound, and the group still goes in one batch") {
  // Batches of two blocks: a group filled to its bound with a reference
  // past it would not fit one batch, and no plan could take it.
  testing::TempDir dir;
  io::PosixFileSystem fs;
  auto options = options_for(dir.path(), 1);
  options.batch_bytes_max = 2 * kBlockBytes;
  options.payload_offload_bytes = 1024;
  auto log = Log::open(fs, options);
  REQUIRE(log);
  auto& wal = **log;
  auto encoded = [](std::size_t size) { return size + varint_length(record_prefix(size, false)); };
  wal.begin_group(0);
  std::size_t in_group = 0;
  Lsn lsn = 0;
  for (std::size_t size : {std::size_t{1000}, std::size_t{10}}) {
    while (in_group + encoded(size) <= wal.group_bytes_max()) {
      REQUIRE(wal.append(0, payload(0, ++lsn, size)));
      in_group += encoded(size);
    }
  }
  CHECK(wal.in_group(0));
  auto reference = wal.append(0, payload(0, ++lsn, 2000));  // offloaded: its reference is staged
  REQUIRE(reference);
  CHECK_FALSE(wal.in_group(0));
  CHECK(wal.stats().groups_cut_at_cap == 1);
  wal.end_group(0);
  REQUIRE(wal.wait_durable(0, *reference));
  CHECK(read_all(wal, 0).size() == *reference);
  REQUIRE(wal.close());
}

TEST_CASE("the durable hook reports every shard's positions in publication order") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  auto log = Log::open(fs, options_for(dir.path()));
  REQUIRE(log);
  std::mutex mu;
  std::vector<Lsn> seen(4, 0);
  bool in_order = true;
  (*log)->set_durable_hook([&](ShardId shard, Lsn lsn) {
    std::lock_guard lock(mu);
    if (lsn <= seen[shard]) in_order = false;
    seen[shard] = lsn;
  });
  for (Lsn lsn = 1; lsn <= 50; ++lsn)
    for (ShardId shard = 0; shard < 4; ++shard) REQUIRE((*log)->append(shard, payload(shard, lsn)));
  for (ShardId shard = 0; shard < 4; ++shard) REQUIRE((*log)->wait_durable(shard, 50));
  REQUIRE((*log)->close());
  std::lock_guard lock(mu);
  CHECK(in_order);
  CHECK(seen == std::vector<Lsn>{50, 50, 50, 50});
}

TEST_CASE("64 concurrent appenders share flushes: at least 8 records per flush") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  auto log = Log::open(fs, options_for(dir.path(), 64));
  REQUIRE(log);
  constexpr int kAppenders = 64;
  constexpr int kRecordsEach = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> appenders;
  for (int t = 0; t < kAppenders; ++t) {
    appenders.emplace_back([&, t] {
      for (int i = 0; i < kRecordsEach; ++i) {
        auto shard = static_cast<ShardId>(t);
        auto lsn = (*log)->append(shard, payload(shard, i + 1, 128));
        if (!lsn || !(*log)->wait_durable(shard, *lsn)) ++failures;
      }
    });
  }
  for (auto& appender : appenders) appender.join();
  CHECK(failures == 0);
  auto stats = (*log)->stats();
  CHECK(stats.records_written == kAppenders * kRecordsEach);
  double per_flush = double(stats.records_written) / double(stats.flushes);
  MESSAGE("64 appenders: " << stats.records_written << " records in " << stats.flushes
                           << " flushes = " << per_flush << " records per flush");
  CHECK(per_flush >= 8.0);
  REQUIRE((*log)->close());
}
}

#include "tests/support/fault_file_system.hpp"

TEST_SUITE("unit") {
TEST_CASE("a file system that refuses O_DIRECT is written buffered, and the log says so once") {
  for (bool at_open : {true, false}) {
    CAPTURE(at_open);
    testing::FaultFileSystemOptions fs_options;
    fs_options.refuse_direct_open = at_open;
    fs_options.refuse_direct_write = !at_open;
    testing::FaultFileSystem fs(fs_options);
    auto options = options_for("/data", 2);
    options.segment_bytes = kSegmentBytesMin;
    std::vector<std::string> warnings;
    options.warn = [&](const std::string& line) { warnings.push_back(line); };
    {
      auto log = Log::open(fs, options);
      REQUIRE(log);
      for (Lsn lsn = 1; lsn <= 12; ++lsn) {
        auto appended = (*log)->append(0, payload(0, lsn, 2000));
        REQUIRE(appended);
        REQUIRE((*log)->wait_durable(0, *appended));
      }
      CHECK_FALSE((*log)->stats().direct_io);
      CHECK((*log)->stats().segments_created >= 2);
    }
    CHECK(warnings.size() == 1);
    // Buffered writes were synced: a power loss keeps every record.
    auto image = fs.crash_image(testing::CrashOutcome::drop_all());
    auto log = Log::open(*image, options);
    REQUIRE(log);
    CHECK(read_all(**log, 0).size() == 12);
  }
}
}

TEST_SUITE("unit") {
TEST_CASE("segments double while the log fills them faster than 100 MB/s, and shrink back when it slows") {
  testing::FaultFileSystem fs;
  auto options = options_for("/data", 1);
  options.segment_bytes = kSegmentBytesMin;
  std::uint64_t now_us = 0;
  std::uint64_t step_us = 1;  // per clock reading: 16 KiB in a few microseconds is far past 100 MB/s
  options.now_us = [&] { return now_us += step_us; };
  auto log = Log::open(fs, options);
  REQUIRE(log);
  std::vector<std::uint64_t> sizes;
  auto append_until_rolls = [&](std::uint64_t rolls) {
    auto target = (*log)->stats().segments_created + rolls;
    Lsn lsn = (*log)->last_lsn(0);
    while ((*log)->stats().segments_created < target) {
      auto appended = (*log)->append(0, payload(0, ++lsn, 3000));
      REQUIRE(appended);
      REQUIRE((*log)->wait_durable(0, *appended));
      if (sizes.empty() || sizes.back() != (*log)->stats().segment_bytes) sizes.push_back((*log)->stats().segment_bytes);
    }
  };
  // Each segment is prepared a segment ahead, so the size a roll decides is
  // the size of the segment after the next one: segment 2 was prepared at
  // the default size before any segment filled.
  append_until_rolls(5);
  CHECK(sizes == std::vector<std::uint64_t>{kSegmentBytesMin, 2 * kSegmentBytesMin, 4 * kSegmentBytesMin, 8 * kSegmentBytesMin,
                                            16 * kSegmentBytesMin});
  CHECK((*log)->stats().rolls_unprepared == 0);
  step_us = 1'000'000;  // now a second per reading: far below 100 MB/s
  append_until_rolls(2);
  CHECK((*log)->stats().segment_bytes == kSegmentBytesMin);
  REQUIRE((*log)->close());
  auto reopened = Log::open(fs, options);
  REQUIRE(reopened);
  CHECK(read_all(**reopened, 0).size() == (*log)->last_lsn(0));
}
}

TEST_SUITE("unit") {
TEST_CASE("readers see the same bytes whether large records were offloaded to blobs or not") {
  std::vector<std::vector<std::vector<std::vector<std::byte>>>> seen;
  for (std::size_t offload : {std::size_t{0}, std::size_t{1000}}) {
    CAPTURE(offload);
    testing::FaultFileSystem fs;
    auto options = options_for("/data", 2);
    options.payload_offload_bytes = offload;
    {
      auto log = Log::open(fs, options);
      REQUIRE(log);
      for (Lsn lsn = 1; lsn <= 10; ++lsn) {
        for (ShardId shard = 0; shard < 2; ++shard) {
          auto size = lsn % 3 == 0 ? 5000 + lsn : 40;
          auto appended = (*log)->append(shard, payload(shard, lsn, size));
          REQUIRE(appended);
        }
      }
      REQUIRE((*log)->wait_durable(0, 10));
      REQUIRE((*log)->wait_durable(1, 10));
      CHECK((*log)->stats().blobs_written == (offload ? 6u : 0u));
      REQUIRE((*log)->close());
    }
    RecoveryPlan plan;
    auto log = Log::open(fs, options, &plan);
    REQUIRE(log);
    CHECK(plan.blob_records == (offload ? 6u : 0u));
    seen.push_back({read_all(**log, 0), read_all(**log, 1)});
    CHECK(seen.back()[0].size() == 10);
  }
  CHECK(seen[0] == seen[1]);
}

TEST_CASE("a damaged blob under an acknowledged record refuses the open, naming the record and the blob file") {
  testing::FaultFileSystem fs;
  auto options = options_for("/data", 1);
  options.payload_offload_bytes = 1000;
  {
    auto log = Log::open(fs, options);
    REQUIRE(log);
    REQUIRE((*log)->append(0, payload(0, 1, 40)));
    auto big = (*log)->append(0, payload(0, 2, 3000));
    REQUIRE(big);
    REQUIRE((*log)->wait_durable(0, *big));
    REQUIRE((*log)->close());
  }
  auto image = fs.crash_image(testing::CrashOutcome::drop_all());
  auto blob_file = std::string("/data/wal/blobs/") + blob_file_name(1);
  REQUIRE(image->corrupt_bit(blob_file, 100 * 8 + 3));
  RecoveryPlan plan;
  auto log = Log::open(*image, options, &plan);
  REQUIRE_FALSE(log);
  CHECK(log.error() == errc::recovery_refused);
  CHECK(plan.refusal.find("LSN 2") != std::string::npos);
  CHECK(plan.refusal.find(blob_file) != std::string::npos);
}

TEST_CASE("blob files no batch of the chain references are deleted at open") {
  testing::FaultFileSystem fs;
  auto options = options_for("/data", 1);
  options.payload_offload_bytes = 1000;
  {
    auto log = Log::open(fs, options);
    REQUIRE(log);
    auto big = (*log)->append(0, payload(0, 1, 3000));
    REQUIRE(big);
    REQUIRE((*log)->wait_durable(0, *big));
  }
  {
    // A blob whose batch never became durable: written and synced, never referenced.
    auto writer = BlobWriter::open(fs, "/data/wal/blobs", {});
    REQUIRE(writer);
    auto bytes = payload(0, 2, 3000);
    auto ref = (*writer)->reserve(bytes);
    REQUIRE(ref.has_value());
    REQUIRE((*writer)->write(*ref, bytes));
    CHECK(ref->file_number == 2);  // one past the log's own file
  }
  RecoveryPlan plan;
  auto log = Log::open(fs, options, &plan);
  REQUIRE(log);
  CHECK(read_all(**log, 0).size() == 1);
  CHECK(plan.blob_files_referenced == std::vector<std::uint64_t>{1});
  CHECK(plan.blob_files_unreferenced == std::vector<std::uint64_t>{2});
  auto remaining = list_blob_files(fs, "/data/wal/blobs");
  REQUIRE(remaining.has_value());
  CHECK(*remaining == std::vector<std::uint64_t>{1});
}
}

#include <map>
#include <random>

TEST_SUITE("unit") {
TEST_CASE("the io_uring owner and the log threads write the same bytes and publish in the same order") {
  std::vector<std::map<std::string, std::vector<std::byte>>> images;
  std::vector<std::vector<std::pair<ShardId, Lsn>>> orders;
  for (auto mode : {LogWriterMode::owner, LogWriterMode::threads}) {
    testing::FaultFileSystem fs;
    auto options = options_for("/data", 2);
    options.segment_bytes = kSegmentBytesMin;
    options.writer_mode = mode;
    options.inline_writes = false;  // every batch through the owner or the threads
    auto rng = std::make_shared<std::mt19937_64>(7);
    options.random = [rng] { return (*rng)(); };
    auto clock_us = std::make_shared<std::uint64_t>(0);
    options.now_us = [clock_us] { return *clock_us += 1'000'000; };
    std::vector<std::pair<ShardId, Lsn>> order;
    {
      auto log = Log::open(fs, options);
      REQUIRE(log);
      CHECK((*log)->stats().owner_thread == (mode == LogWriterMode::owner));
      (*log)->set_durable_hook([&](ShardId shard, Lsn lsn) { order.emplace_back(shard, lsn); });
      for (int i = 0; i < 30; ++i) {
        ShardId shard = i % 2;
        auto appended = (*log)->append(shard, payload(shard, i / 2 + 1, 900));
        REQUIRE(appended);
        REQUIRE((*log)->wait_durable(shard, *appended));
      }
      CHECK((*log)->stats().segments_created >= 3);
      REQUIRE((*log)->close());
    }
    std::map<std::string, std::vector<std::byte>> image;
    for (const auto& path : fs.list_files_recursive()) {
      auto bytes = fs.durable_contents(path);
      REQUIRE(bytes.has_value());
      image[path] = *bytes;
    }
    images.push_back(std::move(image));
    orders.push_back(std::move(order));
  }
  CHECK(images[0].size() == images[1].size());
  CHECK(images[0] == images[1]);
  CHECK(orders[0] == orders[1]);
  CHECK(orders[0].size() == 30);
}
}
