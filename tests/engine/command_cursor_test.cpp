// CommandCursor: records filed by position in any order, gaps, damage far
// ahead, the code's next position, and a command that completes within its
// own call.
#include <doctest/doctest.h>

#include "engine/command_cursor.hpp"
#include "wal/errc.hpp"

using namespace fusee;
using engine::CommandCursor;
using engine::JournalRecord;
using engine::RecordKind;

namespace {

JournalRecord record(RecordKind kind, std::uint32_t position, std::string name) {
  JournalRecord r;
  r.kind = kind;
  r.position = position;
  r.name = std::move(name);
  return r;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("command cursor: records are filed by position in any order, a gap holds nothing") {
  CommandCursor cursor;
  CHECK(cursor.recorded(0) == nullptr);
  CHECK_FALSE(cursor.journal_goes_on());
  CHECK_FALSE(cursor.recorded_from_next());
  // Commands started together complete in any order: 2 before 0, 1 in flight.
  REQUIRE(cursor.file(2, record(RecordKind::step_started, 2, "c")));
  REQUIRE(cursor.file(0, record(RecordKind::step_started, 0, "a")));
  REQUIRE(cursor.file(0, record(RecordKind::step_completed, 0, "a")));
  REQUIRE(cursor.recorded(0) != nullptr);
  CHECK(cursor.recorded(0)->records.size() == 2);
  CHECK(cursor.recorded(0)->records.back().kind == RecordKind::step_completed);
  CHECK(cursor.recorded(1) == nullptr);
  REQUIRE(cursor.recorded(2) != nullptr);
  CHECK(cursor.recorded(2)->records.front().name == "c");
  CHECK(cursor.recorded(3) == nullptr);
  CHECK(cursor.journal_goes_on());
  CHECK(cursor.recorded_from_next() == 0u);
}

TEST_CASE("command cursor: a position far past every recorded one is damage, and files nothing") {
  CommandCursor cursor;
  auto far = cursor.file(CommandCursor::kPositionsAheadMax, record(RecordKind::step_started, 0, "x"));
  REQUIRE_FALSE(far);
  CHECK(far.error() == make_error_code(wal::errc::corrupt));
  CHECK_FALSE(cursor.journal_goes_on());
  REQUIRE(cursor.file(CommandCursor::kPositionsAheadMax - 1, record(RecordKind::step_started, 0, "y")));
  CHECK(cursor.journal_goes_on());
  // The bound moves with the journal.
  CHECK(cursor.file(2 * CommandCursor::kPositionsAheadMax - 1, record(RecordKind::step_started, 0, "z")));
  CHECK_FALSE(cursor.file(3 * CommandCursor::kPositionsAheadMax, record(RecordKind::step_started, 0, "w")));
}

TEST_CASE("command cursor: commands take the positions in order, and a skip takes one without a command") {
  CommandCursor cursor;
  REQUIRE(cursor.file(1, record(RecordKind::patch_marked, 1, "p")));
  REQUIRE(cursor.file(4, record(RecordKind::step_started, 4, "late")));
  detail::Completion first, second;
  CHECK(cursor.begin(first) == 0u);
  CHECK(first.position == 0u);
  CHECK(cursor.in_command());
  CHECK_FALSE(cursor.end());
  CHECK_FALSE(cursor.in_command());
  CHECK(cursor.next() == 1u);
  cursor.skip();  // the patch marker's position
  CHECK(cursor.begin(second) == 2u);
  CHECK(second.position == 2u);
  cursor.end();
  // The code is at 3; the journal still has position 4 (divergence if the
  // code returned now), and goes on.
  CHECK(cursor.recorded_from_next() == 4u);
  CHECK(cursor.journal_goes_on());
  cursor.forget();
  CHECK(cursor.recorded(4) == nullptr);
  CHECK_FALSE(cursor.recorded_from_next());
  CHECK(cursor.next() == 3u);  // forgetting the journal keeps the code's place
}

TEST_CASE("command cursor: only the command whose call is under way completes within its call") {
  CommandCursor cursor;
  detail::Completion started_earlier, current;
  cursor.begin(started_earlier);
  cursor.end();
  cursor.begin(current);
  CHECK_FALSE(cursor.completes_in_call(started_earlier));  // another command: resumes its awaiter later
  CHECK(cursor.completes_in_call(current));
  CHECK(cursor.end());
  // Outside any call nothing completes "within" one, and end() forgets it.
  CHECK_FALSE(cursor.completes_in_call(current));
  detail::Completion later;
  cursor.begin(later);
  CHECK_FALSE(cursor.end());
}
}
