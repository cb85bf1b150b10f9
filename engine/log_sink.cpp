// The local-mode journal sink: the shared write-ahead log.
#include "engine/journal_sink.hpp"

namespace fusee::engine {
namespace {

class LogSink final : public JournalSink {
 public:
  explicit LogSink(std::unique_ptr<wal::Log> log) : log_(std::move(log)) {}
  Result<Lsn> append(ShardId shard, std::span<const std::byte> record) override {
    return log_->append(shard, record);
  }
  Lsn durable_lsn(ShardId shard) const override { return log_->durable_lsn(shard); }
  bool durable_at_once() const override { return false; }
  void begin_group(ShardId shard) override { log_->begin_group(shard); }
  void end_group(ShardId shard) override { log_->end_group(shard); }
  bool in_group(ShardId shard) const override { return log_->in_group(shard); }
  void set_listener(Listener listener) override {
    log_->set_durable_hook([listener](ShardId shard, Lsn) { listener(shard); });
    log_->set_poison_hook([listener, shards = log_->shard_count()](std::error_code) {
      for (ShardId shard = 0; shard < shards; ++shard) listener(shard);
    });
  }
  std::error_code poison() const override { return log_->poison(); }
  Result<void> close() override { return log_->close(); }
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
  std::unique_ptr<wal::Log> log_;
};

}  // namespace

std::unique_ptr<JournalSink> make_log_sink(std::unique_ptr<wal::Log> log) {
  return std::make_unique<LogSink>(std::move(log));
}

}  // namespace fusee::engine
