// TimerQueue: a shard's durable-timer schedule in memory (sleeps, wait
// timeouts, retries, deadlines): the earliest due first, ties in the order
// added. Pure: the shard passes the time in. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

#include "fusee/clock.hpp"

namespace fusee::engine {

class TimerQueue {
 public:
  void add(TimePoint due, std::function<void()> fire) { heap_.push(Entry{due, next_order_++, std::move(fire)}); }
  std::optional<TimePoint> next_due() const {
    if (heap_.empty()) return std::nullopt;
    return heap_.top().due;
  }
  // Removes and returns the earliest timer due at `now`, if any.
  std::function<void()> pop_due(TimePoint now) {
    if (heap_.empty() || heap_.top().due > now) return {};
    auto fire = std::move(const_cast<Entry&>(heap_.top()).fire);
    heap_.pop();
    return fire;
  }
  std::size_t size() const { return heap_.size(); }

 private:
  struct Entry {
    TimePoint due;
    std::uint64_t order;
    std::function<void()> fire;
    bool operator>(const Entry& other) const {
      return due != other.due ? due > other.due : order > other.order;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
  std::uint64_t next_order_ = 0;
};

}  // namespace fusee::engine
