// ReplicatedRunStore: the run store a view's engine writes in replicated mode
// (docs/replication.md, "The run store through the log"). Its writes are
// records of the log's store shard (the shard after the engine's), applied
// to this replica's RocksDB -- as to every other replica's -- once the log
// committed them (store_applier.hpp); a write returns once applied here.
// Its reads are this replica's RocksDB's, which holds every write that
// returned.
//
// When the view ends, a write still waiting, and every later one, fails
// with errc::unavailable: the engine is being shut down, and the next
// primary's store holds whatever of it the log committed.
#pragma once

#include <memory>
#include <mutex>

#include "engine/forwarding_run_store.hpp"
#include "replication/replica_messages.hpp"
#include "hosting/store_applier.hpp"
#include "wal/log.hpp"

namespace fusee::hosting {

class ReplicatedRunStore final : public engine::ForwardingRunStore {
 public:
  // `lead`: the host's number for this lead of `view` (StoreApplier).
  ReplicatedRunStore(std::shared_ptr<engine::RunStore> local, std::shared_ptr<StoreApplier> applier,
                     std::shared_ptr<wal::Log> log, std::uint64_t lead, replication::View view,
                     wal::ShardId store_shard)
      : ForwardingRunStore(std::move(local)),
        applier_(std::move(applier)),
        log_(std::move(log)),
        lead_(lead),
        view_(view),
        store_shard_(store_shard) {}

  // Writes travel in the log; reads are the local store's (forwarded).
  Result<void> write(Batch batch) override;
  // Applied unsynced on every replica anyway: the log is what is durable.
  Result<void> write_unsynced(Batch batch) override { return write(std::move(batch)); }
  Result<void> sync() override { return ok(); }
  Result<std::size_t> expire_finished(std::int64_t before_ms) override;

 private:
  // Appends one record to the store shard and waits for it to be applied.
  Result<std::size_t> submit(const std::vector<std::byte>& record);

  std::shared_ptr<StoreApplier> applier_;
  std::shared_ptr<wal::Log> log_;
  std::uint64_t lead_;
  replication::View view_;
  wal::ShardId store_shard_;
  std::mutex mu_;  // one record at a time: each waits for the one before
};

}  // namespace fusee::hosting
