#include "replica/committed_feed.hpp"

#include <algorithm>

#include "replica/store_errc.hpp"

namespace fusee::replica {

using replication::Entry;
using replication::Seq;

Result<std::uint64_t> CommittedFeed::feed(const replication::ReplicaCore& core, ReplicaStore& store, std::uint64_t bytes_max) {
  const Seq ready = std::min(core.known_committed(), core.durable_end());
  std::uint64_t bytes = 0;
  while (fed_ < ready && bytes < bytes_max) {
    const Seq seq = fed_ + 1;
    const Entry& held = core.log()[seq - 1];
    if (held.elided) {
      // Durable and committed: no write in flight cuts it (ReplicaStore::read).
      Entry read = FUSEE_TRY(store.read(seq));
      if (read.view != held.view) return make_error_code(StoreErrc::unreadable_batch);
      hook_(seq, read.view, read.payload);
      bytes += read.payload.size();
    } else {
      hook_(seq, held.view, held.payload);
      bytes += held.payload.size();
    }
    fed_ = seq;
  }
  return ready - fed_;
}

}  // namespace fusee::replica
