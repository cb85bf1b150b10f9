// The built-in workflow behind a schedule (Engine::schedule): run
// "schedule:<id>" of workflow "fusee.schedule", its input the schedule's
// state (schedule_state.hpp). It loops: works out (in a journaled step, so
// a replay agrees whatever zoneinfo says later) which due times are due,
// starts a child run for each -- id "<id>@<due time>", abandoned when the
// schedule ends, so a due time starts at most one run -- as its overlap
// policy says, then waits for the next due time, a change (the update
// "schedule") or the end of the run it started last. Every
// kTurnsPerGeneration turns it continues as new with its state, so its
// journal stays small. The query "describe" answers its state.
#pragma once

#include <boost/json.hpp>

#include "fusee/ctx.hpp"
#include "fusee/refs.hpp"
#include "fusee/task.hpp"

namespace fusee::schedule {

inline constexpr int kTurnsPerGeneration = 50;

// The changes, as the update's argument {"action": ...}:
//   {"action": "pause", "note": "..."}    {"action": "resume"}
//   {"action": "trigger"}                 (a run now, through the overlap policy)
//   {"action": "backfill", "from_ms": ..., "to_ms": ..., "overlap": "..."}
//                                         (the due times in (from, to]; overlap optional)
//   {"action": "update", "spec": {...}, "workflow": "...", "input": ..., "options": {...}}
//   {"action": "delete"}                  (the schedule's run ends; the runs it started go on)
// Each answers the schedule's description, and "runs": the run ids a
// trigger or backfill started or buffered.
inline const Update<boost::json::value, boost::json::value> kScheduleChange{"schedule"};

Task<boost::json::value> run_schedule(Ctx& ctx, boost::json::value state);

// Why a change is refused (empty: it is taken).
std::string check_change(const boost::json::value& change);

}  // namespace fusee::schedule
