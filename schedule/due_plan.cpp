#include "schedule/due_plan.hpp"

#include <date/date.h>
#include <fmt/format.h>

#include <algorithm>

namespace fusee::schedule {
using namespace std::chrono;

DuePlan plan_due(const ScheduleTimes& times, TimePoint last, TimePoint now, std::uint32_t catch_up) {
  DuePlan plan;
  if (now <= last) return plan;
  // The latest `catch_up` due times, found without walking a long downtime
  // from its start: look back over a window that doubles until it holds
  // enough of them or reaches `last`.
  std::vector<TimePoint> latest;
  if (catch_up > 0) {
    auto window = milliseconds(1000);
    for (;;) {
      const auto from = now - last > window ? now - window : last;
      latest = times.between(from, now, SIZE_MAX);
      if (latest.size() >= catch_up || from == last) break;
      window *= 2;
    }
    if (latest.size() > catch_up) latest.erase(latest.begin(), latest.end() - catch_up);
  }
  plan.fire = latest;
  // What was let pass: the first due time after `last`, up to the last one
  // before the fired ones.
  const auto first = times.next_after(last);
  // Up to now when nothing fires; else up to the first fired, excluded.
  const bool through_now = latest.empty();
  const auto until = through_now ? now : latest.front();
  auto passed = [&](TimePoint due) { return through_now ? due <= until : due < until; };
  if (first && passed(*first)) {
    plan.missed_from = *first;
    // The last due time before `until`: the one whose successor is not
    // before `until`. Walk back a doubling window from `until`.
    auto window = milliseconds(1000);
    for (;;) {
      const auto from = until - *first > window ? until - window : *first - milliseconds(1);
      auto near = times.between(from, until, SIZE_MAX);
      std::erase_if(near, [&](TimePoint due) { return !passed(due); });
      if (!near.empty()) {
        plan.missed_to = near.back();
        break;
      }
      window *= 2;
    }
  }
  return plan;
}

std::string run_id_of(std::string_view schedule_id, TimePoint due) {
  return fmt::format("{}@{}", schedule_id, date::format("%FT%TZ", floor<milliseconds>(due)));
}

milliseconds jitter_of(std::string_view schedule_id, TimePoint due, milliseconds jitter) {
  if (jitter.count() <= 0) return milliseconds(0);
  std::uint64_t hash = 14695981039346656037ull;
  auto mix = [&](std::string_view bytes) {
    for (unsigned char byte : bytes) {
      hash ^= byte;
      hash *= 1099511628211ull;
    }
  };
  mix(schedule_id);
  mix(run_id_of("", due));
  return milliseconds(static_cast<std::int64_t>(hash % static_cast<std::uint64_t>(jitter.count())));
}

}  // namespace fusee::schedule
