// Calls a backup forwards on the whole engine rather than on one run
// (docs/replication.md, "Calls on a backup"): the run counts by status and
// a page of the run index. A backup keeps no run index, and scanning every
// run through the primary for each page (or each /metrics scrape) would
// cost the primary a list of everything; the primary's engine answers them
// from its index instead. Bodies as remote/forwarded_call.hpp's:
//
//   {"op": "count_runs"}               -> {"counts": [n, ...]} (kRunStatuses' order)
//   {"op": "query_runs", "query": {}}  -> {"page": {...}} (list_query_json, list_page_json)
//
// (Not "query": that is a run's query handler, a call on one run.)
#pragma once

#include <boost/json.hpp>
#include <cstddef>
#include <optional>
#include <span>

#include "fusee/engine.hpp"

namespace fusee::facade {

// The call, when it is one of these; nothing for a call on a run.
std::optional<boost::json::object> engine_wide_call(std::span<const std::byte> body);

// Its answer from `engine` (a view's, on the primary). It may wait on the
// engine's shards: not on the replica's loop thread. Nothing when the
// engine could not answer now (it is stopping or stepped down): the caller
// asks again, as nothing happened.
std::optional<boost::json::object> answer_engine_wide(Engine& engine, const boost::json::object& call);

}  // namespace fusee::facade
