// Retirement: segments and blob files go once the caller's keep_from_sequence
// passes them; the log reopens from the first live segment with the shards'
// LSN floors, and refuses when what retirement removed is still needed.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <string>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/errc.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"
#include "wal/segment_file.hpp"

using namespace fusee;
using namespace fusee::wal;

namespace {

std::vector<std::byte> record_of(ShardId shard, Lsn lsn, std::size_t size) {
  std::vector<std::byte> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = std::byte((shard * 31 + lsn * 7 + i) & 0xff);
  return out;
}

LogOptions small_segments(const std::string& dir, std::uint32_t shards) {
  LogOptions options;
  options.dir = dir;
  options.shard_count = shards;
  options.segment_bytes = 64 * 1024;
  options.payload_offload_bytes = 8 * 1024;
  options.warn = [](const std::string&) {};
  return options;
}

std::size_t count_files(const std::string& dir, const std::string& suffix) {
  std::size_t count = 0;
  if (!std::filesystem::exists(dir)) return 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().string().ends_with(suffix)) ++count;
  }
  return count;
}

// Appends `count` records to shard 0 (every 10th large enough for a blob),
// waiting for each.
void append_many(Log& log, Lsn& next, int count) {
  for (int i = 0; i < count; ++i, ++next) {
    auto size = next % 10 == 0 ? 12 * 1024 : 3000;
    auto lsn = log.append(0, record_of(0, next, size));
    REQUIRE(lsn);
    REQUIRE(*lsn == next);
    REQUIRE(log.wait_durable(0, *lsn));
  }
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("retired segments and their blob files go; the rest reopens with the shard's LSN floor") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  auto wal_dir = dir.path() + "/wal";
  Lsn next = 1;
  std::uint64_t keep_from = 0;
  Lsn floor = 0;
  std::uint64_t rolls_seen = 0;
  {
    auto opened = Log::open(fs, small_segments(dir.path(), 2));
    REQUIRE(opened);
    auto& log = **opened;
    log.set_roll_hook([&](std::uint64_t retires_at) {
      if (retires_at > 0) ++rolls_seen;
    });
    append_many(log, next, 200);
    auto segments_before = count_files(wal_dir, ".seg");
    REQUIRE(segments_before > 4);
    CHECK(rolls_seen > 0);
    // A checkpoint of shard 0 covering LSN 150 (shard 1 has no record).
    floor = 150;
    keep_from = log.keep_from_sequence(0, floor);
    CHECK(keep_from > 1);
    CHECK(keep_from <= log.keep_from_sequence(0, 199));
    auto retired = log.retire(std::min(keep_from, log.keep_from_sequence(1, 0)));
    REQUIRE(retired.has_value());
    CHECK(retired->segments > 0);
    CHECK(retired->blob_files == 0);  // one blob file per open, still being written
    CHECK(count_files(wal_dir, ".seg") == segments_before - retired->segments);
    CHECK(log.stats().segments_retired == retired->segments);
    // Records past the floor still read back; those retired do not.
    std::vector<Lsn> seen;
    REQUIRE(log.read(0, floor + 1, 200, [&](Lsn lsn, std::span<const std::byte> bytes) {
      CHECK(bytes.size() == (lsn % 10 == 0 ? 12 * 1024u : 3000u));
      seen.push_back(lsn);
    }));
    CHECK(seen.size() == 50);
    REQUIRE(log.close());
  }
  // Reopening needs the checkpoints that allowed the retirement.
  {
    RecoveryPlan plan;
    auto refused = Log::open(fs, small_segments(dir.path(), 2), &plan);
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == make_error_code(errc::recovery_refused));
    CHECK(plan.refusal.find("no segment holds sequences 1 to") != std::string::npos);
  }
  auto options = small_segments(dir.path(), 2);
  options.base.first_sequence_max = keep_from;
  options.base.shard_lsn_floors = {floor, 0};
  {
    auto opened = Log::open(fs, options);
    REQUIRE(opened);
    auto& log = **opened;
    CHECK(log.durable_lsn(0) == 200);
    std::vector<Lsn> seen;
    REQUIRE(log.read(0, floor + 1, 200, [&](Lsn lsn, std::span<const std::byte>) { seen.push_back(lsn); }));
    CHECK(seen.size() == 50);
    append_many(log, next, 100);
    // Everything before the last records retires now, with the blob file of
    // the previous open: no live batch references it any more.
    auto blob_files_before = count_files(wal_dir + "/blobs", ".blob");
    REQUIRE(blob_files_before == 2);
    auto retired = log.retire(log.keep_from_sequence(0, 299));
    REQUIRE(retired.has_value());
    CHECK(retired->blob_files == 1);
    CHECK(count_files(wal_dir + "/blobs", ".blob") == 1);
    CHECK(log.stats().segments_live == 1);
    keep_from = log.keep_from_sequence(0, 300);
    REQUIRE(log.close());
  }
  // A checkpoint at the very end: the shard goes on past its floor.
  options.base.first_sequence_max = keep_from;
  options.base.shard_lsn_floors = {300, 0};
  {
    auto opened = Log::open(fs, options);
    REQUIRE(opened);
    CHECK((*opened)->durable_lsn(0) == 300);
    auto lsn = (*opened)->append(0, record_of(0, 301, 100));
    REQUIRE(lsn);
    CHECK(*lsn == 301);
    REQUIRE((*opened)->close());
  }
}

TEST_CASE("retire's before_retiring runs once, only when a segment goes, and its error retires nothing") {
  // The checkpointer syncs the run store there (its checkpoints are written
  // unsynced): a segment must never go before that sync, nor the sync be
  // paid when nothing goes.
  testing::TempDir dir;
  io::PosixFileSystem fs;
  auto options = small_segments(dir.path(), 1);
  options.payload_offload_bytes = 0;
  auto log = Log::open(fs, options);
  REQUIRE(log);
  Lsn next = 1;
  while ((*log)->stats().segments_created < 3) append_many(**log, next, 1);
  int calls = 0;
  auto counted = [&] {
    ++calls;
    return Result<void>(ok());
  };
  // Nothing below the first segment's end: not called.
  auto none = (*log)->retire(1, counted);
  REQUIRE(none.has_value());
  CHECK(none->segments == 0);
  CHECK(calls == 0);
  auto keep_from = (*log)->keep_from_sequence(0, next - 1);
  auto refused = (*log)->retire(keep_from, [&] {
    ++calls;
    return Result<void>(make_error_code(std::errc::io_error));
  });
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error() == make_error_code(std::errc::io_error));
  CHECK(calls == 1);
  CHECK((*log)->stats().segments_retired == 0);
  CHECK(count_files(dir.path() + "/wal", ".seg") >= 3);
  auto retired = (*log)->retire(keep_from, counted);
  REQUIRE(retired.has_value());
  CHECK(retired->segments >= 2);  // several segments, one call
  CHECK(calls == 2);
}

TEST_CASE("recovery refuses when a shard's records past its checkpoint are missing") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  Lsn next = 1;
  std::uint64_t keep_from = 0;
  {
    auto opened = Log::open(fs, small_segments(dir.path(), 1));
    REQUIRE(opened);
    append_many(**opened, next, 100);
    keep_from = (*opened)->keep_from_sequence(0, 90);
    REQUIRE((*opened)->retire(keep_from).has_value());
    REQUIRE((*opened)->close());
  }
  auto options = small_segments(dir.path(), 1);
  options.base.first_sequence_max = keep_from;
  SUBCASE("a checkpoint older than the retirement") {
    options.base.shard_lsn_floors = {10};
    RecoveryPlan plan;
    REQUIRE_FALSE(Log::open(fs, options, &plan));
    CHECK(plan.refusal.find("are missing: its checkpoint covers LSN 10") != std::string::npos);
  }
  SUBCASE("a checkpoint past the log's end") {
    options.base.shard_lsn_floors = {500};
    RecoveryPlan plan;
    REQUIRE_FALSE(Log::open(fs, options, &plan));
    CHECK(plan.refusal.find("covers LSN 500, but the log ends at LSN 100") != std::string::npos);
  }
  SUBCASE("the checkpoint that allowed it") {
    options.base.shard_lsn_floors = {90};
    REQUIRE(Log::open(fs, options));
  }
}

TEST_CASE("a retirement interrupted after the header was zeroed finishes at the next open") {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  Lsn next = 1;
  std::uint64_t keep_from = 0;
  {
    auto opened = Log::open(fs, small_segments(dir.path(), 1));
    REQUIRE(opened);
    append_many(**opened, next, 100);
    keep_from = (*opened)->oldest_segment_retires_at();
    REQUIRE(keep_from > 1);
    REQUIRE((*opened)->close());
  }
  // Zero the oldest header by hand, as retire() does before the unlink.
  auto oldest = dir.path() + "/wal/" + segment_file_name(1);
  {
    auto file = fs.open(oldest, {.write = true});
    REQUIRE(file);
    std::vector<std::byte> zeros(kSegmentHeaderBytes);
    REQUIRE((*file)->write_at(0, zeros, {}));
    REQUIRE((*file)->sync_data());
  }
  auto options = small_segments(dir.path(), 1);
  options.base.first_sequence_max = keep_from;
  options.base.shard_lsn_floors = {99};
  RecoveryPlan plan;
  auto opened = Log::open(fs, options, &plan);
  REQUIRE_MESSAGE(opened, plan.refusal);
  CHECK_FALSE(std::filesystem::exists(oldest));
}
}

TEST_SUITE("crash") {
TEST_CASE("a retirement that fails part-way is finished first by the next one, so recovery never finds a gap") {
  // Found by the spec (FuseeLogRetireFails.cfg): the failed segment had
  // already left the log's list, so the next retire() removed the segment
  // after it, leaving a zeroed (or missing) segment 1 before a missing 2.
  for (auto kind : {testing::OpKind::sync_data, testing::OpKind::remove, testing::OpKind::sync_dir}) {
    CAPTURE(int(kind));
    testing::FaultFileSystem fs;
    auto options = small_segments("/data", 1);
    options.payload_offload_bytes = 0;
    options.prepare_segments = false;  // the faults below are for the retirement's
    auto log = Log::open(fs, options);
    REQUIRE(log);
    Lsn next = 1;
    while ((*log)->stats().segments_created < 3) append_many(**log, next, 1);
    auto keep_from = (*log)->keep_from_sequence(0, next - 1);
    fs.inject({kind, 1, testing::FaultEffect::io_error});
    // The log's own writes (the preparer's too) never fail here: only the
    // retirement's first operation of this kind does, once.
    auto first = (*log)->retire(keep_from);
    fs.clear_faults();
    auto second = (*log)->retire(keep_from);
    REQUIRE(second.has_value());
    CHECK((first ? first->segments : 0) + second->segments == 3);
    auto files = fs.list_files_recursive();
    for (const auto& path : files) CHECK_FALSE(path.ends_with("0000000001.seg"));
    for (const auto& path : files) CHECK_FALSE(path.ends_with("0000000002.seg"));
    // After a power loss the log reopens (its checkpoint covers what went).
    auto image = fs.crash_image(testing::CrashOutcome::drop_all());
    RecoveryBase base;
    base.first_sequence_max = keep_from;
    base.shard_lsn_floors = {next - 1};
    auto plan = plan_recovery(*image, "/data/wal", 1, base);
    REQUIRE(plan.has_value());
    CHECK_MESSAGE(!plan->refused, plan->refusal);
  }
}

TEST_CASE("a removal an earlier life left unsynced is made durable by the next open, so a later crash cannot bring it back") {
  // Found by the spec (FuseeLogRestarts.cfg): segment 1's header torn by a
  // crash while retirement zeroed it; life 2's recovery removes it and
  // stops before its directory sync (the sync fails); life 3 opens in the
  // same boot, finds nothing to remove and synced no directory; it retires
  // segment 2 and the machine crashes before that directory sync. Segment 1
  // came back, damaged, before a zeroed segment 2: recovery refused ("the
  // log's start is lost") with every acknowledged record on disk.
  testing::FaultFileSystem fs;
  auto options = small_segments("/data", 1);
  options.payload_offload_bytes = 0;  // the blob writer's open syncs the log directory
  options.prepare_segments = false;   // and so does a preparation
  Lsn next = 1;
  Lsn floor_1 = 0;  // covers segment 1's records
  std::uint64_t keep_from_1 = 0;
  {
    auto log = Log::open(fs, options);
    REQUIRE(log);
    while ((*log)->stats().segments_created < 2) append_many(**log, next, 1);
    keep_from_1 = (*log)->oldest_segment_retires_at();  // segment 2's first sequence
    while (floor_1 + 1 < next && (*log)->keep_from_sequence(0, floor_1 + 1) <= keep_from_1) ++floor_1;
    REQUIRE(floor_1 > 0);
    REQUIRE((*log)->close());
  }
  // A zeroing of segment 1's header torn by a crash: neither valid nor zero.
  {
    auto file = fs.open("/data/wal/" + segment_file_name(1), {.write = true});
    REQUIRE(file);
    std::vector<std::byte> torn(kSegmentHeaderBytes, std::byte{0});
    torn[0] = std::byte{0x5a};
    REQUIRE((*file)->write_at(0, torn, {}));
    REQUIRE((*file)->sync_data());
  }
  options.base.first_sequence_max = keep_from_1;
  options.base.shard_lsn_floors = {floor_1};
  // Life 2: recovery removes segment 1; its directory sync fails.
  fs.inject({testing::OpKind::sync_dir, 1, testing::FaultEffect::io_error});
  {
    RecoveryPlan plan;
    auto log = Log::open(fs, options, &plan);
    CHECK_FALSE(log.has_value());
    REQUIRE(plan.files_to_delete.size() == 1);
  }
  fs.clear_faults();
  // Life 3, same boot: segment 1 is out of sight.
  Lsn floor_2 = floor_1;
  std::uint64_t keep_from_2 = 0;
  {
    RecoveryPlan plan;
    auto log = Log::open(fs, options, &plan);
    REQUIRE_MESSAGE(log, plan.refusal);
    CHECK(plan.files_to_delete.empty());
    keep_from_2 = (*log)->oldest_segment_retires_at();  // segment 3's first sequence
    while (floor_2 + 1 < next && (*log)->keep_from_sequence(0, floor_2 + 1) <= keep_from_2) ++floor_2;
    // Segment 2 retires: its header is zeroed and synced, the file removed,
    // and the directory sync after it fails: the machine crashes there.
    fs.inject({testing::OpKind::sync_dir, 1, testing::FaultEffect::io_error});
    auto retired = (*log)->retire(keep_from_2);
    CHECK_FALSE(retired.has_value());
  }
  auto image = fs.crash_image(testing::CrashOutcome::drop_all(testing::CrashOutcome::Names::revert));
  auto reopen = options;
  reopen.base.first_sequence_max = keep_from_2;
  reopen.base.shard_lsn_floors = {floor_2};
  RecoveryPlan plan;
  auto log = Log::open(*image, reopen, &plan);
  REQUIRE_MESSAGE(log, plan.refusal);
  // Every record past the checkpoint is there.
  std::vector<Lsn> seen;
  REQUIRE((*log)->read(0, floor_2 + 1, next, [&](Lsn lsn, std::span<const std::byte>) { seen.push_back(lsn); }));
  CHECK(seen.size() == next - 1 - floor_2);
}
}
