#include "engine/stream_feed.hpp"
#include "fusee/engine.hpp"

namespace fusee {

namespace detail {
std::optional<StreamChunk> StreamFeed::next(bool wait) {
  std::unique_lock lock(mu_);
  if (wait) cv_.wait(lock, [&] { return !chunks_.empty() || ended_; });
  if (!chunks_.empty()) {
    auto chunk = std::move(chunks_.front());
    chunks_.pop_front();
    return chunk;
  }
  if (ended_ && error_) throw Error(error_ == make_error_code(errc::shut_down) ? errc::shut_down : errc::storage,
                                    "the stream read stopped: " + error_.message());
  return std::nullopt;
}
}  // namespace detail

StreamReader::StreamReader(std::shared_ptr<detail::StreamFeed> feed) : feed_(std::move(feed)) {}
StreamReader::~StreamReader() = default;
StreamReader::StreamReader(StreamReader&&) noexcept = default;
StreamReader& StreamReader::operator=(StreamReader&&) noexcept = default;
std::optional<StreamChunk> StreamReader::next() { return feed_->next(true); }
std::optional<StreamChunk> StreamReader::try_next() { return feed_->next(false); }
bool StreamReader::ended() const { return feed_->ended(); }

const char* run_status_name(RunStatus status) noexcept {
  switch (status) {
    case RunStatus::running: return "running";
    case RunStatus::completed: return "completed";
    case RunStatus::failed: return "failed";
    case RunStatus::cancelled: return "cancelled";
    case RunStatus::stuck: return "stuck";
  }
  return "unknown";
}

}  // namespace fusee
