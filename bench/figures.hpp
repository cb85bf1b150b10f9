// Rounding and ratios for benchmark figures, shared by every benchmark so
// tables and JSON lines agree. Pure functions; thread-safe.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace fusee::bench {

// Multiplying by a power of ten and dividing back (never multiplying by a
// fraction such as 0.001) gives the double nearest the decimal, so JSON shows
// 0.3 and not 0.30000000000000004.
inline double round_to_digits(double value, int digits) {
  double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

// The clock reads in nanoseconds; more digits than that are float noise.
inline double round_to_ns(double value_us) { return round_to_digits(value_us, 3); }

inline double ratio(double numerator, double denominator) {
  // NaN becomes null in JSON and "n/a" in the table: a figure the run lacks.
  return denominator > 0 ? numerator / denominator : std::nan("");
}

inline std::string format_ratio(double value) {
  return std::isfinite(value) ? fmt::format("{:.2f}", value) : std::string("n/a");
}

// The smallest, the median and the largest of a figure taken each round.
struct Spread {
  double min = std::nan("");
  double median = std::nan("");
  double max = std::nan("");
};

inline Spread spread_of(std::vector<double> values) {
  Spread spread;
  if (values.empty()) return spread;
  std::sort(values.begin(), values.end());
  spread.min = values.front();
  spread.max = values.back();
  std::size_t middle = values.size() / 2;
  spread.median = values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
  return spread;
}

}  // namespace fusee::bench
