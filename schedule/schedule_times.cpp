#include "schedule/schedule_times.hpp"

#include <date/tz.h>
#include <fmt/format.h>

#include "fusee/error.hpp"

namespace fusee::schedule {
namespace {

using namespace std::chrono;

date::local_seconds to_date(LocalSeconds time) { return date::local_seconds(time.time_since_epoch()); }
LocalSeconds from_date(date::local_seconds time) { return LocalSeconds(time.time_since_epoch()); }

}  // namespace

ScheduleTimes::ScheduleTimes(const TimesSpec& spec) : spec_(spec) {
  const bool cron = !spec.cron.empty();
  const bool every = spec.every.count() != 0;
  if (cron == every) {
    throw Error(errc::invalid_argument, "a schedule is due by a cron expression or by a fixed interval (every): one of them");
  }
  if (every) {
    if (spec.every.count() < 0) throw Error(errc::invalid_argument, "a schedule's interval (every) is positive");
    if (spec.offset.count() < 0 || spec.offset >= spec.every) {
      throw Error(errc::invalid_argument,
                  fmt::format("a schedule's offset is at least 0 and below its interval ({} ms)", spec.every.count()));
    }
    return;
  }
  cron_ = CronExpression::parse(spec.cron);
  try {
    zone_ = date::locate_zone(spec.time_zone);
  } catch (const std::exception&) {
    throw Error(errc::invalid_argument,
                fmt::format("time zone '{}' is not in the system's zoneinfo (a name such as 'UTC' or "
                            "'Europe/Paris': see /usr/share/zoneinfo)",
                            spec.time_zone));
  }
}

std::optional<TimePoint> ScheduleTimes::next_after(TimePoint after) const {
  std::optional<TimePoint> next;
  if (cron_) {
    next = next_cron(after);
  } else {
    // k * every + offset, the first past `after`.
    const auto since = duration_cast<milliseconds>(after.time_since_epoch()) - spec_.offset;
    auto k = since.count() / spec_.every.count();
    if (since.count() < 0 && since.count() % spec_.every.count() != 0) --k;  // floor
    next = TimePoint(duration_cast<TimePoint::duration>(spec_.offset + spec_.every * (k + 1)));
  }
  if (next && spec_.end && *next > *spec_.end) return std::nullopt;
  return next;
}

std::optional<TimePoint> ScheduleTimes::next_cron(TimePoint after) const {
  const auto after_seconds = floor<seconds>(after);
  // Search wall-clock times from the wall clock at `after`; a candidate's
  // instant may still be at or before `after` (the hour a fall back
  // repeats), so take the first past it.
  auto local = from_date(zone_->to_local(date::sys_seconds(after_seconds.time_since_epoch())));
  for (int tries = 0; tries < 100'000; ++tries) {
    auto candidate = cron_->next_after(local);
    if (!candidate) return std::nullopt;
    local = *candidate;
    auto info = zone_->get_info(to_date(*candidate));
    date::sys_seconds instant;
    switch (info.result) {
      case date::local_info::unique:
        instant = date::sys_seconds(to_date(*candidate).time_since_epoch() - info.first.offset);
        break;
      case date::local_info::ambiguous:
        // Twice on the wall clock: the first time only.
        instant = date::sys_seconds(to_date(*candidate).time_since_epoch() - info.first.offset);
        break;
      case date::local_info::nonexistent:
        // Skipped by the change: due when the clock lands past the gap.
        instant = info.second.begin;
        break;
    }
    TimePoint due{duration_cast<TimePoint::duration>(instant.time_since_epoch())};
    if (due > after) return due;
  }
  return std::nullopt;
}

std::vector<TimePoint> ScheduleTimes::between(TimePoint from, TimePoint to, std::size_t limit) const {
  std::vector<TimePoint> out;
  auto at = from;
  while (out.size() < limit) {
    auto next = next_after(at);
    if (!next || *next > to) break;
    out.push_back(*next);
    at = *next;
  }
  return out;
}

}  // namespace fusee::schedule
