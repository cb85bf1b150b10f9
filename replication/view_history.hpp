// The view history etcd keeps (the sequence each view's primary started at)
// and the cut it implies on a replica's log (spec/FuseeReplicated.tla,
// TruncByHistory): a batch sealed in view w at sequence s is not part of the
// cluster's log when a later view w2 > w started at or before s, because
// w2's primary chose an end below s without it. The chain makes everything
// after the first such batch go too.
#pragma once

#include <cstdint>
#include <map>

namespace fusee::replication {

using View = std::uint64_t;
using Seq = std::uint64_t;  // a batch's sequence; the first batch is 1

// View -> the sequence of the first batch its primary appended (its chosen
// end + 1). Written once per view, in the compare-and-swap that makes the
// view normal; never changed after.
using ViewStarts = std::map<View, Seq>;

// Merges starts learnt from a message or a coordinator read. Starts never
// change once written, so a merge only adds.
void merge_starts(ViewStarts& into, const ViewStarts& from);

// The starts of views <= view, which a primary of `view` carries in its
// messages: no start of a later view exists while it is primary and normal.
ViewStarts starts_through(const ViewStarts& starts, View view);

// How many leading batches of a log of `length` batches survive the history.
// `view_at(i)` is the view of the batch at sequence i + 1 (a callable, so a
// log is read where it lies, without a copy of its views). Whether a batch
// survives depends on its own sequence and view alone, so a caller that knows
// the first `known` survive the same history starts there.
template <typename ViewAt>
std::uint64_t surviving_length(std::uint64_t length, ViewAt&& view_at, const ViewStarts& starts,
                               std::uint64_t known = 0) {
  for (std::uint64_t i = known; i < length; ++i) {
    const Seq seq = i + 1;
    for (auto later = starts.upper_bound(view_at(i)); later != starts.end(); ++later) {
      if (later->second <= seq) return i;
    }
  }
  return length;
}

}  // namespace fusee::replication
