// Connection: one client's connection to HttpServer. It reads requests one
// at a time, routes each, writes the answer, and reads the next while the
// client keeps the connection alive; so pipelined requests are answered in
// order (the next one waits, parsed or not, in the read buffer until the
// one before it is answered). A stream's chunks (connection_stream.cpp) and
// a relayed call (connection_relay.cpp) end the connection.
//
// Where a request is routed:
//  - the engine's API, a route that waits on a run (HttpApi::waits):
//    HttpApi::route_async on the connection's strand, no thread held;
//  - the engine's API, any other route: HttpApi::route on the hub's
//    blocking pool, the answer posted back to the strand;
//  - a router (`fusee server`'s front): called on the strand; it must not
//    block.
//
// Lifetimes: a Connection is owned by the operations pending on it (each
// handler holds a shared_ptr) and by blocking-pool tasks working for it;
// engine callbacks reach it only through the hub's ServerGate. All of its
// state is touched on its strand only. The hub outlives every connection:
// HttpServer::stop() stops the io_context and the blocking pool and
// destroys them (and with them every pending handler, so every connection)
// before the hub goes.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "http/http_api.hpp"
#include "http/http_limits.hpp"
#include "http/http_server.hpp"
#include "http/request_guard.hpp"
#include "http/server_gate.hpp"

namespace fusee::http {

// What every connection of one server shares; owned by the HttpServer.
struct ConnectionHub {
  HttpApi* api = nullptr;        // the engine's API, or
  HttpRouter router;             // a router that answers at once
  Engine* engine = nullptr;      // streams (with api)
  boost::asio::thread_pool* blocking = nullptr;  // with api: the routes that block
  std::shared_ptr<ServerGate> gate = std::make_shared<ServerGate>();
  std::size_t body_bytes_max = 0;
  ServerLimits limits;
  HostPolicy hosts;
  std::atomic<std::size_t> connections{0};  // open now, against limits.connections_max

  // Takes a slot for a connection from `peer` (its address), or says why
  // not: the server is full, the peer holds its share, or only the reserve
  // is left and the peer holds more than a few. Thread-safe.
  std::optional<std::string> admit(const std::string& peer);
  // The slot back (the connection's end).
  void release(const std::string& peer);

 private:
  std::mutex peers_mu_;
  std::unordered_map<std::string, std::size_t> peers_;  // connections open, by peer address
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // socket: accepted, with a strand of its own as its executor; its slot
  // taken for `peer` (ConnectionHub::admit), given back at the end.
  Connection(ConnectionHub& hub, boost::asio::ip::tcp::socket socket, std::string peer);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Reads the first request (on the strand).
  void start();
  const boost::asio::any_io_executor& executor() const { return strand_; }

 private:
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  // A stream being written (connection_stream.cpp).
  struct Stream {
    Stream(StreamRequest request_in, StreamReader reader_in, const boost::asio::any_io_executor& executor,
           unsigned version);
    StreamRequest request;
    StreamReader reader;
    boost::beast::http::response<boost::beast::http::empty_body> head;
    boost::beast::http::response_serializer<boost::beast::http::empty_body> serializer{head};
    boost::asio::steady_timer poll;
    std::string text;  // what is being written
    std::chrono::steady_clock::time_point quiet_since;
    bool failed = false;  // the reader threw: end once `text` is out
    bool ending = false;  // the last chunk is being written
  };
  // A call relayed to a worker (connection_relay.cpp).
  struct Upstream {
    explicit Upstream(const boost::asio::any_io_executor& executor) : socket(executor) {}
    boost::asio::ip::tcp::socket socket;
    boost::beast::http::request<boost::beast::http::string_body> out;
    std::array<char, kRelayBufferBytes> buffer{};
  };

  void read_next();
  // The next request's header has begun (or is in the buffer already).
  void read_header();
  void on_read(boost::system::error_code error);
  // The connection closes unless disarm() (or the next arm) comes within
  // `timeout`: what a request that arrives too slowly, or an answer the
  // client does not take, runs into.
  void arm(std::chrono::milliseconds timeout);
  void disarm();
  // An answer made before routing (a 4xx), then the connection ends.
  void refuse(HttpResponse response);
  void route();
  // On a blocking-pool thread: HttpApi::route and, for a stream, its reader.
  void route_blocking();
  void answer(HttpRoute routed, std::optional<StreamReader> reader = std::nullopt);
  // The response; then the next request, or the end (keep_alive_).
  void write(HttpResponse response);
  void close();

  // connection_stream.cpp
  void start_stream(const StreamRequest& stream, StreamReader reader);
  void stream_next();
  void stream_written(boost::system::error_code error);

  // connection_relay.cpp
  void start_relay(const Relay& to);
  void relay_failed(const std::string& message);
  void relay_pump();

  ConnectionHub& hub_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::any_io_executor strand_;
  std::string peer_;
  boost::asio::steady_timer deadline_;
  std::uint64_t deadline_generation_ = 0;  // a timer's wake-up that is not the latest arm's is ignored
  bool answered_one_ = false;              // the next request is a kept-alive connection's (idle timeout)
  boost::beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  // The request being answered: its version and keep-alive answer it, and a
  // relay sends it on as it came.
  HttpRequest request_;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool head_ = false;  // the request being answered is a HEAD: its response has no body
  std::optional<boost::beast::http::response<boost::beast::http::string_body>> response_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Upstream> upstream_;
};

}  // namespace fusee::http
