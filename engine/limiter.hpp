// Limiter: the engine's own step limits (StepLimits), in memory and local
// mode, and the server's for its workers (server/permit_broker.hpp). Each
// limit bounds the permits held at once and the rate they are granted at.
// Rate is paced by the given clock (a permit every 1/per_second; a grant
// late by less than that keeps the pace, so a late timer does not lower the
// long-run rate); when the head waiter waits for time, the limiter asks to
// be polled then (Arm), which the engine does with a shard timer, so a
// manual clock drives it too.
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
#include "engine/step_limits.hpp"
#include "fusee/engine.hpp"

namespace fusee::engine {

class Limiter final : public StepLimits, public std::enable_shared_from_this<Limiter> {
 public:
  using Now = std::function<TimePoint()>;
  // Call poll() at (or after) this time.
  using Arm = std::function<void(TimePoint)>;

  Limiter(Now now, Arm arm) : now_(std::move(now)), arm_(std::move(arm)) {}

  void set(const std::string& name, const StepLimit& limit) override;
  bool acquire(const std::string& name, Grant grant) override;
  void close() override;
  std::vector<LimitStats> stats() const override;
  // Grants what the clock now allows.
  void poll();
  // A permit at once, over the bound if need be, counted against the limit
  // (a worker that held it when the server restarted is still using it).
  std::shared_ptr<Permit> take(const std::string& name);

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
  std::shared_ptr<Permit> make_permit(const std::string& name);
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
