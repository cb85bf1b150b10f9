#include "http/http_api.hpp"
#include "fusee/limits.hpp"
#include "http/cluster_json.hpp"
#include "http/console_files.hpp"
#include "http/prometheus.hpp"
#include "http/run_wait.hpp"
#include "http/json_text.hpp"
#include "http/log_figures.hpp"
#include "http/request_guard.hpp"
#include "queue/queue_state.hpp"
#include "schedule/schedule_state.hpp"

#include <fmt/format.h>

#include <cctype>
#include <mutex>
#include <random>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <vector>

namespace fusee::http {
namespace {

namespace json = boost::json;

HttpResponse json_response(unsigned status, const json::value& value) {
  HttpResponse response;
  response.status = status;
  response.body = json::serialize(value) + "\n";
  return response;
}

unsigned status_of(errc code) {
  switch (code) {
    case errc::not_found: return 404;
    case errc::unknown_workflow: return 404;
    case errc::already_exists: return 409;
    case errc::conflict: return 409;
    case errc::rejected: return 422;
    case errc::invalid_argument: return 400;
    case errc::wrong_shard_count: return 400;
    case errc::busy: return 503;
    case errc::shut_down: return 503;
    case errc::unavailable: return 503;
    case errc::timed_out: return 504;
    case errc::storage: return 500;
    default: return 500;
  }
}

HttpResponse from_error(const Error& error) { return HttpApi::error(status_of(error.error()), errc_name(error.error()), error.what()); }

// An execute's answer: the start's outcome, then how the run ended.
json::object started_json(const std::string& id, StartOutcome outcome) {
  return json::object{{"id", id}, {"outcome", start_outcome_name(outcome)}};
}

HttpResponse executed(json::object out, const std::variant<json::value, Error>& ended) {
  if (const auto* result = std::get_if<json::value>(&ended)) {
    out["status"] = "completed";
    out["result"] = *result;
  } else {
    const auto& failure = std::get<Error>(ended);
    out["status"] = failure.error() == errc::cancelled        ? "cancelled"
                    : failure.error() == errc::nondeterminism ? "stuck"
                                                              : "failed";
    out["error"] = json::object{{"code", errc_name(failure.error())}, {"message", failure.what()}};
  }
  return json_response(200, out);
}

HttpResponse timed_out(const std::string& id, std::chrono::milliseconds timeout) {
  return HttpApi::error(504, "timed_out",
                        fmt::format("run '{}' did not finish within {} ms; it goes on: GET /v1/runs/{} later", id,
                                    timeout.count(), id));
}

std::int64_t to_ms(TimePoint time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}

json::object run_json(const RunInfo& info) {
  json::object out{{"id", info.id},
                   {"workflow", info.workflow},
                   {"status", run_status_name(info.status)},
                   {"generation", info.generation},
                   {"version", info.version},
                   {"started_at_ms", to_ms(info.started_at)}};
  out["finished_at_ms"] = info.finished_at ? json::value(to_ms(*info.finished_at)) : json::value(nullptr);
  out["error"] = info.error.empty() ? json::value(nullptr) : json::value(info.error);
  out["stuck_position"] = info.stuck_position ? json::value(*info.stuck_position) : json::value(nullptr);
  json::array waiting;
  for (const auto& command : info.waiting_on) {
    waiting.push_back(json::object{{"position", command.position},
                                   {"command", command.command},
                                   {"name", command.name},
                                   {"due_ms", command.due ? json::value(to_ms(*command.due)) : json::value(nullptr)}});
  }
  out["waiting_on"] = std::move(waiting);
  return out;
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at < path.size()) {
    if (path[at] == '/') {
      ++at;
      continue;
    }
    auto end = path.find('/', at);
    if (end == std::string_view::npos) end = path.size();
    parts.emplace_back(path.substr(at, end - at));
    at = end;
  }
  return parts;
}

// The body as a JSON object; an empty body is an empty object.
// The body as a JSON object with no field but `fields` (a misspelt option
// is refused rather than ignored); nothing, with `problem` set, otherwise.
std::optional<json::object> body_object(const HttpRequest& request, HttpResponse& problem,
                                        std::initializer_list<std::string_view> fields) {
  if (request.body.empty()) return json::object{};
  if (auto at = first_invalid_utf8(request.body)) {
    problem = HttpApi::error(400, "invalid_json", fmt::format("the body is not UTF-8: byte {} (0x{:02x}) is not part of "
                                                              "a UTF-8 character",
                                                              *at, static_cast<unsigned char>(request.body[*at])));
    return std::nullopt;
  }
  if (auto key = first_duplicate_key(request.body)) {
    problem = HttpApi::error(400, "invalid_json",
                             fmt::format("the body gives \"{}\" twice in one object: give each field once", *key));
    return std::nullopt;
  }
  boost::system::error_code error;
  auto value = json::parse(request.body, error);
  if (error) {
    problem = HttpApi::error(400, "invalid_json", fmt::format("the body is not JSON: {}", error.message()));
    return std::nullopt;
  }
  if (!value.is_object()) {
    problem = HttpApi::error(400, "invalid_argument", "the body must be a JSON object");
    return std::nullopt;
  }
  for (const auto& [key, field_value] : value.as_object()) {
    if (std::find(fields.begin(), fields.end(), std::string_view(key)) != fields.end()) continue;
    std::string known;
    for (auto field : fields) known += (known.empty() ? "\"" : ", \"") + std::string(field) + "\"";
    problem = HttpApi::error(400, "invalid_argument",
                             fmt::format("unknown field \"{}\" (this request takes {})", std::string(key), known));
    return std::nullopt;
  }
  return value.as_object();
}

std::optional<std::string> string_field(const json::object& object, const char* name, bool required,
                                        HttpResponse& problem) {
  const auto* value = object.if_contains(name);
  if (value == nullptr || value->is_null()) {
    if (required) problem = HttpApi::error(400, "invalid_argument", fmt::format("\"{}\" is required", name));
    return std::nullopt;
  }
  if (!value->is_string()) {
    problem = HttpApi::error(400, "invalid_argument", fmt::format("\"{}\" must be a string", name));
    return std::nullopt;
  }
  return std::string(value->as_string());
}

std::optional<std::uint64_t> number_text(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      int high = hex(text[i + 1]);
      int low = hex(text[i + 2]);
      if (high < 0 || low < 0) return std::nullopt;
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

HttpResponse HttpApi::error(unsigned status, const std::string& code, const std::string& message) {
  // A message may quote what the client sent (a path, an id): what is not
  // UTF-8 is escaped, so the answer is JSON whatever came in.
  return json_response(status, json::object{{"error", code}, {"message", printable(message, 4096)}});
}

HttpResponse HttpApi::failure(const Error& error) { return from_error(error); }

std::variant<HttpResponse, StreamRequest> HttpApi::route(const HttpRequest& request) {
  return *route_to(request, nullptr);
}

void HttpApi::route_async(const HttpRequest& request, Later later) {
  if (auto now = route_to(request, &later)) later.done(std::move(*now));
}

bool HttpApi::waits(const HttpRequest& request) {
  if (request.method != "POST") return false;
  auto parts = split_path(std::string_view(request.target).substr(0, request.target.find('?')));
  if (parts.size() < 3 || parts[0] != "v1" || parts[1] != "runs") return false;
  return (parts.size() == 3 && parts[2] == "execute") || (parts.size() == 5 && parts[3] == "updates");
}

std::optional<Routed> HttpApi::route_to(const HttpRequest& request, Later* later) {
  auto query_at = request.target.find('?');
  std::string_view path = std::string_view(request.target).substr(0, query_at);
  std::map<std::string, std::string> query;
  if (query_at != std::string::npos) {
    std::string_view rest = std::string_view(request.target).substr(query_at + 1);
    while (!rest.empty()) {
      auto amp = rest.find('&');
      auto pair = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      if (pair.empty()) continue;
      auto eq = pair.find('=');
      auto key = percent_decode(pair.substr(0, eq), true);
      auto value = percent_decode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
      if (!key || !value) return error(400, "invalid_argument", "the query string is not well encoded");
      query[*key] = *value;
    }
  }
  std::vector<std::string> parts;
  for (const auto& raw : split_path(path)) {
    auto decoded = percent_decode(raw, false);
    if (!decoded) return error(400, "invalid_argument", "the path is not well encoded");
    parts.push_back(*decoded);
  }
  // HEAD is GET without the body (the connection drops it).
  const std::string method = request.method == "HEAD" ? std::string("GET") : request.method;
  auto wrong_method = [&](const char* allowed) {
    auto response = error(405, "method_not_allowed", fmt::format("{} takes {}", path, allowed));
    response.headers["Allow"] = allowed;
    return response;
  };

  if (auto page = console(request)) return std::move(*page);
  if (parts.size() == 1 && parts[0] == "healthz") {
    if (method != "GET") return wrong_method("GET");
    return json_response(200, json::object{{"status", "ok"}});
  }
  std::vector<std::string> tokens{options_.token};
  if (options_.front_token) tokens.push_back(options_.front_token());
  if (auto refused = refuse_without_token(request, tokens)) return std::move(*refused);
  try {
    if (parts.size() == 1 && parts[0] == "metrics") {
      if (method != "GET") return wrong_method("GET");
      return metrics();
    }
    if (parts.size() == 2 && parts[0] == "v1" && parts[1] == "stats") {
      if (method != "GET") return wrong_method("GET");
      return stats_json();
    }
    if (parts.size() == 2 && parts[0] == "v1" && parts[1] == "cluster") {
      if (method != "GET") return wrong_method("GET");
      return cluster_json();
    }
    if (parts.size() == 3 && parts[0] == "v1" && parts[1] == "stats" && parts[2] == "activity") {
      if (method != "GET") return wrong_method("GET");
      return activity_json();
    }
    if (parts.size() == 2 && parts[0] == "v1" && parts[1] == "server") {
      // fusee server's front answers this with its shards and log; an
      // engine's own listener says it is not that front.
      if (method != "GET") return wrong_method("GET");
      return json_response(200, json::object{{"server", false}});
    }
    if (parts.size() == 4 && parts[0] == "v1" && parts[1] == "awakeables" &&
        (parts[3] == "complete" || parts[3] == "fail")) {
      if (method != "POST") return wrong_method("POST");
      return complete_awakeable(parts[2], request, parts[3] == "complete");
    }
    if (parts.size() >= 2 && parts.size() <= 4 && parts[0] == "v1" && parts[1] == "schedules") {
      return schedules(parts, method, request);
    }
    if (parts.size() >= 2 && parts.size() <= 4 && parts[0] == "v1" && parts[1] == "queues") {
      return queues(parts, method, request);
    }
    if (parts.empty() || parts[0] != "v1" || parts.size() < 2 || parts[1] != "runs") {
      return error(404, "no_route", fmt::format("no route {} {} (docs/http-api.md lists them)", method, path));
    }
    if (parts.size() == 2) {
      if (method == "POST") return start(request, false, query);
      if (method == "GET") return list(query);
      return wrong_method("GET, POST");
    }
    if (parts.size() == 3 && parts[2] == "execute") {
      if (method != "POST") return wrong_method("POST");
      if (later != nullptr) return execute_later(request, query, *later);
      return start(request, true, query);
    }
    const auto& id = parts[2];
    if (parts.size() == 3) {
      if (method != "GET") return wrong_method("GET");
      return get_run(id);
    }
    if (parts.size() == 5 && parts[3] == "queries") {
      if (method != "POST") return wrong_method("POST");
      return answer_query(id, parts[4], request);
    }
    if (parts.size() == 5 && parts[3] == "updates") {
      if (method != "POST") return wrong_method("POST");
      if (later != nullptr) return update_later(id, parts[4], request, query, *later);
      return update(id, parts[4], request, query);
    }
    if (parts.size() == 4 && parts[3] == "reset") {
      if (method != "POST") return wrong_method("POST");
      return reset(id, request);
    }
    if (parts.size() == 4 && parts[3] == "journal") {
      if (method != "GET") return wrong_method("GET");
      try {
        auto text = engine_.journal_json(id);
        HttpResponse response;
        response.status = 200;
        response.body = std::move(text) + "\n";
        return response;
      } catch (const Error& failure) {
        return from_error(failure);
      }
    }
    if (parts.size() == 4 && (parts[3] == "cancel" || parts[3] == "terminate")) {
      if (method != "POST") return wrong_method("POST");
      return cancel(id, request, parts[3] == "terminate");
    }
    if (parts.size() == 5 && parts[3] == "signals") {
      if (method != "POST") return wrong_method("POST");
      return signal(id, parts[4], request);
    }
    if (parts.size() == 5 && parts[3] == "streams") {
      if (method != "GET") return wrong_method("GET");
      StreamRequest stream{id, parts[4], 0, false};
      auto accept = request.headers.find("accept");
      stream.sse = accept != request.headers.end() && accept->second.find("text/event-stream") != std::string::npos;
      if (auto from = query.find("from"); from != query.end()) {
        auto offset = number_text(from->second);
        if (!offset) return error(400, "invalid_argument", "from must be a chunk offset (a whole number)");
        stream.from = *offset;
      }
      if (auto last = request.headers.find("last-event-id"); last != request.headers.end()) {
        auto offset = number_text(last->second);
        if (!offset) return error(400, "invalid_argument", "Last-Event-ID must be a chunk offset");
        stream.from = *offset + 1;
      }
      if (!engine_.get_run(id)) return error(404, "not_found", fmt::format("no run '{}'", id));
      return stream;
    }
    return error(404, "no_route", fmt::format("no route {} {} (docs/http-api.md lists them)", method, path));
  } catch (const Error& failure) {
    return from_error(failure);
  }
}

struct HttpApi::StartCall {
  std::string workflow;
  std::string id;
  json::value input;
  StartOptions options;
  std::chrono::milliseconds timeout{0};  // execute: how long to wait for the end
};

std::variant<HttpApi::StartCall, HttpResponse> HttpApi::read_start(const HttpRequest& request, bool execute,
                                                                  const std::map<std::string, std::string>& query) {
  HttpResponse problem;
  auto body = body_object(request, problem, {"workflow", "id", "input", "deadline_ms", "if_running", "if_finished", "if_input_differs"});
  if (!body) return problem;
  auto workflow = string_field(*body, "workflow", true, problem);
  if (!workflow) return problem;
  auto id = string_field(*body, "id", true, problem);
  if (!id) return problem;
  if (id->empty()) return error(400, "invalid_argument", "\"id\" must not be empty");
  if (!engine_.has_workflow(*workflow)) {
    return error(404, "unknown_workflow", fmt::format("no workflow '{}' is registered", *workflow));
  }
  json::value input = nullptr;
  if (const auto* given = body->if_contains("input")) input = *given;
  StartOptions options;
  if (const auto* deadline = body->if_contains("deadline_ms"); deadline != nullptr && !deadline->is_null()) {
    if (!deadline->is_int64() || deadline->as_int64() <= 0 || deadline->as_int64() > kDurationMax.count()) {
      return error(400, "invalid_argument",
                   fmt::format("\"deadline_ms\" must be a whole number of milliseconds from 1 to {} (100 years)",
                               kDurationMax.count()));
    }
    options.deadline = std::chrono::milliseconds(deadline->as_int64());
  }
  if (auto policy = string_field(*body, "if_finished", false, problem)) {
    if (*policy == "attach") {
      options.if_finished = IfFinished::attach;
    } else if (*policy == "reject") {
      options.if_finished = IfFinished::reject;
    } else if (*policy == "start_anew") {
      options.if_finished = IfFinished::start_anew;
    } else {
      return error(400, "invalid_argument", "\"if_finished\" is one of attach, reject, start_anew");
    }
  } else if (problem.status != 200) {
    return problem;
  }
  if (auto policy = string_field(*body, "if_running", false, problem)) {
    if (*policy != "attach" && *policy != "reject") {
      return error(400, "invalid_argument", "\"if_running\" is one of attach, reject");
    }
    options.if_running = *policy == "reject" ? IfRunning::reject : IfRunning::attach;
  } else if (problem.status != 200) {
    return problem;
  }
  if (auto policy = string_field(*body, "if_input_differs", false, problem)) {
    if (*policy != "report" && *policy != "reject") {
      return error(400, "invalid_argument", "\"if_input_differs\" is one of report, reject");
    }
    options.if_input_differs = *policy == "reject" ? IfInputDiffers::reject : IfInputDiffers::report;
  } else if (problem.status != 200) {
    return problem;
  }
  std::chrono::milliseconds timeout = options_.execute_timeout_max;
  if (execute) {
    if (auto given = query.find("timeout_ms"); given != query.end()) {
      auto ms = number_text(given->second);
      if (!ms || *ms == 0) return error(400, "invalid_argument", "timeout_ms must be a positive whole number");
      timeout = std::min(timeout, std::chrono::milliseconds(*ms));
    }
  }
  return StartCall{std::move(*workflow), std::move(*id), std::move(input), options, timeout};
}

HttpResponse HttpApi::start(const HttpRequest& request, bool execute, const std::map<std::string, std::string>& query) {
  auto read = read_start(request, execute, query);
  if (auto* problem = std::get_if<HttpResponse>(&read)) return std::move(*problem);
  auto& call = std::get<StartCall>(read);
  try {
    auto outcome = engine_.start_json(call.workflow, call.id, std::move(call.input), call.options);
    auto out = started_json(call.id, outcome);
    if (!execute) return json_response(outcome == StartOutcome::started ? 201 : 200, out);
    auto result = engine_.result_json_async(call.id);
    if (result.wait_for(call.timeout) != std::future_status::ready) return timed_out(call.id, call.timeout);
    std::variant<json::value, Error> ended = json::value();
    try {
      ended = result.get();
    } catch (const Error& failure) {
      ended = failure;
    }
    return executed(std::move(out), ended);
  } catch (const Error& failure) {
    return from_error(failure);
  }
}

// The same answers as start(request, true, query), without a thread: the
// start's and the result's answers come back through `later` (a RunWait).
// As there, the timeout counts from the start's answer; the start itself
// waits at most execute_timeout_max.
std::optional<HttpResponse> HttpApi::execute_later(const HttpRequest& request,
                                                   const std::map<std::string, std::string>& query, Later& later) {
  auto read = read_start(request, true, query);
  if (auto* problem = std::get_if<HttpResponse>(&read)) return std::move(*problem);
  auto& call = std::get<StartCall>(read);
  auto wait = std::make_shared<RunWait>(later.executor, later.gate);
  // Both answers come to this connection's strand in order: the start's
  // first (`ended` follows only a started run), so the start's outcome is
  // there for the result's answer.
  auto outcome = std::make_shared<StartOutcome>(StartOutcome::started);
  auto on_started = [id = call.id, timeout = call.timeout, outcome](RunWait& wait,
                                                                    std::variant<StartOutcome, Error> started) {
    if (const auto* failure = std::get_if<Error>(&started)) return wait.answer(from_error(*failure));
    *outcome = std::get<StartOutcome>(started);
    wait.rearm(timeout, timed_out(id, timeout));
  };
  auto on_ended = [id = call.id, outcome](RunWait& wait, std::variant<json::value, Error> ended) {
    wait.answer(executed(started_json(id, *outcome), ended));
  };
  try {
    engine_.execute_json_then(call.workflow, call.id, std::move(call.input), call.options,
                              wait->then<StartOutcome>(std::move(on_started)),
                              wait->then<json::value>(std::move(on_ended)));
  } catch (const Error& failure) {
    return from_error(failure);
  }
  wait->arm(options_.execute_timeout_max, timed_out(call.id, options_.execute_timeout_max), std::move(later.done));
  return std::nullopt;
}

// --- Updates and awakeables ---

struct HttpApi::UpdateHttpCall {
  UpdateCall call;
  std::chrono::milliseconds timeout{0};
};

namespace {

// An update id for a call that gave none: the answer names it, so the
// caller can ask again after a timeout.
std::string new_update_id() {
  static std::mutex mu;
  static std::mt19937_64 generator{std::random_device{}()};
  std::lock_guard lock(mu);
  return fmt::format("update-{:016x}{:016x}", generator(), generator());
}

json::object update_json(const UpdateCall& call) {
  return json::object{{"id", call.run_id}, {"update", call.update}, {"update_id", call.update_id}};
}

// The code's answer: 200 with the result, or with its failure (the code's
// reply_error, or a run that ended without answering); any other error
// (refused, unknown) is the error response.
HttpResponse update_answered(json::object out, const std::variant<json::value, Error>& answer) {
  if (const auto* result = std::get_if<json::value>(&answer)) {
    out["status"] = "completed";
    out["result"] = *result;
    return json_response(200, out);
  }
  const auto& failure = std::get<Error>(answer);
  if (failure.error() != errc::failed) return HttpApi::failure(failure);
  out["status"] = "failed";
  out["error"] = json::object{{"code", errc_name(failure.error())}, {"message", failure.what()}};
  return json_response(200, out);
}

HttpResponse update_timed_out(const UpdateCall& call, std::chrono::milliseconds timeout) {
  return HttpApi::error(504, "timed_out",
                        fmt::format("update '{}' of run '{}' was not answered within {} ms; it goes on: send it again "
                                    "with \"update_id\": \"{}\" for its answer",
                                    call.update, call.run_id, timeout.count(), call.update_id));
}

}  // namespace

std::variant<HttpApi::UpdateHttpCall, HttpResponse> HttpApi::read_update(
    const std::string& id, const std::string& name, const HttpRequest& request,
    const std::map<std::string, std::string>& query) {
  HttpResponse problem;
  auto body = body_object(request, problem, {"arg", "update_id", "start"});
  if (!body) return problem;
  UpdateHttpCall read;
  read.call.run_id = id;
  read.call.update = name;
  if (const auto* given = body->if_contains("arg")) read.call.arg = *given;
  if (auto given = string_field(*body, "update_id", false, problem)) {
    if (given->empty()) return error(400, "invalid_argument", "\"update_id\" must not be empty");
    read.call.update_id = *given;
  } else if (problem.status != 200) {
    return problem;
  } else {
    read.call.update_id = new_update_id();
  }
  if (const auto* start = body->if_contains("start"); start != nullptr && !start->is_null()) {
    if (!start->is_object()) return error(400, "invalid_argument", "\"start\" must be an object (POST /v1/runs's fields)");
    if (start->as_object().contains("id")) {
      return error(400, "invalid_argument", "\"start\" takes no \"id\": the run's id is the path's");
    }
    // The start's fields as POST /v1/runs reads them, with the path's id.
    auto fields = start->as_object();
    fields["id"] = id;
    HttpRequest as_start = request;
    as_start.body = json::serialize(fields);
    auto started = read_start(as_start, false, {});
    if (auto* refused = std::get_if<HttpResponse>(&started)) return std::move(*refused);
    auto& call = std::get<StartCall>(started);
    read.call.start = UpdateStart{std::move(call.workflow), std::move(call.input), call.options};
  }
  read.timeout = options_.execute_timeout_max;
  if (auto given = query.find("timeout_ms"); given != query.end()) {
    auto ms = number_text(given->second);
    if (!ms || *ms == 0) return error(400, "invalid_argument", "timeout_ms must be a positive whole number");
    read.timeout = std::min(read.timeout, std::chrono::milliseconds(*ms));
  }
  return read;
}

HttpResponse HttpApi::update(const std::string& id, const std::string& name, const HttpRequest& request,
                             const std::map<std::string, std::string>& query) {
  auto read = read_update(id, name, request, query);
  if (auto* problem = std::get_if<HttpResponse>(&read)) return std::move(*problem);
  auto& [call, timeout] = std::get<UpdateHttpCall>(read);
  auto out = update_json(call);
  try {
    auto answer = engine_.update_json_async(call);
    if (answer.wait_for(timeout) != std::future_status::ready) return update_timed_out(call, timeout);
    std::variant<json::value, Error> answered = json::value();
    try {
      answered = answer.get();
    } catch (const Error& failure) {
      answered = failure;
    }
    return update_answered(std::move(out), answered);
  } catch (const Error& failure) {
    return from_error(failure);
  }
}

// The same answers as update(), without a thread.
std::optional<HttpResponse> HttpApi::update_later(const std::string& id, const std::string& name,
                                                  const HttpRequest& request,
                                                  const std::map<std::string, std::string>& query, Later& later) {
  auto read = read_update(id, name, request, query);
  if (auto* problem = std::get_if<HttpResponse>(&read)) return std::move(*problem);
  auto& [call, timeout] = std::get<UpdateHttpCall>(read);
  auto wait = std::make_shared<RunWait>(later.executor, later.gate);
  auto at_deadline = update_timed_out(call, timeout);
  auto on_answer = [out = update_json(call)](RunWait& wait, std::variant<json::value, Error> answer) {
    wait.answer(update_answered(out, answer));
  };
  try {
    engine_.update_json_then(std::move(call), wait->then<json::value>(std::move(on_answer)));
  } catch (const Error& failure) {
    return from_error(failure);
  }
  wait->arm(timeout, std::move(at_deadline), std::move(later.done));
  return std::nullopt;
}

HttpResponse HttpApi::complete_awakeable(const std::string& token, const HttpRequest& request, bool succeeded) {
  HttpResponse problem;
  auto body = body_object(request, problem, {succeeded ? "value" : "message"});
  if (!body) return problem;
  json::value value = nullptr;
  if (succeeded) {
    if (const auto* given = body->if_contains("value")) value = *given;
  } else {
    auto message = string_field(*body, "message", true, problem);
    if (!message) return problem;
    value = json::value(*message);
  }
  try {
    engine_.complete_awakeable_json(token, succeeded, std::move(value));
  } catch (const Error& failure) {
    return from_error(failure);
  }
  return json_response(200, json::object{{"status", succeeded ? "completed" : "failed"}});
}

HttpResponse HttpApi::get_run(const std::string& id) {
  auto info = engine_.get_run(id);
  if (!info) return error(404, "not_found", fmt::format("no run '{}'", id));
  auto out = run_json(*info);
  if (info->status == RunStatus::completed) {
    try {
      out["result"] = engine_.result_json(id);
    } catch (const Error&) {
      out["result"] = nullptr;  // finished past its retention between the two reads
    }
  }
  return json_response(200, out);
}

HttpResponse HttpApi::list(const std::map<std::string, std::string>& query) {
  RunListQuery wanted;
  if (auto workflow = query.find("workflow"); workflow != query.end()) wanted.workflow_prefix = workflow->second;
  if (auto status = query.find("status"); status != query.end()) {
    for (auto candidate : kRunStatuses) {
      if (status->second == run_status_name(candidate)) wanted.status = candidate;
    }
    if (!wanted.status) return error(400, "invalid_argument", "status is one of running, completed, failed, cancelled, stuck");
  }
  if (auto given = query.find("limit"); given != query.end()) {
    auto value = number_text(given->second);
    if (!value || *value == 0 || *value > 10000) return error(400, "invalid_argument", "limit is 1 to 10000");
    wanted.limit = *value;
  }
  if (auto order = query.find("order"); order != query.end()) {
    if (order->second == "newest") {
      wanted.order = RunListQuery::Order::newest;
    } else if (order->second == "oldest") {
      wanted.order = RunListQuery::Order::oldest;
    } else if (order->second == "id") {
      wanted.order = RunListQuery::Order::id;
    } else {
      return error(400, "invalid_argument", "order is one of newest, oldest, id");
    }
  }
  if (auto cursor = query.find("cursor"); cursor != query.end()) wanted.cursor = cursor->second;
  if (auto given = query.find("id_prefix"); given != query.end()) wanted.id_prefix = given->second;
  // Started in [started_from_ms, started_to_ms), milliseconds since the epoch.
  for (auto [name, bound] : {std::pair{"started_from_ms", &wanted.started_from}, std::pair{"started_to_ms", &wanted.started_to}}) {
    if (auto given = query.find(name); given != query.end()) {
      auto value = number_text(given->second);
      if (!value || *value > static_cast<std::uint64_t>(kTimeMsMax)) {
        return error(400, "invalid_argument",
                     fmt::format("{} is a time from 0 to {} ms since the Unix epoch", name, kTimeMsMax));
      }
      *bound = TimePoint(std::chrono::milliseconds(*value));
    }
  }
  // From the engine's run index: the page's size, not a scan of the runs.
  auto found = engine_.query_runs(wanted);
  json::array page;
  for (const auto& run : found.runs) page.push_back(run_json(run));
  auto cursor = [](const std::string& text) { return text.empty() ? json::value(nullptr) : json::value(text); };
  return json_response(200, json::object{{"runs", std::move(page)},
                                         {"next_cursor", cursor(found.next_cursor)},
                                         {"previous_cursor", cursor(found.previous_cursor)},
                                         {"total", found.total},
                                         {"total_exact", found.total_exact}});
}

HttpResponse HttpApi::signal(const std::string& id, const std::string& name, const HttpRequest& request) {
  HttpResponse problem;
  auto body = body_object(request, problem, {"value", "signal_id"});
  if (!body) return problem;
  json::value value = nullptr;
  if (const auto* given = body->if_contains("value")) value = *given;
  std::string signal_id;
  if (auto given = string_field(*body, "signal_id", false, problem)) {
    signal_id = *given;
  } else if (problem.status != 200) {
    return problem;
  }
  try {
    engine_.signal_json(id, name, std::move(value), signal_id);
  } catch (const Error& failure) {
    return from_error(failure);
  }
  return json_response(202, json::object{{"id", id}, {"signal", name}, {"accepted", true}});
}

HttpResponse HttpApi::cancel(const std::string& id, const HttpRequest& request, bool terminate) {
  HttpResponse problem;
  auto body = body_object(request, problem, {"reason"});
  if (!body) return problem;
  std::string reason = terminate ? "terminated over HTTP" : "cancelled over HTTP";
  if (auto given = string_field(*body, "reason", false, problem)) {
    reason = *given;
  } else if (problem.status != 200) {
    return problem;
  }
  if (!engine_.get_run(id)) return error(404, "not_found", fmt::format("no run '{}'", id));
  try {
    if (terminate) {
      engine_.terminate(id, reason);
    } else {
      engine_.cancel(id, reason);
    }
  } catch (const Error& failure) {
    return from_error(failure);
  }
  // A cancel is accepted: the run ends once its code lets the cancellation
  // through (GET .../result waits for that). A terminated run has ended.
  return json_response(202, json::object{{"id", id}, {terminate ? "terminated" : "cancelled", true}});
}

HttpResponse HttpApi::answer_query(const std::string& id, const std::string& name, const HttpRequest& request) {
  HttpResponse problem;
  auto body = body_object(request, problem, {"arg"});
  if (!body) return problem;
  json::value arg = nullptr;
  if (const auto* given = body->if_contains("arg")) arg = *given;
  try {
    auto answer = engine_.query_json(id, name, std::move(arg));
    return json_response(200, json::object{{"id", id}, {"query", name}, {"answer", std::move(answer)}});
  } catch (const Error& failure) {
    return from_error(failure);
  }
}

HttpResponse HttpApi::reset(const std::string& id, const HttpRequest& request) {
  HttpResponse problem;
  auto body = body_object(request, problem, {"position", "after_step", "reason"});
  if (!body) return problem;
  ResetPoint point;
  if (const auto* position = body->if_contains("position"); position != nullptr && !position->is_null()) {
    if (!position->is_int64() || position->as_int64() < 0 || position->as_int64() > UINT32_MAX) {
      return error(400, "invalid_argument", "\"position\" must be a command position (a whole number from 0)");
    }
    point.position = static_cast<std::uint32_t>(position->as_int64());
  }
  if (auto step = string_field(*body, "after_step", false, problem)) {
    point.after_step = *step;
  } else if (problem.status != 200) {
    return problem;
  }
  if (point.position.has_value() == point.after_step.has_value()) {
    return error(400, "invalid_argument", "give one of \"position\" and \"after_step\"");
  }
  std::string reason = "reset over HTTP";
  if (auto given = string_field(*body, "reason", false, problem)) {
    reason = *given;
  } else if (problem.status != 200) {
    return problem;
  }
  try {
    engine_.reset(id, point, reason);
  } catch (const Error& failure) {
    return from_error(failure);
  }
  auto info = engine_.get_run(id);
  return json_response(202, json::object{{"id", id}, {"reset", true}, {"generation", info ? info->generation : 0}});
}

std::map<std::string, std::uint64_t> HttpApi::runs_by_status() {
  std::map<std::string, std::uint64_t> by_status;
  // Counters the engine keeps as runs change state, not a scan.
  auto counts = engine_.count_runs();
  for (std::size_t k = 0; k < kRunStatuses.size(); ++k) by_status[run_status_name(kRunStatuses[k])] = counts[k];
  return by_status;
}

HttpResponse HttpApi::metrics() {
  auto stats = engine_.stats();
  // A replica that runs nothing now (a backup) counts no runs -- the
  // primary's /metrics does, and a sum over the cluster's replicas must
  // not count a run twice -- but shows its part in the cluster.
  std::map<std::string, std::uint64_t> by_status;
  if (!stats.replica.enabled || stats.shards_held > 0) {
    try {
      by_status = runs_by_status();
    } catch (const Error& failure) {
      if (failure.error() != errc::unavailable) throw;
    }
  }
  std::string text;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    append_metric(text, name, type, help, value);
  };
  metric("fusee_records_written_total", "counter", "Journal records made durable.", stats.records_written);
  metric("fusee_flushes_total", "counter", "Log batches written, each one durable write.", stats.batches_written);
  metric("fusee_records_per_flush", "gauge", "Records per durable write, on average since open.",
         records_per_flush(stats.records_written, stats.batches_written));
  metric("fusee_inline_writes_total", "counter", "Batches a shard wrote itself.", stats.inline_writes);
  metric("fusee_wal_segments", "gauge", "Live log segments.", stats.wal_segments);
  metric("fusee_wal_bytes", "gauge", "Bytes of the live log segments.", stats.wal_bytes);
  metric("fusee_checkpoints_total", "counter", "Shard checkpoints written to the run store.", stats.checkpoints);
  metric("fusee_segments_retired_total", "counter", "Log segments retired.", stats.segments_retired);
  metric("fusee_checkpoint_failed", "gauge", "1 when checkpoints stopped on an error.",
         stats.checkpoint_error.empty() ? 0 : 1);
  metric("fusee_log_failed", "gauge", "1 when a write or flush failed and the log stopped (reopen to recover).",
         stats.log_error.empty() ? 0 : 1);
  metric("fusee_run_store_bytes", "gauge", "The run store's size (RocksDB's estimate).", stats.run_store_bytes);
  metric("fusee_runs_parked_total", "counter", "Runs that left memory while waiting.", stats.runs_parked);
  metric("fusee_runs_woken_total", "counter", "Parked runs loaded back.", stats.runs_woken);
  metric("fusee_runs_started_total", "counter", "Runs started (a reset and a continue-as-new start one).",
         stats.runs_started);
  metric("fusee_runs_finished_total", "counter", "Runs that completed, failed or were cancelled.",
         stats.runs_finished);
  metric("fusee_runs_failed_total", "counter", "Runs that failed.", stats.runs_failed);
  metric("fusee_steps_completed_total", "counter", "Steps that completed.", stats.steps_completed);
  metric("fusee_shards", "gauge", "Shards of this engine.", engine_.shard_count());
  metric("fusee_staged_bytes", "gauge", "Bytes appended to the log and not yet in a durable write.",
         stats.staged_bytes);
  append_seconds_histogram(text, "fusee_flush_duration_seconds", "Durable writes of the log by how long they took.",
                           kFlushLatencyBoundsUs, stats.flush_latency_counts, stats.flush_latency_sum_us);
  append_limit_metrics(text, stats.limits);
  if (stats.backup.enabled) {
    // The continuous backup (docs/backup.md).
    metric("fusee_backup_uploads_total", "counter", "Backup uploads (manifests) written.", stats.backup.uploads);
    metric("fusee_backup_chunks_total", "counter", "Chunks of log segment bytes uploaded.", stats.backup.chunks);
    metric("fusee_backup_bytes_total", "counter", "Bytes of the log uploaded.", stats.backup.bytes);
    metric("fusee_backup_failures_total", "counter", "Backup uploads that failed (each tried again).",
           stats.backup.failures);
    metric("fusee_backup_blobs_total", "counter", "Large records (blob area) uploaded in blob packs.",
           stats.backup.blobs);
    metric("fusee_backup_snapshots_total", "counter", "Snapshots of the run store uploaded.", stats.backup.snapshots);
    metric("fusee_backup_snapshot_sequence", "gauge",
           "The log batch the newest snapshot on the target covers to: a restore replays the log from there.",
           stats.backup.snapshot_sequence);
    metric("fusee_backup_retired_objects_total", "counter",
           "Objects deleted from the backup target by backup_retention.", stats.backup.retired_objects);
    metric("fusee_backup_backlog_bytes", "gauge",
           "Bytes of the log not on the backup target, as of the last failed upload (0 after a good one).",
           stats.backup.backlog_bytes);
    metric("fusee_backup_backlog_full", "gauge",
           "1 while the backlog is past backup_backlog_bytes_max and new requests are refused.",
           stats.backup.backlog_full ? 1 : 0);
    metric("fusee_backup_loss_window_seconds", "gauge",
           "What losing the disk now would lose, as time: from the newest batch on the target to now while the log "
           "holds batches past it; 0 when it holds none.",
           static_cast<double>(stats.backup.loss_window.count()) / 1000);
    metric("fusee_backup_upload_lag_p99_seconds", "gauge",
           "From a log batch's publication to the end of the upload covering it: p99 over the last 8192 batches.",
           static_cast<double>(stats.backup.upload_lag_p99.count()) / 1000);
    metric("fusee_backup_stopped", "gauge",
           "1 once the backup stopped for good (the target is another directory's).", stats.backup.stopped ? 1 : 0);
    metric("fusee_backup_pending_batches", "gauge",
           "Log batches published and not yet uploaded: what losing the disk would lose now.",
           stats.backup.pending_batches);
    const auto covered_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                stats.backup.covered_at.time_since_epoch())
                                .count();
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            engine_.now().time_since_epoch())
                            .count();
    metric("fusee_backup_newest_uploaded_age_seconds", "gauge",
           "Age of the newest log batch the backup holds (0 before the first upload).",
           covered_ms > 0 ? static_cast<double>(std::max<std::int64_t>(0, now_ms - covered_ms)) / 1000 : 0.0);
  }
  if (stats.replica.enabled) append_replica_metrics(text, stats.replica);
  text += "# HELP fusee_runs Runs by status.\n# TYPE fusee_runs gauge\n";
  for (const auto& [status, count] : by_status) text += fmt::format("fusee_runs{{status=\"{}\"}} {}\n", status, count);
  HttpResponse response;
  response.content_type = "text/plain; version=0.0.4";
  response.body = std::move(text);
  return response;
}

// GET /v1/stats/activity: the engine's work each second over the last ten
// minutes (Engine::activity), oldest first, for the console's charts.
HttpResponse HttpApi::activity_json() {
  json::array samples;
  for (const auto& sample : engine_.activity()) {
    samples.push_back(json::object{{"at_ms", to_ms(sample.at)},
                                   {"interval_ms", sample.interval.count()},
                                   {"runs_started", sample.runs_started},
                                   {"runs_finished", sample.runs_finished},
                                   {"runs_failed", sample.runs_failed},
                                   {"steps_completed", sample.steps_completed},
                                   {"flushes", sample.flushes},
                                   {"flush_mean_us", sample.flush_mean_us},
                                   {"flush_p50_us", sample.flush_p50_us},
                                   {"flush_p99_us", sample.flush_p99_us}});
  }
  return json_response(200, json::object{{"samples", std::move(samples)}});
}

// GET /v1/cluster: in replicated mode, every replica as it answers now
// (Engine::cluster); elsewhere, none.
HttpResponse HttpApi::cluster_json() {
  const auto stats = engine_.stats();
  const auto self = stats.replica.enabled ? std::optional<std::uint32_t>(stats.replica.replica_id) : std::nullopt;
  return json_response(200, http::cluster_json(engine_.cluster(), self));
}

// GET /v1/stats: what /metrics says, as one JSON object, for pages and
// tools that read JSON (the flush histogram with its bounds in µs).
HttpResponse HttpApi::stats_json() {
  auto stats = engine_.stats();
  auto counts = runs_by_status();
  json::object by_status;  // in kRunStatuses's order, running first
  for (auto status : kRunStatuses) by_status[run_status_name(status)] = counts[run_status_name(status)];
  json::object out{
      {"shards", engine_.shard_count()},
      {"shards_held", stats.shards_held},
      {"runs", std::move(by_status)},
      {"records_written", stats.records_written},
      {"flushes", stats.batches_written},
      {"records_per_flush", records_per_flush(stats.records_written, stats.batches_written)},
      {"inline_writes", stats.inline_writes},
      {"direct_io", stats.direct_io},
      {"staged_bytes", stats.staged_bytes},
      {"wal_segments", stats.wal_segments},
      {"wal_bytes", stats.wal_bytes},
      {"checkpoints", stats.checkpoints},
      {"segments_retired", stats.segments_retired},
      {"run_store_bytes", stats.run_store_bytes},
      {"runs_parked", stats.runs_parked},
      {"runs_woken", stats.runs_woken},
      {"runs_started", stats.runs_started},
      {"runs_finished", stats.runs_finished},
      {"runs_failed", stats.runs_failed},
      {"steps_completed", stats.steps_completed},
      {"checkpoint_error", stats.checkpoint_error.empty() ? json::value(nullptr) : json::value(stats.checkpoint_error)},
      {"log_error", stats.log_error.empty() ? json::value(nullptr) : json::value(stats.log_error)},
      {"flush_latency",
       latency_histogram_json(kFlushLatencyBoundsUs, stats.flush_latency_counts, stats.flush_latency_sum_us)}};
  json::array limits;
  for (const auto& limit : stats.limits) {
    limits.push_back(json::object{{"name", limit.name},
                                  {"concurrent", limit.limit.concurrent},
                                  {"per_second", limit.limit.per_second},
                                  {"in_use", limit.in_use},
                                  {"waiting", limit.waiting},
                                  {"granted", limit.granted},
                                  {"waited_us", limit.waited_us}});
  }
  out["limits"] = std::move(limits);
  if (stats.backup.enabled) {
    out["backup"] = boost::json::object{
        {"uploads", stats.backup.uploads},
        {"chunks", stats.backup.chunks},
        {"bytes", stats.backup.bytes},
        {"failures", stats.backup.failures},
        {"snapshots", stats.backup.snapshots},
        {"snapshot_sequence", stats.backup.snapshot_sequence},
        {"retired_objects", stats.backup.retired_objects},
        {"snapshot_at_ms",
         std::chrono::duration_cast<std::chrono::milliseconds>(stats.backup.snapshot_at.time_since_epoch()).count()},
        {"covered_sequence", stats.backup.covered_sequence},
        {"covered_at_ms",
         std::chrono::duration_cast<std::chrono::milliseconds>(stats.backup.covered_at.time_since_epoch()).count()},
        {"pending_batches", stats.backup.pending_batches},
        {"blobs", stats.backup.blobs},
        {"backlog_bytes", stats.backup.backlog_bytes},
        {"backlog_full", stats.backup.backlog_full},
        {"connected", stats.backup.connected},
        {"stopped", stats.backup.stopped},
        {"upload_lag_p50_ms", stats.backup.upload_lag_p50.count()},
        {"upload_lag_p99_ms", stats.backup.upload_lag_p99.count()},
        {"upload_lag_max_ms", stats.backup.upload_lag_max.count()},
        {"loss_window_ms", stats.backup.loss_window.count()},
        {"error", stats.backup.error.empty() ? boost::json::value(nullptr) : boost::json::value(stats.backup.error)}};
  } else {
    out["backup"] = nullptr;
  }
  return json_response(200, out);
}

std::optional<HttpResponse> HttpApi::console(const HttpRequest& request) {
  std::string_view path = std::string_view(request.target).substr(0, request.target.find('?'));
  if (path != "/" && path != "/ui" && !path.starts_with("/ui/")) return std::nullopt;
  if (request.method != "GET" && request.method != "HEAD") {
    auto response = error(405, "method_not_allowed", fmt::format("{} takes GET", path));
    response.headers["Allow"] = "GET";
    return response;
  }
  if (path == "/" || path == "/ui") {
    HttpResponse response;
    response.status = 302;
    response.content_type = "text/plain; charset=utf-8";
    response.headers["Location"] = "/ui/";
    response.body = "the console is at /ui/\n";
    return response;
  }
  auto name = path.substr(4);
  if (name.empty()) name = "index.html";
  for (const auto& file : console_files()) {
    if (file.name != name) continue;
    HttpResponse response;
    response.content_type = std::string(file.content_type);
    response.body = std::string(file.body);
    // Everything from this origin, nothing inline, nothing framed: the
    // console talks to its own engine only.
    response.headers["Content-Security-Policy"] =
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
    response.headers["X-Content-Type-Options"] = "nosniff";
    response.headers["Cache-Control"] = "no-cache";
    return response;
  }
  return error(404, "not_found", fmt::format("the console has no {} (it starts at /ui/)", path));
}

namespace {

HttpResponse method_not_allowed(const std::string& target, const char* allowed) {
  auto response = HttpApi::error(405, "method_not_allowed", fmt::format("{} takes {}", target, allowed));
  response.headers["Allow"] = allowed;
  return response;
}

// The descriptions of the running runs of a built-in workflow (schedules,
// queues), by the name after their run id's prefix; one gone meanwhile is
// left out.
template <typename Describe>
json::array describe_running(Engine& engine, const char* workflow, std::string_view prefix, Describe describe) {
  json::array listed;
  RunListQuery query;
  query.status = RunStatus::running;
  query.id_prefix = std::string(prefix);
  query.order = RunListQuery::Order::id;
  query.limit = 1000;
  for (;;) {
    auto page = engine.query_runs(query);
    for (const auto& run : page.runs) {
      if (run.workflow != workflow) continue;
      try {
        listed.push_back(describe(run.id.substr(prefix.size())));
      } catch (const Error& failure) {
        if (failure.error() != errc::not_found) throw;
      }
    }
    if (page.next_cursor.empty()) return listed;
    query.cursor = page.next_cursor;
  }
}

}  // namespace

HttpResponse HttpApi::schedules(const std::vector<std::string>& parts, const std::string& method,
                                const HttpRequest& request) {
  auto wrong_method = [&](const char* allowed) { return method_not_allowed(request.target, allowed); };
  HttpResponse problem;
  if (parts.size() == 2) {
    if (method == "GET") {
      auto listed = describe_running(engine_, schedule::kScheduleWorkflow, schedule::kScheduleRunPrefix,
                                     [&](const std::string& id) { return engine_.describe_schedule_json(id); });
      return json_response(200, json::object{{"schedules", std::move(listed)}});
    }
    if (method != "POST") return wrong_method("GET, POST");
    auto body = body_object(request, problem, {"id", "spec", "workflow", "input", "options"});
    if (!body) return problem;
    auto id = string_field(*body, "id", true, problem);
    if (!id) return problem;
    auto workflow = string_field(*body, "workflow", true, problem);
    if (!workflow) return problem;
    if (!body->contains("spec")) return error(400, "invalid_argument", "\"spec\" is required");
    auto spec = schedule::spec_from_json(body->at("spec"));
    ScheduleOptions options;
    if (const auto* given = body->if_contains("options")) options = schedule::options_from_json(*given);
    json::value input = body->contains("input") ? body->at("input") : json::value(nullptr);
    engine_.schedule_json(*id, spec, *workflow, std::move(input), options);
    return json_response(201, engine_.describe_schedule_json(*id));
  }
  const auto& id = parts[2];
  if (parts.size() == 3) {
    if (method == "GET") return json_response(200, engine_.describe_schedule_json(id));
    if (method == "DELETE") {
      engine_.delete_schedule(id);
      return json_response(200, json::object{{"deleted", id}});
    }
    return wrong_method("GET, DELETE");
  }
  const auto& action = parts[3];
  if (action != "pause" && action != "resume" && action != "trigger" && action != "backfill" && action != "update") {
    return error(404, "no_route",
                 fmt::format("no schedule action '{}' (pause, resume, trigger, backfill, update)", action));
  }
  if (method != "POST") return wrong_method("POST");
  auto body = body_object(request, problem, {"note", "from_ms", "to_ms", "overlap", "spec", "workflow", "input", "options"});
  if (!body) return problem;
  for (const char* key : {"from_ms", "to_ms"}) {
    const auto* time = body->if_contains(key);
    if (time == nullptr) continue;
    if (!(time->is_int64() && time->as_int64() >= 0 && time->as_int64() <= kTimeMsMax)) {
      return error(400, "invalid_argument",
                   fmt::format("\"{}\" is a time from 0 to {} ms since the Unix epoch (the year 2200)", key, kTimeMsMax));
    }
  }
  json::object change = *body;
  change["action"] = action;
  return json_response(200, engine_.change_schedule_json(id, std::move(change)));
}

HttpResponse HttpApi::queues(const std::vector<std::string>& parts, const std::string& method,
                             const HttpRequest& request) {
  auto wrong_method = [&](const char* allowed) { return method_not_allowed(request.target, allowed); };
  HttpResponse problem;
  if (parts.size() == 2) {
    if (method == "GET") {
      auto listed = describe_running(engine_, queue::kQueueWorkflow, queue::kQueueRunPrefix,
                                     [&](const std::string& name) { return engine_.describe_queue_json(name); });
      return json_response(200, json::object{{"queues", std::move(listed)}});
    }
    if (method != "POST") return wrong_method("GET, POST");
    auto body = body_object(request, problem, {"name", "options"});
    if (!body) return problem;
    auto name = string_field(*body, "name", true, problem);
    if (!name) return problem;
    QueueOptions options;
    if (const auto* given = body->if_contains("options")) options = queue::options_from_json(*given);
    engine_.queue(*name, options);
    return json_response(200, engine_.describe_queue_json(*name));
  }
  const auto& name = parts[2];
  if (parts.size() == 3) {
    if (method != "GET") return wrong_method("GET");
    return json_response(200, engine_.describe_queue_json(name));
  }
  if (parts[3] != "runs") return error(404, "no_route", fmt::format("no route {} {} (docs/http-api.md lists them)", method, request.target));
  if (method != "POST") return wrong_method("POST");
  auto body = body_object(request, problem, {"workflow", "id", "input", "priority", "partition", "dedup_id"});
  if (!body) return problem;
  auto workflow = string_field(*body, "workflow", true, problem);
  if (!workflow) return problem;
  auto id = string_field(*body, "id", true, problem);
  if (!id) return problem;
  EnqueueOptions options;
  if (const auto* priority = body->if_contains("priority")) {
    if (!priority->is_int64() && !priority->is_uint64()) return error(400, "invalid_argument", "\"priority\" must be a whole number");
    options.priority = priority->to_number<std::int64_t>();
  }
  if (auto partition = string_field(*body, "partition", false, problem)) {
    options.partition = *partition;
  } else if (!problem.body.empty()) {  // there, but not a string
    return problem;
  }
  if (auto dedup = string_field(*body, "dedup_id", false, problem)) {
    options.dedup_id = *dedup;
  } else if (!problem.body.empty()) {  // there, but not a string
    return problem;
  }
  json::value input = body->contains("input") ? body->at("input") : json::value(nullptr);
  auto outcome = engine_.enqueue_json(name, *workflow, *id, std::move(input), options);
  return json_response(202, json::object{{"id", *id},
                                         {"queue", name},
                                         {"outcome", outcome == EnqueueOutcome::queued ? "queued" : "already_queued"}});
}

}  // namespace fusee::http
