// Damage sweeps over a golden multi-segment image: every single-bit flip and
// every truncation point of every segment is either refused, or recovers
// every acknowledged record exactly; never a record that differs.
#include <doctest/doctest.h>

#include "tests/support/log_workloads.hpp"
#include "wal/recovery.hpp"

using namespace fusee;
using namespace fusee::testing;
using namespace fusee::wal;

namespace {

// The sweeps are complete in the normal build. Under ASan each recovery is
// about 20 times slower, so `make test-asan` visits every 7th bit and
// truncation point (a prime stride: every byte offset and bit position still
// comes up), which keeps its run in minutes.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t kSweepStride = 7;
#else
constexpr std::uint64_t kSweepStride = 1;
#endif

using Records = std::vector<std::vector<std::vector<std::byte>>>;

struct Golden {
  std::unique_ptr<FaultFileSystem> image;
  Records records;
  LogOptions options;
};

// Three segments of sequential appends on two shards, closed cleanly: every
// record in it was acknowledged.
Golden make_golden() {
  Workload workload;
  workload.shards = 2;
  auto options = workload_options(workload, 42);
  FaultFileSystem fs;
  {
    auto log = Log::open(fs, options);
    REQUIRE(log);
    // Five batches of one record (one block) each, written one at a time so
    // the layout never depends on timing: two per 16 KiB segment, then a
    // roll; the close marker ends the third segment.
    for (int i = 0; i < 5; ++i) {
      ShardId shard = i % 2;
      auto appended = (*log)->append(shard, test_record(shard, i / 2 + 1, 300 + 40 * i));
      REQUIRE(appended);
      REQUIRE((*log)->wait_durable(shard, *appended));
    }
    REQUIRE((*log)->close());
  }
  Golden golden;
  golden.image = fs.crash_image(CrashOutcome::drop_all());
  golden.options = options;
  // Read through a copy: an open log prepares its next segment, a file the
  // golden image must not gain.
  auto scratch = golden.image->clone();
  auto log = Log::open(*scratch, options);
  REQUIRE(log);
  golden.records = read_everything(**log);
  REQUIRE(golden.records[0].size() == 3);
  REQUIRE(golden.records[1].size() == 2);
  return golden;
}

// What a recovery plan would return, read straight from its chain (no
// writes, so one image serves every flip).
bool read_plan(FaultFileSystem& fs, const RecoveryPlan& plan, Records& out) {
  out.assign(plan.shards.size(), {});
  std::vector<SectionView> sections;
  for (const auto& location : plan.sections) {
    auto segment = std::find_if(plan.segments.begin(), plan.segments.end(),
                                [&](const auto& s) { return s.number == location.segment; });
    auto file = fs.open(segment->path, {});
    if (!file) return false;
    auto bytes = read_batch(**file, segment->header.salt, location.batch_offset, location.batch_bytes);
    if (!bytes) return false;
    auto header = decode_batch_header(*bytes);
    auto body = std::span<const std::byte>(*bytes).subspan(kBatchHeaderBytes, header->body_length);
    if (decode_body(body, header->section_count, sections)) return false;
    for (const auto& section : sections) {
      if (section.header.shard != location.shard || section.header.first_lsn != location.first_lsn) continue;
      for (auto record : section.records) out[location.shard].emplace_back(record.begin(), record.end());
    }
  }
  return true;
}

struct Verdicts {
  std::uint64_t refused = 0;
  std::uint64_t intact = 0;
};

void judge(FaultFileSystem& fs, const Golden& golden, const std::string& what, Verdicts& verdicts) {
  auto plan = plan_recovery(fs, "/data/wal", golden.options.shard_count);
  REQUIRE(plan.has_value());
  if (plan->refused) {
    ++verdicts.refused;
    CHECK_MESSAGE(plan->refusal.find("/data/wal/") != std::string::npos, what << ": refusal names no file");
    return;
  }
  Records records;
  if (!read_plan(fs, *plan, records)) {
    FAIL_CHECK(what << ": the plan's chain does not read back");
    return;
  }
  if (records != golden.records)
    FAIL_CHECK(what << ": recovery accepted the damage and returned records that differ from what was written "
                       "or lost acknowledged ones");
  else
    ++verdicts.intact;
}

}  // namespace

TEST_SUITE("crash") {
TEST_CASE("every single-bit flip of the golden image is refused or harmless") {
  auto golden = make_golden();
  auto files = golden.image->list_files_recursive();
  REQUIRE(files.size() == 3);
  Verdicts verdicts;
  for (const auto& path : files) {
    auto bytes = golden.image->durable_contents(path);
    REQUIRE(bytes.has_value());
    for (std::uint64_t bit = 0; bit < bytes->size() * 8; bit += kSweepStride) {
      REQUIRE(golden.image->corrupt_bit(path, bit));
      judge(*golden.image, golden, path + " bit " + std::to_string(bit), verdicts);
      REQUIRE(golden.image->corrupt_bit(path, bit));  // flip it back
    }
  }
  MESSAGE("bit flips over " << files.size() << " segments: " << verdicts.refused << " refused, " << verdicts.intact
                            << " recovered intact");
  CHECK(verdicts.refused > 0);
}

TEST_CASE("every truncation point of every golden segment is refused or harmless") {
  auto golden = make_golden();
  auto files = golden.image->list_files_recursive();
  Verdicts verdicts;
  for (const auto& path : files) {
    auto bytes = golden.image->durable_contents(path);
    REQUIRE(bytes.has_value());
    for (std::uint64_t size = 0; size < bytes->size(); size += kSweepStride) {
      auto damaged = golden.image->clone();
      REQUIRE(damaged->truncate_durable(path, size));
      judge(*damaged, golden, path + " truncated to " + std::to_string(size), verdicts);
    }
  }
  MESSAGE("truncations: " << verdicts.refused << " refused, " << verdicts.intact << " recovered intact");
  CHECK(verdicts.refused > 0);
}
}
