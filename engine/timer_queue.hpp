// TimerQueue: a shard's durable-timer schedule in memory (sleeps, wait
// timeouts, retries, deadlines): the earliest due first, ties in the order
// added. Pure: the shard passes the time in. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_set>
#include <vector>

#include "fusee/clock.hpp"

namespace fusee::engine {

class TimerQueue {
 public:
  // owner: whose timer it is (a run), so that remove_owned can drop it.
  void add(TimePoint due, const void* owner, std::function<void()> fire) {
    heap_.push(Entry{due, next_order_++, owner, std::move(fire)});
  }
  // Drops every timer of the given owners (runs leaving memory): a rebuild,
  // linear in the timers held.
  void remove_owned(const std::unordered_set<const void*>& owners) {
    if (owners.empty()) return;
    std::vector<Entry> kept;
    kept.reserve(heap_.size());
    while (!heap_.empty()) {
      auto entry = std::move(const_cast<Entry&>(heap_.top()));
      heap_.pop();
      if (!owners.contains(entry.owner)) kept.push_back(std::move(entry));
    }
    heap_ = decltype(heap_)(std::greater<>(), std::move(kept));
  }
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
    const void* owner;
    std::function<void()> fire;
    bool operator>(const Entry& other) const {
      return due != other.due ? due > other.due : order > other.order;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
  std::uint64_t next_order_ = 0;
};

}  // namespace fusee::engine
