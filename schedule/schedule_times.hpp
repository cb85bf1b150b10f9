// When a schedule is due: its spec (a cron expression in a named time zone,
// or a fixed interval with an offset; an end) as instants. Daylight-saving
// changes are handled as cron does:
// - a wall-clock time the change skips (spring forward) is due at the
//   first instant after the gap, once;
// - a wall-clock time that happens twice (fall back) is due once, at its
//   first occurrence.
// Time zones are the system's zoneinfo (Howard Hinnant's date library,
// USE_OS_TZDB). Pure apart from reading zoneinfo. Thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "fusee/clock.hpp"
#include "schedule/cron.hpp"

namespace date {
class time_zone;
}

namespace fusee::schedule {

struct TimesSpec {
  std::string cron;                      // or
  std::chrono::milliseconds every{0};    // > 0: due at the Unix epoch + offset + k * every
  std::chrono::milliseconds offset{0};
  std::string time_zone = "UTC";         // cron only: an IANA name ("Europe/Paris")
  std::optional<TimePoint> end;          // nothing due after it
};

class ScheduleTimes {
 public:
  // Throws Error(errc::invalid_argument) for a spec that is not one: both
  // or neither of cron and every, a cron expression cron does not take, a
  // time zone zoneinfo does not know, an offset not below the interval.
  explicit ScheduleTimes(const TimesSpec& spec);

  // The first due time strictly after `after` (whole seconds for cron,
  // milliseconds for an interval); nothing past the end.
  std::optional<TimePoint> next_after(TimePoint after) const;

  // The due times in (from, to], at most `limit` of them.
  std::vector<TimePoint> between(TimePoint from, TimePoint to, std::size_t limit) const;

 private:
  std::optional<TimePoint> next_cron(TimePoint after) const;

  TimesSpec spec_;
  std::optional<CronExpression> cron_;
  const date::time_zone* zone_ = nullptr;
};

}  // namespace fusee::schedule
