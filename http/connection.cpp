#include "http/connection.hpp"

#include <fmt/format.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <cctype>
#include <exception>
#include <utility>

namespace fusee::http {
namespace {

namespace net = boost::asio;
namespace beast_http = boost::beast::http;
using boost::system::error_code;

HttpRoute widen(Routed routed) {
  if (auto* response = std::get_if<HttpResponse>(&routed)) return std::move(*response);
  return std::get<StreamRequest>(std::move(routed));
}

}  // namespace

std::optional<std::string> ConnectionHub::admit(const std::string& peer) {
  std::lock_guard lock(peers_mu_);
  auto held = peers_.contains(peer) ? peers_.at(peer) : 0;
  auto open = connections.load();
  if (open >= limits.connections_max) return "too many connections, try again later";
  if (held >= limits.peer_connections_max) return "too many connections from your address, close some first";
  if (open + limits.reserve_connections >= limits.connections_max && held >= limits.reserve_peer_connections) {
    return "too many connections, try again later (the last ones are kept for clients holding few)";
  }
  ++peers_[peer];
  connections.fetch_add(1);
  return std::nullopt;
}

void ConnectionHub::release(const std::string& peer) {
  std::lock_guard lock(peers_mu_);
  if (auto found = peers_.find(peer); found != peers_.end() && --found->second == 0) peers_.erase(found);
  connections.fetch_sub(1);
}

Connection::Connection(ConnectionHub& hub, net::ip::tcp::socket socket, std::string peer)
    : hub_(hub), socket_(std::move(socket)), strand_(socket_.get_executor()), peer_(std::move(peer)),
      deadline_(strand_) {
  // An answer goes out in one write, and the client's next request may wait
  // for it: Nagle's algorithm would hold a short answer back for the ACK of
  // the one before it (a delayed ACK: up to 40 ms on Linux).
  error_code ignored;
  socket_.set_option(net::ip::tcp::no_delay(true), ignored);
}

// Runs on a server thread, or on the thread that destroys the io_context at
// stop: never on an engine's (ServerGate).
Connection::~Connection() { hub_.release(peer_); }

void Connection::start() {
  net::dispatch(strand_, [self = shared_from_this()] { self->read_next(); });
}

void Connection::read_next() {
  parser_.emplace();
  parser_->body_limit(hub_.body_bytes_max);
  parser_->header_limit(static_cast<std::uint32_t>(kHeaderBytesMax));
  // A pipelined request is here already.
  if (buffer_.size() > 0) return read_header();
  // A new connection gets the header's time from its start; a kept-alive
  // one may idle, then has the header's time from its first byte.
  if (!answered_one_) return read_header();
  arm(hub_.limits.idle_timeout);
  socket_.async_wait(net::socket_base::wait_read, [self = shared_from_this()](error_code error) {
    if (error) return self->close();
    self->read_header();  // the peer's close is readable too: the read sees it
  });
}

void Connection::read_header() {
  arm(hub_.limits.header_timeout);
  beast_http::async_read_header(socket_, buffer_, *parser_, [self = shared_from_this()](error_code error, std::size_t) {
    if (error) return self->on_read(error);
    if (self->parser_->is_done()) return self->on_read(error);
    self->arm(self->hub_.limits.body_timeout);
    beast_http::async_read(self->socket_, self->buffer_, *self->parser_,
                           [self](error_code error, std::size_t) { self->on_read(error); });
  });
}

void Connection::arm(std::chrono::milliseconds timeout) {
  auto generation = ++deadline_generation_;
  deadline_.expires_after(timeout);
  deadline_.async_wait([self = shared_from_this(), generation](error_code error) {
    if (error || generation != self->deadline_generation_) return;  // disarmed or armed again since
    self->close();  // what was pending on the socket ends with operation_aborted
  });
}

void Connection::disarm() {
  ++deadline_generation_;
  deadline_.cancel();
}

void Connection::on_read(error_code error) {
  disarm();
  if (error == beast_http::error::end_of_stream || error == net::error::operation_aborted) return close();
  if (error == beast_http::error::body_limit) {
    return refuse(HttpApi::error(413, "too_large", fmt::format("the body is larger than {} bytes", hub_.body_bytes_max)));
  }
  if (error == beast_http::error::header_limit) {
    return refuse(HttpApi::error(431, "too_large", "the request's header is too large"));
  }
  // Not HTTP (or cut short): say so if the socket still takes it.
  if (error) return refuse(HttpApi::error(400, "bad_request", fmt::format("not a valid HTTP request: {}", error.message())));
  auto message = parser_->release();
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  for (const auto& field : message) {
    std::string name(field.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (request.headers.contains(name)) request.repeated_headers.insert(name);
    request.headers[name] = std::string(field.value());
  }
  request.body = std::move(message.body());
  head_ = request.method == "HEAD";
  request_ = std::move(request);
  version_ = message.version();
  keep_alive_ = message.keep_alive();
  route();
}

void Connection::refuse(HttpResponse response) {
  version_ = 11;
  keep_alive_ = false;
  write(std::move(response));
}

void Connection::route() {
  if (auto refused = refuse_unsafe(request_, hub_.hosts)) return write(std::move(*refused));
  if (hub_.api == nullptr) return answer(hub_.router(request_));
  if (HttpApi::waits(request_)) {
    hub_.api->route_async(request_, HttpApi::Later{strand_, hub_.gate, [self = shared_from_this()](Routed routed) {
                                                     self->answer(widen(std::move(routed)));
                                                   }});
    return;
  }
  // Nothing else touches request_ until the answer is posted back.
  net::post(*hub_.blocking, [self = shared_from_this()] { self->route_blocking(); });
}

void Connection::route_blocking() {
  Routed routed;
  std::optional<StreamReader> reader;
  try {
    routed = hub_.api->route(request_);
    if (const auto* stream = std::get_if<StreamRequest>(&routed)) {
      try {
        reader.emplace(hub_.engine->read_stream(stream->run_id, stream->stream, StreamFrom::at(stream->from)));
      } catch (const Error& failure) {
        routed = HttpApi::failure(failure);  // the engine shut down or the run left
      }
    }
  } catch (const std::exception& unexpected) {
    routed = HttpApi::error(500, "internal", fmt::format("the request failed: {}", unexpected.what()));
  }
  net::post(strand_, [self = shared_from_this(), routed = std::move(routed), reader = std::move(reader)]() mutable {
    self->answer(widen(std::move(routed)), std::move(reader));
  });
}

void Connection::answer(HttpRoute routed, std::optional<StreamReader> reader) {
  if (auto* response = std::get_if<HttpResponse>(&routed)) return write(std::move(*response));
  if (const auto* to = std::get_if<Relay>(&routed)) return start_relay(*to);
  const auto& stream = std::get<StreamRequest>(routed);
  if (reader) return start_stream(stream, std::move(*reader));
  keep_alive_ = false;
  write(HttpApi::error(500, "no_engine", "a stream needs an engine"));
}

void Connection::write(HttpResponse response) {
  auto& out = response_.emplace(static_cast<beast_http::status>(response.status), version_);
  out.set(beast_http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) out.set(name, value);
  out.body() = std::move(response.body);
  out.keep_alive(keep_alive_);
  out.prepare_payload();
  // HEAD: the headers GET would send (its Content-Length too), no body.
  if (std::exchange(head_, false)) out.body().clear();
  arm(hub_.limits.write_timeout);
  beast_http::async_write(socket_, out, [self = shared_from_this()](error_code error, std::size_t) {
    self->disarm();
    if (error || !self->keep_alive_) return self->close();
    self->answered_one_ = true;
    self->read_next();
  });
}

void Connection::close() {
  error_code ignored;
  disarm();
  if (stream_) stream_->poll.cancel();
  if (upstream_) upstream_->socket.close(ignored);
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  socket_.close(ignored);
}

}  // namespace fusee::http
