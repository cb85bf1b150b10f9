#include "replication/view_history.hpp"

namespace fusee::replication {

void merge_starts(ViewStarts& into, const ViewStarts& from) {
  for (const auto& [view, start] : from) into.emplace(view, start);
}

ViewStarts starts_through(const ViewStarts& starts, View view) {
  return ViewStarts(starts.begin(), starts.upper_bound(view));
}

}  // namespace fusee::replication
