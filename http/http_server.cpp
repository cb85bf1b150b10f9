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
  std::size_t connections_max = kConnectionsMax;
  std::mutex stop_mu;
  bool stopped = false;

  void accept();
  void refuse(tcp::socket socket);
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
    if (hub.connections.load() >= connections_max) {
      refuse(std::move(socket));
    } else {
      std::make_shared<Connection>(hub, std::move(socket))->start();
    }
    accept();
  });
}

void HttpServer::State::refuse(tcp::socket socket) {
  static const std::string kBusy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
      "Content-Length: 66\r\n\r\n{\"error\":\"busy\",\"message\":\"too many connections, try again later\"}";
  auto refused = std::make_shared<tcp::socket>(std::move(socket));
  net::async_write(*refused, net::buffer(kBusy), [refused](error_code, std::size_t) {
    error_code ignored;
    refused->shutdown(tcp::socket::shutdown_send, ignored);
    refused->close(ignored);
  });
}

HttpServer::HttpServer(Engine& engine, const std::string& listen, HttpApiOptions options, std::size_t body_bytes_max,
                       std::size_t connections_max)
    : api_(std::make_unique<HttpApi>(engine, std::move(options))), state_(std::make_unique<State>()) {
  state_->connections_max = connections_max;
  state_->hub.api = api_.get();
  state_->hub.engine = &engine;
  state_->hub.body_bytes_max = body_bytes_max;
  state_->blocking = std::make_unique<net::thread_pool>(kBlockingThreads);
  state_->hub.blocking = state_->blocking.get();
  start(listen);
}

HttpServer::HttpServer(HttpRouter router, const std::string& listen, std::size_t body_bytes_max,
                       std::size_t connections_max)
    : state_(std::make_unique<State>()) {
  state_->connections_max = connections_max;
  state_->hub.router = std::move(router);
  state_->hub.body_bytes_max = body_bytes_max;
  start(listen);
}

void HttpServer::start(const std::string& listen) {
  auto endpoint = parse_address(listen, "http listen address", /*unix_allowed=*/false).tcp;
  raise_descriptor_limit();
  error_code error;
  auto& acceptor = *state_->acceptor;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(net::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(net::socket_base::max_listen_connections, error);
  if (error) throw Error(errc::storage, fmt::format("cannot listen for HTTP on {}: {}", listen, error.message()));
  auto bound = acceptor.local_endpoint();
  endpoint_ = bound.address().is_v6() ? fmt::format("[{}]:{}", bound.address().to_string(), bound.port())
                                      : fmt::format("{}:{}", bound.address().to_string(), bound.port());
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
