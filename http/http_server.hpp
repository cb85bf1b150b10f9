// The HTTP server: Boost.Beast's asynchronous model on a small pool of
// threads (the machine's cores, at least kIoThreadsMin), one Connection
// (http/connection.hpp) per client, at most kConnectionsMax at once (past it
// a connection gets 503 and is closed). Requests are read one at a time per
// connection, so keep-alive and pipelining work and pipelined requests are
// answered in order. A request that waits on a run (an execute) holds no
// thread while it waits; the routes that block in the engine run on a pool
// of kBlockingThreads; a stream's chunks are written as they become durable
// (chunked NDJSON, or server-sent events) from a timer, with no thread per
// stream. Requests larger than the body limit get 413, headers past
// kHeaderBytesMax 431, bytes that are not HTTP 400; each closes that one
// connection. A connection must send its request in time (a header
// deadline, an idle timeout between requests, a body deadline) and take
// each answer in time; one peer address holds at most so many connections,
// and the last slots are kept for peers holding few. Every limit is in
// http/http_limits.hpp.
//
// Started by Engine::open when Config::http_listen is set (local and remote
// mode), and by `fusee server --http`. stop() closes the listener and ends
// every connection at once, those waiting on a run or relaying a worker's
// open stream included (their clients see the connection close); it waits
// only for the blocking routes under way. An engine's answer that comes
// after stop() or after the server is gone is dropped
// (http/server_gate.hpp). The engine stops its server before its shards.
//
// Thread-safety: endpoint() from any thread; stop() from any thread but the
// server's own (a route must not stop its server), and it may be called
// more than once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "http/http_api.hpp"
#include "http/http_limits.hpp"

namespace fusee::http {

// What to do with a request that is not answered here and now: hand it, as
// it came, to another HTTP server (`fusee server` passing a call to the
// worker that holds the run's shard) and relay its answer back byte for
// byte, streams included.
struct Relay {
  std::string endpoint;  // "host:port"
};

using HttpRoute = std::variant<HttpResponse, StreamRequest, Relay>;
// Called on a server thread for every request; it must not block (it holds
// one of the few threads serving every connection).
using HttpRouter = std::function<HttpRoute(const HttpRequest&)>;

struct HttpServerOptions {
  std::size_t body_bytes_max = 1u << 20;
  // Host names answered besides loopback's (http/request_guard.hpp).
  std::vector<std::string> allowed_hosts;
  ServerLimits limits;  // the defaults but in tests
};

class HttpServer {
 public:
  // Listens on "host:port" (port 0: a free port; see endpoint()). Throws
  // fusee::Error (invalid_argument for a malformed address, storage when it
  // cannot listen). Serves the engine's API (HttpApi). The engine must
  // outlive the server. Every request passes refuse_unsafe
  // (http/request_guard.hpp) before it is routed.
  HttpServer(Engine& engine, const std::string& listen, HttpApiOptions api_options, HttpServerOptions options);
  // Serves what `router` says; streams need an engine, so a router without
  // one answers or relays.
  HttpServer(HttpRouter router, const std::string& listen, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // "host:port" it listens on.
  std::string endpoint() const { return endpoint_; }
  void stop();

 private:
  struct State;
  void start(const std::string& listen, HttpServerOptions options);

  std::unique_ptr<HttpApi> api_;
  std::string endpoint_;
  std::unique_ptr<State> state_;
};

}  // namespace fusee::http
