// A schedule waking after downtime: which due times it fires (the latest
// `catch_up`), which it lets pass, its runs' ids and jitter.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "schedule/due_plan.hpp"
#include "tests/schedule/times_text.hpp"

using namespace fusee;
using namespace fusee::schedule;
using namespace fusee::schedule::testing;
using namespace std::chrono;

namespace {

ScheduleTimes every_minute() {
  TimesSpec spec;
  spec.cron = "* * * * *";
  return ScheduleTimes(spec);
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("due plan: awake on time, a schedule fires the one due time") {
  auto plan = plan_due(every_minute(), utc("2026-01-01 10:00:00"), utc("2026-01-01 10:01:00"), 1);
  CHECK(utc_texts(plan.fire) == std::vector<std::string>{"2026-01-01 10:01:00"});
  CHECK_FALSE(plan.missed_from.has_value());
  CHECK(plan_due(every_minute(), utc("2026-01-01 10:00:00"), utc("2026-01-01 10:00:59"), 1).fire.empty());
}

TEST_CASE("due plan: after downtime, the latest catch_up due times fire and the rest are let pass") {
  // Down from 10:00 to 13:00:30: 180 due times.
  auto plan = plan_due(every_minute(), utc("2026-01-01 10:00:00"), utc("2026-01-01 13:00:30"), 3);
  CHECK(utc_texts(plan.fire) == std::vector<std::string>{"2026-01-01 12:58:00", "2026-01-01 12:59:00", "2026-01-01 13:00:00"});
  REQUIRE(plan.missed_from.has_value());
  CHECK(utc_text(*plan.missed_from) == "2026-01-01 10:01:00");
  CHECK(utc_text(*plan.missed_to) == "2026-01-01 12:57:00");
  // A window wider than the downtime: everything fires.
  auto all = plan_due(every_minute(), utc("2026-01-01 10:00:00"), utc("2026-01-01 10:05:00"), 100);
  CHECK(all.fire.size() == 5);
  CHECK_FALSE(all.missed_from.has_value());
  // catch_up 0: nothing fires, everything passes.
  auto none = plan_due(every_minute(), utc("2026-01-01 10:00:00"), utc("2026-01-01 10:05:00"), 0);
  CHECK(none.fire.empty());
  CHECK(utc_text(*none.missed_from) == "2026-01-01 10:01:00");
  CHECK(utc_text(*none.missed_to) == "2026-01-01 10:05:00");
}

TEST_CASE("due plan: a long downtime of a sparse schedule") {
  TimesSpec spec;
  spec.cron = "0 9 1 * *";  // monthly
  ScheduleTimes monthly(spec);
  auto plan = plan_due(monthly, utc("2020-01-01 09:00:00"), utc("2026-06-15 00:00:00"), 2);
  CHECK(utc_texts(plan.fire) == std::vector<std::string>{"2026-05-01 09:00:00", "2026-06-01 09:00:00"});
  CHECK(utc_text(*plan.missed_from) == "2020-02-01 09:00:00");
  CHECK(utc_text(*plan.missed_to) == "2026-04-01 09:00:00");
}

TEST_CASE("due plan: run ids name the schedule and the due time; jitter is fixed by both") {
  CHECK(run_id_of("nightly", utc("2026-03-29 01:00:00")) == "nightly@2026-03-29T01:00:00.000Z");
  const auto due = utc("2026-03-29 01:00:00");
  const auto jitter = jitter_of("nightly", due, seconds(30));
  CHECK(jitter == jitter_of("nightly", due, seconds(30)));  // the same every time it is computed
  CHECK(jitter >= milliseconds(0));
  CHECK(jitter < seconds(30));
  CHECK(jitter_of("nightly", due, milliseconds(0)) == milliseconds(0));
  // Spread over due times and schedules rather than one value.
  std::vector<milliseconds> seen;
  for (int minute = 0; minute < 20; ++minute) seen.push_back(jitter_of("nightly", due + minutes(minute), seconds(30)));
  std::sort(seen.begin(), seen.end());
  CHECK(std::unique(seen.begin(), seen.end()) - seen.begin() > 10);
}
}
