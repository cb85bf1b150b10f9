// Durable queues (Engine::queue, Engine::enqueue), as DBOS has them: runs
// wait in a named queue and start when its limits allow -- at most
// `concurrency` running at once, at most `partition_concurrency` per
// partition key, at most `per_second` started per second -- smaller
// priority first, then in the order they came. A queue is a run of its own
// (id "queue:<name>", the built-in workflow "fusee.queue"), so what waits in
// it survives crashes and restarts, and each queued run starts once: it is
// a child run with the id the caller gave.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "fusee/clock.hpp"

namespace fusee {

struct QueueOptions {
  std::uint32_t concurrency = 0;            // runs of the queue running at once; 0: no bound
  std::uint32_t partition_concurrency = 0;  // ... per partition key; 0: no bound
  double per_second = 0;                    // runs started per second, on average; 0: no bound
};

struct EnqueueOptions {
  std::int64_t priority = 0;  // smaller starts first; ties in the order they came
  std::string partition;      // the partition key (partition_concurrency)
  // At most one run waiting or running in the queue has it: another
  // enqueue with it is refused (errc::rejected) while that one is there.
  std::string dedup_id;
};

enum class EnqueueOutcome {
  queued,          // it waits (or already started)
  already_queued,  // a run of that id was waiting or running in the queue already
};

struct QueuedRun {
  std::string id;
  std::string workflow;
  boost::json::value input;
  std::int64_t priority = 0;
  std::string partition;
  std::string dedup_id;
  TimePoint enqueued_at;
  std::optional<TimePoint> started_at;  // running ones
};

struct QueueInfo {
  std::string name;
  QueueOptions options;
  std::vector<QueuedRun> waiting;  // in the order they will start
  std::vector<QueuedRun> running;  // started, not yet seen to end
  std::uint64_t started = 0;       // runs it started
};

}  // namespace fusee
