// StoreService: the server's side of remote mode's run store. It answers
// workers' store calls (protocol/store_call.hpp) on the directory's RunStore,
// and after each checkpoint a worker writes it retires the log's segments
// below every shard's keep_from, as a local engine's checkpointer does.
//
// Fencing: a write is done only while the calling connection holds the
// lease, at the epoch it names, of every shard the batch touches (the shards
// are read from the batch's own keys). The check and the write happen under
// fence_mu(); a lease goes on to another worker only after taking it, so a
// write in progress ends before the successor reads the store.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/run_store.hpp"
#include "protocol/store_call.hpp"
#include "wal/log.hpp"

namespace fusee::server {

struct StoreServiceStats {
  std::uint64_t checkpoints = 0;  // written by workers
  std::uint64_t segments_retired = 0;
  std::uint64_t blob_files_retired = 0;
  std::uint64_t finished_expired = 0;
  std::string retire_error;  // why retirement stopped; empty while it works
};

class StoreService {
 public:
  // keep_from: each shard's keep_from_sequence from its checkpoint at open.
  StoreService(engine::RunStore& store, wal::Log& log, std::vector<std::uint64_t> keep_from,
               std::function<void(const std::string&)> say);

  // Does one call. Rows go to send_rows in pieces as they are found; the
  // reply is returned. holds(shard, epoch): whether the calling connection
  // holds that lease now.
  protocol::StoreReply serve(const protocol::StoreCall& call,
                           const std::function<bool(std::uint32_t, std::uint64_t)>& holds,
                           const std::function<void(const std::vector<std::vector<std::byte>>&)>& send_rows);

  std::mutex& fence_mu() { return fence_mu_; }
  // Shards whose checkpoint keeps the segment that would retire at
  // `retires_at` (the log's roll hook asks them for a checkpoint).
  std::vector<std::uint32_t> lagging(std::uint64_t retires_at) const;
  // Checkpoints written for `shard` so far (the server's stop waits for one
  // more from each holder).
  std::uint64_t checkpoints_of(std::uint32_t shard) const;
  StoreServiceStats stats() const;

 private:
  protocol::StoreReply write(const protocol::StoreCall& call, const std::function<bool(std::uint32_t, std::uint64_t)>& holds);

  engine::RunStore& store_;
  wal::Log& log_;
  std::function<void(const std::string&)> say_;
  std::mutex fence_mu_;  // a write and its fence check; lease hand-overs
  mutable std::mutex mu_;
  std::vector<std::uint64_t> keep_from_;    // per shard (under mu_)
  std::vector<std::uint64_t> written_;      // checkpoints per shard (under mu_)
  StoreServiceStats stats_;                 // under mu_
};

}  // namespace fusee::server
