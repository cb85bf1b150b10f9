// Which crash points a crash-suite case checks (docs/testing.md, "Crash
// enumerations"). `make test` checks a sample within a time budget per
// case: the points in an order drawn from a seed that changes every run, so
// that successive runs cover different points, and is printed, so that a
// failure replays (FUSEE_CRASH_SEED=N). `make test-long` sets
// FUSEE_CRASH_WHOLE=1: every point, in order, however long it takes.
//
//   CrashSample sample("versioning", std::chrono::seconds(5));
//   while (auto point = sample.next(last_point)) check(*point);
//   sample.report(states_checked);
//
// The last point (the workload run to its end) and the first are always
// checked; then the rest, in the seed's order, while the budget lasts and
// until at least kMinPoints are checked however slow the machine is (so a
// case's own counts, "more than 10 points", hold on any machine).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace fusee::testing {

// The run's seed: FUSEE_CRASH_SEED, or a new one (the same for every case
// of the process, so one number replays the run).
inline std::uint64_t crash_seed() {
  static const std::uint64_t seed = [] {
    if (const char* text = std::getenv("FUSEE_CRASH_SEED"); text != nullptr && *text != '\0') {
      return static_cast<std::uint64_t>(std::strtoull(text, nullptr, 10));
    }
    return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return seed;
}

// Every point, as make test-long asks.
inline bool crash_whole() {
  const char* text = std::getenv("FUSEE_CRASH_WHOLE");
  return text != nullptr && std::string(text) == "1";
}

// Several workloads' points numbered as one range, so that one sample
// spreads over them all: add each workload's count, then find which
// workload a point of the range is, and its point within it.
class PointRanges {
 public:
  void add(std::uint64_t points) {
    first_.push_back(total_);
    total_ += points;
  }
  std::uint64_t total() const { return total_; }
  // (workload index, point within it)
  std::pair<std::size_t, std::uint64_t> locate(std::uint64_t point) const {
    const auto index =
        static_cast<std::size_t>(std::upper_bound(first_.begin(), first_.end(), point) - first_.begin() - 1);
    return {index, point - first_[index]};
  }

 private:
  std::vector<std::uint64_t> first_;
  std::uint64_t total_ = 0;
};

// FUSEE_CRASH_POINTS=A-B: only the points A to B, every one, in order (the
// hunt for a failure at a point whose operation moves with thread timing:
// run the range again and again under load).
inline std::optional<std::pair<std::uint64_t, std::uint64_t>> crash_point_range() {
  const char* text = std::getenv("FUSEE_CRASH_POINTS");
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const auto first = std::strtoull(text, &end, 10);
  if (end == text || *end != '-') return std::nullopt;
  const char* rest = end + 1;
  const auto last = std::strtoull(rest, &end, 10);
  if (end == rest || *end != '\0' || last < first) return std::nullopt;
  return std::pair{static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(last)};
}

class CrashSample {
 public:
  static constexpr std::uint64_t kMinPoints = 16;
  // `budget`: the case's time in make test (its checks, not its set-up).
  // `min_points`: checked however long they take.
  CrashSample(std::string name, std::chrono::steady_clock::duration budget, std::uint64_t min_points = kMinPoints)
      : name_(std::move(name)), budget_(budget), min_points_(min_points), range_(crash_point_range()),
        whole_(crash_whole() || range_.has_value()), seed_(case_seed(name_)) {}

  bool whole() const { return whole_; }
  std::uint64_t seed() const { return crash_seed(); }

  // The next point of [0, last] to check, or nothing when the sample is
  // done. `last` may change between calls (a workload whose operation
  // count moves with thread timing): points past it are skipped.
  // `wanted`: the case needs more (a count of its own to reach), budget
  // or not.
  std::optional<std::uint64_t> next(std::uint64_t last, bool wanted = false) {
    if (!started_) {
      started_ = true;
      start_ = std::chrono::steady_clock::now();
      last_ = last;
      order_.resize(last + 1);
      std::iota(order_.begin(), order_.end(), std::uint64_t{0});
      if (!whole_) {
        // The end and the start first, then the rest shuffled.
        std::swap(order_[0], order_.back());
        if (order_.size() > 2) {
          std::swap(order_[1], order_.back());  // 0 is second
          std::mt19937_64 random(seed_);
          std::shuffle(order_.begin() + 2, order_.end(), random);
        }
      }
    }
    while (at_ < order_.size()) {
      if (!whole_ && !wanted && checked_ >= min_points_ && std::chrono::steady_clock::now() - start_ >= budget_) {
        return std::nullopt;
      }
      auto point = order_[at_++];
      if (point > last) continue;
      if (range_ && (point < range_->first || point > range_->second)) continue;
      ++checked_;
      return point;
    }
    return std::nullopt;
  }

  std::uint64_t points_checked() const { return checked_; }
  std::uint64_t points() const { return last_ + 1; }

  // One line for the log: what was checked, and how to replay it.
  // `what`: what a point is ("crash points", "faulted runs").
  void report(std::uint64_t states, const std::string& what = "crash points") const {
    std::cout << name_ << ": " << checked_ << " of " << points() << " " << what << ", " << states
              << " crash states checked"
              << (whole_ ? std::string(" (every point)")
                         : " (sampled with FUSEE_CRASH_SEED=" + std::to_string(crash_seed()) + ", " +
                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(budget_).count()) +
                               " s budget; FUSEE_CRASH_WHOLE=1 checks every point)")
              << "\n";
  }

 private:
  static std::uint64_t case_seed(const std::string& name) {
    std::uint64_t hash = 0xcbf29ce484222325ULL ^ crash_seed();  // FNV-1a over the name
    for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ULL;
    return hash;
  }

  std::string name_;
  std::chrono::steady_clock::duration budget_;
  std::uint64_t min_points_;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> range_;
  bool whole_;
  std::uint64_t seed_;
  bool started_ = false;
  std::chrono::steady_clock::time_point start_;
  std::uint64_t last_ = 0;
  std::vector<std::uint64_t> order_;
  std::size_t at_ = 0;
  std::uint64_t checked_ = 0;
};

}  // namespace fusee::testing
