// The window of ids a run carries into its next generation
// (engine/remembered.hpp): bounded by count, age and bytes, newest kept;
// its JSON round-trips and a damaged one is refused; a reset remembers the
// answers given past its cut.
#include <doctest/doctest.h>

#include <string>

#include "engine/remembered.hpp"
#include "wal/errc.hpp"

using namespace fusee::engine;

namespace {

constexpr std::int64_t kNowMs = 1'800'000'000'000;
constexpr std::int64_t kHourMs = 3'600'000;

Remembered::Answer answer(const std::string& key, std::int64_t at_ms, std::size_t value_bytes = 8) {
  return Remembered::Answer{key, "buy", answer_json(true, boost::json::value(std::string(value_bytes, 'v')), "", ""),
                            at_ms};
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("the remembered window keeps the newest of each kind, by count and age") {
  Remembered window;
  for (int k = 0; k < 1500; ++k) {
    window.signals.push_back(Remembered::Signal{"s-" + std::to_string(k), kNowMs - 1500 + k});
    window.updates.push_back(answer("u-" + std::to_string(k), kNowMs - 1500 + k));
  }
  window.awakeables.push_back(answer("old", kNowMs - 25 * kHourMs));  // past the day
  window.awakeables.push_back(answer("new", kNowMs - 23 * kHourMs));
  window.bound(kNowMs);
  REQUIRE(window.signals.size() == kRememberedPerKindMax);
  REQUIRE(window.updates.size() == kRememberedPerKindMax);
  CHECK(window.signals.front().id == "s-1499");  // newest first
  CHECK(window.signals.back().id == "s-500");
  CHECK(window.updates.back().key == "u-500");
  REQUIRE(window.awakeables.size() == 1);
  CHECK(window.awakeables.front().key == "new");
}

TEST_CASE("past its byte budget the window drops its oldest answers first") {
  Remembered window;
  for (int k = 0; k < 10; ++k) window.updates.push_back(answer("u-" + std::to_string(k), kNowMs - 100 + k, 200'000));
  window.signals.push_back(Remembered::Signal{"kept", kNowMs - 1000});
  window.bound(kNowMs);
  CHECK(boost::json::serialize(window.to_json()).size() <= kRememberedBytesMax);
  REQUIRE(window.updates.size() >= 4);
  REQUIRE(window.updates.size() < 10);
  CHECK(window.updates.front().key == "u-9");  // the newest stayed
  CHECK(window.signals.size() == 1);           // ids are cheap: they stay
}

TEST_CASE("the remembered window round-trips through JSON, and a damaged one is refused") {
  Remembered window;
  window.signals.push_back(Remembered::Signal{"s", 5});
  window.updates.push_back(answer("u", 6));
  window.awakeables.push_back(Remembered::Answer{"secret", "paid", answer_json(false, nullptr, "failed", "no"), 7});
  auto back = Remembered::from_json(window.to_json());
  REQUIRE(back.has_value());
  CHECK(boost::json::serialize(back->to_json()) == boost::json::serialize(window.to_json()));
  const auto corrupt = make_error_code(fusee::wal::errc::corrupt);
  for (const char* damaged :
       {R"([])", R"({"signals": {}})", R"({"signals": [["s"]]})", R"({"signals": [[1, 2]]})",
        R"({"updates": [{"key": "u", "name": "n", "answer": {"value": 1}, "at_ms": 1}]})",
        R"({"updates": [{"key": "u", "name": "n", "answer": {"ok": true}}]})", R"({"awakeables": [7]})"}) {
    auto refused = Remembered::from_json(boost::json::parse(damaged));
    REQUIRE_MESSAGE(!refused.has_value(), damaged);
    CHECK(refused.error() == corrupt);
  }
}

TEST_CASE("a reset remembers the answers given past its cut, and every signal id") {
  auto record = [](RecordKind kind, std::uint32_t position, const std::string& name, const std::string& detail) {
    JournalRecord out;
    out.kind = kind;
    out.position = position;
    out.name = name;
    out.detail = detail;
    out.at_ms = kNowMs;
    out.flag = true;
    return out;
  };
  std::vector<JournalRecord> records;
  records.push_back(record(RecordKind::run_started, 0, "shop", "1"));
  records.push_back(record(RecordKind::signal_received, 0, "go", "go-1"));
  records.push_back(record(RecordKind::update_answered, 1, "buy", "before"));
  records.push_back(record(RecordKind::awakeable_created, 2, "paid", "s-before"));
  records.push_back(record(RecordKind::awakeable_completed, 2, "paid", ""));
  records.push_back(record(RecordKind::update_answered, 3, "buy", "after"));
  records.push_back(record(RecordKind::awakeable_created, 4, "paid", "s-after"));
  records.push_back(record(RecordKind::awakeable_completed, 4, "paid", ""));
  auto remembered = remembered_of_records(records, 3);
  REQUIRE(remembered.signals.size() == 1);
  CHECK(remembered.signals[0].id == "go-1");
  REQUIRE(remembered.updates.size() == 1);
  CHECK(remembered.updates[0].key == "after");
  REQUIRE(remembered.awakeables.size() == 1);
  CHECK(remembered.awakeables[0].key == "s-after");
}
}
