// RemoteRunStore: remote mode's run store -- every RunStore call goes to
// `fusee server`'s store over the sink's connection (protocol/store_call.hpp),
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
// Id filters: asking the server whether a new run's id finished or parked
// earlier would cost every start two round trips on its shard's thread. So
// the store keeps, per shard, a Bloom filter (engine/id_filter.hpp) of the
// ids the server's store holds, loaded once at open (load_id_filters) and
// told of every finished and parked id this worker writes, before the write
// goes out. The store only changes through the shard's lease holder, so an
// id the filter has never seen is certainly not stored, and finished() and
// parked() answer "none" for it at once.
//
// Thread-safe, as the channel is.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/id_filter.hpp"
#include "engine/run_store.hpp"
#include "remote/remote_sink.hpp"

namespace fusee::remote {

class RemoteRunStore final : public engine::RunStore {
 public:
  explicit RemoteRunStore(StoreChannel& channel) : channel_(channel) {}

  Result<void> write(Batch batch) override;
  Result<std::optional<engine::FinishedRun>> finished(const std::string& id) override;
  Result<engine::RunPage> list(const engine::RunQuery& query) override;
  Result<std::optional<engine::Checkpoint>> checkpoint(std::uint32_t shard) override;
  Result<std::optional<std::string>> streams(const std::string& id) override;
  Result<std::optional<std::string>> journal_of_finished(const std::string& id) override;
  Result<void> load_journals(std::uint32_t shard, const JournalVisitor& visit) override;
  Result<void> read_journal(engine::JournalPlace place, std::uint32_t shard, const std::string& id,
                            const JournalVisitor& visit) override;
  Result<std::optional<engine::ParkedRun>> parked(std::uint32_t shard, const std::string& id) override;
  Result<void> parked_by_wake(std::uint32_t shard, std::int64_t from_ms,
                              const std::function<bool(const engine::ParkedRun&)>& visit) override;
  Result<void> all_parked(std::uint32_t shard, const std::function<void(const engine::ParkedRun&)>& visit) override;
  // The size the server gave with its last write's reply.
  std::uint64_t size_bytes() const override { return size_bytes_.load(); }
  Result<std::size_t> expire_finished(std::int64_t before_ms) override;
  Result<void> stored_ids(const std::function<void(std::string_view id)>& visit) override;

  // Loads the filters of every shard from the server (at open, once the
  // leases are held and before anything is written).
  [[nodiscard]] Result<void> load_id_filters(std::uint32_t shard_count);
  // Loads one shard's filter again (a shard taken over from another worker,
  // which added ids since open); the others keep theirs.
  [[nodiscard]] Result<void> reload_id_filter(std::uint32_t shard_count, std::uint32_t shard);
  // Lookups the filters answered without asking the server.
  std::uint64_t lookups_saved() const { return lookups_saved_.load(); }

 private:
  // Every shard's filter, from the server.
  Result<std::vector<engine::IdFilter>> fetch_id_filters(std::uint32_t shard_count);
  // Whether the store may hold a run `id`: false only when certainly not.
  bool may_hold(std::string_view id);
  // One call; its value, or the reply's error.
  Result<std::vector<std::byte>> call(protocol::StoreCall call, std::vector<std::vector<std::byte>>* rows = nullptr);
  Result<void> visit_journal_rows(protocol::StoreCall call, const JournalVisitor& visit);
  // A call whose value may be absent (finished, checkpoint, streams, parked),
  // the value decoded by `decode` (nothing: malformed).
  template <typename T, typename Decode>
  Result<std::optional<T>> call_optional(protocol::StoreCall call, Decode decode);

  StoreChannel& channel_;
  std::atomic<std::uint64_t> size_bytes_{0};
  std::mutex filters_mu_;
  std::vector<engine::IdFilter> filters_;  // per shard; empty: not loaded (every lookup asks)
  std::atomic<std::uint64_t> lookups_saved_{0};
};

}  // namespace fusee::remote
