// What a schedule does when it wakes at `now` having last fired at `last`:
// the due times in (last, now] it fires -- the latest `catch_up` of them,
// the catch-up window -- and the range it let pass. Plus what each fire is
// called and when it starts: its run id names the schedule and the due
// time, so a due time starts at most one run however often it is
// computed, and its jitter is derived from both, so a replay computes the
// same. Pure. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusee/clock.hpp"
#include "schedule/schedule_times.hpp"

namespace fusee::schedule {

struct DuePlan {
  std::vector<TimePoint> fire;           // oldest first
  std::optional<TimePoint> missed_from;  // due times in [missed_from, missed_to] were let pass
  std::optional<TimePoint> missed_to;
};

// catch_up 0 fires nothing and lets every due time in (last, now] pass.
DuePlan plan_due(const ScheduleTimes& times, TimePoint last, TimePoint now, std::uint32_t catch_up);

// "<schedule id>@<due time, UTC, ISO 8601 to the millisecond>".
std::string run_id_of(std::string_view schedule_id, TimePoint due);

// A delay in [0, jitter) fixed by the schedule id and the due time
// (FNV-1a 64 of both); 0 without jitter.
std::chrono::milliseconds jitter_of(std::string_view schedule_id, TimePoint due, std::chrono::milliseconds jitter);

}  // namespace fusee::schedule
