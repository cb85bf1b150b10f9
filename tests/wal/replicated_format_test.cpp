// The replicated log's format (docs/log-format.md, docs/replication.md): the
// view in each batch header behind kBatchFlagView, segments of their own
// version, and one kind of log per directory. A local log's bytes do not
// change (log_format_golden_test.cpp pins them).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"
#include "wal/errc.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"
#include "wal/segment_file.hpp"

using namespace fusee;
using namespace fusee::wal;

namespace {

LogOptions options_for(const std::string& dir, std::uint64_t view) {
  LogOptions options;
  options.dir = dir;
  options.shard_count = 2;
  options.segment_bytes = kSegmentBytesMin;
  options.view = view;
  options.warn = [](const std::string&) {};
  options.verify_writes = true;
  return options;
}

std::vector<std::byte> record(Lsn lsn) { return std::vector<std::byte>(700, std::byte(lsn % 251)); }

void append_some(Log& log, Lsn from, Lsn to) {
  for (Lsn lsn = from; lsn <= to; ++lsn) REQUIRE(log.append(0, record(lsn)));
  REQUIRE(log.wait_durable(0, to));
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("replicated format: the view round-trips behind its flag; a flag with view 0 is no batch") {
    BatchHeader header;
    header.total_length = kBlockBytes;
    header.sequence = 9;
    header.acked = 8;
    header.flags = kBatchFlagView;
    header.view = 3;
    std::vector<std::byte> bytes(kBatchHeaderBytes);
    encode_batch_header(header, bytes);
    auto decoded = decode_batch_header(bytes);
    REQUIRE(decoded);
    CHECK(decoded->view == 3);
    CHECK(*decoded == header);
    store_u64(bytes.data() + batch_header_offset::view, 0);
    CHECK_FALSE(decode_batch_header(bytes));

    SegmentHeader segment{4, 77, 100, kSegmentBytesMin, 5, true};
    std::vector<std::byte> block(kSegmentHeaderBytes);
    encode_segment_header(segment, block);
    CHECK(load_u32(block.data() + segment_header_offset::format_version) == kFormatVersionReplicated);
    auto read = decode_segment_header(block);
    REQUIRE(read.status == SegmentHeaderStatus::valid);
    CHECK(read.header == segment);
    segment.replicated = false;
    encode_segment_header(segment, block);
    CHECK(load_u32(block.data() + segment_header_offset::format_version) == kFormatVersion);
    CHECK_FALSE(decode_segment_header(block).header.replicated);
  }

  TEST_CASE("replicated format: a primary's log stamps each batch with its view, across rolls and views") {
    testing::TempDir dir;
    io::PosixFileSystem fs;
    {
      auto log = Log::open(fs, options_for(dir.path(), 3));
      REQUIRE(log.has_value());
      append_some(**log, 1, 60);
    }
    {
      auto log = Log::open(fs, options_for(dir.path(), 4));  // the next view's primary
      REQUIRE(log.has_value());
      append_some(**log, 61, 80);
      REQUIRE((*log)->close());
    }
    auto plan = plan_recovery(fs, dir.sub("wal"), 2, {}, true);
    REQUIRE(plan.has_value());
    CHECK_FALSE(plan->refused);
    CHECK(plan->replicated);
    CHECK(plan->segments.size() > 2);
    for (const auto& segment : plan->segments) CHECK(segment.header.replicated);
    CHECK(plan->chain_records == 80);
    bool saw_three = false;
    bool saw_four = false;
    std::uint64_t previous = 0;
    for (const auto& batch : plan->batches) {
      CHECK((batch.view == 3 || batch.view == 4));
      CHECK(batch.view >= previous);  // views never go back along the chain
      previous = batch.view;
      saw_three = saw_three || batch.view == 3;
      saw_four = saw_four || batch.view == 4;
    }
    CHECK(saw_three);
    CHECK(saw_four);
  }

  TEST_CASE("replicated format: a directory holds one kind of log") {
    testing::TempDir local_dir;
    testing::TempDir replicated_dir;
    io::PosixFileSystem fs;
    {
      auto log = Log::open(fs, options_for(local_dir.path(), 0));
      REQUIRE(log.has_value());
      append_some(**log, 1, 60);
    }
    {
      auto log = Log::open(fs, options_for(replicated_dir.path(), 2));
      REQUIRE(log.has_value());
      append_some(**log, 1, 10);
    }
    // Opened as the other kind: refused, not taken for torn batches.
    auto as_replicated = Log::open(fs, options_for(local_dir.path(), 1));
    REQUIRE(as_replicated.has_error());
    CHECK(as_replicated.error() == make_error_code(errc::invalid_argument));
    auto as_local = Log::open(fs, options_for(replicated_dir.path(), 0));
    REQUIRE(as_local.has_error());
    CHECK(as_local.error() == make_error_code(errc::invalid_argument));

    // A replicated segment among a local log's: a mix-up, refused by name.
    auto plan = plan_recovery(fs, local_dir.sub("wal"), 2);
    REQUIRE(plan.has_value());
    REQUIRE(plan->segments.size() >= 2);
    const auto& second = plan->segments[1];
    SegmentHeader header = second.header;
    header.replicated = true;
    std::vector<std::byte> block(kSegmentHeaderBytes);
    encode_segment_header(header, block);
    {
      auto file = fs.open(second.path, {.write = true});
      REQUIRE(file.has_value());
      REQUIRE((*file)->write_at(0, block, io::WriteFlags::dsync));
    }
    auto mixed = plan_recovery(fs, local_dir.sub("wal"), 2);
    REQUIRE(mixed.has_value());
    CHECK(mixed->refused);
    CHECK(mixed->refusal.find("of a local log") != std::string::npos);
    CHECK(mixed->refusal.find("replicated") != std::string::npos);
  }
}
