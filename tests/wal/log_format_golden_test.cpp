// The worked example of docs/log-format.md: a two-batch segment from the real codecs, its golden bytes, its recovery.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "wal/batch_builder.hpp"
#include "wal/limits.hpp"
#include "wal/log.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"
#include "wal/segment_file.hpp"

using namespace fusee;
using namespace fusee::wal;

namespace {

// Fixed where the log draws random values, so the bytes are reproducible;
// chosen so that little-endian order is visible in the dump.
constexpr std::uint64_t kSalt = 0x1122334455667788ull;
constexpr std::uint64_t kLife = 0xa1a2a3a4a5a6a7a8ull;
// The smallest segment the log accepts: header block, two one-block batches
// and the block every segment keeps free for its roll marker.
constexpr std::uint64_t kSegmentBytes = kSegmentBytesMin;
constexpr std::uint32_t kShards = 2;
constexpr std::uint64_t kBatch1Offset = kSegmentHeaderBytes;
constexpr std::uint64_t kBatch2Offset = kSegmentHeaderBytes + kBlockBytes;

// `xxd -a 0000000001.seg` of the example segment, printed by
//   FUSEE_PRINT_GOLDEN=1 fusee_tests -ts=unit -tc='*golden*'
// and reproduced, annotated, in docs/log-format.md. If this test fails, the
// format changed: bump kFormatVersion and update the document with it.
constexpr std::string_view kGolden = R"golden(00000000: 4655 5345 4553 4547 0100 0000 2636 2521  FUSEESEG....&6%!
00000010: 0100 0000 0000 0000 8877 6655 4433 2211  .........wfUD3".
00000020: 0100 0000 0000 0000 0040 0000 0000 0000  .........@......
00000030: 0000 0000 0000 0000 0000 0000 0000 0000  ................
*
00001000: 4653 4231 b293 a558 0010 0000 4200 0000  FSB1...X....B...
00001010: 0100 0000 0000 0000 0000 0000 0000 0000  ................
00001020: 0000 0000 0000 0000 a8a7 a6a5 a4a3 a2a1  ................
00001030: 0200 0000 0000 0000 0000 0000 0000 0000  ................
00001040: 0000 0000 0200 0000 0100 0000 0000 0000  ................
00001050: 0c00 0000 0000 0000 0a68 656c 6c6f 0a77  .........hello.w
00001060: 6f72 6c64 0100 0000 0100 0000 0100 0000  orld............
00001070: 0000 0000 0600 0000 0000 0000 0a66 7573  .............fus
00001080: 6565 0000 0000 0000 0000 0000 0000 0000  ee..............
00001090: 0000 0000 0000 0000 0000 0000 0000 0000  ................
*
00002000: 4653 4231 9071 cb17 0010 0000 1e00 0000  FSB1.q..........
00002010: 0200 0000 0000 0000 b293 a558 0000 0000  ...........X....
00002020: 0100 0000 0000 0000 a8a7 a6a5 a4a3 a2a1  ................
00002030: 0100 0000 0000 0000 0000 0000 0000 0000  ................
00002040: 0000 0000 0100 0000 0300 0000 0000 0000  ................
00002050: 0600 0000 0000 0000 0a61 6761 696e 0000  .........again..
00002060: 0000 0000 0000 0000 0000 0000 0000 0000  ................
*
00003ff0: 0000 0000 0000 0000 0000 0000 0000 0000  ................
)golden";

std::vector<std::byte> bytes_of(std::string_view text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

std::string text_of(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// What `xxd -a` prints: per 16 bytes the offset, eight groups of two bytes in
// hex and the bytes as ASCII ('.' where not printable). In a run of all-zero
// lines the first is printed; of the lines after it, before the next line
// that is printed anyway (a non-zero line, or the file's last line, always
// printed so the size shows), one alone is printed and two or more become a
// single "*". The dump is lossless: every elided line is zero.
std::string xxd_autoskip(std::span<const std::byte> bytes) {
  REQUIRE(bytes.size() % 16 == 0);
  auto line = [&](std::size_t offset) {
    char text[80];
    int at = std::snprintf(text, sizeof text, "%08zx:", offset);
    for (std::size_t i = 0; i < 16; i += 2)
      at += std::snprintf(text + at, sizeof text - at, " %02x%02x", std::to_integer<unsigned>(bytes[offset + i]),
                          std::to_integer<unsigned>(bytes[offset + i + 1]));
    at += std::snprintf(text + at, sizeof text - at, "  ");
    for (std::size_t i = 0; i < 16; ++i) {
      auto c = std::to_integer<unsigned char>(bytes[offset + i]);
      text[at++] = c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '.';
    }
    return std::string(text, at) + "\n";
  };
  auto zero = [&](std::size_t offset) {
    for (std::size_t i = 0; i < 16; ++i)
      if (bytes[offset + i] != std::byte{0}) return false;
    return true;
  };
  std::string out;
  std::size_t lines = bytes.size() / 16;
  std::size_t run_start = 0;  // first line of the current run of zero lines
  std::size_t run_length = 0;
  auto end_run = [&](std::size_t next_printed) {
    // Lines [run_start + 1, next_printed) are zero and not yet printed.
    auto elided = next_printed - run_start - 1;
    if (elided == 1) out += line((run_start + 1) * 16);
    if (elided >= 2) out += "*\n";
    run_length = 0;
  };
  for (std::size_t i = 0; i < lines; ++i) {
    bool last = i + 1 == lines;
    if (zero(i * 16)) {
      if (run_length++ == 0) {
        run_start = i;
        out += line(i * 16);
        continue;
      }
      if (!last) continue;
      end_run(i);
      out += line(i * 16);
      continue;
    }
    if (run_length > 0) end_run(i);
    out += line(i * 16);
  }
  return out;
}

struct Golden {
  std::vector<std::byte> segment = std::vector<std::byte>(kSegmentBytes);
  BatchHeader batch1;
  BatchHeader batch2;
};

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

// Builds the segment as the writer would: the header block first, then each
// batch planned from the shards' stages, encoded, sealed with the segment's
// salt and chained to the one before. batch2_acked is 1 when batch 1 was
// durable before batch 2 was sealed (the golden case), 0 when both were in
// flight at once.
Golden build_golden(std::uint64_t batch2_acked = 1) {
  Golden golden;
  auto segment = std::span<std::byte>(golden.segment);
  SegmentHeader segment_header{1, kSalt, 1, kSegmentBytes, 0};
  encode_segment_header(segment_header, segment.first(kSegmentHeaderBytes));

  std::vector<ShardStage> stages(kShards);
  auto hello = bytes_of("hello"), world = bytes_of("world"), fusee = bytes_of("fusee"), again = bytes_of("again");
  REQUIRE(stages[0].push(hello) == 1);
  REQUIRE(stages[0].push(world) == 2);
  REQUIRE(stages[1].push(fusee) == 1);

  // Returns the sealed batch's header (with its CRC).
  auto write_batch = [&](ShardId turn, std::uint64_t offset, std::uint64_t sequence, std::uint32_t prev_crc,
                         std::uint64_t acked) {
    auto plan = plan_batch(stages, turn, kBatchBytesMax, kHandoffBytesMax);
    REQUIRE_FALSE(plan.empty());
    BatchHeader header;
    header.total_length = batch_total_bytes(plan.body_bytes);
    header.body_length = plan.body_bytes;
    header.sequence = sequence;
    header.prev_crc = prev_crc;
    header.flags = 0;
    header.acked = acked;
    header.life = kLife;
    header.section_count = static_cast<std::uint32_t>(plan.sections.size());
    auto batch = segment.subspan(offset, header.total_length);
    encode_sections(plan, stages, batch.subspan(kBatchHeaderBytes, plan.body_bytes));
    encode_batch_header(header, batch);
    header.crc = seal_batch(kSalt, batch, header.body_length);
    for (const auto& section : plan.sections) stages[section.shard].pop(section.record_count);
    return header;
  };
  // Batch 1 opens the chain: prev_crc is the segment header's, nothing is
  // acknowledged yet.
  golden.batch1 = write_batch(0, kBatch1Offset, 1, segment_header.prev_crc, 0);
  // Batch 2 was sealed after batch 1 was durable, so it acknowledges it.
  REQUIRE(stages[0].push(again) == 3);
  golden.batch2 = write_batch(1, kBatch2Offset, 2, golden.batch1.crc, batch2_acked);
  return golden;
}

void check_batch(std::span<const std::byte> segment, std::uint64_t offset, const BatchHeader& expected,
                 std::vector<SectionView>& sections) {
  auto block = segment.subspan(offset, kBlockBytes);
  auto header = decode_batch_header(block);
  REQUIRE(header);
  CHECK(*header == expected);
  CHECK(batch_crc(kSalt, block, header->body_length) == header->crc);
  CHECK(batch_crc(kSalt + 1, block, header->body_length) != header->crc);
  REQUIRE_FALSE(decode_body(block.subspan(kBatchHeaderBytes, header->body_length), header->section_count, sections));
  CHECK(all_zero(block.subspan(kBatchHeaderBytes + header->body_length)));  // the padding
}

// Puts the segment where the log keeps it, in an in-memory file system.
void install(testing::FaultFileSystem& fs, std::span<const std::byte> segment) {
  REQUIRE(fs.create_dir("/data").has_value());
  REQUIRE(fs.create_dir("/data/wal").has_value());
  auto file = fs.open("/data/wal/" + segment_file_name(1), {.write = true, .create = true});
  REQUIRE(file.has_value());
  auto written = (*file)->write_at(0, segment, io::WriteFlags::dsync);
  REQUIRE(written.has_value());
  REQUIRE(*written == segment.size());
}

RecoveryPlan plan_for(std::span<const std::byte> segment) {
  testing::FaultFileSystem fs;
  install(fs, segment);
  auto plan = plan_recovery(fs, "/data/wal", kShards);
  REQUIRE(plan.has_value());
  return *plan;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("the golden segment of docs/log-format.md is byte for byte what the codecs write") {
  auto golden = build_golden();
  auto dump = xxd_autoskip(golden.segment);
  if (const char* print = std::getenv("FUSEE_PRINT_GOLDEN"); print != nullptr && std::string_view(print) == "1") {
    std::fputs(dump.c_str(), stdout);
    std::fflush(stdout);  // before doctest's own report, which goes through std::cout
  }
  CHECK(dump == kGolden);

  auto decoded = decode_segment_header(std::span(golden.segment).first(kSegmentHeaderBytes));
  REQUIRE(decoded.status == SegmentHeaderStatus::valid);
  CHECK(decoded.header == SegmentHeader{1, kSalt, 1, kSegmentBytes, 0});

  std::vector<SectionView> sections;
  CHECK(golden.batch1.total_length == kBlockBytes);
  CHECK(golden.batch1.body_length == 2 * kSectionHeaderBytes + (1 + 5) * 3);
  check_batch(golden.segment, kBatch1Offset, golden.batch1, sections);
  REQUIRE(sections.size() == 2);
  CHECK(sections[0].header.shard == 0);
  CHECK(sections[0].header.first_lsn == 1);
  REQUIRE(sections[0].records.size() == 2);
  CHECK(text_of(sections[0].records[0]) == "hello");
  CHECK(text_of(sections[0].records[1]) == "world");
  CHECK(sections[1].header.shard == 1);
  CHECK(sections[1].header.first_lsn == 1);
  REQUIRE(sections[1].records.size() == 1);
  CHECK(text_of(sections[1].records[0]) == "fusee");

  CHECK(golden.batch2.prev_crc == golden.batch1.crc);
  check_batch(golden.segment, kBatch2Offset, golden.batch2, sections);
  REQUIRE(sections.size() == 1);
  CHECK(sections[0].header.shard == 0);
  CHECK(sections[0].header.first_lsn == 3);
  REQUIRE(sections[0].records.size() == 1);
  CHECK(text_of(sections[0].records[0]) == "again");

  // Everything after batch 2 is the preallocated zeros of an unused block.
  CHECK(all_zero(std::span(golden.segment).subspan(kBatch2Offset + kBlockBytes)));
}

TEST_CASE("recovery reads the golden segment as docs/log-format.md walks through it") {
  auto golden = build_golden();

  SUBCASE("whole: both batches form the chain and the next batch goes after them") {
    auto plan = plan_for(golden.segment);
    CHECK_FALSE(plan.refused);
    CHECK(plan.chain_batches == 2);
    CHECK(plan.first_sequence == 1);
    CHECK(plan.last_sequence == 2);
    CHECK(plan.last_crc == golden.batch2.crc);
    CHECK(plan.chain_records == 4);
    CHECK(plan.tail.empty());
    CHECK_FALSE(plan.ends_with_close);
    CHECK(plan.write_segment == 1);
    CHECK(plan.write_offset == kBatch2Offset + kBlockBytes);
    REQUIRE(plan.shards.size() == kShards);
    CHECK(plan.shards[0].first_lsn == 1);
    CHECK(plan.shards[0].last_lsn == 3);
    CHECK(plan.shards[1].first_lsn == 1);
    CHECK(plan.shards[1].last_lsn == 1);
  }

  SUBCASE("batch 2 torn: a torn tail, dropped without refusing") {
    auto segment = golden.segment;
    segment[kBatch2Offset + kBatchHeaderBytes + kSectionHeaderBytes + 1] ^= std::byte{0x20};  // "again" -> "Again"
    auto plan = plan_for(segment);
    CHECK_FALSE(plan.refused);
    CHECK(plan.chain_batches == 1);
    CHECK(plan.last_sequence == 1);
    CHECK(plan.write_offset == kBatch2Offset);
    CHECK(plan.tail.find("fails its checksum") != std::string::npos);
    CHECK(plan.stale_batches_past_end == 0);
  }

  SUBCASE("batch 1 damaged: batch 2 acknowledged it, so recovery refuses") {
    auto segment = golden.segment;
    segment[kBatch1Offset + kBatchHeaderBytes + kSectionHeaderBytes + 1] ^= std::byte{0x20};  // "hello" -> "Hello"
    auto plan = plan_for(segment);
    REQUIRE(plan.refused);
    CHECK(plan.refusal.find("batch sequence 2 at /data/wal/0000000001.seg offset 8192") != std::string::npos);
    CHECK(plan.refusal.find("an acknowledged batch was lost") != std::string::npos);
  }

  SUBCASE("batch 1 damaged, but batch 2 was sealed while it was in flight: nothing acknowledged is lost") {
    auto segment = build_golden(/*batch2_acked=*/0).segment;
    segment[kBatch1Offset + kBatchHeaderBytes + kSectionHeaderBytes + 1] ^= std::byte{0x20};
    auto plan = plan_for(segment);
    CHECK_FALSE(plan.refused);
    CHECK(plan.chain_batches == 0);
    CHECK(plan.write_offset == kBatch1Offset);
    CHECK(plan.stale_batches_past_end == 1);
  }

  SUBCASE("the next open rolls first: a roll marker in the reserved block, the batch in segment 2") {
    testing::FaultFileSystem fs;
    install(fs, golden.segment);
    constexpr std::uint64_t kNextLife = 0xb1b2b3b4b5b6b7b8ull;
    constexpr std::uint64_t kNextSalt = 0x99aabbccddeeff00ull;
    std::vector<std::uint64_t> draws = {kNextLife, kNextSalt};  // life at open, salt at the roll
    LogOptions options;
    options.dir = "/data";
    options.shard_count = kShards;
    options.segment_bytes = kSegmentBytes;
    options.random = [&draws] {  // runs on a log thread too: no doctest assertions here
      if (draws.empty()) return std::uint64_t{0};
      auto value = draws.front();
      draws.erase(draws.begin());
      return value;
    };
    options.warn = [](const std::string&) {};
    {
      auto log = Log::open(fs, options);
      REQUIRE(log.has_value());
      auto lsn = (*log)->append(1, bytes_of("next"));
      REQUIRE(lsn.has_value());
      CHECK(*lsn == 2);
      REQUIRE((*log)->wait_durable(1, 2).has_value());
    }
    CHECK(draws.empty());
    auto read = [&](const std::string& name, std::uint64_t offset) {
      std::vector<std::byte> block(kBlockBytes);
      auto file = fs.open("/data/wal/" + name, {});
      REQUIRE(file.has_value());
      auto got = (*file)->read_at(offset, block);
      REQUIRE(got.has_value());
      REQUIRE(*got == kBlockBytes);
      return block;
    };
    auto marker = decode_batch_header(read("0000000001.seg", kBatch2Offset + kBlockBytes));
    REQUIRE(marker);
    CHECK(marker->flags == kBatchFlagRoll);
    CHECK(marker->sequence == 3);
    CHECK(marker->prev_crc == golden.batch2.crc);
    CHECK(marker->life == kNextLife);
    auto next = decode_segment_header(read("0000000002.seg", 0));
    REQUIRE(next.status == SegmentHeaderStatus::valid);
    CHECK(next.header.first_sequence == 4);
    CHECK(next.header.prev_crc == marker->crc);
    CHECK(next.header.salt == kNextSalt);
    auto batch = decode_batch_header(read("0000000002.seg", kSegmentHeaderBytes));
    REQUIRE(batch);
    CHECK(batch->sequence == 4);
    CHECK(batch->prev_crc == marker->crc);
    CHECK(batch->flags == 0);
  }
}
}
