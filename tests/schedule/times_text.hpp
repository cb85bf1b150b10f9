// Times as the schedule tests write them: "2026-03-29 01:30:00", as a
// wall-clock time or as UTC.
#pragma once

#include <doctest/doctest.h>

#include <date/date.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "fusee/clock.hpp"
#include "schedule/cron.hpp"

namespace fusee::schedule::testing {

inline LocalSeconds local(const std::string& text) {
  std::istringstream in(text);
  date::local_seconds time;
  in >> date::parse("%Y-%m-%d %H:%M:%S", time);
  REQUIRE_FALSE(in.fail());
  return LocalSeconds(time.time_since_epoch());
}

inline std::string local_text(LocalSeconds time) {
  return date::format("%Y-%m-%d %H:%M:%S", date::local_seconds(time.time_since_epoch()));
}

inline TimePoint utc(const std::string& text) {
  std::istringstream in(text);
  date::sys_seconds time;
  in >> date::parse("%Y-%m-%d %H:%M:%S", time);
  REQUIRE_FALSE(in.fail());
  return TimePoint(std::chrono::duration_cast<TimePoint::duration>(time.time_since_epoch()));
}

inline std::string utc_text(TimePoint time) {
  return date::format("%Y-%m-%d %H:%M:%S", std::chrono::floor<std::chrono::seconds>(time));
}

inline std::vector<std::string> utc_texts(const std::vector<TimePoint>& times) {
  std::vector<std::string> out;
  for (auto time : times) out.push_back(utc_text(time));
  return out;
}

}  // namespace fusee::schedule::testing
