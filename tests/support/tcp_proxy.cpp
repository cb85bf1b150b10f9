#include "tests/support/tcp_proxy.hpp"

#include <boost/asio.hpp>
#include <array>
#include <future>
#include <list>
#include <thread>

namespace fusee::testing {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {
// How often a cut direction looks whether it was healed.
constexpr auto kCutPoll = std::chrono::milliseconds(2);
}  // namespace

struct TcpProxy::State : std::enable_shared_from_this<TcpProxy::State> {
  struct Link;

  net::io_context io;
  tcp::acceptor acceptor{io};
  tcp::endpoint target;
  std::atomic<bool> forward_cut{false};
  std::atomic<bool> backward_cut{false};
  std::atomic<std::uint64_t> forward_bytes{0};
  std::atomic<std::uint64_t> backward_bytes{0};
  std::list<std::shared_ptr<Link>> links;  // on the proxy's thread only
  std::atomic<std::size_t> link_count{0};
  std::thread thread;

  // One proxied connection: the accepted socket and the one to the target,
  // with a pump each way.
  struct Link : std::enable_shared_from_this<Link> {
    explicit Link(State& state) : state(state), client(state.io), server(state.io), wait(state.io) {}
    State& state;
    tcp::socket client;
    tcp::socket server;
    net::steady_timer wait;
    std::array<char, 16384> forward_buffer{};
    std::array<char, 16384> backward_buffer{};
    bool closed = false;

    void start() {
      // A SYN across a cut forward direction is lost until it heals.
      if (state.forward_cut) {
        wait.expires_after(kCutPoll);
        wait.async_wait([self = shared_from_this()](boost::system::error_code error) {
          if (!error && !self->closed) self->start();
        });
        return;
      }
      server.async_connect(state.target, [self = shared_from_this()](boost::system::error_code error) {
        if (error) return self->close();
        self->pump(self->client, self->server, self->forward_buffer, self->state.forward_cut,
                   self->state.forward_bytes);
        self->pump(self->server, self->client, self->backward_buffer, self->state.backward_cut,
                   self->state.backward_bytes);
      });
    }

    void pump(tcp::socket& from, tcp::socket& to, std::array<char, 16384>& buffer, std::atomic<bool>& cut,
              std::atomic<std::uint64_t>& carried) {
      if (closed) return;
      if (cut) {
        // Stop reading: the bytes wait in the kernel and then the sender,
        // as behind a link that loses every packet.
        hold(cut, [self = shared_from_this(), &from, &to, &buffer, &cut, &carried] {
          self->pump(from, to, buffer, cut, carried);
        });
        return;
      }
      from.async_read_some(net::buffer(buffer), [self = shared_from_this(), &from, &to, &buffer, &cut, &carried](
                                                    boost::system::error_code error, std::size_t bytes) {
        if (error) return self->close();
        // Read while the link was up, but it may have been cut since: then
        // these bytes are on the wire, and cross only once it heals.
        self->hold(cut, [self, &from, &to, &buffer, &cut, &carried, bytes] {
          // Counted before they are handed on, never after: the other side
          // may read them, and a test check the count, before this thread
          // runs the write's completion (a fresh clone's make test did).
          carried += bytes;
          net::async_write(to, net::buffer(buffer.data(), bytes),
                           [self, &from, &to, &buffer, &cut, &carried](boost::system::error_code error2, std::size_t) {
                             if (error2) return self->close();
                             self->pump(from, to, buffer, cut, carried);
                           });
        });
      });
    }

    // Runs `then` once the direction is not cut.
    template <typename Then>
    void hold(std::atomic<bool>& cut, Then then) {
      if (closed) return;
      if (!cut) return then();
      auto timer = std::make_shared<net::steady_timer>(state.io, kCutPoll);
      timer->async_wait([self = shared_from_this(), &cut, then = std::move(then), timer](boost::system::error_code) mutable {
        self->hold(cut, std::move(then));
      });
    }

    void close() {
      if (closed) return;
      closed = true;
      boost::system::error_code ignored;
      // A reset, not an orderly close: the other side learns the connection
      // is gone, as after a timeout.
      client.set_option(net::socket_base::linger(true, 0), ignored);
      server.set_option(net::socket_base::linger(true, 0), ignored);
      client.close(ignored);
      server.close(ignored);
      wait.cancel();
      state.links.remove(shared_from_this());
      state.link_count = state.links.size();
    }
  };

  void accept() {
    auto link = std::make_shared<Link>(*this);
    acceptor.async_accept(link->client, [self = shared_from_this(), link](boost::system::error_code error) {
      if (error) return;  // closed
      self->links.push_back(link);
      self->link_count = self->links.size();
      link->start();
      self->accept();
    });
  }
};

TcpProxy::TcpProxy(std::string target_host, std::uint16_t target_port) : state_(std::make_shared<State>()) {
  state_->target = tcp::endpoint(net::ip::make_address(target_host), target_port);
  const tcp::endpoint listen(net::ip::make_address("127.0.0.1"), 0);
  state_->acceptor.open(listen.protocol());
  state_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  state_->acceptor.bind(listen);
  state_->acceptor.listen();
  state_->accept();
  state_->thread = std::thread([state = state_] { state->io.run(); });
}

TcpProxy::~TcpProxy() {
  net::post(state_->io, [state = state_] {
    boost::system::error_code ignored;
    state->acceptor.close(ignored);
    auto links = state->links;
    for (auto& link : links) link->close();
    state->io.stop();
  });
  state_->thread.join();
  // What the stop left queued holds the state (the acceptor's handler) and
  // its links, and the state holds the queue: run it out, or all of it
  // leaks. Every socket is closed, so each handler ends at once.
  state_->io.restart();
  state_->io.run();
}

std::uint16_t TcpProxy::port() const { return state_->acceptor.local_endpoint().port(); }

void TcpProxy::cut(bool forward, bool backward) {
  state_->forward_cut = forward;
  state_->backward_cut = backward;
}

void TcpProxy::reset() {
  std::promise<void> done;
  net::post(state_->io, [state = state_, &done] {
    auto links = state->links;
    for (auto& link : links) link->close();
    done.set_value();
  });
  done.get_future().wait();
}

std::size_t TcpProxy::connections() const { return state_->link_count; }
std::uint64_t TcpProxy::bytes_forward() const { return state_->forward_bytes; }
std::uint64_t TcpProxy::bytes_backward() const { return state_->backward_bytes; }

}  // namespace fusee::testing
