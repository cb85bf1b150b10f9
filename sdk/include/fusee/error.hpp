// fusee::Error: what the public SDK throws. A std::system_error whose code is
// one of fusee::errc (category "fusee"), with a message a user can act on.
// Thread-safe to copy and throw from anywhere.
#pragma once

#include <string>
#include <system_error>

namespace fusee {

enum class errc {
  busy = 1,          // a shard's queue is full; nothing was recorded, try again
  not_found,         // no run with that id (or no such stream)
  already_exists,    // a run with that id exists and the id policy says reject
  unknown_workflow,  // no workflow registered under that name
  step_failed,       // a step failed for good (retries used up, or not retryable)
  failed,            // the run failed (the workflow threw, or a child failed)
  cancelled,         // the run was cancelled
  timed_out,         // the run's deadline passed
  nondeterminism,    // the workflow took another path than its journal
  storage,           // the log could not be written or opened
  invalid_argument,  // a bad argument or configuration
  shut_down,         // the engine is shut down
  wrong_shard_count, // the data directory has another shard count (see `fusee reshard`)
  unavailable,       // remote mode: no worker holds the run's shard now, or its holder went mid-call; try again
  conflict,          // the id runs with another input (StartOptions::if_input_differs)
  wrong_thread,      // a blocking Engine call from a workflow or a step: it would wait on a shard
  rejected,          // an update's validator refused it; nothing was recorded
};
inline constexpr errc kErrcLast = errc::rejected;

const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc code) noexcept {
  return {static_cast<int>(code), error_category()};
}

// The name of a code as written in journals and printed ("step_failed").
const char* errc_name(errc code) noexcept;

class Error : public std::system_error {
 public:
  Error(errc code, const std::string& message) : std::system_error(make_error_code(code), message), message_(message) {}
  errc error() const noexcept { return static_cast<errc>(code().value()); }
  // The message alone (std::system_error would append the code's name).
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Thrown by a step function: the step fails at once, whatever its retry
// policy says (Restate's TerminalError). Any other exception is retried.
class TerminalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fusee

template <>
struct std::is_error_code_enum<fusee::errc> : std::true_type {};
