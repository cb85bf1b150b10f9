// What the files of class Shard share, and nothing else includes. Shard's
// methods live in files by concern: shard.cpp (its thread and queue),
// shard_durability.cpp (appends and what waits for them to be durable),
// shard_loading.cpp (recovery and unparking: records read back into runs),
// shard_checkpoint.cpp (parking and checkpoints), shard_lifecycle.cpp
// (start, code, end, continue-as-new), shard_requests.cpp (signal, cancel,
// result, children), shard_views.cpp (get, list, journal, stream reads),
// shard_reset.cpp and shard_messages.cpp (queries, updates, awakeables).
#pragma once

#include <fmt/format.h>

#include <string>
#include <system_error>

#include "engine/outcome.hpp"
#include "fusee/error.hpp"

namespace fusee::engine::shard_text {

inline std::string storage_message(const std::string& id, std::error_code error) {
  return fmt::format("run '{}': cannot read the run store: {}", id, error.message());
}

// What a run's callers are told when the shard's log fails under it: the
// engine shut down; its replica stopped being the primary (errc::unavailable,
// from a replicated log sink: the run goes on on the next primary); or the
// log failed (errc::storage).
inline Outcome log_failed_outcome(const std::string& id, std::error_code error) {
  if (error == make_error_code(errc::shut_down)) {
    return Outcome{RunStatus::failed, {}, errc::shut_down,
                   fmt::format("the engine shut down before run '{}' finished", id)};
  }
  if (error == make_error_code(errc::unavailable)) {
    return Outcome{RunStatus::failed, {}, errc::unavailable,
                   fmt::format("run '{}': this replica is no longer the primary; the run goes on on the next one: "
                               "try again there",
                               id)};
  }
  return Outcome{RunStatus::failed, {}, errc::storage,
                 fmt::format("run '{}' cannot go on: the log failed: {}", id, error.message())};
}

}  // namespace fusee::engine::shard_text
