// The HTTP/JSON API's routes: a request in, a response out, over an Engine
// (docs/http-api.md). No sockets here (http/http_server.hpp has
// them), so every route and every error is tested without a network.
// Streams are the one route that is not a single response: route() names the
// stream and the server writes its chunks as they come.
//
// Two ways in. route() answers at once, blocking in the engine's calls (a
// start waits for its record to be durable, an execute for the run's end).
// route_async() answers the routes that wait on a run (waits() says which:
// execute) later, without a thread: the engine's *_then calls answer on an
// engine thread, the answer comes back to the caller's executor, and a timer
// there gives the 504. Every other route it answers at once, as route().
//
// Bad input gets a 4xx with a JSON body {"error": <errc name or reason>,
// "message": <what to do>}; nothing is recorded for a refused request.
// Thread-safe: the server calls route() from many threads at once, and
// route_async() from each connection's strand. The engine must outlive the
// HttpApi; route_async's answers use it from the caller's executor, so the
// server stops that executor before the HttpApi goes.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "fusee/engine.hpp"

namespace fusee::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::map<std::string, std::string> headers;  // names in lower case
  std::set<std::string> repeated_headers;       // names sent more than once (headers keeps the last)
  std::string body;
};

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;  // extra headers (WWW-Authenticate)
};

// GET /v1/runs/{id}/streams/{name}: what to stream.
struct StreamRequest {
  std::string run_id;
  std::string stream;
  std::uint64_t from = 0;  // first offset (?from=N, or Last-Event-ID + 1)
  bool sse = false;        // text/event-stream; otherwise NDJSON, chunked
};

struct HttpApiOptions {
  std::string token;  // when set, every route but /healthz wants "Authorization: Bearer <token>"
  // A remote-mode worker's: the token of `fusee server`'s HTTP front, which
  // passes its clients' calls on here as they came (empty: none). Taken as
  // well as `token`; asked for each request, as a new server may bring a
  // new one.
  std::function<std::string()> front_token;
  std::chrono::milliseconds execute_timeout_max{std::chrono::minutes(5)};
};

// What a route gives: the response, or the stream to write.
using Routed = std::variant<HttpResponse, StreamRequest>;
using RouteDone = std::function<void(Routed)>;

class ServerGate;

class HttpApi {
 public:
  HttpApi(Engine& engine, HttpApiOptions options) : engine_(engine), options_(std::move(options)) {}

  // The response, or the stream to write.
  std::variant<HttpResponse, StreamRequest> route(const HttpRequest& request);

  // How a route that waits on a run answers later (http/run_wait.hpp).
  struct Later {
    // The caller's strand: the deadline's timer runs here, and `done` is
    // called here.
    boost::asio::any_io_executor executor;
    // Closed when the server stops: an engine answer that comes after it is
    // dropped (http/server_gate.hpp).
    std::shared_ptr<ServerGate> gate;
    RouteDone done;
  };
  // Answers through later.done, once: before it returns, or later on
  // later.executor (never, if the server stops first). Call it on
  // later.executor. It blocks as route() does for every request but those
  // waits() names, so a server calls it for those alone where it must not
  // block, and route() for the rest where it may.
  void route_async(const HttpRequest& request, Later later);
  // Whether route_async answers this request without blocking a thread: a
  // POST to /v1/runs/execute or to /v1/runs/{id}/updates/{name}. From the method and the path alone, so a
  // server can decide before routing; a path it does not recognise
  // (percent-encoded, say) is routed right all the same, only blocking.
  static bool waits(const HttpRequest& request);

  // The web console (docs/console.md): GET / redirects to /ui/, GET /ui/...
  // serves its embedded files with a strict Content-Security-Policy, no token
  // needed (the page asks for one for the API). Nothing for other paths.
  // Shared with fusee server's front.
  static std::optional<HttpResponse> console(const HttpRequest& request);

  // The body of an error response.
  static HttpResponse error(unsigned status, const std::string& code, const std::string& message);
  // The error response for an engine's Error: its errc's status and name.
  static HttpResponse failure(const Error& error);

 private:
  // A start's fields, read and checked (http_api.cpp).
  struct StartCall;
  // route() and route_async(): nothing when `later` took the request and
  // will answer it.
  std::optional<Routed> route_to(const HttpRequest& request, Later* later);
  // A start's body and query, or the 4xx that refuses them.
  std::variant<StartCall, HttpResponse> read_start(const HttpRequest& request, bool execute,
                                                   const std::map<std::string, std::string>& query);
  HttpResponse start(const HttpRequest& request, bool execute, const std::map<std::string, std::string>& query);
  // POST /v1/runs/execute through route_async: nothing when `later` took it.
  std::optional<HttpResponse> execute_later(const HttpRequest& request,
                                            const std::map<std::string, std::string>& query, Later& later);
  HttpResponse get_run(const std::string& id);
  HttpResponse list(const std::map<std::string, std::string>& query);
  HttpResponse signal(const std::string& id, const std::string& name, const HttpRequest& request);
  HttpResponse reset(const std::string& id, const HttpRequest& request);
  HttpResponse answer_query(const std::string& id, const std::string& name, const HttpRequest& request);
  // POST /v1/runs/{id}/updates/{name}: read and checked; then answered
  // waiting (update) or without a thread (update_later: nothing when
  // `later` took it).
  struct UpdateHttpCall;
  std::variant<UpdateHttpCall, HttpResponse> read_update(const std::string& id, const std::string& name,
                                                         const HttpRequest& request,
                                                         const std::map<std::string, std::string>& query);
  HttpResponse update(const std::string& id, const std::string& name, const HttpRequest& request,
                      const std::map<std::string, std::string>& query);
  std::optional<HttpResponse> update_later(const std::string& id, const std::string& name,
                                           const HttpRequest& request,
                                           const std::map<std::string, std::string>& query, Later& later);
  // POST /v1/awakeables/{token}/complete or /fail.
  HttpResponse complete_awakeable(const std::string& token, const HttpRequest& request, bool succeeded);
  // POST .../cancel, or .../terminate.
  HttpResponse cancel(const std::string& id, const HttpRequest& request, bool terminate);
  // /v1/schedules...: parts past "v1" (docs/http-api.md, "Schedules").
  HttpResponse schedules(const std::vector<std::string>& parts, const std::string& method, const HttpRequest& request);
  // /v1/queues...: (docs/http-api.md, "Queues").
  HttpResponse queues(const std::vector<std::string>& parts, const std::string& method, const HttpRequest& request);
  HttpResponse metrics();
  HttpResponse stats_json();
  HttpResponse activity_json();
  HttpResponse cluster_json();
  // Every status with its count of runs (0 included): /metrics and /v1/stats.
  std::map<std::string, std::uint64_t> runs_by_status();

  Engine& engine_;
  HttpApiOptions options_;
};

// Percent-decoding of one path segment or query value; nothing when malformed.
std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space);

}  // namespace fusee::http
