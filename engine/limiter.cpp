#include "engine/limiter.hpp"

#include <cmath>

namespace fusee::engine {
namespace {

double ms_of(TimePoint time) {
  return std::chrono::duration<double, std::milli>(time.time_since_epoch()).count();
}

}  // namespace

std::shared_ptr<StepLimits::Permit> Limiter::make_permit(const std::string& name) {
  return std::make_shared<Permit>([limiter = weak_from_this(), name] {
    if (auto alive = limiter.lock()) alive->release(name);
  });
}

void Limiter::set(const std::string& name, const StepLimit& limit) {
  std::vector<std::pair<Grant, std::shared_ptr<Permit>>> granted;
  {
    std::lock_guard lock(mu_);
    auto& state = limits_[name];
    state.set = true;
    state.limit = limit;
    grant_locked(granted);
  }
  for (auto& [grant, permit] : granted) grant(std::move(permit));
}

std::shared_ptr<StepLimits::Permit> Limiter::take(const std::string& name) {
  std::lock_guard lock(mu_);
  auto& state = limits_[name];
  state.in_use++;
  state.granted++;
  return make_permit(name);
}

bool Limiter::acquire(const std::string& name, Grant grant) {
  std::vector<std::pair<Grant, std::shared_ptr<Permit>>> granted;
  bool known = false;
  {
    std::lock_guard lock(mu_);
    auto& state = limits_[name];
    state.waiters.push_back(Waiter{std::move(grant), std::chrono::steady_clock::now()});
    known = state.set;
    grant_locked(granted);
  }
  for (auto& [grant_fn, permit] : granted) grant_fn(std::move(permit));
  return known;
}

void Limiter::release(const std::string& name) {
  std::vector<std::pair<Grant, std::shared_ptr<Permit>>> granted;
  {
    std::lock_guard lock(mu_);
    auto found = limits_.find(name);
    if (found == limits_.end() || found->second.in_use == 0) return;
    found->second.in_use--;
    grant_locked(granted);
  }
  for (auto& [grant, permit] : granted) grant(std::move(permit));
}

void Limiter::poll() {
  std::vector<std::pair<Grant, std::shared_ptr<Permit>>> granted;
  {
    std::lock_guard lock(mu_);
    armed_ms_.reset();
    grant_locked(granted);
  }
  for (auto& [grant, permit] : granted) grant(std::move(permit));
}

void Limiter::close() {
  std::vector<Waiter> dropped;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (auto& [name, state] : limits_) {
      for (auto& waiter : state.waiters) dropped.push_back(std::move(waiter));
      state.waiters.clear();
    }
  }
  // Destroyed outside the lock: what they hold may give permits back.
}

void Limiter::grant_locked(std::vector<std::pair<Grant, std::shared_ptr<Permit>>>& granted) {
  if (closed_) return;
  const double now_ms = ms_of(now_());
  std::optional<double> wake_ms;
  for (auto& [name, state] : limits_) {
    const bool paced = state.limit.per_second > 0;
    const double interval_ms = paced ? 1000.0 / state.limit.per_second : 0;
    while (state.set && !state.waiters.empty()) {
      if (state.limit.concurrent > 0 && state.in_use >= state.limit.concurrent) break;  // a release will call
      if (paced && state.next_ms > now_ms) {
        if (!wake_ms || state.next_ms < *wake_ms) wake_ms = state.next_ms;
        break;
      }
      auto waiter = std::move(state.waiters.front());
      state.waiters.pop_front();
      state.in_use++;
      state.granted++;
      state.waited_us += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - waiter.since).count());
      // Paced from the later of the last due time and a permit-interval
      // ago: a grant late by less than an interval keeps the long-run rate.
      if (paced) state.next_ms = std::max(state.next_ms, now_ms - interval_ms) + interval_ms;
      granted.emplace_back(std::move(waiter.grant), make_permit(name));
    }
  }
  if (wake_ms && (!armed_ms_ || *wake_ms < *armed_ms_)) {
    armed_ms_ = *wake_ms;
    auto at = TimePoint(std::chrono::duration_cast<TimePoint::duration>(
        std::chrono::duration<double, std::milli>(std::ceil(*wake_ms))));
    arm_(at);
  }
}

std::vector<LimitStats> Limiter::stats() const {
  std::lock_guard lock(mu_);
  std::vector<LimitStats> out;
  for (const auto& [name, state] : limits_) {
    out.push_back(LimitStats{name, state.limit, state.in_use, state.waiters.size(), state.granted, state.waited_us});
  }
  return out;
}

}  // namespace fusee::engine
