// The log's byte format: varints, segment and batch headers, sections.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "wal/batch_builder.hpp"
#include "wal/log_format.hpp"

using namespace fusee::wal;

namespace {
std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}
}  // namespace

TEST_SUITE("unit") {
TEST_CASE("varints round-trip at every length boundary and reject non-canonical forms") {
  for (std::uint64_t value : {0ull, 1ull, 127ull, 128ull, 16383ull, 16384ull, (1ull << 35) - 1, ~0ull}) {
    std::byte buffer[kVarintBytesMax];
    auto length = encode_varint(value, buffer);
    CHECK(length == varint_length(value));
    auto decoded = decode_varint({buffer, length});
    REQUIRE(decoded);
    CHECK(decoded->value == value);
    CHECK(decoded->length == length);
    if (length > 1) CHECK_FALSE(decode_varint({buffer, length - 1}));  // truncated
  }
  std::byte redundant[2] = {std::byte{0x81}, std::byte{0x00}};
  CHECK_FALSE(decode_varint(redundant));
  std::byte too_long[11];
  std::memset(too_long, 0xff, sizeof too_long);
  CHECK_FALSE(decode_varint(too_long));
}

TEST_CASE("a segment header round-trips, and any flipped bit makes it damaged") {
  SegmentHeader header{7, 0x1122334455667788ull, 42, 1 << 20, 0xdeadbeef};
  std::vector<std::byte> block(kSegmentHeaderBytes);
  encode_segment_header(header, block);
  auto decoded = decode_segment_header(block);
  REQUIRE(decoded.status == SegmentHeaderStatus::valid);
  CHECK(decoded.header == header);
  for (std::size_t bit = 0; bit < kSegmentHeaderUsedBytes * 8; ++bit) {
    auto copy = block;
    copy[bit / 8] ^= std::byte(1u << (bit % 8));
    CHECK(decode_segment_header(copy).status == SegmentHeaderStatus::damaged);
  }
  auto tail_flip = block;
  tail_flip[kSegmentHeaderBytes - 1] = std::byte{1};
  CHECK(decode_segment_header(tail_flip).status == SegmentHeaderStatus::damaged);
  std::vector<std::byte> zeros(kSegmentHeaderBytes);
  CHECK(decode_segment_header(zeros).status == SegmentHeaderStatus::zeroed);
}

TEST_CASE("a sealed batch verifies with its salt and fails with another salt or any flipped bit") {
  std::vector<ShardStage> stages(2);
  auto a = bytes_of("alpha");
  auto b = bytes_of("beta-record");
  stages[0].push(a);
  stages[1].push(b);
  stages[1].push(a);
  auto plan = plan_batch(stages, 0, kBlockBytes * 4, 1 << 20);
  REQUIRE(plan.sections.size() == 2);
  auto total = batch_total_bytes(plan.body_bytes);
  CHECK(total == kBlockBytes);
  std::vector<std::byte> batch(total);
  encode_sections(plan, stages, std::span(batch).subspan(kBatchHeaderBytes, plan.body_bytes));
  BatchHeader header{0, total, plan.body_bytes, 5, 0xabcdef01, 0, 4, 99, 2};
  encode_batch_header(header, batch);
  auto crc = seal_batch(1234, batch, plan.body_bytes);
  auto decoded = decode_batch_header(batch);
  REQUIRE(decoded);
  header.crc = crc;
  CHECK(*decoded == header);
  CHECK(batch_crc(1234, batch, plan.body_bytes) == crc);
  CHECK(batch_crc(1235, batch, plan.body_bytes) != crc);
  for (std::size_t bit = 8 * 8; bit < (kBatchHeaderBytes + plan.body_bytes) * 8; ++bit) {
    auto copy = batch;
    copy[bit / 8] ^= std::byte(1u << (bit % 8));
    CHECK(batch_crc(1234, copy, plan.body_bytes) != crc);
  }
  std::vector<SectionView> sections;
  auto error = decode_body(std::span(batch).subspan(kBatchHeaderBytes, plan.body_bytes), 2, sections);
  REQUIRE_FALSE(error);
  REQUIRE(sections.size() == 2);
  CHECK(sections[0].header.shard == 0);
  CHECK(sections[0].header.first_lsn == 1);
  REQUIRE(sections[1].records.size() == 2);
  CHECK(std::memcmp(sections[1].records[0].data(), "beta-record", 11) == 0);
}

TEST_CASE("batch headers with impossible fields are not batches") {
  std::vector<std::byte> block(kBlockBytes);
  BatchHeader header{0, kBlockBytes, 0, 3, 0, 0, 2, 1, 0};
  encode_batch_header(header, block);
  CHECK(decode_batch_header(block));
  auto with = [&](std::size_t offset, std::uint32_t value) {
    auto copy = block;
    store_u32(copy.data() + offset, value);
    return decode_batch_header(copy).has_value();
  };
  CHECK_FALSE(with(batch_header_offset::magic, 0));
  CHECK_FALSE(with(batch_header_offset::total_length, kBlockBytes + 1));
  CHECK_FALSE(with(batch_header_offset::total_length, 0));
  CHECK_FALSE(with(batch_header_offset::body_length, kBlockBytes));
  CHECK_FALSE(with(batch_header_offset::flags, 1u << 7));
  CHECK_FALSE(with(batch_header_offset::acked, 3));  // acks its own sequence
}

TEST_CASE("a body whose lengths disagree does not decode") {
  std::vector<ShardStage> stages(1);
  auto a = bytes_of("0123456789");
  stages[0].push(a);
  auto plan = plan_batch(stages, 0, kBlockBytes, 1 << 20);
  std::vector<std::byte> body(plan.body_bytes);
  encode_sections(plan, stages, body);
  std::vector<SectionView> sections;
  CHECK_FALSE(decode_body(body, 1, sections));
  CHECK(decode_body(body, 2, sections));  // a section count too high
  auto longer = body;
  longer.push_back(std::byte{0});
  CHECK(decode_body(longer, 1, sections));  // trailing bytes
  auto bad_count = body;
  store_u32(bad_count.data() + section_header_offset::record_count, 2);
  CHECK(decode_body(bad_count, 1, sections));
  auto bad_length = body;
  bad_length[kSectionHeaderBytes] = std::byte{22};  // an 11-byte record in a 10-byte section
  CHECK(decode_body(bad_length, 1, sections));
  auto bad_reference = body;
  bad_reference[kSectionHeaderBytes] = std::byte{21};  // a 10-byte "blob reference"
  CHECK(decode_body(bad_reference, 1, sections));
}
}
