// Clocks: the engine reads time only through a Clock, so tests and a
// deterministic simulator can drive timers. Implementations must be
// thread-safe: every shard reads the clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace fusee {

using TimePoint = std::chrono::system_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time: timers and deadlines are stored as wall time, so a timer
  // due during downtime fires at the next start.
  virtual TimePoint now() const = 0;
  // The engine calls this once per shard; a clock that moves by itself may
  // ignore it, a manual clock calls every listener after each move so that
  // sleeping shards look at their timers again.
  virtual void on_advance(std::function<void()> listener) { (void)listener; }
};

// The system clock (std::chrono::system_clock).
std::shared_ptr<Clock> system_clock();

// A clock that moves only when told. For tests and simulations.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = TimePoint{std::chrono::hours(24 * 365 * 56)}) : now_(start) {}
  TimePoint now() const override {
    std::lock_guard lock(mu_);
    return now_;
  }
  void on_advance(std::function<void()> listener) override {
    std::lock_guard lock(mu_);
    listeners_.push_back(std::move(listener));
  }
  void advance(std::chrono::milliseconds by) {
    std::vector<std::function<void()>> listeners;
    {
      std::lock_guard lock(mu_);
      now_ += by;
      listeners = listeners_;
    }
    for (auto& listener : listeners) listener();
  }

 private:
  mutable std::mutex mu_;
  TimePoint now_;
  std::vector<std::function<void()>> listeners_;
};

}  // namespace fusee
