// WorkQueue: a thread of its own for work handed off a thread that must stay
// quick -- the replica's loop, whose heartbeats keep the view -- bounded in
// units its user counts (bytes, or calls): past the bound, try_post refuses
// and the caller says "not now". Used by the view host for the run store's
// transfer (view_host.hpp) and by an application's replica for the calls
// other replicas' applications forward (sdk/facade/replica_host.hpp).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace fusee::hosting {

class WorkQueue {
 public:
  explicit WorkQueue(std::size_t units_max) : units_max_(units_max), thread_([this] { run(); }) {}
  ~WorkQueue() { stop(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `work`, worth `units`; false (and nothing queued) past the bound
  // or once stopped.
  bool try_post(std::size_t units, std::function<void()> work) {
    {
      std::lock_guard lock(mu_);
      if (stopping_ || units_ + units > units_max_) return false;
      units_ += units;
      queue_.emplace_back(units, std::move(work));
    }
    cv_.notify_one();
    return true;
  }

  // What is queued is dropped (its callers hear nothing: their connections
  // close with the replica); the work under way finishes. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      queue_.clear();
      units_ = 0;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    for (;;) {
      std::pair<std::size_t, std::function<void()>> next;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        next.second();
      } catch (...) {
        // The work answers its own failures; one that escapes must not end
        // the process (it ends only this piece of work).
      }
      std::lock_guard lock(mu_);
      units_ -= std::min(units_, next.first);
    }
  }

  const std::size_t units_max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::size_t, std::function<void()>>> queue_;
  std::size_t units_ = 0;  // of the queued work and the work under way
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace fusee::hosting
