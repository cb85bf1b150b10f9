// StreamFeed: the queue between a shard, which pushes durable chunks of one
// stream in offset order, and a StreamReader on a user thread. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>

#include "fusee/engine.hpp"

namespace fusee::detail {

class StreamFeed {
 public:
  StreamFeed() = default;
  // A feed whose chunks and end go to another worker (a forwarded read):
  // push and end call these, on the shard's thread, instead of queueing.
  StreamFeed(std::function<void(StreamChunk)> on_chunk, std::function<void(std::error_code)> on_end)
      : on_chunk_(std::move(on_chunk)), on_end_(std::move(on_end)) {}

  void push(StreamChunk chunk) {
    if (on_chunk_) {
      on_chunk_(std::move(chunk));
      return;
    }
    std::lock_guard lock(mu_);
    chunks_.push_back(std::move(chunk));
    cv_.notify_all();
  }
  // No more chunks will come: the stream closed or the run finished; with an
  // error code, the reader fails instead (shutdown, storage).
  void end(std::error_code error = {}) {
    {
      std::lock_guard lock(mu_);
      if (ended_) return;
      ended_ = true;
      error_ = error;
      cv_.notify_all();
    }
    if (on_end_) on_end_(error);
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
  std::function<void(StreamChunk)> on_chunk_;
  std::function<void(std::error_code)> on_end_;
};

}  // namespace fusee::detail
