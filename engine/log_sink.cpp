// The journal sink over the shared write-ahead log: a local engine's own,
// or the one a replica opened as its view's primary.
#include "engine/journal_sink.hpp"

#include "fusee/error.hpp"
#include "wal/errc.hpp"

namespace fusee::engine {
namespace {

class LogSink final : public JournalSink {
 public:
  LogSink(std::shared_ptr<wal::Log> log, bool replicated, std::uint32_t shards)
      : log_(std::move(log)), replicated_(replicated), shards_(shards) {}
  Result<Lsn> append(ShardId shard, std::span<const std::byte> record) override {
    auto lsn = log_->append(shard, record);
    if (!lsn && replicated_) {
      // A stepped-down log refuses appends as poisoned or closed: say why.
      if (auto stopped = poison()) return stopped;
    }
    return lsn;
  }
  Lsn durable_lsn(ShardId shard) const override { return log_->durable_lsn(shard); }
  bool durable_at_once() const override { return false; }
  void begin_group(ShardId shard) override { log_->begin_group(shard); }
  void end_group(ShardId shard) override { log_->end_group(shard); }
  bool in_group(ShardId shard) const override { return log_->in_group(shard); }
  void set_listener(Listener listener) override {
    log_->set_durable_hook([listener, shards = shards_](ShardId shard, Lsn) {
      if (shard < shards) listener(shard);
    });
    log_->set_poison_hook([listener, shards = shards_](std::error_code) {
      for (ShardId shard = 0; shard < shards; ++shard) listener(shard);
    });
  }
  std::error_code poison() const override {
    std::error_code poison = log_->poison();
    if (replicated_ && poison == make_error_code(wal::errc::closed)) return make_error_code(errc::unavailable);
    return poison;
  }
  // A replica's log is the replica's to close (its PrimaryLog, when the
  // view ends): an engine that shuts down while the view goes on (its open
  // failed) must not stop the replica's publication.
  Result<void> close() override { return replicated_ ? ok() : log_->close(); }
  Result<void> read(ShardId shard, Lsn first,
                    const std::function<void(Lsn, std::span<const std::byte>)>& visit) override {
    Lsn last = log_->durable_lsn(shard);
    if (last < first) return ok();
    return log_->read(shard, first, last, visit);
  }
  std::uint64_t keep_from_sequence(ShardId shard, Lsn lsn) const override {
    return log_->keep_from_sequence(shard, lsn);
  }
  std::uint64_t oldest_segment_retires_at() const override { return log_->oldest_segment_retires_at(); }
  Result<wal::RetireStats> retire(std::uint64_t keep_from_sequence,
                                  const std::function<Result<void>()>& before_retiring) override {
    return log_->retire(keep_from_sequence, before_retiring);
  }
  void set_roll_hook(std::function<void(std::uint64_t)> hook) override { log_->set_roll_hook(std::move(hook)); }
  wal::LogStats stats() const override { return log_->stats(); }
  bool write_inline() override { return log_->write_inline(); }

 private:
  std::shared_ptr<wal::Log> log_;
  bool replicated_;
  std::uint32_t shards_;  // the engine's: the log's first ones
};

}  // namespace

std::unique_ptr<JournalSink> make_log_sink(std::unique_ptr<wal::Log> log) {
  const auto shards = log->shard_count();
  return std::make_unique<LogSink>(std::shared_ptr<wal::Log>(std::move(log)), false, shards);
}

std::unique_ptr<JournalSink> make_replicated_log_sink(std::shared_ptr<wal::Log> log, std::uint32_t shards) {
  return std::make_unique<LogSink>(std::move(log), true, shards);
}

}  // namespace fusee::engine
