#include "sdk/facade/activity_history.hpp"

#include <cmath>
#include <numeric>

namespace fusee::detail {

std::uint64_t histogram_quantile_us(const std::array<std::uint64_t, kFlushLatencyBoundsUs.size() + 1>& counts,
                                    double quantile) {
  auto total = std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
  if (total == 0) return 0;
  auto wanted = static_cast<std::uint64_t>(std::ceil(quantile * static_cast<double>(total)));
  std::uint64_t seen = 0;
  for (std::size_t bucket = 0; bucket < counts.size(); ++bucket) {
    seen += counts[bucket];
    if (seen >= wanted) return kFlushLatencyBoundsUs[std::min(bucket, kFlushLatencyBoundsUs.size() - 1)];
  }
  return kFlushLatencyBoundsUs.back();
}

void ActivityHistory::read(TimePoint at, const EngineStats& totals) {
  std::lock_guard lock(mu_);
  if (last_ && at > last_->first) {
    const auto& [then, before] = *last_;
    // A total that went down (it cannot, but a reading is not trusted to
    // be monotonic) counts as nothing, not as 2^64.
    auto delta = [](std::uint64_t now, std::uint64_t earlier) { return now >= earlier ? now - earlier : 0; };
    ActivitySample sample;
    sample.at = at;
    sample.interval = std::chrono::duration_cast<std::chrono::milliseconds>(at - then);
    sample.runs_started = delta(totals.runs_started, before.runs_started);
    sample.runs_finished = delta(totals.runs_finished, before.runs_finished);
    sample.runs_failed = delta(totals.runs_failed, before.runs_failed);
    sample.steps_completed = delta(totals.steps_completed, before.steps_completed);
    sample.flushes = delta(totals.batches_written, before.batches_written);
    std::array<std::uint64_t, kFlushLatencyBoundsUs.size() + 1> flushed{};
    for (std::size_t bucket = 0; bucket < flushed.size(); ++bucket) {
      flushed[bucket] = delta(totals.flush_latency_counts[bucket], before.flush_latency_counts[bucket]);
    }
    auto histogram_flushes = std::accumulate(flushed.begin(), flushed.end(), std::uint64_t{0});
    if (histogram_flushes > 0) {
      sample.flush_mean_us = delta(totals.flush_latency_sum_us, before.flush_latency_sum_us) / histogram_flushes;
      sample.flush_p50_us = histogram_quantile_us(flushed, 0.50);
      sample.flush_p99_us = histogram_quantile_us(flushed, 0.99);
    }
    samples_.push_back(sample);
    while (samples_.size() > kSamplesMax) samples_.pop_front();
  }
  if (!last_ || at > last_->first) last_.emplace(at, totals);
}

std::vector<ActivitySample> ActivityHistory::samples() const {
  std::lock_guard lock(mu_);
  return {samples_.begin(), samples_.end()};
}

}  // namespace fusee::detail
