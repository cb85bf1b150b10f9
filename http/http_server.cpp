#include "http/http_server.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "http/connection.hpp"
#include "http/request_guard.hpp"
#include "protocol/address.hpp"

namespace fusee::http {

using protocol::parse_address;

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

// Every connection is a descriptor. Linux's default soft RLIMIT_NOFILE is
// 1,024 (select()'s old ceiling) while the hard limit is far higher
// (systemd's default: 524,288), so the server raises the soft limit to what
// kConnectionsMax needs, as far as the hard one allows. The limit is the
// process's: an application embedding the engine gets it raised too. Without
// it, accept fails past the soft limit (EMFILE) and clients wait in the
// listen backlog rather than being served or refused.
void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  rlim_t wanted = kConnectionsMax + kDescriptorsSpare;
  if (limit.rlim_max != RLIM_INFINITY) wanted = std::min(wanted, limit.rlim_max);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    limit.rlim_cur = wanted;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);  // as far as it goes: accept backs off at the limit
  }
}

std::size_t io_threads() {
  return std::max<std::size_t>(kIoThreadsMin, std::thread::hardware_concurrency());
}

// A handler that throws would end its thread's run(); the others go on, and
// so does this one after saying so (the connection it served is dropped).
void run_io(net::io_context& io) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& failure) {
      std::fprintf(stderr, "fusee http: a request's handler failed: %s\n", failure.what());
    }
  }
}

}  // namespace

struct HttpServer::State {
  ConnectionHub hub;
  // Reset at stop(), after the threads are joined: that destroys every
  // pending handler, and with them every connection.
  std::unique_ptr<net::io_context> io = std::make_unique<net::io_context>();
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work{io->get_executor()};
  std::unique_ptr<tcp::acceptor> acceptor = std::make_unique<tcp::acceptor>(*io);
  std::unique_ptr<net::steady_timer> accept_retry = std::make_unique<net::steady_timer>(*io);
  std::unique_ptr<net::thread_pool> blocking;  // serving an engine's API
  std::vector<std::thread> threads;
  std::mutex stop_mu;
  bool stopped = false;

  void accept();
  void admit(tcp::socket socket);
  void refuse(tcp::socket socket, const std::string& why);
};

void HttpServer::State::accept() {
  acceptor->async_accept(net::make_strand(*io), [this](error_code error, tcp::socket socket) {
    if (error == net::error::operation_aborted) return;
    if (error == net::error::connection_aborted) return accept();  // the client left first
    if (error) {
      // Out of descriptors (or memory): wait for connections to end rather
      // than spin on accept.
      accept_retry->expires_after(kAcceptRetry);
      accept_retry->async_wait([this](error_code waited) {
        if (!waited) accept();
      });
      return;
    }
    admit(std::move(socket));
    // The rest of the backlog now (the acceptor does not block: it says
    // would_block once the backlog is empty).
    for (std::size_t taken = 0; taken < kAcceptBurstMax; ++taken) {
      tcp::socket next(net::make_strand(*io));
      error_code burst_error;
      acceptor->accept(next, burst_error);
      if (burst_error == net::error::connection_aborted) continue;  // that client left first
      if (burst_error) break;  // none left (would_block), or an error the next async_accept meets
      admit(std::move(next));
    }
    accept();
  });
}

void HttpServer::State::admit(tcp::socket socket) {
  error_code unknown;
  auto peer = socket.remote_endpoint(unknown);
  if (unknown) return;  // gone already
  auto peer_address = peer.address().to_string();
  if (auto why = hub.admit(peer_address)) {
    refuse(std::move(socket), *why);
  } else {
    std::make_shared<Connection>(hub, std::move(socket), std::move(peer_address))->start();
  }
}

// 503 and close, without reading the request: a refusal costs a write.
void HttpServer::State::refuse(tcp::socket socket, const std::string& why) {
  auto body = fmt::format("{{\"error\":\"busy\",\"message\":\"{}\"}}", why);
  auto text = std::make_shared<std::string>(
      fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
                  "Retry-After: 1\r\nContent-Length: {}\r\n\r\n{}",
                  body.size(), body));
  auto refused = std::make_shared<tcp::socket>(std::move(socket));
  net::async_write(*refused, net::buffer(*text), [refused, text](error_code, std::size_t) {
    error_code ignored;
    refused->shutdown(tcp::socket::shutdown_send, ignored);
    refused->close(ignored);
  });
}

HttpServer::HttpServer(Engine& engine, const std::string& listen, HttpApiOptions api_options, HttpServerOptions options)
    : api_(std::make_unique<HttpApi>(engine, std::move(api_options))), state_(std::make_unique<State>()) {
  state_->hub.api = api_.get();
  state_->hub.engine = &engine;
  state_->blocking = std::make_unique<net::thread_pool>(kBlockingThreads);
  state_->hub.blocking = state_->blocking.get();
  start(listen, std::move(options));
}

HttpServer::HttpServer(HttpRouter router, const std::string& listen, HttpServerOptions options)
    : state_(std::make_unique<State>()) {
  state_->hub.router = std::move(router);
  start(listen, std::move(options));
}

void HttpServer::start(const std::string& listen, HttpServerOptions options) {
  state_->hub.body_bytes_max = options.body_bytes_max;
  state_->hub.limits = options.limits;
  state_->hub.hosts.loopback = is_loopback_listen(listen);
  state_->hub.hosts.allowed = std::move(options.allowed_hosts);
  auto endpoint = parse_address(listen, "http listen address", /*unix_allowed=*/false).tcp;
  raise_descriptor_limit();
  error_code error;
  auto& acceptor = *state_->acceptor;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(net::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(net::socket_base::max_listen_connections, error);
  if (!error) acceptor.non_blocking(true, error);  // the accept burst (State::accept)
  // A connection aborted in the backlog (ECONNABORTED, EPROTO) is an error
  // the accept returns, not one it retries: otherwise Asio's synchronous
  // accept waits in poll() for the next client, non-blocking or not, and
  // holds its io thread (and a shutdown joining it) until one comes.
  if (!error) acceptor.set_option(net::socket_base::enable_connection_aborted(true), error);
  if (error) throw Error(errc::storage, fmt::format("cannot listen for HTTP on {}: {}", listen, error.message()));
  auto bound = acceptor.local_endpoint();
  endpoint_ = bound.address().is_v6() ? fmt::format("[{}]:{}", bound.address().to_string(), bound.port())
                                      : fmt::format("{}:{}", bound.address().to_string(), bound.port());
  state_->hub.hosts.bound = endpoint_;
  state_->accept();
  for (std::size_t thread = 0; thread < io_threads(); ++thread) {
    state_->threads.emplace_back([io = state_->io.get()] { run_io(*io); });
  }
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  auto& state = *state_;
  std::lock_guard lock(state.stop_mu);
  if (state.stopped) return;
  state.stopped = true;
  // Engine answers from here on are dropped; one being posted now is in.
  state.hub.gate->close();
  state.io->stop();
  for (auto& thread : state.threads) thread.join();
  // The blocking routes under way finish (their answers are posted to the
  // stopped io_context and dropped with it); those not started never are.
  if (state.blocking) {
    state.blocking->stop();
    state.blocking->join();
  }
  // No thread runs a handler now. Tear down so that what each destroyed
  // handler releases finds the io_context still there: the blocking pool's
  // abandoned tasks first, then the listener, then the io_context with every
  // pending handler and so every connection, wait, stream and relay.
  state.blocking.reset();
  state.hub.blocking = nullptr;
  state.accept_retry.reset();
  state.acceptor.reset();
  state.work.reset();
  state.io.reset();
}

}  // namespace fusee::http
