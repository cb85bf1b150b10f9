// RunWait: an HTTP request that waits on a run without holding a thread
// (POST /v1/runs/execute). The engine answers an Engine::Then on its own
// thread; then() wraps that callback so the answer comes back through the
// server's gate (http/server_gate.hpp) onto the connection's strand. A timer
// there gives up at the deadline. Whichever comes first answers, once; the
// other finds the wait over and does nothing.
//
// Lifetimes: the armed timer's handler holds the wait, and the wait holds
// `done`, which holds the connection; engine callbacks hold only a weak_ptr.
// So a run that ends after the server stopped or was destroyed finds nothing
// to touch, and stopping the server's io_context (which destroys the
// timer's handler) releases the wait and its connection.
//
// Not thread-safe: create, arm and answer it on its executor (a strand).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <variant>

#include "fusee/error.hpp"
#include "http/http_api.hpp"
#include "http/server_gate.hpp"

namespace fusee::http {

class RunWait : public std::enable_shared_from_this<RunWait> {
 public:
  using Answer = Routed;
  using Done = RouteDone;

  RunWait(boost::asio::any_io_executor executor, std::shared_ptr<ServerGate> gate);
  ~RunWait();
  RunWait(const RunWait&) = delete;
  RunWait& operator=(const RunWait&) = delete;

  const boost::asio::any_io_executor& executor() const { return executor_; }

  // An Engine::Then<T>: the engine's answer runs on(wait, answer) on the
  // executor, unless the wait is over by then (or the server has gone).
  // The callback holds nothing of the server's but the gate.
  template <typename T, typename On>
  std::function<void(std::variant<T, Error>)> then(On on) {
    return [gate = gate_, self = weak_from_this(), on = std::move(on)](std::variant<T, Error> answer) {
      gate->post(self, [on, answer = std::move(answer)](RunWait& wait) mutable {
        if (!wait.over()) on(wait, std::move(answer));
      });
    };
  }

  // Arms the deadline: after `timeout`, `at_deadline` is the answer.
  // `done` takes the answer, once, on the executor. Call it once, after the
  // engine calls whose answers come through then() were made.
  void arm(std::chrono::steady_clock::duration timeout, HttpResponse at_deadline, Done done);
  // Moves the armed deadline to `timeout` from now, with its answer.
  void rearm(std::chrono::steady_clock::duration timeout, HttpResponse at_deadline);
  // The answer, if the wait is not over: disarms the deadline.
  void answer(Answer answer);
  bool over() const { return !done_; }

 private:
  boost::asio::any_io_executor executor_;
  std::shared_ptr<ServerGate> gate_;
  boost::asio::steady_timer deadline_;
  HttpResponse at_deadline_;
  // Which arming the timer's pending handler belongs to: a handler of an
  // earlier one (cancelled, or expired just as rearm came) does nothing.
  std::uint64_t armed_ = 0;
  Done done_;
};

}  // namespace fusee::http
