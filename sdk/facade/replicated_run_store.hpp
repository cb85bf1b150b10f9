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

#include "engine/run_store.hpp"
#include "replication/replica_messages.hpp"
#include "sdk/facade/store_applier.hpp"
#include "wal/log.hpp"

namespace fusee::facade {

class ReplicatedRunStore final : public engine::RunStore {
 public:
  // `lead`: the host's number for this lead of `view` (StoreApplier).
  ReplicatedRunStore(std::shared_ptr<engine::RunStore> local, std::shared_ptr<StoreApplier> applier,
                     std::shared_ptr<wal::Log> log, std::uint64_t lead, replication::View view,
                     wal::ShardId store_shard)
      : local_(std::move(local)),
        applier_(std::move(applier)),
        log_(std::move(log)),
        lead_(lead),
        view_(view),
        store_shard_(store_shard) {}

  Result<void> write(Batch batch) override;
  // Applied unsynced on every replica anyway: the log is what is durable.
  Result<void> write_unsynced(Batch batch) override { return write(std::move(batch)); }
  Result<void> sync() override { return ok(); }
  Result<std::size_t> expire_finished(std::int64_t before_ms) override;

  Result<std::optional<engine::FinishedRun>> finished(const std::string& id) override { return local_->finished(id); }
  Result<engine::RunPage> list(const engine::RunQuery& query) override { return local_->list(query); }
  Result<std::optional<engine::Checkpoint>> checkpoint(std::uint32_t shard) override {
    return local_->checkpoint(shard);
  }
  Result<std::optional<std::string>> streams(const std::string& id) override { return local_->streams(id); }
  Result<std::optional<std::string>> journal_of_finished(const std::string& id) override {
    return local_->journal_of_finished(id);
  }
  Result<void> load_journals(std::uint32_t shard, const JournalVisitor& visit) override {
    return local_->load_journals(shard, visit);
  }
  Result<void> read_journal(engine::JournalPlace place, std::uint32_t shard, const std::string& id,
                            const JournalVisitor& visit) override {
    return local_->read_journal(place, shard, id, visit);
  }
  Result<std::optional<engine::ParkedRun>> parked(std::uint32_t shard, const std::string& id) override {
    return local_->parked(shard, id);
  }
  Result<void> parked_by_wake(std::uint32_t shard, std::int64_t from_ms,
                              const std::function<bool(const engine::ParkedRun&)>& visit) override {
    return local_->parked_by_wake(shard, from_ms, visit);
  }
  Result<void> all_parked(std::uint32_t shard, const std::function<void(const engine::ParkedRun&)>& visit) override {
    return local_->all_parked(shard, visit);
  }
  std::uint64_t size_bytes() const override { return local_->size_bytes(); }
  Result<void> stored_ids(const std::function<void(std::string_view id)>& visit) override {
    return local_->stored_ids(visit);
  }
  Result<engine::ReplicaApplied> replica_applied() override { return local_->replica_applied(); }

 private:
  // Appends one record to the store shard and waits for it to be applied.
  Result<std::size_t> submit(const std::vector<std::byte>& record);

  std::shared_ptr<engine::RunStore> local_;
  std::shared_ptr<StoreApplier> applier_;
  std::shared_ptr<wal::Log> log_;
  std::uint64_t lead_;
  replication::View view_;
  wal::ShardId store_shard_;
  std::mutex mu_;  // one record at a time: each waits for the one before
};

}  // namespace fusee::facade
