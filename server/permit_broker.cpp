#include "server/permit_broker.hpp"

#include <utility>

namespace fusee::server {

PermitBroker::PermitBroker(Now now, bool timer, bool paused) : paused_(paused), now_(std::move(now)) {
  limiter_ = std::make_shared<engine::Limiter>(now_, [this](TimePoint at) { arm(at); });
  if (timer) timer_ = std::thread([this] { timer_loop(); });
}

PermitBroker::~PermitBroker() {
  {
    std::lock_guard lock(timer_mu_);
    stopping_ = true;
  }
  timer_cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  limiter_->close();
  std::map<std::uint64_t, std::map<std::uint64_t, Entry>> asks;
  {
    std::lock_guard lock(mu_);
    asks.swap(asks_);
  }
  // The permits go back outside the lock (the closed limiter grants nothing).
}

void PermitBroker::set(const std::string& name, const StepLimit& limit, bool* changed) {
  {
    std::lock_guard lock(mu_);
    auto [it, added] = limits_.try_emplace(name, limit);
    if (changed) {
      *changed = !added && (it->second.concurrent != limit.concurrent || it->second.per_second != limit.per_second);
    }
    it->second = limit;
  }
  limiter_->set(name, limit);
}

void PermitBroker::ask(std::uint64_t connection, std::uint64_t ask, const std::string& name, bool held,
                       OnGrant on_grant) {
  {
    std::lock_guard lock(mu_);
    auto& mine = asks_[connection];
    if (mine.contains(ask)) return;
    mine.emplace(ask, Entry{name, nullptr, std::move(on_grant)});
    if (paused_ && !held) {
      deferred_.push_back(Deferred{connection, ask, name});
      return;
    }
  }
  if (held) {
    auto permit = limiter_->take(name);
    std::lock_guard lock(mu_);
    auto mine = asks_.find(connection);
    if (mine == asks_.end()) return;  // gone meanwhile: the permit goes back as this returns
    auto entry = mine->second.find(ask);
    if (entry != mine->second.end()) entry->second.permit = std::move(permit);
    return;
  }
  queue(connection, ask, name);
}

void PermitBroker::queue(std::uint64_t connection, std::uint64_t ask, const std::string& name) {
  // A withdrawn ask is dropped when its turn comes: its permit goes back at
  // once (granted() finds no entry).
  limiter_->acquire(name, [this, connection, ask](std::shared_ptr<engine::StepLimits::Permit> permit) {
    granted(connection, ask, std::move(permit));
  });
}

void PermitBroker::resume() {
  std::vector<Deferred> deferred;
  {
    std::lock_guard lock(mu_);
    paused_ = false;
    deferred.swap(deferred_);
  }
  for (const auto& waiting : deferred) queue(waiting.connection, waiting.ask, waiting.name);
}

void PermitBroker::granted(std::uint64_t connection, std::uint64_t ask,
                           std::shared_ptr<engine::StepLimits::Permit> permit) {
  OnGrant tell;
  {
    std::lock_guard lock(mu_);
    auto mine = asks_.find(connection);
    if (mine == asks_.end()) return;
    auto entry = mine->second.find(ask);
    if (stopped_ || entry == mine->second.end() || entry->second.permit) return;
    entry->second.permit = std::move(permit);
    tell = entry->second.on_grant;
    ++telling_;
  }
  // (A permit not kept goes back here, outside the lock: giving it back may
  // grant the next ask, which takes the lock.)
  if (tell) tell(ask);
  std::lock_guard lock(mu_);
  if (--telling_ == 0) told_.notify_all();
}

void PermitBroker::stop() {
  {
    std::unique_lock lock(mu_);
    stopped_ = true;
    told_.wait(lock, [&] { return telling_ == 0; });
  }
  limiter_->close();
}

void PermitBroker::release(std::uint64_t connection, std::uint64_t ask) {
  std::optional<Entry> gone;
  {
    std::lock_guard lock(mu_);
    auto mine = asks_.find(connection);
    if (mine == asks_.end()) return;
    auto entry = mine->second.find(ask);
    if (entry == mine->second.end()) return;
    gone = std::move(entry->second);
    mine->second.erase(entry);
  }
  gone.reset();  // outside the lock: may grant the next
}

void PermitBroker::drop(std::uint64_t connection) {
  std::map<std::uint64_t, Entry> gone;
  {
    std::lock_guard lock(mu_);
    auto mine = asks_.find(connection);
    if (mine == asks_.end()) return;
    gone.swap(mine->second);
    asks_.erase(mine);
  }
  gone.clear();  // outside the lock
}

void PermitBroker::poll_due() { limiter_->poll(); }

std::vector<LimitStats> PermitBroker::stats() const { return limiter_->stats(); }

void PermitBroker::arm(TimePoint at) {
  {
    std::lock_guard lock(timer_mu_);
    if (due_ && *due_ <= at) return;
    due_ = at;
  }
  timer_cv_.notify_all();
}

void PermitBroker::timer_loop() {
  std::unique_lock lock(timer_mu_);
  while (!stopping_) {
    if (!due_) {
      timer_cv_.wait(lock);
      continue;
    }
    auto left = *due_ - now_();
    if (left > TimePoint::duration::zero()) {
      timer_cv_.wait_for(lock, left);
      continue;
    }
    due_.reset();
    lock.unlock();
    limiter_->poll();  // may arm again
    lock.lock();
  }
}

}  // namespace fusee::server
