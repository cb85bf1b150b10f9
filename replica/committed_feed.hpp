// CommittedFeed: hands an engine's replica each batch of its log that is
// committed, in order, once this replica holds it durably -- the run store's
// records travel in the log, and every replica, the primary too, applies the
// committed ones to its own run store (hosting/store_applier.hpp;
// docs/replication.md, "The run store through the log").
//
// A batch is fed once the core knows it committed (ReplicaCore::
// known_committed: no later view cuts it) and it is durable here (so that a
// batch read back from the disk is what was synced). Batches whose payload
// the core released are read back from the segments. A turn feeds at most
// a byte budget, so that a replica far behind (a restart after long, a
// rebuilt one) does not hold up its loop's heartbeats while it catches up.
//
// Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "base/result.hpp"
#include "replica/replica_store.hpp"
#include "replication/replica_core.hpp"

namespace fusee::replica {

// A committed batch: its sequence, the view whose primary sealed it, its
// body (the shared log's sections); valid for the call only. False: the
// taker is full (it applies what it holds first): the batch is fed again
// on a later turn (the core's ticks make one at least every tick).
using CommittedHook = std::function<bool(replication::Seq seq, replication::View view, std::string_view body)>;

class CommittedFeed {
 public:
  // `after`: the batches through it were fed before (a restart's).
  CommittedFeed(CommittedHook hook, replication::Seq after) : hook_(std::move(hook)), fed_(after) {}

  // Feeds what is committed and durable, past what was fed, up to about
  // `bytes_max` of payload: how many batches are ready still (feed again on
  // a later turn; 0 also when the hook is full). A batch that does not read
  // back is the store's error.
  Result<std::uint64_t> feed(const replication::ReplicaCore& core, ReplicaStore& store, std::uint64_t bytes_max);
  replication::Seq fed() const { return fed_; }

 private:
  CommittedHook hook_;
  replication::Seq fed_;
};

}  // namespace fusee::replica
