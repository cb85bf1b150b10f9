#include "replica/committed_feed.hpp"

#include <algorithm>

#include "replica/store_errc.hpp"

namespace fusee::replica {

using replication::Entry;
using replication::Seq;

Result<std::uint64_t> CommittedFeed::feed(const replication::ReplicaCore& core, ReplicaStore& store, std::uint64_t bytes_max) {
  const Seq ready = std::min(core.known_committed(), core.durable_end());
  std::uint64_t bytes = 0;
  // After a restart the feed may start past what the core knows committed
  // yet (its place was written before the batches saying so were durable):
  // nothing is ready until the core learns more.
  while (fed_ < ready && bytes < bytes_max) {
    const Seq seq = fed_ + 1;
    // The log no longer holds what the run store has yet to apply: a store
    // restored from longer ago than the log's start, or one whose unsynced
    // applies a crash took back past it. Only a store fetched anew helps.
    if (!core.log().holds(seq)) return make_error_code(StoreErrc::store_behind_log);
    const Entry& held = core.log().at(seq);
    bool taken = false;
    if (held.elided) {
      // Durable and committed: no write in flight cuts it (ReplicaStore::read).
      Entry read = FUSEE_TRY(store.read(seq));
      if (read.view != held.view) return make_error_code(StoreErrc::unreadable_batch);
      taken = hook_(seq, read.view, read.payload);
      bytes += read.payload.size();
    } else {
      taken = hook_(seq, held.view, held.payload);
      bytes += held.payload.size();
    }
    if (!taken) return 0;  // full: again on a later turn
    fed_ = seq;
  }
  return ready > fed_ ? ready - fed_ : 0;
}

}  // namespace fusee::replica
