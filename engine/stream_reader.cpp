#include "engine/shard.hpp"
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
  if (ended_ && error_) {
    // shut_down and unavailable (a replica that stopped leading: the read
    // may go on through the new primary) reach the reader as they are, so
    // that it can tell a retry from a loss; anything else is the storage's.
    const bool as_is = error_ == make_error_code(errc::shut_down) || error_ == make_error_code(errc::unavailable);
    throw Error(as_is ? static_cast<errc>(error_.value()) : errc::storage, "the stream read stopped: " + error_.message());
  }
  return std::nullopt;
}
}  // namespace detail

StreamReader::StreamReader(std::shared_ptr<detail::StreamFeed> feed) : feed_(std::move(feed)) {}
StreamReader::~StreamReader() = default;
StreamReader::StreamReader(StreamReader&&) noexcept = default;
StreamReader& StreamReader::operator=(StreamReader&&) noexcept = default;
std::optional<StreamChunk> StreamReader::next() {
  // Chunks come from a shard's thread: waiting on one there could hang.
  if (engine::Shard::on_shard_thread()) {
    throw Error(errc::wrong_thread,
                "StreamReader::next was called from a workflow or a step, on a shard's thread, where it would wait "
                "on a shard (maybe its own): read streams from outside the engine's threads (try_next does not wait)");
  }
  return feed_->next(true);
}
std::optional<StreamChunk> StreamReader::try_next() { return feed_->next(false); }
bool StreamReader::ended() const { return feed_->ended(); }

const char* start_outcome_name(StartOutcome outcome) noexcept {
  switch (outcome) {
    case StartOutcome::started: return "started";
    case StartOutcome::attached: return "attached";
    case StartOutcome::attached_other_input: return "attached_other_input";
  }
  return "unknown";
}

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
