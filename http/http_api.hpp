// The HTTP/JSON API's routes: a request in, a response out, over an Engine
// (docs/http-api.md). No sockets here (http/http_server.hpp has
// them), so every route and every error is tested without a network.
// Streams are the one route that is not a single response: route() names the
// stream and the server writes its chunks as they come.
//
// Bad input gets a 4xx with a JSON body {"error": <errc name or reason>,
// "message": <what to do>}; nothing is recorded for a refused request.
// Thread-safe: the server calls it from one thread per connection.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

#include "fusee/engine.hpp"

namespace fusee::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::map<std::string, std::string> headers;  // names in lower case
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
  std::chrono::milliseconds execute_timeout_max{std::chrono::minutes(5)};
};

class HttpApi {
 public:
  HttpApi(Engine& engine, HttpApiOptions options) : engine_(engine), options_(std::move(options)) {}

  // The response, or the stream to write.
  std::variant<HttpResponse, StreamRequest> route(const HttpRequest& request);

  // The body of an error response.
  static HttpResponse error(unsigned status, const std::string& code, const std::string& message);

 private:
  HttpResponse start(const HttpRequest& request, bool execute, const std::map<std::string, std::string>& query);
  HttpResponse get_run(const std::string& id);
  HttpResponse list(const std::map<std::string, std::string>& query);
  HttpResponse signal(const std::string& id, const std::string& name, const HttpRequest& request);
  HttpResponse reset(const std::string& id, const HttpRequest& request);
  HttpResponse answer_query(const std::string& id, const std::string& name, const HttpRequest& request);
  // POST .../cancel, or .../terminate.
  HttpResponse cancel(const std::string& id, const HttpRequest& request, bool terminate);
  HttpResponse metrics();

  Engine& engine_;
  HttpApiOptions options_;
};

// Percent-decoding of one path segment or query value; nothing when malformed.
std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space);

}  // namespace fusee::http
