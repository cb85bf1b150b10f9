// The memory-mode journal sink: nothing is written, so nothing survives the
// process; positions still advance so the engine's code paths are the same.
#include <atomic>
#include <vector>

#include "engine/journal_sink.hpp"

namespace fusee::engine {
namespace {

class MemorySink final : public JournalSink {
 public:
  explicit MemorySink(std::uint32_t shard_count) : lsns_(shard_count) {}
  Result<Lsn> append(ShardId shard, std::span<const std::byte>) override {
    return lsns_[shard].fetch_add(1, std::memory_order_relaxed) + 1;
  }
  Lsn durable_lsn(ShardId shard) const override { return lsns_[shard].load(std::memory_order_relaxed); }
  bool durable_at_once() const override { return true; }
  void set_listener(Listener) override {}
  std::error_code poison() const override { return {}; }
  Result<void> close() override { return ok(); }
  Result<void> read(ShardId, Lsn, const std::function<void(Lsn, std::span<const std::byte>)>&) override {
    return ok();
  }

 private:
  std::vector<std::atomic<Lsn>> lsns_;
};

}  // namespace

std::unique_ptr<JournalSink> make_memory_sink(std::uint32_t shard_count) {
  return std::make_unique<MemorySink>(shard_count);
}

}  // namespace fusee::engine
