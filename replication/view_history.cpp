#include "replication/view_history.hpp"

namespace fusee::replication {

void merge_starts(ViewStarts& into, const ViewStarts& from) {
  for (const auto& [view, start] : from) into.emplace(view, start);
}

ViewStarts starts_through(const ViewStarts& starts, View view) {
  return ViewStarts(starts.begin(), starts.upper_bound(view));
}

std::uint64_t surviving_length(std::span<const View> views, const ViewStarts& starts) {
  for (std::uint64_t i = 0; i < views.size(); ++i) {
    const Seq seq = i + 1;
    for (auto later = starts.upper_bound(views[i]); later != starts.end(); ++later) {
      if (later->second <= seq) return i;
    }
  }
  return views.size();
}

}  // namespace fusee::replication
