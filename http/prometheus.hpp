// Prometheus text exposition: one metric with its HELP and TYPE lines, and
// histograms (cumulative `_bucket{le=...}` lines, `_sum`, `_count`), shared
// by an engine's /metrics and `fusee server`'s.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <string>

namespace fusee::http {

template <typename T>
void append_metric(std::string& text, const char* name, const char* type, const char* help, T value) {
  text += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

// counts has one more entry than bounds: the values past the last bound.
inline void append_histogram(std::string& text, const char* name, const char* help,
                             std::span<const std::uint64_t> bounds, std::span<const std::uint64_t> counts,
                             std::uint64_t sum) {
  text += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    text += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], cumulative);
  }
  cumulative += counts[bounds.size()];
  text += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name, sum, name,
                      cumulative);
}

}  // namespace fusee::http
