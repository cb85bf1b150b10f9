// A schedule's state as JSON: the input of its run (the built-in workflow
// "fusee.schedule"), carried from generation to generation by
// continue-as-new, and what describe answers. Pure. Thread-safe.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fusee/schedule.hpp"
#include "schedule/schedule_times.hpp"

namespace fusee::schedule {

inline constexpr const char* kScheduleWorkflow = "fusee.schedule";
inline constexpr const char* kScheduleRunPrefix = "schedule:";
inline constexpr std::size_t kRecentRuns = 10;

struct ScheduleState {
  std::string id;
  std::string workflow;
  boost::json::value input;
  ScheduleSpec spec;
  ScheduleOptions options;
  std::int64_t last_ms = 0;                  // due times up to here are dealt with
  std::optional<std::string> running;        // the run it started last, until seen ending
  std::vector<std::int64_t> buffered_ms;     // due times waiting for it (oldest first)
  std::vector<std::string> recent;           // newest last
  std::uint64_t started = 0;
  std::uint64_t skipped = 0;
};

// Throw Error(errc::invalid_argument) naming what is wrong.
boost::json::value spec_json(const ScheduleSpec& spec);
ScheduleSpec spec_from_json(const boost::json::value& json);
Overlap overlap_from_name(const std::string& name);
const char* overlap_name_of(Overlap overlap);
boost::json::value options_json(const ScheduleOptions& options);
ScheduleOptions options_from_json(const boost::json::value& json, ScheduleOptions base = {});
boost::json::value state_json(const ScheduleState& state);
ScheduleState state_from_json(const boost::json::value& json);
TimesSpec times_spec(const ScheduleSpec& spec);

// What describe answers (Engine::describe_schedule, HTTP).
boost::json::value info_json(const ScheduleState& state, std::optional<TimePoint> next_due);
ScheduleInfo info_from_json(const boost::json::value& json);

}  // namespace fusee::schedule
