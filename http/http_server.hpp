// The HTTP server: Boost.Beast over blocking sockets, one thread accepting
// and one thread per connection (at most kConnectionsMax; past it a
// connection gets 503 and is closed). Each request goes to HttpApi; a
// stream's chunks are written as they become durable (chunked NDJSON, or
// server-sent events). Requests larger than the body limit get 413, bytes
// that are not HTTP get 400; either closes that one connection.
//
// Started by Engine::open when Config::http_listen is set (local mode), and
// by `fusee server`. stop() closes the listener, ends every connection and
// joins the threads; the engine stops it before its shards.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <functional>
#include <variant>

#include "http/http_api.hpp"

namespace fusee::http {

// What to do with a request that is not answered here and now: hand it, as
// it came, to another HTTP server (`fusee server` passing a call to the
// worker that holds the run's shard) and relay its answer back byte for
// byte, streams included.
struct Relay {
  std::string endpoint;  // "host:port"
};

using HttpRoute = std::variant<HttpResponse, StreamRequest, Relay>;
using HttpRouter = std::function<HttpRoute(const HttpRequest&)>;

class HttpServer {
 public:
  static constexpr std::size_t kConnectionsMax = 1024;

  // Listens on "host:port" (port 0: a free port; see endpoint()). Throws
  // fusee::Error (invalid_argument for a malformed address, storage when it
  // cannot listen). Serves the engine's API (HttpApi).
  HttpServer(Engine& engine, const std::string& listen, HttpApiOptions options, std::size_t body_bytes_max);
  // Serves what `router` says; streams need an engine, so a router without
  // one answers or relays.
  HttpServer(HttpRouter router, const std::string& listen, std::size_t body_bytes_max);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // "host:port" it listens on.
  std::string endpoint() const { return endpoint_; }
  void stop();

 private:
  struct State;
  void accept_loop();
  void serve(int fd);

  void start(const std::string& listen);
  void relay(int client_fd, const HttpRequest& request, unsigned version, const Relay& to);

  std::unique_ptr<HttpApi> api_;
  Engine* engine_ = nullptr;
  HttpRouter router_;
  std::size_t body_bytes_max_;
  std::string endpoint_;
  std::unique_ptr<State> state_;
  std::thread acceptor_thread_;
};

}  // namespace fusee::http
