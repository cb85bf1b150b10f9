// The bodies of calls one worker forwards to the holder of a shard it does
// not hold (remote/shard_router.hpp carries them through the server): JSON
// objects, {"op": ...} with the call's arguments, and the answers. Pure.
//
// Calls: start, child (start or attach, and answer when the run ends),
// result, signal, cancel (mode cancel, parent_close or terminate; a
// request_id), reset, query, update (with an update_id, and a start for
// update-with-start; answered with its outcome), awakeable (a completion
// by token), journal, get, list (one shard's runs in memory) and stream
// (parts {"opened"} and {"chunk"}, then {"end"}). An answer is the call's
// value, {"error": errc name, "message"}, or {"retry": why} when the holder
// stopped before the run could answer (the caller asks the next holder).
#pragma once

#include <boost/json.hpp>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_core.hpp"
#include "engine/outcome.hpp"
#include "fusee/engine.hpp"
#include "fusee/error.hpp"

namespace fusee::remote::forwarded {

std::vector<std::byte> to_bytes(const boost::json::value& value);
// Nothing for bytes that are not one JSON object.
std::optional<boost::json::object> from_bytes(std::span<const std::byte> bytes);

boost::json::object start_call(const engine::StartRequest& request);
// Throws Error (invalid_argument) for a malformed call.
engine::StartRequest start_request_of(const boost::json::object& call);

boost::json::object outcome_json(const engine::Outcome& outcome);
engine::Outcome outcome_of(const boost::json::value& value);

boost::json::object run_info_json(const RunInfo& info);
RunInfo run_info_of(const boost::json::value& value);

boost::json::object filter_json(const RunFilter& filter);
RunFilter filter_of(const boost::json::value& value);

// A backup's query_runs, asked of the primary (sdk/facade/engine_wide_calls.hpp).
boost::json::object list_query_json(const RunListQuery& query);
RunListQuery list_query_of(const boost::json::value& value);
boost::json::object list_page_json(const RunListPage& page);
RunListPage list_page_of(const boost::json::value& value);

boost::json::object from_json(const StreamFrom& from);
StreamFrom stream_from_of(const boost::json::value& value);

const char* cancel_mode_name(engine::CancelMode mode);
// Throws Error (invalid_argument) for an unknown name.
engine::CancelMode cancel_mode_of(const std::string& name);

boost::json::object error_json(errc code, const std::string& message);
// An answer's error as an Error, when it is one.
std::optional<Error> error_of(const boost::json::object& answer);

// Field access that throws Error (invalid_argument) for a missing or
// mistyped field.
std::string text(const boost::json::object& object, const char* field);

}  // namespace fusee::remote::forwarded
