#include "http/http_server.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>

#include "protocol/address.hpp"

namespace fusee::http {

using protocol::parse_address;

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace beast_http = beast::http;
using tcp = net::ip::tcp;

constexpr std::uint32_t kHeaderBytesMax = 16 * 1024;
// How often a stream with nothing new looks again, and how long it stays
// silent before an SSE comment checks that the client is still there.
constexpr auto kStreamPoll = std::chrono::milliseconds(5);
constexpr auto kStreamKeepAlive = std::chrono::seconds(15);

}  // namespace

struct HttpServer::State {
  net::io_context io;
  tcp::acceptor acceptor{io};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::condition_variable idle;
  std::set<int> connections;  // open sockets, so stop() can end them
};

HttpServer::HttpServer(Engine& engine, const std::string& listen, HttpApiOptions options, std::size_t body_bytes_max)
    : api_(std::make_unique<HttpApi>(engine, std::move(options))), engine_(&engine), body_bytes_max_(body_bytes_max),
      state_(std::make_unique<State>()) {
  router_ = [api = api_.get()](const HttpRequest& request) -> HttpRoute {
    auto routed = api->route(request);
    if (auto* response = std::get_if<HttpResponse>(&routed)) return std::move(*response);
    return std::get<StreamRequest>(routed);
  };
  start(listen);
}

HttpServer::HttpServer(HttpRouter router, const std::string& listen, std::size_t body_bytes_max)
    : router_(std::move(router)), body_bytes_max_(body_bytes_max), state_(std::make_unique<State>()) {
  start(listen);
}

void HttpServer::start(const std::string& listen) {
  auto endpoint = parse_address(listen, "http listen address", /*unix_allowed=*/false).tcp;
  boost::system::error_code error;
  auto& acceptor = state_->acceptor;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(net::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(net::socket_base::max_listen_connections, error);
  if (error) throw Error(errc::storage, fmt::format("cannot listen for HTTP on {}: {}", listen, error.message()));
  auto bound = acceptor.local_endpoint();
  endpoint_ = bound.address().is_v6() ? fmt::format("[{}]:{}", bound.address().to_string(), bound.port())
                                      : fmt::format("{}:{}", bound.address().to_string(), bound.port());
  acceptor_thread_ = std::thread([this] { accept_loop(); });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  if (state_->stopping.exchange(true)) return;
  // Shutting the listening socket down wakes the blocked accept.
  ::shutdown(state_->acceptor.native_handle(), SHUT_RDWR);
  if (acceptor_thread_.joinable()) acceptor_thread_.join();
  boost::system::error_code ignored;
  state_->acceptor.close(ignored);
  std::unique_lock lock(state_->mu);
  for (int fd : state_->connections) ::shutdown(fd, SHUT_RDWR);
  state_->idle.wait(lock, [&] { return state_->connections.empty(); });
}

void HttpServer::accept_loop() {
  for (;;) {
    tcp::socket socket(state_->io);
    boost::system::error_code error;
    state_->acceptor.accept(socket, error);
    if (state_->stopping) return;
    if (error) continue;
    int fd = socket.release(error);
    if (error) continue;
    std::unique_lock lock(state_->mu);
    if (state_->connections.size() >= kConnectionsMax) {
      lock.unlock();
      static const char kBusy[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
          "Content-Length: 66\r\n\r\n{\"error\":\"busy\",\"message\":\"too many connections, try again later\"}";
      (void)!::write(fd, kBusy, sizeof kBusy - 1);
      ::close(fd);
      continue;
    }
    state_->connections.insert(fd);
    lock.unlock();
    std::thread([this, fd] { serve(fd); }).detach();
  }
}

void HttpServer::serve(int fd) {
  {
    net::io_context io;
    tcp::socket socket(io);
    boost::system::error_code error;
    socket.assign(tcp::v4(), fd, error);
    beast::flat_buffer buffer;
    auto send = [&](const HttpResponse& response, unsigned version, bool keep_alive) {
      beast_http::response<beast_http::string_body> out{static_cast<beast_http::status>(response.status), version};
      out.set(beast_http::field::content_type, response.content_type);
      for (const auto& [name, value] : response.headers) out.set(name, value);
      out.body() = response.body;
      out.keep_alive(keep_alive);
      out.prepare_payload();
      beast_http::write(socket, out, error);
    };
    while (!error && !state_->stopping) {
      beast_http::request_parser<beast_http::string_body> parser;
      parser.body_limit(body_bytes_max_);
      parser.header_limit(kHeaderBytesMax);
      beast_http::read(socket, buffer, parser, error);
      if (error == beast_http::error::end_of_stream || state_->stopping) break;
      if (error == beast_http::error::body_limit) {
        send(HttpApi::error(413, "too_large", fmt::format("the body is larger than {} bytes", body_bytes_max_)), 11,
             false);
        break;
      }
      if (error == beast_http::error::header_limit) {
        send(HttpApi::error(431, "too_large", "the request's header is too large"), 11, false);
        break;
      }
      if (error) {
        // Not HTTP (or cut short): say so if the socket still takes it.
        boost::system::error_code read_error = error;
        error = {};
        send(HttpApi::error(400, "bad_request", fmt::format("not a valid HTTP request: {}", read_error.message())), 11,
             false);
        break;
      }
      auto& request = parser.get();
      HttpRequest in;
      in.method = std::string(request.method_string());
      in.target = std::string(request.target());
      for (const auto& field : request) {
        std::string name(field.name_string());
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        in.headers[name] = std::string(field.value());
      }
      in.body = std::move(request.body());
      auto routed = router_(in);
      if (auto* response = std::get_if<HttpResponse>(&routed)) {
        send(*response, request.version(), request.keep_alive());
        if (!request.keep_alive()) break;
        continue;
      }
      if (auto* to = std::get_if<Relay>(&routed)) {
        relay(fd, in, request.version(), *to);
        break;
      }
      if (engine_ == nullptr) {
        send(HttpApi::error(500, "no_engine", "a stream needs an engine"), request.version(), false);
        break;
      }
      // A stream: chunks as they become durable, until it ends or the client goes.
      const auto& stream = std::get<StreamRequest>(routed);
      beast_http::response<beast_http::empty_body> head{beast_http::status::ok, request.version()};
      head.set(beast_http::field::content_type, stream.sse ? "text/event-stream" : "application/x-ndjson");
      head.set(beast_http::field::cache_control, "no-cache");
      head.chunked(true);
      head.keep_alive(false);
      beast_http::response_serializer<beast_http::empty_body> serializer{head};
      beast_http::write_header(socket, serializer, error);
      try {
        auto reader = engine_->read_stream(stream.run_id, stream.stream, StreamFrom::at(stream.from));
        auto quiet_since = std::chrono::steady_clock::now();
        while (!error && !state_->stopping) {
          if (auto chunk = reader.try_next()) {
            auto value = boost::json::serialize(chunk->value);
            auto text = stream.sse ? fmt::format("id: {}\ndata: {}\n\n", chunk->offset, value)
                                   : fmt::format("{{\"offset\":{},\"value\":{}}}\n", chunk->offset, value);
            net::write(socket, beast_http::make_chunk(net::buffer(text)), error);
            quiet_since = std::chrono::steady_clock::now();
            continue;
          }
          if (reader.ended()) {
            if (stream.sse) net::write(socket, beast_http::make_chunk(net::buffer(std::string("event: end\ndata: {}\n\n"))), error);
            if (!error) net::write(socket, beast_http::make_chunk_last(), error);
            break;
          }
          if (stream.sse && std::chrono::steady_clock::now() - quiet_since > kStreamKeepAlive) {
            net::write(socket, beast_http::make_chunk(net::buffer(std::string(": keep-alive\n\n"))), error);
            quiet_since = std::chrono::steady_clock::now();
          }
          std::this_thread::sleep_for(kStreamPoll);
        }
      } catch (const Error&) {
        // The engine shut down or the run left: the client sees the stream cut.
      }
      break;
    }
    socket.shutdown(tcp::socket::shutdown_send, error);
    // Closing the socket is the io_context's business; fd is released below.
    int released = socket.release(error);
    (void)released;
  }
  // Under the lock, so the accept thread cannot be handed the same number
  // for a new connection before this one leaves the set.
  std::lock_guard lock(state_->mu);
  state_->connections.erase(fd);
  ::close(fd);
  state_->idle.notify_all();
}

void HttpServer::relay(int client_fd, const HttpRequest& request, unsigned version, const Relay& to) {
  net::io_context io;
  boost::system::error_code error;
  tcp::socket upstream(io);
  tcp::endpoint where;
  try {
    where = parse_address(to.endpoint, "worker's HTTP address", /*unix_allowed=*/false).tcp;
  } catch (const Error&) {
    error = net::error::invalid_argument;  // a worker announced nonsense
  }
  if (!error) upstream.connect(where, error);
  auto answer = [&](unsigned status, const std::string& code, const std::string& message) {
    auto response = HttpApi::error(status, code, message);
    std::string text = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                   "Content-Length: {}\r\n\r\n{}",
                                   status, status == 502 ? "Bad Gateway" : "Service Unavailable", response.body.size(),
                                   response.body);
    (void)!::send(client_fd, text.data(), text.size(), MSG_NOSIGNAL);
  };
  if (error) {
    answer(502, "bad_gateway", fmt::format("the worker at {} does not answer: {}", to.endpoint, error.message()));
    return;
  }
  // The request as it came, then whatever the worker sends, until it closes.
  beast_http::request<beast_http::string_body> out{beast_http::string_to_verb(request.method), request.target, version};
  for (const auto& [name, value] : request.headers) out.set(name, value);
  out.body() = request.body;
  out.keep_alive(false);
  out.prepare_payload();
  beast_http::write(upstream, out, error);
  if (error) {
    answer(502, "bad_gateway", fmt::format("the worker at {} went away: {}", to.endpoint, error.message()));
    return;
  }
  // Looks up every so often, so that stop() is not held up by a stream
  // the worker keeps open.
  char buffer[16384];
  while (!state_->stopping) {
    pollfd ready{upstream.native_handle(), POLLIN, 0};
    auto waited = ::poll(&ready, 1, 100);
    if (waited < 0 && errno != EINTR) break;
    if (waited <= 0) continue;
    auto got = upstream.read_some(net::buffer(buffer), error);
    if (got > 0 && ::send(client_fd, buffer, got, MSG_NOSIGNAL) != static_cast<ssize_t>(got)) break;
    if (error) break;
  }
}

}  // namespace fusee::http
