// The kept journal's stored form: records in and out in order, the JSON
// text earlier builds stored still read, and a damaged one refused rather
// than read in part.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/journal_json.hpp"
#include "engine/kept_journal.hpp"
#include "wal/errc.hpp"

using namespace fusee::engine;

namespace {

std::vector<JournalRecord> sample_records() {
  JournalRecord started;
  started.kind = RecordKind::run_started;
  started.run_id = "order-7";
  started.generation = 1;
  started.name = "order";
  started.value = boost::json::parse(R"({"amount": 12, "note": "a\u0000b"})");
  started.at_ms = 1'800'000'000'000;
  JournalRecord step;
  step.kind = RecordKind::step_completed;
  step.run_id = "order-7";
  step.generation = 1;
  step.position = 0;
  step.name = "charge";
  step.value = "ch_1";
  step.at_ms = 1'800'000'000'001;
  step.took_us = 35;
  JournalRecord ended;
  ended.kind = RecordKind::run_completed;
  ended.run_id = "order-7";
  ended.generation = 1;
  ended.position = 1;
  ended.value = boost::json::parse(R"({"ok": true})");
  ended.at_ms = 1'800'000'000'002;
  return {started, step, ended};
}

KeptJournal kept_of(const std::vector<JournalRecord>& records) {
  KeptJournal kept;
  for (const auto& record : records) kept.add(encode_record(record));
  return kept;
}

bool corrupt(const fusee::Result<std::vector<JournalRecord>>& read) {
  return !read && read.error() == make_error_code(fusee::wal::errc::corrupt);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("a kept journal gives back its records in order, from the run and from its stored form") {
    auto records = sample_records();
    auto kept = kept_of(records);
    CHECK(kept.stored().front() == kKeptJournalBinary);
    auto back = kept.records();
    REQUIRE(back.has_value());
    CHECK(*back == records);
    auto stored = records_of_kept_journal(kept.stored());
    REQUIRE(stored.has_value());
    CHECK(*stored == records);
    CHECK(journal_json(*stored) == journal_json(records));
  }

  TEST_CASE("an empty kept journal has no records, and nothing is stored for it") {
    KeptJournal kept;
    CHECK(kept.empty());
    CHECK(kept.stored().empty());
    auto back = kept.records();
    REQUIRE(back.has_value());
    CHECK(back->empty());
  }

  TEST_CASE("a journal stored as JSON text, as earlier builds stored it, still reads") {
    auto records = sample_records();
    auto text = journal_json(records);
    REQUIRE(text.front() == '{');
    auto read = records_of_kept_journal(text);
    REQUIRE(read.has_value());
    REQUIRE(read->size() == records.size());
    CHECK(journal_json(*read) == text);
  }

  TEST_CASE("a damaged kept journal is refused whole, never read in part") {
    auto stored = kept_of(sample_records()).stored();
    SUBCASE("cut inside a record") { CHECK(corrupt(records_of_kept_journal(stored.substr(0, stored.size() - 3)))); }
    SUBCASE("cut inside a length") {
      auto first_length = std::string_view(stored).substr(1, 4);
      auto first = static_cast<std::size_t>(static_cast<unsigned char>(first_length[0])) |
                   static_cast<std::size_t>(static_cast<unsigned char>(first_length[1])) << 8;
      CHECK(corrupt(records_of_kept_journal(stored.substr(0, 1 + 4 + first + 2))));
    }
    SUBCASE("a length past the end") {
      auto damaged = stored;
      damaged[4] = static_cast<char>(0x7f);  // the first length's high byte
      CHECK(corrupt(records_of_kept_journal(damaged)));
    }
    SUBCASE("a record that does not decode") {
      auto damaged = stored;
      damaged[5] = static_cast<char>(0x63);  // the first record's format version
      CHECK(corrupt(records_of_kept_journal(damaged)));
    }
    SUBCASE("JSON that is not a journal") { CHECK(corrupt(records_of_kept_journal(R"({"not": "a journal"})"))); }
    SUBCASE("neither form") { CHECK(corrupt(records_of_kept_journal("garbage"))); }
  }
}
