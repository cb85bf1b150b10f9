// The built-in workflow behind a queue (Engine::queue): run "queue:<name>"
// of workflow "fusee.queue", its input the queue's state (queue_state.hpp).
// It takes runs (the update "queue", {"action": "enqueue", ...}) into its
// waiting list and starts them as child runs -- with the ids their callers
// gave, abandoned on its own end -- when its limits allow: smaller
// priority first, then in the order they came; a waiting run whose
// partition is full lets the next one by. It waits with Ctx::any for a
// change, the end of any run it started, or the time the rate allows the
// next start. Every kTurnsPerGeneration turns it continues as new with its
// state. The query "describe" answers its state.
#pragma once

#include <boost/json.hpp>
#include <string>

#include "fusee/ctx.hpp"
#include "fusee/refs.hpp"
#include "fusee/task.hpp"
#include "queue/queue_state.hpp"

namespace fusee::queue {

inline constexpr int kTurnsPerGeneration = 100;
// The queue's state rides in one journal record at continue-as-new (at most
// 16 MiB): past this much (its runs' JSON, roughly) it refuses enqueues
// until some have run, rather than fail then.
inline constexpr std::size_t kQueueBytesMax = 8u << 20;

// The changes, as the update's argument:
//   {"action": "enqueue", "id", "workflow", "input", "priority", "partition", "dedup_id"}
//     answers {"id", "outcome": "queued" | "already_queued"}
//   {"action": "configure", "options": {...}}  answers the queue's description
inline const Update<boost::json::value, boost::json::value> kQueueChange{"queue"};

Task<boost::json::value> run_queue(Ctx& ctx, boost::json::value state);

// Why the queue refuses a change now (empty: it takes it); state_bytes:
// what its state holds now, roughly.
std::string check_change(const boost::json::value& change, const QueueState& state, std::size_t state_bytes);

}  // namespace fusee::queue
