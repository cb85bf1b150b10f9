// Gate: lets a test hold a coroutine step suspended, as if it waited on an
// outside reply, and release it from the test's thread.
#pragma once

#include <coroutine>
#include <mutex>
#include <optional>
#include <stop_token>
#include <utility>

namespace fusee::testing {

// The test opens it from its own thread: a coroutine step that awaits
// wait() stays suspended until then, like one waiting on an outside reply.
class Gate {
 public:
  struct Awaiter {
    Gate* gate;
    bool await_ready() { return gate->is_open(); }
    bool await_suspend(std::coroutine_handle<> waiter) { return gate->park(waiter); }
    void await_resume() {}
  };
  Awaiter wait() { return Awaiter{this}; }
  // Whether a coroutine is suspended on it now.
  bool has_waiter() {
    std::lock_guard lock(mu_);
    return static_cast<bool>(waiter_);
  }
  // Resumes the waiting coroutine on the calling thread.
  void open() {
    std::coroutine_handle<> waiter;
    {
      std::lock_guard lock(mu_);
      open_ = true;
      waiter = std::exchange(waiter_, {});
    }
    if (waiter) waiter.resume();
  }

 private:
  bool is_open() {
    std::lock_guard lock(mu_);
    return open_;
  }
  bool park(std::coroutine_handle<> waiter) {
    std::lock_guard lock(mu_);
    if (open_) return false;
    waiter_ = waiter;
    return true;
  }

  std::mutex mu_;
  bool open_ = false;
  std::coroutine_handle<> waiter_;
};

// co_await UntilStopped{step.stop_token()}: a coroutine step's outside
// call that never answers; it ends when the engine asks the step to stop
// (its run stops: a shutdown, a cancel), on the thread that asks, so no
// frame is left behind.
struct UntilStopped {
  struct Resume {
    std::coroutine_handle<> waiter;
    void operator()() const { waiter.resume(); }
  };
  std::stop_token stop;
  std::optional<std::stop_callback<Resume>> callback;
  bool await_ready() const noexcept { return stop.stop_requested(); }
  void await_suspend(std::coroutine_handle<> waiter) { callback.emplace(stop, Resume{waiter}); }
  void await_resume() const noexcept {}
};

}  // namespace fusee::testing
