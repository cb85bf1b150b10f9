#include "server/http_front.hpp"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <vector>

#include "engine/awakeable_token.hpp"
#include "engine/run_hash.hpp"
#include "http/request_guard.hpp"
#include "queue/queue_state.hpp"
#include "schedule/schedule_state.hpp"

namespace fusee::server {

using http::HttpApi;
using http::HttpRequest;
using http::HttpResponse;
using http::HttpRoute;
using http::HttpRouter;
using http::Relay;
using http::percent_decode;

namespace {

std::vector<std::string> path_parts(const std::string& target) {
  std::vector<std::string> parts;
  auto path = std::string_view(target).substr(0, target.find('?'));
  std::size_t at = 0;
  while (at < path.size()) {
    auto end = path.find('/', at);
    if (end == std::string_view::npos) end = path.size();
    if (end > at) {
      auto decoded = percent_decode(path.substr(at, end - at), false);
      parts.push_back(decoded ? *decoded : std::string(path.substr(at, end - at)));
    }
    at = end + 1;
  }
  return parts;
}

}  // namespace

HttpRouter make_front_router(FrontDirectory directory, std::string token) {
  return [directory = std::move(directory), token = std::move(token)](const HttpRequest& request) -> HttpRoute {
    if (auto page = HttpApi::console(request)) return std::move(*page);
    auto parts = path_parts(request.target);
    if (parts.size() == 1 && parts[0] == "healthz") {
      HttpResponse response;
      response.body = fmt::format("{{\"status\":\"ok\",\"shards\":{}}}\n", directory.shard_count);
      return response;
    }
    if (auto refused = http::refuse_without_token(request, {token})) return std::move(*refused);
    if (parts.size() == 1 && parts[0] == "metrics") {
      HttpResponse response;
      response.content_type = "text/plain; version=0.0.4";
      response.body = directory.metrics();
      return response;
    }
    if (parts.size() == 2 && parts[0] == "v1" && parts[1] == "server") {
      if (request.method != "GET") {
        auto response = HttpApi::error(405, "method_not_allowed", "/v1/server takes GET");
        response.headers["Allow"] = "GET";
        return response;
      }
      HttpResponse response;
      response.body = directory.stats() + "\n";
      return response;
    }
    if (parts.size() == 2 && parts[0] == "v1" && parts[1] == "cluster") {
      // A server that is no replica answers as an engine not in
      // replicated mode does (docs/http-api.md).
      if (request.method != "GET") {
        auto response = HttpApi::error(405, "method_not_allowed", "/v1/cluster takes GET");
        response.headers["Allow"] = "GET";
        return response;
      }
      HttpResponse response;
      if (!directory.cluster) {
        response.body = "{\"replicated\":false,\"replicas\":[]}\n";
        return response;
      }
      auto cluster = directory.cluster();
      if (!cluster) {
        response = HttpApi::error(503, "unavailable", "the replicas are being asked for their status: try again");
        response.headers["Retry-After"] = "1";
        return response;
      }
      response.body = *cluster + "\n";
      return response;
    }
    // An awakeable's completion goes to the holder of its run's shard: the
    // token names the run.
    std::optional<std::string> id;
    if (parts.size() == 4 && parts[0] == "v1" && parts[1] == "awakeables") {
      auto token = engine::parse_token(parts[2]);
      if (!token) {
        return HttpApi::error(400, "invalid_argument",
                              "not an awakeable token (tokens look like awk1.<hex>.<position>.<32 hex digits>)");
      }
      id = token->run_id;
    } else if ((parts.size() == 2 || parts.size() == 3) && parts[0] == "v1" && parts[1] == "stats") {
      // The engine's figures (and their history, /v1/stats/activity), from
      // the holder of shard 0 (as a listing).
    } else if (parts.size() >= 2 && parts[0] == "v1" && parts[1] == "queues") {
      // A queue is its run "queue:<name>": to its shard's holder.
      if (parts.size() >= 3) {
        id = queue::kQueueRunPrefix + parts[2];
      } else if (request.method == "POST") {
        boost::system::error_code error;
        auto body = boost::json::parse(request.body, error);
        const auto* object = error ? nullptr : body.if_object();
        const auto* given = object ? object->if_contains("name") : nullptr;
        if (given == nullptr || !given->is_string()) {
          return HttpApi::error(400, "invalid_argument", "a queue needs a JSON body with a string \"name\"");
        }
        id = queue::kQueueRunPrefix + std::string(given->as_string());
      }
    } else if (parts.size() >= 2 && parts[0] == "v1" && parts[1] == "schedules") {
      // A schedule is its run "schedule:<id>": to its shard's holder (a
      // listing to shard 0's, as runs' are).
      if (parts.size() >= 3) {
        id = schedule::kScheduleRunPrefix + parts[2];
      } else if (request.method == "POST") {
        boost::system::error_code error;
        auto body = boost::json::parse(request.body, error);
        const auto* object = error ? nullptr : body.if_object();
        const auto* given = object ? object->if_contains("id") : nullptr;
        if (given == nullptr || !given->is_string()) {
          return HttpApi::error(400, "invalid_argument", "a schedule needs a JSON body with a string \"id\"");
        }
        id = schedule::kScheduleRunPrefix + std::string(given->as_string());
      }
    } else if (parts.size() < 2 || parts[0] != "v1" || parts[1] != "runs") {
      return HttpApi::error(404, "no_route", fmt::format("no route {} {} (docs/http-api.md lists them)", request.method,
                                                         request.target));
    }
    // Which run the call is about: in the path, or in a start's body.
    if (!id && parts[1] == "runs" && parts.size() >= 3 && parts[2] != "execute") id = parts[2];
    if (request.method == "POST" && parts[1] == "runs" &&
        (parts.size() == 2 || (parts.size() == 3 && parts[2] == "execute"))) {
      boost::system::error_code error;
      auto body = boost::json::parse(request.body, error);
      const auto* object = error ? nullptr : body.if_object();
      const auto* given = object ? object->if_contains("id") : nullptr;
      if (given == nullptr || !given->is_string()) {
        return HttpApi::error(400, "invalid_argument", "a start needs a JSON body with a string \"id\"");
      }
      id = std::string(given->as_string());
    }
    std::uint32_t shard = id ? engine::shard_of(*id, directory.shard_count) : 0;
    auto http = directory.http_of(shard);
    if (!http) {
      auto response = HttpApi::error(503, "no_worker",
                                     fmt::format("no worker with an HTTP API holds shard {} now; try again", shard));
      response.headers["Retry-After"] = "1";
      return response;
    }
    return Relay{*http};
  };
}

}  // namespace fusee::server
