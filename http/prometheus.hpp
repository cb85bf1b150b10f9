// Prometheus text exposition: one metric with its HELP and TYPE lines, and
// histograms (cumulative `_bucket{le=...}` lines, `_sum`, `_count`), shared
// by an engine's /metrics and `fusee server`'s.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fusee/engine.hpp"

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

// Step limits (Engine::limit), a sample per limit in each family; nothing
// when there are none.
inline void append_limit_metrics(std::string& text, const std::vector<LimitStats>& limits) {
  if (limits.empty()) return;
  auto label = [](const std::string& name) {
    std::string escaped;
    for (char c : name) {
      if (c == '\\' || c == '"') escaped += '\\';
      if (c == '\n') {
        escaped += "\\n";
        continue;
      }
      escaped += c;
    }
    return escaped;
  };
  auto family = [&](const char* name, const char* type, const char* help, auto value_of) {
    text += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const auto& limit : limits) text += fmt::format("{}{{limit=\"{}\"}} {}\n", name, label(limit.name), value_of(limit));
  };
  family("fusee_limit_permits_in_use", "gauge", "Permits of a step limit held now.",
         [](const LimitStats& limit) { return limit.in_use; });
  family("fusee_limit_waiting", "gauge", "Step attempts waiting for a permit of the limit now.",
         [](const LimitStats& limit) { return limit.waiting; });
  family("fusee_limit_permits_granted_total", "counter", "Permits of the limit granted.",
         [](const LimitStats& limit) { return limit.granted; });
  family("fusee_limit_wait_seconds_total", "counter", "Time step attempts spent waiting for a permit of the limit.",
         [](const LimitStats& limit) { return static_cast<double>(limit.waited_us) / 1e6; });
}

}  // namespace fusee::http
