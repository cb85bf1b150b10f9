// The HTTP front of `fusee server` (`--http`): the same routes as an
// engine's API (docs/http-api.md), answered by passing each call on to the
// worker that holds the run's shard, as the worker announced its HTTP API
// (server/log_service.hpp). A start names its run in the body; listing and
// /v1/stats go to the holder of shard 0 (a worker holds every shard, for
// now). /healthz, /metrics and /v1/server are the server's own. With a
// token, every route but /healthz wants it, as the engines' API does. Pure
// routing: no sockets here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "http/http_server.hpp"

namespace fusee::server {

struct FrontDirectory {
  std::uint32_t shard_count = 0;
  // The HTTP API of the worker holding the shard, if one holds it and said.
  std::function<std::optional<std::string>(std::uint32_t shard)> http_of;
  // The server's metrics, Prometheus text.
  std::function<std::string()> metrics;
  // The server's figures, JSON (GET /v1/server: shards and holders, the log).
  std::function<std::string()> stats;
  // GET /v1/cluster's body, JSON: every replica of `--replicated`'s cluster
  // (http/cluster_json.hpp); it must not block, and says none while the
  // replicas' first answers are awaited. Unset: a server that is no replica.
  std::function<std::optional<std::string>()> cluster;
};

http::HttpRouter make_front_router(FrontDirectory directory, std::string token);

}  // namespace fusee::server
