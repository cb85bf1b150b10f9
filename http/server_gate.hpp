// ServerGate: the one way from an engine thread back into an HTTP server.
//
// An Engine::Then callback (a run's answer to an execute) is called on a
// shard's thread or the remote-calls reader, maybe after the server stopped
// or was destroyed. So such a callback holds this gate and a weak_ptr to what
// it answers, never the thing itself: it cannot keep a connection (whose
// socket and timers need the server's io_context) alive past the server,
// and it touches the io_context only through post(), under the gate's lock,
// while the gate is open. HttpServer::stop() closes the gate before it stops
// the io_context, so once close() returns no engine thread touches it.
//
// Thread-safe. The gate itself is a mutex and a flag: a callback may hold it
// (shared) for as long as it likes.
#pragma once

#include <boost/asio/post.hpp>
#include <memory>
#include <mutex>
#include <utility>

namespace fusee::http {

class ServerGate {
 public:
  // Runs fn(*target) on target->executor(), unless the gate is closed or
  // target has gone; then drops fn. The strong reference taken here goes
  // into the posted handler, so the target is only ever released by the
  // server's own threads (or by the io_context's destruction).
  template <typename Target, typename Fn>
  void post(const std::weak_ptr<Target>& target, Fn fn) {
    std::lock_guard lock(mu_);
    if (closed_) return;
    auto alive = target.lock();
    if (!alive) return;
    auto executor = alive->executor();
    boost::asio::post(executor, [alive = std::move(alive), fn = std::move(fn)]() mutable { fn(*alive); });
  }

  // From now on post() drops everything. Waits for a post in progress.
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
  }

 private:
  std::mutex mu_;
  bool closed_ = false;
};

}  // namespace fusee::http
