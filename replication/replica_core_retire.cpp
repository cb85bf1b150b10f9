// The replica core's retirement (docs/replication.md, "Retiring a replica's
// log"): below which batch its log may go -- what its driver allows, what
// every replica within the lag cap holds, what it knows published and holds
// durably -- and the disk write that asks for it, once a heartbeat.
#include <algorithm>
#include <vector>

#include "replication/replica_core.hpp"

namespace fusee::replication {

Seq ReplicaCore::held_by_all() const {
  Seq held = commit_;
  // Past the cap, a minority of the most lagging replicas is not waited
  // for (ReplicaOptions::retire_lag_bytes_max); the rest still are.
  std::vector<Seq> lagging;
  for (ReplicaId r = 0; r < options_.replica_count; ++r) {
    if (r == options_.self) continue;
    const Seq match = match_[r];
    bool past_cap = false;
    if (options_.retire_lag_bytes_max > 0 && match < commit_) {
      if (match_known_[r]) {
        past_cap = match < log_.retired_through() ||
                   log_.bytes_through(commit_) - log_.bytes_through(match) > options_.retire_lag_bytes_max;
      } else {
        // Not heard from in this view: what it holds is unknown (a replica
        // restarting holds most of the log, and would have to be rebuilt
        // if its log ended before this one's start). It lags by this
        // view's batches at least: past the cap once they pass it.
        const Seq from = std::max(lead_from_, log_.retired_through());
        past_cap = commit_ > from &&
                   log_.bytes_through(commit_) - log_.bytes_through(from) > options_.retire_lag_bytes_max;
      }
    }
    if (past_cap) {
      lagging.push_back(match);
    } else {
      held = std::min(held, match);
    }
  }
  std::sort(lagging.begin(), lagging.end());
  const std::size_t left_behind_max = options_.replica_count - quorum();
  for (std::size_t i = left_behind_max; i < lagging.size(); ++i) held = std::min(held, lagging[i]);
  return held;
}

Seq ReplicaCore::retire_target() const {
  // Below what its driver is done with, what every replica holds (none will
  // ask for it again), what it knows published and holds durably -- and
  // never its last batch (its log always ends in one it holds).
  Seq target = std::min(retire_allowed_, role_ == Role::primary ? held_by_all() + 1 : retire_known_);
  target = std::min({target, known_committed() + 1, durable_end_ + 1, log_.end()});
  return target;
}

void ReplicaCore::retire(Output& out) {
  // A suspect replica's log waits for its repair.
  if ((role_ != Role::backup && role_ != Role::primary) || suspect_) return;
  const Seq target = retire_target();
  if (target <= std::max(retire_asked_, log_.retired_through() + 1)) return;
  retire_asked_ = target;
  write(log_.end(), {}, out, false, std::nullopt, target);
}

}  // namespace fusee::replication
