// Recovery's work past the chain's end is bounded by the bytes there, not by
// what the blocks there claim. A torn batch whose payload holds blocks that
// decode as batch headers, each claiming a batch up to the segment's end,
// once made an open read and checksum each claimed batch: quadratic in the
// segment's size (gigabytes for a large one). docs/log-format.md §9 states
// the bound.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/log_workloads.hpp"
#include "tests/support/result_checks.hpp"
#include "wal/io/file_system.hpp"
#include "wal/limits.hpp"
#include "wal/log.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"

using namespace fusee;
using namespace fusee::wal;
using namespace fusee::testing;

TEST_SUITE("unit") {
TEST_CASE("recovery reads about twice the bytes past the chain's end, however many fake batch headers lie there") {
  constexpr std::uint64_t kSegmentBytes = 4 * kMiB;
  FaultFileSystem fs;
  auto options = fault_log_options(1, 5);
  options.segment_bytes = kSegmentBytes;
  options.payload_offload_bytes = 0;
  Lsn durable = 0;
  {
    auto log = value_or_fail(Log::open(fs, options));
    durable = value_or_fail(log->append(0, std::vector<std::byte>(100, std::byte{1})));
    ok_or_fail(log->wait_durable(0, durable));
  }
  auto image = fs.crash_image(CrashOutcome::drop_all());
  auto plan = value_or_fail(plan_recovery(*image, "/data/wal", 1));
  REQUIRE_FALSE(plan.refused);
  auto end = plan.write_offset;

  // Past the end: a block that decodes as a batch header at every block
  // offset, each claiming a batch that runs to the segment's end (with a
  // checksum that fails, as a torn payload's would).
  {
    auto segment = value_or_fail(image->open("/data/wal/0000000001.seg", {.write = true}));
    io::AlignedBuffer block(kBlockBytes);
    for (auto offset = end; offset + kBlockBytes <= kSegmentBytes; offset += kBlockBytes) {
      BatchHeader fake;
      fake.total_length = static_cast<std::uint32_t>(std::min<std::uint64_t>(kSegmentBytes - offset, kBatchBytesMax));
      fake.body_length = fake.total_length - static_cast<std::uint32_t>(kBatchHeaderBytes);
      fake.sequence = 1000 + offset / kBlockBytes;
      fake.acked = fake.sequence - 1;  // would refuse, were it valid
      fake.crc = 0x12345678;
      encode_batch_header(fake, block.span());
      REQUIRE(value_or_fail(segment->write_at(offset, block.span(), io::WriteFlags::none)) == kBlockBytes);
    }
    ok_or_fail(segment->sync_data());
  }

  auto before = image->bytes_read();
  auto damaged = value_or_fail(plan_recovery(*image, "/data/wal", 1));
  auto read_bytes = image->bytes_read() - before;
  CHECK_MESSAGE(!damaged.refused, damaged.refusal);
  CHECK(damaged.last_sequence == plan.last_sequence);
  CHECK(damaged.stale_batches_past_end == 0);
  auto past_end = kSegmentBytes - end;
  MESSAGE("recovery read " << read_bytes << " bytes for " << past_end << " bytes past the chain's end");
  // Headers of every segment, the chain, one pass over the rest and at most
  // one block per fake header.
  CHECK(read_bytes <= 3 * kSegmentBytes);
}
}
