// What a running run waits on (RunInfo::waiting_on) as JSON: how a parked
// run's row in the run store keeps it, and how a forwarded get or list
// carries it between workers. Pure.
//
//   [{"position": 3, "command": "wait_for", "name": "approve", "due_ms": 1765000000000}, ...]
//
// "due_ms" is absent when the command does not end by itself.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <vector>

#include "fusee/engine.hpp"

namespace fusee::rows {

boost::json::array pending_json(const std::vector<PendingCommand>& waiting);
// Nothing when `value` is not such an array (a damaged row, a bad peer).
std::optional<std::vector<PendingCommand>> pending_of(const boost::json::value& value);

}  // namespace fusee::rows
