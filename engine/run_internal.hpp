// What the files of class Run share, and nothing else includes: the state
// of a step being tried, and the texts and answers several kinds of command
// build. Run's methods live in files by concern: run.cpp (the code's
// driving: positions, completion, cancel, replay), run_view.cpp (what a run
// shows), run_load.cpp (replaying records into a run), run_steps.cpp,
// run_waits.cpp (timers, signals, Ctx::any), run_streams.cpp,
// run_values.cpp (now, random, patched), run_children.cpp,
// run_messages.cpp (queries, updates), run_awakeables.cpp and
// run_remembered.cpp (what a new generation carries).
#pragma once

#include <fmt/format.h>

#include <boost/json.hpp>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include "engine/outcome.hpp"
#include "engine/run.hpp"
#include "engine/step_limits.hpp"

namespace fusee::engine {

// A step being tried: lives in the callbacks of its attempts.
struct StepCall {
  std::uint32_t position = 0;
  std::string name;
  RetryPolicy policy;
  detail::StepBody body;
  std::uint32_t attempt = 1;
  detail::Completion* completion = nullptr;
  // RetryPolicy::deadline as a time: set at the first attempt, journaled
  // with each failed attempt so a replay keeps it.
  std::optional<TimePoint> deadline;
  // The attempt under way: whether its outcome is still awaited, and how
  // it is asked to stop (attempt timeout, deadline).
  bool attempt_open = false;
  std::shared_ptr<std::stop_source> stop;
  // When the attempt under way began (monotonic: its running time is
  // journaled as took_us, whatever the engine clock does).
  std::chrono::steady_clock::time_point attempt_began;
  // StepAwaitable::limit: the permit the next (or current) attempt holds.
  std::shared_ptr<StepLimits::Permit> permit;
};

namespace run_text {

inline std::string describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// The command a record belongs to, as nondeterminism messages name it (a
// cancel_delivered record stands for the command it lists).
inline const char* command_of(const JournalRecord& record) {
  return record.kind == RecordKind::cancel_delivered ? record.detail.c_str() : command_name(record.kind);
}

// The message a failure record carries (its value is a JSON string).
inline std::string text_of(const boost::json::value& value) {
  return value.is_string() ? std::string(value.get_string()) : std::string();
}

// The error a cancelled command throws.
inline std::string cancel_text(const std::string& id, const std::string& reason) {
  return fmt::format("run '{}' was cancelled: {}", id, reason);
}

// A reply's or a completion's record, as its caller sees it.
inline Outcome answer_of(bool succeeded, const boost::json::value& value, const char* what, const std::string& name) {
  if (succeeded) return Outcome{RunStatus::completed, value, errc::failed, {}};
  return Outcome{RunStatus::failed, {}, errc::failed, fmt::format("{} '{}' failed: {}", what, name, text_of(value))};
}

// An outcome in the {"ok", ...} form repeats are answered from
// (Remembered, FinishedRun's answers).
inline boost::json::object answer_json_of(const Outcome& outcome) {
  return answer_json(outcome.status == RunStatus::completed, outcome.value, errc_name(outcome.code), outcome.message);
}

}  // namespace run_text
}  // namespace fusee::engine
