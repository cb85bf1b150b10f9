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

// A latency histogram measured in microseconds, exposed in seconds as
// Prometheus wants base units (`..._duration_seconds`; promtool flags
// abbreviated units): bounds in µs, counts with one more entry than bounds
// (the values past the last bound), the sum in µs.
inline void append_seconds_histogram(std::string& text, const char* name, const char* help,
                                     std::span<const std::uint64_t> bounds_us, std::span<const std::uint64_t> counts,
                                     std::uint64_t sum_us) {
  text += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_us.size(); ++i) {
    cumulative += counts[i];
    text += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, static_cast<double>(bounds_us[i]) / 1e6, cumulative);
  }
  cumulative += counts[bounds_us.size()];
  text += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name,
                      static_cast<double>(sum_us) / 1e6, name, cumulative);
}

}  // namespace fusee::http
