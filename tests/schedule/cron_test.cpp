// Cron expressions and schedule times: the fields cron takes and the ones
// it refuses, next times across months, leap years and the day-field rule,
// fixed intervals with offsets, ends, and daylight-saving changes in named
// zones (a skipped time is due once after the gap; a repeated one once, at
// its first occurrence).
#include <doctest/doctest.h>

#include <date/tz.h>

#include <string>
#include <vector>

#include "fusee/error.hpp"
#include "schedule/cron.hpp"
#include "schedule/schedule_times.hpp"
#include "tests/schedule/times_text.hpp"

using namespace fusee;
using namespace fusee::schedule;
using namespace fusee::schedule::testing;
using namespace std::chrono;

namespace {


// The next `count` wall-clock times after `from`.
std::vector<std::string> next_times(const std::string& expression, const std::string& from, int count) {
  auto cron = CronExpression::parse(expression);
  std::vector<std::string> out;
  auto at = local(from);
  for (int i = 0; i < count; ++i) {
    auto next = cron.next_after(at);
    if (!next) break;
    out.push_back(local_text(*next));
    at = *next;
  }
  return out;
}

std::string refusal(const std::string& expression) {
  try {
    (void)CronExpression::parse(expression);
  } catch (const Error& error) {
    CHECK(error.error() == errc::invalid_argument);
    return error.what();
  }
  FAIL("'" << expression << "' was taken");
  return "";
}

// The next `count` due times of a spec after `from` (UTC text).
std::vector<std::string> due_times(const TimesSpec& spec, const std::string& from, int count) {
  ScheduleTimes times(spec);
  std::vector<std::string> out;
  auto at = utc(from);
  for (int i = 0; i < count; ++i) {
    auto next = times.next_after(at);
    if (!next) break;
    out.push_back(utc_text(*next));
    at = *next;
  }
  return out;
}

TimesSpec cron_in(const std::string& expression, const std::string& zone) {
  TimesSpec spec;
  spec.cron = expression;
  spec.time_zone = zone;
  return spec;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("cron: fields, ranges, steps, lists and names") {
  CHECK(next_times("*/15 * * * *", "2026-01-01 00:07:00", 3) ==
        std::vector<std::string>{"2026-01-01 00:15:00", "2026-01-01 00:30:00", "2026-01-01 00:45:00"});
  CHECK(next_times("0 9-17/4 * * MON-FRI", "2026-01-02 12:00:00", 4) ==  // a Friday
        std::vector<std::string>{"2026-01-02 13:00:00", "2026-01-02 17:00:00", "2026-01-05 09:00:00",
                                 "2026-01-05 13:00:00"});
  CHECK(next_times("30 8 1,15 jan,Jul *", "2026-01-15 08:30:00", 3) ==
        std::vector<std::string>{"2026-07-01 08:30:00", "2026-07-15 08:30:00", "2027-01-01 08:30:00"});
  CHECK(next_times("5/20 0 1 1 *", "2026-01-01 00:00:00", 3) ==
        std::vector<std::string>{"2026-01-01 00:05:00", "2026-01-01 00:25:00", "2026-01-01 00:45:00"});
  // Six fields: seconds first.
  CHECK(next_times("*/20 0 12 * * *", "2026-05-01 12:00:30", 3) ==
        std::vector<std::string>{"2026-05-01 12:00:40", "2026-05-02 12:00:00", "2026-05-02 12:00:20"});
  // 7 is Sunday, as 0 is.
  CHECK(next_times("0 0 * * 7", "2026-01-01 00:00:00", 1) == next_times("0 0 * * 0", "2026-01-01 00:00:00", 1));
  CHECK(next_times("0 0 * * 7", "2026-01-01 00:00:00", 1) == std::vector<std::string>{"2026-01-04 00:00:00"});
  CHECK(next_times("@hourly", "2026-01-01 10:59:59", 1) == std::vector<std::string>{"2026-01-01 11:00:00"});
  CHECK(next_times("@weekly", "2026-01-01 00:00:00", 1) == std::vector<std::string>{"2026-01-04 00:00:00"});
  CHECK(next_times("@yearly", "2026-06-01 00:00:00", 1) == std::vector<std::string>{"2027-01-01 00:00:00"});
}

TEST_CASE("cron: the day fields, leap years and expressions that never match") {
  // Both day fields restricted: either one will do (the 13th, or a Friday).
  CHECK(next_times("0 0 13 * 5", "2026-02-01 00:00:00", 3) ==
        std::vector<std::string>{"2026-02-06 00:00:00", "2026-02-13 00:00:00", "2026-02-20 00:00:00"});
  // One restricted: that one alone ('?' is '*').
  CHECK(next_times("0 0 13 * ?", "2026-02-01 00:00:00", 2) ==
        std::vector<std::string>{"2026-02-13 00:00:00", "2026-03-13 00:00:00"});
  CHECK(next_times("0 12 29 2 *", "2026-01-01 00:00:00", 2) ==
        std::vector<std::string>{"2028-02-29 12:00:00", "2032-02-29 12:00:00"});
  CHECK(next_times("0 0 31 * *", "2026-04-01 00:00:00", 2) ==
        std::vector<std::string>{"2026-05-31 00:00:00", "2026-07-31 00:00:00"});
  CHECK(next_times("0 0 30 2 *", "2026-01-01 00:00:00", 1).empty());
}

TEST_CASE("cron: expressions cron does not take are refused, saying why") {
  CHECK(refusal("* * * *").find("has 4 fields") != std::string::npos);
  CHECK(refusal("* * * * * * *").find("has 7 fields") != std::string::npos);
  CHECK(refusal("60 * * * *").find("minute field '60' is out of range (0 to 59)") != std::string::npos);
  CHECK(refusal("* 24 * * *").find("hour field") != std::string::npos);
  CHECK(refusal("* * 0 * *").find("day of month field '0' is out of range (1 to 31)") != std::string::npos);
  CHECK(refusal("* * * 13 *").find("month field") != std::string::npos);
  CHECK(refusal("* * * * 8").find("day of week field") != std::string::npos);
  CHECK(refusal("* * * FOO *").find("is not a number or a name") != std::string::npos);
  CHECK(refusal("*/0 * * * *").find("step that is not a positive number") != std::string::npos);
  CHECK(refusal("5-1 * * * *").find("runs backwards") != std::string::npos);
  CHECK(refusal("1,,2 * * * *").find("empty list item") != std::string::npos);
  CHECK(refusal("? * * * *").find("may not be '?'") != std::string::npos);
  CHECK(refusal("@fortnightly").find("not a macro") != std::string::npos);
  CHECK(refusal("").find("has 0 fields") != std::string::npos);
}

TEST_CASE("schedule times: a cron expression in UTC and in a zone with a fixed offset") {
  CHECK(due_times(cron_in("0 9 * * *", "UTC"), "2026-01-01 09:00:00", 2) ==
        std::vector<std::string>{"2026-01-02 09:00:00", "2026-01-03 09:00:00"});
  // Tokyo has no daylight-saving time: 09:00 there is 00:00 UTC.
  CHECK(due_times(cron_in("0 9 * * *", "Asia/Tokyo"), "2026-07-01 00:00:00", 2) ==
        std::vector<std::string>{"2026-07-02 00:00:00", "2026-07-03 00:00:00"});
}

TEST_CASE("schedule times: spring forward -- a skipped wall-clock time is due once, when the gap ends") {
  // Europe/Paris, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
  CHECK(due_times(cron_in("30 2 * * *", "Europe/Paris"), "2026-03-27 12:00:00", 3) ==
        std::vector<std::string>{"2026-03-28 01:30:00",    // 02:30 CET
                                 "2026-03-29 01:00:00",    // 02:30 does not exist: 03:00 CEST
                                 "2026-03-30 00:30:00"});  // 02:30 CEST
  // Every 30 minutes through the gap: 01:30 CET, then the gap's end once, then on.
  CHECK(due_times(cron_in("*/30 * * * *", "Europe/Paris"), "2026-03-29 00:00:00", 4) ==
        std::vector<std::string>{"2026-03-29 00:30:00", "2026-03-29 01:00:00", "2026-03-29 01:30:00",
                                 "2026-03-29 02:00:00"});
  // America/New_York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
  CHECK(due_times(cron_in("15 2 * * *", "America/New_York"), "2026-03-07 12:00:00", 2) ==
        std::vector<std::string>{"2026-03-08 07:00:00", "2026-03-09 06:15:00"});
}

TEST_CASE("schedule times: fall back -- a repeated wall-clock time is due once, at its first occurrence") {
  // Europe/Paris, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC);
  // 02:00-03:00 happens twice.
  CHECK(due_times(cron_in("30 2 * * *", "Europe/Paris"), "2026-10-24 12:00:00", 3) ==
        std::vector<std::string>{"2026-10-25 00:30:00",    // 02:30 CEST, the first
                                 "2026-10-26 01:30:00",    // 02:30 CET
                                 "2026-10-27 01:30:00"});
  // Hourly at :30 -- the repeated 02:30 is not due again.
  CHECK(due_times(cron_in("30 * * * *", "Europe/Paris"), "2026-10-24 23:00:00", 4) ==
        std::vector<std::string>{"2026-10-24 23:30:00",    // 01:30 CEST
                                 "2026-10-25 00:30:00",    // 02:30 CEST
                                 "2026-10-25 02:30:00",    // 03:30 CET
                                 "2026-10-25 03:30:00"});
  // A search that starts inside the repeated hour finds no time twice.
  CHECK(due_times(cron_in("30 2 * * *", "Europe/Paris"), "2026-10-25 01:10:00", 1) ==
        std::vector<std::string>{"2026-10-26 01:30:00"});
}

TEST_CASE("schedule times: a fixed interval with an offset, and an end") {
  TimesSpec spec;
  spec.every = minutes(10);
  spec.offset = minutes(3);
  CHECK(due_times(spec, "2026-01-01 00:00:00", 3) ==
        std::vector<std::string>{"2026-01-01 00:03:00", "2026-01-01 00:13:00", "2026-01-01 00:23:00"});
  CHECK(due_times(spec, "2026-01-01 00:03:00", 1) == std::vector<std::string>{"2026-01-01 00:13:00"});
  spec.end = utc("2026-01-01 00:13:00");
  CHECK(due_times(spec, "2026-01-01 00:00:00", 3) ==
        std::vector<std::string>{"2026-01-01 00:03:00", "2026-01-01 00:13:00"});
  ScheduleTimes times(spec);
  CHECK(times.between(utc("2025-12-31 23:50:00"), utc("2026-01-02 00:00:00"), 10).size() == 3);  // 23:53, 00:03, 00:13
  spec.end.reset();
  CHECK(ScheduleTimes(spec).between(utc("2026-01-01 00:00:00"), utc("2026-01-01 01:00:00"), 4).size() == 4);
}

TEST_CASE("schedule times: specs that are not one are refused") {
  auto refused = [](const TimesSpec& spec) {
    try {
      ScheduleTimes times(spec);
    } catch (const Error& error) {
      CHECK(error.error() == errc::invalid_argument);
      return std::string(error.what());
    }
    FAIL("the spec was taken");
    return std::string();
  };
  CHECK(refused(TimesSpec{}).find("one of them") != std::string::npos);
  TimesSpec both = cron_in("* * * * *", "UTC");
  both.every = seconds(5);
  CHECK(refused(both).find("one of them") != std::string::npos);
  CHECK(refused(cron_in("* * * * *", "Mars/Olympus_Mons")).find("not in the system's zoneinfo") != std::string::npos);
  TimesSpec offset;
  offset.every = seconds(5);
  offset.offset = seconds(5);
  CHECK(refused(offset).find("below its interval") != std::string::npos);
}
}
