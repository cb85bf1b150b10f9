// Cron expressions: which wall-clock times a schedule is due at. Five fields
// (minute hour day-of-month month day-of-week) or six (seconds first), each
// `*`, a number, a range `a-b`, a step `*/n` or `a-b/n` or `a/n`, or a
// comma list of those; months and weekdays also by name (JAN, MON); weekday
// 7 is Sunday as 0 is; `?` is `*` in the day fields. The macros @yearly
// (@annually), @monthly, @weekly, @daily (@midnight) and @hourly. When both
// day fields are restricted a day matches either, as in cron.
// Pure: no clock, no time zone (schedule/schedule_times.hpp adds those).
#pragma once

#include <bitset>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace fusee::schedule {

// A wall-clock time, seconds resolution, in no particular zone.
using LocalSeconds = std::chrono::time_point<std::chrono::local_t, std::chrono::seconds>;

class CronExpression {
 public:
  // The expression in `text`; throws Error(errc::invalid_argument) saying
  // which field is wrong and why.
  static CronExpression parse(std::string_view text);

  // The first wall-clock time strictly after `after` that matches; nothing
  // when none does within 8 years (an expression such as "0 0 30 2 *").
  std::optional<LocalSeconds> next_after(LocalSeconds after) const;

  bool matches(LocalSeconds time) const;
  const std::string& text() const { return text_; }

 private:
  bool day_matches(std::chrono::year_month_day date) const;

  std::string text_;
  std::bitset<60> seconds_;
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;      // 1..31
  std::bitset<13> months_;    // 1..12
  std::bitset<7> weekdays_;   // 0 (Sunday)..6
  bool days_restricted_ = false;
  bool weekdays_restricted_ = false;
};

}  // namespace fusee::schedule
