// RemoteRunStore: remote mode's run store -- every RunStore call goes to
// `fusee server`'s store over the sink's connection (engine/store_call.hpp),
// so a worker checkpoints, parks and answers for finished runs as a local
// engine does, and a standby that takes a shard over finds them there.
//
// Differences from the local store, all the server's doing:
// - a write's checkpoints get their keep_from_sequence from the server's log
//   (the worker has none), and the server retires the log's segments after
//   it (JournalSink::retire is nothing here);
// - a write is refused (errc closed, "fenced") unless the worker holds the
//   lease of every shard the batch names, so a deposed worker cannot write
//   a checkpoint over its successor's.
//
// Thread-safe, as the channel is.
#pragma once

#include <atomic>
#include <memory>

#include "engine/remote_sink.hpp"
#include "engine/run_store.hpp"

namespace fusee::engine {

class RemoteRunStore final : public RunStore {
 public:
  explicit RemoteRunStore(StoreChannel& channel) : channel_(channel) {}

  Result<void> write(Batch batch) override;
  Result<std::optional<FinishedRun>> finished(const std::string& id) override;
  Result<RunPage> list(const RunQuery& query) override;
  Result<std::optional<Checkpoint>> checkpoint(std::uint32_t shard) override;
  Result<std::optional<std::string>> streams(const std::string& id) override;
  Result<void> load_journals(std::uint32_t shard, const JournalVisitor& visit) override;
  Result<void> read_journal(JournalPlace place, std::uint32_t shard, const std::string& id,
                            const JournalVisitor& visit) override;
  Result<std::optional<ParkedRun>> parked(std::uint32_t shard, const std::string& id) override;
  Result<void> parked_by_wake(std::uint32_t shard, std::int64_t from_ms,
                              const std::function<bool(const ParkedRun&)>& visit) override;
  Result<void> all_parked(std::uint32_t shard, const std::function<void(const ParkedRun&)>& visit) override;
  // The size the server gave with its last write's reply.
  std::uint64_t size_bytes() const override { return size_bytes_.load(); }
  Result<std::size_t> expire_finished(std::int64_t before_ms) override;

 private:
  // One call; its value, or the reply's error.
  Result<std::vector<std::byte>> call(StoreCall call, std::vector<std::vector<std::byte>>* rows = nullptr);
  Result<void> visit_journal_rows(StoreCall call, const JournalVisitor& visit);

  StoreChannel& channel_;
  std::atomic<std::uint64_t> size_bytes_{0};
};

}  // namespace fusee::engine
