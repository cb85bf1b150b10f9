// ActivityHistory: what an engine did each second over the last minutes
// (Engine::activity, GET /v1/stats/activity, the console's engine charts),
// made from the running totals EngineStats keeps: each sample is the
// difference between two readings, so nothing on the hot path does more
// than bump a counter. Thread-safe; pure apart from its mutex.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "fusee/engine.hpp"

namespace fusee::detail {

class ActivityHistory {
 public:
  // Ten minutes of one-second samples.
  static constexpr std::size_t kSamplesMax = 600;

  // A reading of the engine's totals at `at`: the second since the last
  // reading becomes a sample (the first reading only sets the baseline).
  void read(TimePoint at, const EngineStats& totals);
  // Oldest first.
  std::vector<ActivitySample> samples() const;

 private:
  mutable std::mutex mu_;
  std::optional<std::pair<TimePoint, EngineStats>> last_;
  std::deque<ActivitySample> samples_;
};

// The latency bound at or under which `quantile` of the writes counted in
// `counts` (a flush histogram's difference over an interval) took; 0 with
// none counted, the last bound for the writes past it.
std::uint64_t histogram_quantile_us(const std::array<std::uint64_t, kFlushLatencyBoundsUs.size() + 1>& counts,
                                    double quantile);

}  // namespace fusee::detail
