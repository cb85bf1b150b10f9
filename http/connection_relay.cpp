// Connection's relays: `fusee server`'s front hands a call to the worker
// that holds the run's shard. The request goes to the worker as it came
// (asking it to close afterwards), then whatever the worker sends goes to
// the client byte for byte, streams included, until the worker closes; then
// the connection ends. Nothing here waits on the worker with a thread, so
// HttpServer::stop() is not held up by a stream the worker keeps open.
#include <fmt/format.h>

#include "http/connection.hpp"
#include "protocol/address.hpp"

namespace fusee::http {
namespace {

namespace net = boost::asio;
namespace beast_http = boost::beast::http;
using boost::system::error_code;

}  // namespace

void Connection::start_relay(const Relay& to) {
  upstream_ = std::make_unique<Upstream>(strand_);
  net::ip::tcp::endpoint where;
  try {
    where = protocol::parse_address(to.endpoint, "worker's HTTP address", /*unix_allowed=*/false).tcp;
  } catch (const Error&) {
    // A worker announced nonsense.
    return relay_failed(fmt::format("the worker at {} does not answer: {}", to.endpoint,
                                    make_error_code(net::error::invalid_argument).message()));
  }
  auto& out = upstream_->out;
  out = beast_http::request<beast_http::string_body>{beast_http::string_to_verb(request_.method), request_.target,
                                                     version_};
  for (const auto& [name, value] : request_.headers) {
    // This server checked where the call came from (refuse_unsafe); to the
    // worker it comes from here, addressed to the worker's own name.
    if (name == "origin" || name.starts_with("sec-fetch-")) continue;
    out.set(name, value);
  }
  out.set(beast_http::field::host, to.endpoint);
  out.body() = request_.body;
  out.keep_alive(false);
  out.prepare_payload();
  upstream_->socket.async_connect(where, [self = shared_from_this(), endpoint = to.endpoint](error_code error) {
    if (error) return self->relay_failed(fmt::format("the worker at {} does not answer: {}", endpoint, error.message()));
    beast_http::async_write(self->upstream_->socket, self->upstream_->out,
                            [self, endpoint](error_code error, std::size_t) {
                              if (error) {
                                return self->relay_failed(
                                    fmt::format("the worker at {} went away: {}", endpoint, error.message()));
                              }
                              self->relay_pump();
                            });
  });
}

void Connection::relay_failed(const std::string& message) {
  keep_alive_ = false;
  write(HttpApi::error(502, "bad_gateway", message));
}

void Connection::relay_pump() {
  upstream_->socket.async_read_some(
      net::buffer(upstream_->buffer), [self = shared_from_this()](error_code read_error, std::size_t got) {
        if (got == 0) return self->close();  // the worker closed (or failed): so does the client's connection
        self->arm(self->hub_.limits.write_timeout);
        net::async_write(self->socket_, net::buffer(self->upstream_->buffer.data(), got),
                         [self, worker_done = bool(read_error)](error_code error, std::size_t) {
                           self->disarm();
                           if (error || worker_done) return self->close();
                           self->relay_pump();
                         });
      });
}

}  // namespace fusee::http
