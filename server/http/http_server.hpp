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

#include "server/http/http_api.hpp"

namespace fusee::server {

class HttpServer {
 public:
  static constexpr std::size_t kConnectionsMax = 1024;

  // Listens on "host:port" (port 0: a free port; see endpoint()). Throws
  // fusee::Error (invalid_argument for a malformed address, storage when it
  // cannot listen).
  HttpServer(Engine& engine, const std::string& listen, HttpApiOptions options, std::size_t body_bytes_max);
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

  HttpApi api_;
  Engine& engine_;
  std::size_t body_bytes_max_;
  std::string endpoint_;
  std::unique_ptr<State> state_;
  std::thread acceptor_thread_;
};

}  // namespace fusee::server
