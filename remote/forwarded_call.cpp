#include "remote/forwarded_call.hpp"

#include <fmt/format.h>

#include "rows/pending_json.hpp"
#include "protocol/wire.hpp"

namespace fusee::remote::forwarded {
namespace json = boost::json;

namespace {

[[noreturn]] void malformed(const char* field) {
  throw Error(errc::invalid_argument, fmt::format("a forwarded call without a proper '{}'", field));
}

const json::value& field(const json::object& object, const char* name) {
  auto found = object.find(name);
  if (found == object.end()) malformed(name);
  return found->value();
}

std::int64_t number(const json::object& object, const char* name) {
  const auto& value = field(object, name);
  if (!value.is_int64()) {
    if (value.is_uint64()) return static_cast<std::int64_t>(value.as_uint64());
    malformed(name);
  }
  return value.as_int64();
}

const json::object& object_of(const json::value& value, const char* what) {
  if (!value.is_object()) malformed(what);
  return value.as_object();
}

RunStatus status_of(const std::string& name) {
  for (auto status : kRunStatuses) {
    if (name == run_status_name(status)) return status;
  }
  malformed("status");
}

}  // namespace

std::string text(const json::object& object, const char* name) {
  const auto& value = field(object, name);
  if (!value.is_string()) malformed(name);
  return std::string(value.as_string());
}

std::vector<std::byte> to_bytes(const json::value& value) { return protocol::bytes_of(json::serialize(value)); }

std::optional<json::object> from_bytes(std::span<const std::byte> bytes) {
  json::error_code error;
  auto value = json::parse(protocol::text_of(bytes), error);
  if (error || !value.is_object()) return std::nullopt;
  return std::move(value.as_object());
}

json::object start_call(const engine::StartRequest& request) {
  json::object call{{"op", "start"},
                    {"workflow", request.workflow},
                    {"id", request.id},
                    {"input", request.input},
                    {"if_running", request.options.if_running == IfRunning::reject ? "reject" : "attach"},
                    {"if_finished", request.options.if_finished == IfFinished::reject   ? "reject"
                                    : request.options.if_finished == IfFinished::attach ? "attach"
                                                                                        : "start_anew"},
                    {"if_input_differs", request.options.if_input_differs == IfInputDiffers::reject ? "reject" : "report"}};
  if (request.options.deadline) call["deadline_ms"] = request.options.deadline->count();
  if (!request.parent.empty()) call["parent"] = request.parent;
  return call;
}

engine::StartRequest start_request_of(const json::object& call) {
  engine::StartRequest request;
  request.workflow = text(call, "workflow");
  request.id = text(call, "id");
  request.input = field(call, "input");
  if (const auto* parent = call.if_contains("parent"); parent != nullptr && parent->is_string()) {
    request.parent = std::string(parent->get_string());
  }
  auto if_running = text(call, "if_running");
  auto if_finished = text(call, "if_finished");
  request.options.if_running = if_running == "reject" ? IfRunning::reject : IfRunning::attach;
  request.options.if_finished = if_finished == "reject"   ? IfFinished::reject
                                : if_finished == "attach" ? IfFinished::attach
                                                          : IfFinished::start_anew;
  if (call.contains("if_input_differs") && text(call, "if_input_differs") == "reject") {
    request.options.if_input_differs = IfInputDiffers::reject;
  }
  if (call.contains("deadline_ms")) request.options.deadline = std::chrono::milliseconds(number(call, "deadline_ms"));
  return request;
}

json::object outcome_json(const engine::Outcome& outcome) {
  return {{"status", run_status_name(outcome.status)},
          {"value", outcome.value},
          {"code", errc_name(outcome.code)},
          {"message", outcome.message}};
}

engine::Outcome outcome_of(const json::value& value) {
  const auto& object = object_of(value, "outcome");
  engine::Outcome outcome;
  outcome.status = status_of(text(object, "status"));
  outcome.value = field(object, "value");
  outcome.code = engine::errc_from_name(text(object, "code"));
  outcome.message = text(object, "message");
  return outcome;
}

json::object run_info_json(const RunInfo& info) {
  json::object object{{"id", info.id},
                      {"workflow", info.workflow},
                      {"status", run_status_name(info.status)},
                      {"generation", info.generation},
                      {"version", info.version},
                      {"started_ms", engine::to_ms(info.started_at)},
                      {"error", info.error}};
  if (info.finished_at) object["finished_ms"] = engine::to_ms(*info.finished_at);
  if (info.stuck_position) object["stuck_position"] = *info.stuck_position;
  if (!info.waiting_on.empty()) object["waiting_on"] = rows::pending_json(info.waiting_on);
  return object;
}

RunInfo run_info_of(const json::value& value) {
  const auto& object = object_of(value, "run");
  RunInfo info;
  info.id = text(object, "id");
  info.workflow = text(object, "workflow");
  info.status = status_of(text(object, "status"));
  info.generation = static_cast<std::uint32_t>(number(object, "generation"));
  if (object.contains("version")) info.version = static_cast<std::uint32_t>(number(object, "version"));
  info.started_at = engine::from_ms(number(object, "started_ms"));
  if (object.contains("finished_ms")) info.finished_at = engine::from_ms(number(object, "finished_ms"));
  info.error = text(object, "error");
  if (object.contains("stuck_position")) info.stuck_position = static_cast<std::uint32_t>(number(object, "stuck_position"));
  if (const auto* waiting = object.if_contains("waiting_on")) {
    auto commands = rows::pending_of(*waiting);
    if (!commands) throw Error(errc::invalid_argument, "a forwarded call without a proper 'waiting_on'");
    info.waiting_on = std::move(*commands);
  }
  return info;
}

json::object filter_json(const RunFilter& filter) {
  json::object object;
  if (filter.workflow) object["workflow"] = *filter.workflow;
  if (filter.status) object["status"] = run_status_name(*filter.status);
  if (filter.finished_from) object["finished_from_ms"] = engine::to_ms(*filter.finished_from);
  if (filter.finished_to) object["finished_to_ms"] = engine::to_ms(*filter.finished_to);
  return object;
}

RunFilter filter_of(const json::value& value) {
  const auto& object = object_of(value, "filter");
  RunFilter filter;
  if (object.contains("workflow")) filter.workflow = text(object, "workflow");
  if (object.contains("status")) filter.status = status_of(text(object, "status"));
  if (object.contains("finished_from_ms")) filter.finished_from = engine::from_ms(number(object, "finished_from_ms"));
  if (object.contains("finished_to_ms")) filter.finished_to = engine::from_ms(number(object, "finished_to_ms"));
  return filter;
}

json::object list_query_json(const RunListQuery& query) {
  json::object object{{"workflow_prefix", query.workflow_prefix},
                      {"id_prefix", query.id_prefix},
                      {"order", query.order == RunListQuery::Order::id       ? "id"
                                : query.order == RunListQuery::Order::oldest ? "oldest"
                                                                             : "newest"},
                      {"limit", query.limit},
                      {"cursor", query.cursor}};
  if (query.status) object["status"] = run_status_name(*query.status);
  if (query.started_from) object["started_from_ms"] = engine::to_ms(*query.started_from);
  if (query.started_to) object["started_to_ms"] = engine::to_ms(*query.started_to);
  return object;
}

RunListQuery list_query_of(const json::value& value) {
  const auto& object = object_of(value, "query");
  RunListQuery query;
  if (object.contains("status")) query.status = status_of(text(object, "status"));
  query.workflow_prefix = text(object, "workflow_prefix");
  query.id_prefix = text(object, "id_prefix");
  if (object.contains("started_from_ms")) query.started_from = engine::from_ms(number(object, "started_from_ms"));
  if (object.contains("started_to_ms")) query.started_to = engine::from_ms(number(object, "started_to_ms"));
  const auto order = text(object, "order");
  if (order == "id") {
    query.order = RunListQuery::Order::id;
  } else if (order == "oldest") {
    query.order = RunListQuery::Order::oldest;
  } else if (order == "newest") {
    query.order = RunListQuery::Order::newest;
  } else {
    throw Error(errc::invalid_argument, fmt::format("a forwarded query's order '{}' is none of newest, oldest, id", order));
  }
  const auto limit = number(object, "limit");
  if (limit < 0) throw Error(errc::invalid_argument, "a forwarded query's limit is negative");
  query.limit = static_cast<std::size_t>(limit);
  query.cursor = text(object, "cursor");
  return query;
}

json::object list_page_json(const RunListPage& page) {
  json::array runs;
  for (const auto& run : page.runs) runs.push_back(run_info_json(run));
  return {{"runs", std::move(runs)},
          {"next_cursor", page.next_cursor},
          {"previous_cursor", page.previous_cursor},
          {"total", page.total},
          {"total_exact", page.total_exact}};
}

RunListPage list_page_of(const json::value& value) {
  const auto& object = object_of(value, "page");
  RunListPage page;
  const auto& runs = field(object, "runs");
  if (!runs.is_array()) throw Error(errc::invalid_argument, "a forwarded page's runs are not an array");
  for (const auto& run : runs.as_array()) page.runs.push_back(run_info_of(run));
  page.next_cursor = text(object, "next_cursor");
  page.previous_cursor = text(object, "previous_cursor");
  const auto total = number(object, "total");
  if (total < 0) throw Error(errc::invalid_argument, "a forwarded page's total is negative");
  page.total = static_cast<std::uint64_t>(total);
  const auto& exact = field(object, "total_exact");
  if (!exact.is_bool()) throw Error(errc::invalid_argument, "a forwarded page's total_exact is not a boolean");
  page.total_exact = exact.get_bool();
  return page;
}

json::object from_json(const StreamFrom& from) {
  const char* kind = from.kind == StreamFrom::Kind::earliest ? "earliest"
                     : from.kind == StreamFrom::Kind::latest ? "latest"
                                                             : "offset";
  return {{"kind", kind}, {"offset", from.offset}};
}

StreamFrom stream_from_of(const json::value& value) {
  const auto& object = object_of(value, "from");
  auto kind = text(object, "kind");
  if (kind == "earliest") return StreamFrom::earliest();
  if (kind == "latest") return StreamFrom::latest();
  if (kind == "offset") return StreamFrom::at(static_cast<std::uint64_t>(number(object, "offset")));
  malformed("from");
}

json::object error_json(errc code, const std::string& message) {
  return {{"error", errc_name(code)}, {"message", message}};
}

std::optional<Error> error_of(const json::object& answer) {
  auto found = answer.find("error");
  if (found == answer.end()) return std::nullopt;
  auto name = found->value().is_string() ? std::string(found->value().as_string()) : std::string("failed");
  auto message = answer.contains("message") && answer.at("message").is_string()
                     ? std::string(answer.at("message").as_string())
                     : std::string("a forwarded call failed");
  return Error(engine::errc_from_name(name), message);
}

const char* cancel_mode_name(engine::CancelMode mode) {
  switch (mode) {
    case engine::CancelMode::cancel: return "cancel";
    case engine::CancelMode::parent_close: return "parent_close";
    case engine::CancelMode::terminate: return "terminate";
  }
  return "cancel";
}

engine::CancelMode cancel_mode_of(const std::string& name) {
  for (auto mode : {engine::CancelMode::cancel, engine::CancelMode::parent_close, engine::CancelMode::terminate}) {
    if (name == cancel_mode_name(mode)) return mode;
  }
  throw Error(errc::invalid_argument, fmt::format("unknown cancel mode '{}'", name));
}

}  // namespace fusee::remote::forwarded
