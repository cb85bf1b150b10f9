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

namespace fusee::engine::shard_text {

inline std::string storage_message(const std::string& id, std::error_code error) {
  return fmt::format("run '{}': cannot read the run store: {}", id, error.message());
}

}  // namespace fusee::engine::shard_text
