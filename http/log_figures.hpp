// Figures of a log that an engine's /metrics and /v1/stats and fusee
// server's /metrics and /v1/server all show, computed one way.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <span>

namespace fusee::http {

// Records per durable write, on average; 0 before the first write.
inline double records_per_flush(std::uint64_t records, std::uint64_t flushes) {
  return flushes == 0 ? 0.0 : static_cast<double>(records) / static_cast<double>(flushes);
}

// A latency histogram as JSON (the console's charts): {"bounds_us",
// "counts", "sum_us"}, counts with one more entry than bounds (the values
// past the last bound).
inline boost::json::object latency_histogram_json(std::span<const std::uint64_t> bounds_us,
                                                  std::span<const std::uint64_t> counts, std::uint64_t sum_us) {
  boost::json::array bounds, listed;
  for (auto bound : bounds_us) bounds.push_back(bound);
  for (auto count : counts) listed.push_back(count);
  return {{"bounds_us", std::move(bounds)}, {"counts", std::move(listed)}, {"sum_us", sum_us}};
}

}  // namespace fusee::http
