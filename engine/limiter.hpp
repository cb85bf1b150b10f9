// Limiter: the engine's named step limits (Engine::limit). A step attempt
// asks for a permit of its limit and runs once granted; the permit goes
// back when the attempt ends (its last reference drops). Each limit bounds
// the permits held at once and the rate they are granted at; waiters are
// served in the order they asked. Rate is paced by the engine's clock
// (a permit every 1/per_second; a grant late by less than that keeps the
// pace, so a late timer does not lower the long-run rate); when the head waiter waits
// for time, the limiter asks to be polled then (Arm), which the engine does
// with a shard timer, so a manual clock drives it too.
//
// Thread-safe: any thread may acquire, release and poll; grants are called
// on the thread that made them possible, outside the lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fusee/clock.hpp"
#include "fusee/engine.hpp"

namespace fusee::engine {

class Limiter : public std::enable_shared_from_this<Limiter> {
 public:
  using Now = std::function<TimePoint()>;
  // Call poll() at (or after) this time.
  using Arm = std::function<void(TimePoint)>;

  // A granted permit: released when the last reference drops.
  class Permit {
   public:
    Permit(std::weak_ptr<Limiter> limiter, std::string name) : limiter_(std::move(limiter)), name_(std::move(name)) {}
    ~Permit();
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;

   private:
    std::weak_ptr<Limiter> limiter_;
    std::string name_;
  };
  using Grant = std::function<void(std::shared_ptr<Permit>)>;

  Limiter(Now now, Arm arm) : now_(std::move(now)), arm_(std::move(arm)) {}

  void set(const std::string& name, const StepLimit& limit);
  bool has(const std::string& name) const;
  // Queues the ask; `grant` runs once a permit is free (maybe at once, on
  // this thread). A limit not set yet grants nothing until set() sets it
  // (a recovered run may ask before the application has set its limits);
  // false then, for the caller to warn about.
  bool acquire(const std::string& name, Grant grant);
  // Grants what the clock now allows.
  void poll();
  // Grants nothing more (the engine shuts down); drops the waiters.
  void close();
  std::vector<LimitStats> stats() const;

 private:
  struct Waiter {
    Grant grant;
    std::chrono::steady_clock::time_point since;
  };
  struct State {
    bool set = false;  // set() named it; until then it grants nothing
    StepLimit limit;
    std::uint32_t in_use = 0;
    double next_ms = 0;  // when the next permit is due by the rate (ms since the epoch)
    std::deque<Waiter> waiters;
    std::uint64_t granted = 0;
    std::uint64_t waited_us = 0;
  };
  void release(const std::string& name);
  // Under mu_: grants what it can into `granted`; arms the next poll.
  void grant_locked(std::vector<std::pair<Grant, std::shared_ptr<Permit>>>& granted);

  Now now_;
  Arm arm_;
  mutable std::mutex mu_;
  std::map<std::string, State> limits_;
  std::optional<double> armed_ms_;  // a poll is asked for then
  bool closed_ = false;
};

}  // namespace fusee::engine
