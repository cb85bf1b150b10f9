// The journal record codec: the documented bytes, round trips of every kind,
// and refusal of malformed records.
#include <doctest/doctest.h>

#include "engine/journal_record.hpp"

using namespace fusee::engine;

namespace {
std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int value : values) out.push_back(static_cast<std::byte>(value));
  return out;
}
}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("a step_completed record encodes to the bytes docs/journal-format.md shows") {
    JournalRecord record;
    record.kind = RecordKind::step_completed;
    record.run_id = "r1";
    record.generation = 1;
    record.position = 1;
    record.name = "two";
    record.value = 12;
    record.at_ms = 1'800'000'000'000;
    record.took_us = 300;
    auto expected = bytes_of({0x02, 0x02, 0x01, 0x01, 0x00, 0x00, 0x80, 0xc0, 0xe2, 0x85, 0xe3, 0x68, 0xac, 0x02,
                              0x00, 0x02, 0x72, 0x31, 0x03, 0x74, 0x77, 0x6f, 0x00, 0x00, 0x31, 0x32});
    CHECK(encode_record(record) == expected);
    auto decoded = decode_record(expected);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == record);
  }

  TEST_CASE("a version 1 record (before at_ms and took_us) still decodes, with both 0") {
    // The same step_completed as written before version 2.
    auto old = bytes_of({0x01, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x02, 0x72, 0x31, 0x03, 0x74, 0x77, 0x6f, 0x00,
                         0x31, 0x32});
    auto decoded = decode_record(old);
    REQUIRE(decoded.has_value());
    CHECK(decoded->kind == RecordKind::step_completed);
    CHECK(decoded->run_id == "r1");
    CHECK(decoded->name == "two");
    CHECK(decoded->value == boost::json::value(12));
    CHECK(decoded->at_ms == 0);
    CHECK(decoded->took_us == 0);
  }

  TEST_CASE("every record kind survives a round trip, with negative times and large numbers") {
    for (std::uint8_t kind = 1; kind <= kRecordKindMax; ++kind) {
      JournalRecord record;
      record.kind = static_cast<RecordKind>(kind);
      record.run_id = "order-" + std::to_string(kind);
      record.generation = 4'000'000'000u;
      record.position = kind * 1000;
      record.number = ~std::uint64_t{0};
      record.time_ms = kind % 2 ? -1 : 1'800'000'000'000;
      record.at_ms = kind % 2 ? 1'800'000'000'123 : -5;
      record.took_us = kind * 1'000'000'007ull;
      record.flag = kind % 3 == 0;
      record.name = "name";
      record.detail = kind % 2 ? "" : "detail";
      record.parent = kind % 2 ? "parent-run" : "";
      record.value = boost::json::parse(R"({"a":[1,2.5,"x",null,true],"b":{}})");
      auto decoded = decode_record(encode_record(record));
      REQUIRE(decoded.has_value());
      CHECK(*decoded == record);
    }
  }

  TEST_CASE("malformed records are refused, never half-read") {
    JournalRecord record;
    record.kind = RecordKind::signal_received;
    record.run_id = "r";
    record.name = "go";
    record.value = "yes";
    auto good = encode_record(record);
    // Every truncation inside the fixed fields and strings is refused.
    for (std::size_t size = 0; size < good.size() - 5; ++size) {
      CHECK_FALSE(decode_record(std::span(good).first(size)).has_value());
    }
    auto bad_version = good;
    bad_version[0] = std::byte{kJournalFormatVersion + 1};
    CHECK_FALSE(decode_record(bad_version).has_value());
    bad_version[0] = std::byte{0};
    CHECK_FALSE(decode_record(bad_version).has_value());
    auto bad_kind = good;
    bad_kind[1] = std::byte{kRecordKindMax + 1};
    CHECK_FALSE(decode_record(bad_kind).has_value());
    auto bad_json = good;
    bad_json.back() = std::byte{'{'};
    CHECK_FALSE(decode_record(bad_json).has_value());
  }
}
