// Schedules (Engine::schedule): start a workflow at due times -- a cron
// expression in a named time zone, or a fixed interval -- each due time at
// most one run, with the id "<schedule id>@<due time, UTC ISO>". A schedule
// is a run of its own (id "schedule:<id>", the built-in workflow
// "fusee.schedule"), so it is as durable as any run: its timers, the runs
// it starts and what it was told survive crashes, restarts and resharding.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "fusee/clock.hpp"

namespace fusee {

// When a schedule is due: a cron expression or an interval (exactly one).
struct ScheduleSpec {
  // 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds
  // first); ranges, steps, lists, names, and @hourly/@daily/... macros.
  std::string cron;
  // Or: due at the Unix epoch + offset + k * every.
  std::chrono::milliseconds every{0};
  std::chrono::milliseconds offset{0};
  // cron only: an IANA zone from the system's zoneinfo. A time the
  // spring-forward change skips is due once at the gap's end; a time the
  // fall-back change repeats is due once, at its first occurrence.
  std::string time_zone = "UTC";
  // Each run starts up to this much after its due time (a delay fixed by the
  // schedule id and the due time), so many schedules do not start at once.
  std::chrono::milliseconds jitter{0};
  // Nothing is due after it.
  std::optional<TimePoint> end;
};

// What a due time does while the run the schedule started last is still
// running.
enum class Overlap {
  skip,             // nothing: the due time passes
  buffer_one,       // starts once the running one ends; further ones pass
  buffer_all,       // each starts, in turn, once the one before has ended
  cancel_other,     // cancels the running one, starts once it has ended
  terminate_other,  // terminates the running one, starts at once
  allow_all,        // starts at once, beside it
};
const char* overlap_name(Overlap overlap) noexcept;

struct ScheduleOptions {
  Overlap overlap = Overlap::skip;
  // When the schedule wakes (on time, or after downtime), how many of the
  // due times since it last looked to run: the latest ones; the rest pass.
  // 1 to 1000; 1 runs the one it woke for.
  std::uint32_t catch_up = 1;
  bool paused = false;
  std::string note;  // why it is paused, say
};

struct ScheduleInfo {
  std::string id;
  ScheduleSpec spec;
  std::string workflow;
  boost::json::value input;
  ScheduleOptions options;
  std::optional<TimePoint> next_due;     // nothing: paused, or past its end
  std::vector<std::string> running;      // runs it started that have not ended, as far as it knows
  std::vector<std::string> buffered;     // run ids waiting for the running one (buffer_*, cancel_other)
  std::vector<std::string> recent;       // the latest runs it started, newest last (at most 10)
  std::uint64_t started = 0;             // runs it started
  std::uint64_t skipped = 0;             // due times that passed: overlap, or beyond the catch-up window
};

}  // namespace fusee
