// ForwardingRunStore: a run store that hands every call to another one, for
// a store that changes only some of them (replicated mode's, whose writes
// travel in the log: hosting/replicated_run_store.hpp; tests' stores
// that hold writes back). Derive and override what differs.
#pragma once

#include <memory>
#include <utility>

#include "engine/run_store.hpp"

namespace fusee::engine {

class ForwardingRunStore : public RunStore {
 public:
  explicit ForwardingRunStore(std::shared_ptr<RunStore> inner) : inner_(std::move(inner)) {}

  Result<void> write(Batch batch) override { return inner_->write(std::move(batch)); }
  Result<void> write_unsynced(Batch batch) override { return inner_->write_unsynced(std::move(batch)); }
  Result<void> sync() override { return inner_->sync(); }
  Result<std::optional<FinishedRun>> finished(const std::string& id) override { return inner_->finished(id); }
  Result<RunPage> list(const RunQuery& query) override { return inner_->list(query); }
  Result<std::optional<Checkpoint>> checkpoint(std::uint32_t shard) override { return inner_->checkpoint(shard); }
  Result<std::optional<std::string>> streams(const std::string& id) override { return inner_->streams(id); }
  Result<std::optional<std::string>> journal_of_finished(const std::string& id) override {
    return inner_->journal_of_finished(id);
  }
  Result<void> load_journals(std::uint32_t shard, const JournalVisitor& visit) override {
    return inner_->load_journals(shard, visit);
  }
  Result<void> read_journal(JournalPlace place, std::uint32_t shard, const std::string& id,
                            const JournalVisitor& visit) override {
    return inner_->read_journal(place, shard, id, visit);
  }
  Result<std::optional<ParkedRun>> parked(std::uint32_t shard, const std::string& id) override {
    return inner_->parked(shard, id);
  }
  Result<void> parked_by_wake(std::uint32_t shard, std::int64_t from_ms,
                              const std::function<bool(const ParkedRun&)>& visit) override {
    return inner_->parked_by_wake(shard, from_ms, visit);
  }
  Result<void> all_parked(std::uint32_t shard, const std::function<void(const ParkedRun&)>& visit) override {
    return inner_->all_parked(shard, visit);
  }
  std::uint64_t size_bytes() const override { return inner_->size_bytes(); }
  Result<std::size_t> expire_finished(std::int64_t before_ms) override { return inner_->expire_finished(before_ms); }
  Result<void> stored_ids(const std::function<void(std::string_view id)>& visit) override {
    return inner_->stored_ids(visit);
  }
  Result<ReplicaApplied> replica_applied() override { return inner_->replica_applied(); }

 protected:
  RunStore& inner() { return *inner_; }

 private:
  std::shared_ptr<RunStore> inner_;
};

}  // namespace fusee::engine
