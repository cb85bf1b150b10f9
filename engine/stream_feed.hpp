// StreamFeed: the queue between a shard, which pushes durable chunks of one
// stream in offset order, and a StreamReader on a user thread. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>

#include "fusee/engine.hpp"

namespace fusee::detail {

class StreamFeed {
 public:
  void push(StreamChunk chunk) {
    std::lock_guard lock(mu_);
    chunks_.push_back(std::move(chunk));
    cv_.notify_all();
  }
  // No more chunks will come: the stream closed or the run finished; with an
  // error code, the reader fails instead (shutdown, storage).
  void end(std::error_code error = {}) {
    std::lock_guard lock(mu_);
    if (ended_) return;
    ended_ = true;
    error_ = error;
    cv_.notify_all();
  }
  std::optional<StreamChunk> next(bool wait);
  bool ended() const {
    std::lock_guard lock(mu_);
    return ended_ && chunks_.empty();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamChunk> chunks_;
  bool ended_ = false;
  std::error_code error_;
};

}  // namespace fusee::detail
