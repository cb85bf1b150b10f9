// A queue's state as JSON: the input of its run (the built-in workflow
// "fusee.queue"), carried across continue-as-new, and what describe
// answers. Pure. Thread-safe.
#pragma once

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "fusee/queue.hpp"

namespace fusee::queue {

inline constexpr const char* kQueueWorkflow = "fusee.queue";
inline constexpr const char* kQueueRunPrefix = "queue:";

struct Entry {
  std::string id;
  std::string workflow;
  boost::json::value input;
  std::int64_t priority = 0;
  std::string partition;
  std::string dedup_id;
  std::int64_t enqueued_ms = 0;
  std::int64_t started_ms = 0;  // running ones
  std::uint64_t seq = 0;        // the order it came in
};

struct QueueState {
  std::string name;
  QueueOptions options;
  std::vector<Entry> waiting;  // in the order they came
  std::vector<Entry> running;  // in the order they started
  double next_start_ms = 0;    // per_second: when the next start is due
  std::uint64_t started = 0;
  std::uint64_t seq = 0;
};

// Throw Error(errc::invalid_argument) naming what is wrong.
boost::json::value options_json(const QueueOptions& options);
QueueOptions options_from_json(const boost::json::value& json);
boost::json::value entry_json(const Entry& entry);
Entry entry_from_json(const boost::json::value& json);
boost::json::value state_json(const QueueState& state);
QueueState state_from_json(const boost::json::value& json);

// What describe answers: the waiting ones in the order they will start.
boost::json::value info_json(const QueueState& state);
QueueInfo info_from_json(const boost::json::value& json);

// The waiting entries in start order: smaller priority first, then seq.
std::vector<const Entry*> start_order(const QueueState& state);

}  // namespace fusee::queue
