// StoreApplier: replicated mode's run store, applied from the log
// (docs/replication.md, "The run store through the log").
//
// The engine on a primary writes its run store (checkpoints, parking,
// finished runs, expiry) as records of one shard of the replicated log, the
// one after its own (replicated_run_store.hpp). Every replica -- the primary
// too -- applies each such record to its own RocksDB once the log committed
// it (replica::CommittedFeed), in the log's order, with the place it
// reached written in the same RocksDB batch (RunStore::put_replica_applied):
// a restart applies on from there, and a new primary's run store holds every
// checkpoint its log committed. A primary applies its own records only once
// committed, like the others, so a deposed primary's store never holds what
// the next primary's log does not.
//
// A writer on the primary waits for its record to be applied here. Its
// record is known by its view and LSN: applied in that view, it succeeded;
// the view ended first, or another record took its place, and its outcome is
// unknown (errc::unavailable; it may yet be applied: the store follows the
// log, whatever the writer heard).
//
// Threads: committed() on the replica's loop thread (it only parses and
// queues), the applying on a thread of its own, the rest from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "engine/run_store.hpp"
#include "replication/replica_messages.hpp"
#include "wal/log_format.hpp"

namespace fusee::hosting {

// A run-store record's first byte: what follows it.
enum class StoreRecordKind : char {
  batch = 'B',   // RunStore::Batch::encode()
  expire = 'E',  // 8 bytes, big-endian: expire_finished's before_ms
};
std::vector<std::byte> encode_store_batch(const engine::RunStore::Batch& batch);
std::vector<std::byte> encode_store_expiry(std::int64_t before_ms);

struct StoreApplierStats {
  std::uint64_t records_applied = 0;
  std::uint64_t records_skipped = 0;  // applied before a restart
  replication::Seq batches_done = 0;  // every committed batch through it is applied
  std::string error;                  // why applying stopped; empty while it runs
};

class StoreApplier {
 public:
  // `store`: this replica's own; `store_shard`: the log's shard its records
  // travel in. `failed`: applying stopped (the store cannot be written, or
  // the log holds a record that is none): this replica's store no longer
  // follows the log, and it must stop (from the applying thread).
  StoreApplier(std::shared_ptr<engine::RunStore> store, wal::ShardId store_shard,
               std::function<void(const std::string&)> failed);
  ~StoreApplier();  // stop()
  StoreApplier(const StoreApplier&) = delete;
  StoreApplier& operator=(const StoreApplier&) = delete;

  // Where the store stands (read at construction): the replica's feed starts
  // after `feed_after()`.
  replication::Seq feed_after() const { return start_.seq == 0 ? 0 : start_.seq - 1; }

  // A committed batch (replica::CommittedHook), in order: false when it
  // holds kQueuedBytesMax of records not applied yet (the feed offers the
  // batch again later), so that a replica far behind does not read its
  // whole log into memory.
  bool committed(replication::Seq seq, replication::View view, std::string_view body);
  static constexpr std::uint64_t kQueuedBytesMax = 64u << 20;

  // Each time the replica leads, its host numbers the lead (1, 2, ...: a
  // view may be led twice, its log reopened): what follows is per lead.
  //
  // Appends a record through `append` (a log's, returning its LSN) and waits
  // for it to be applied: what an expiry removed (0 for a batch), or
  // errc::unavailable when its outcome is unknown (see above), or the
  // append's or the apply's error. `view`: the lead's view.
  Result<std::size_t> submit(std::uint64_t lead, replication::View view,
                             const std::function<Result<wal::Lsn>()>& append);
  // The lead ended (its view's log stepped down): its writers still waiting
  // are told errc::unavailable, and later ones are refused.
  void lead_ended(std::uint64_t lead);
  // Waits until every committed batch through `seq` is applied: false when
  // applying stopped, or lead_ended(lead) came first.
  bool wait_done(replication::Seq seq, std::uint64_t lead);

  StoreApplierStats stats() const;
  void stop();

 private:
  struct Item {
    replication::Seq seq = 0;
    replication::View view = 0;
    wal::Lsn first_lsn = 0;
    std::vector<std::string> records;
    bool undecodable = false;  // its store shard's sections do not decode
  };
  struct Waiter {
    std::uint64_t lead = 0;
    std::optional<Result<std::size_t>> outcome;
  };
  void run();
  // Applies record `index` of `item`: what an expiry removed.
  Result<std::size_t> apply(const Item& item, std::uint32_t index);
  // Under mu_: a record of `view` at `lsn` was applied with `outcome`.
  void settle(replication::View view, wal::Lsn lsn, const Result<std::size_t>& outcome);
  void fail(const std::string& why);

  std::shared_ptr<engine::RunStore> store_;
  wal::ShardId store_shard_;
  std::function<void(const std::string&)> failed_;
  engine::ReplicaApplied start_;  // the store's place when it was opened

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  replication::Seq fed_ = 0;       // the last batch committed() was given
  replication::Seq applying_ = 0;  // the batch being applied (0: none)
  std::uint64_t ended_ = 0;        // the last lead lead_ended() named
  std::uint64_t queued_bytes_ = 0;  // of the records in queue_
  std::map<std::pair<replication::View, wal::Lsn>, std::shared_ptr<Waiter>> waiters_;
  StoreApplierStats stats_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fusee::hosting
