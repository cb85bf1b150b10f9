#include "remote/remote_limits.hpp"

#include <optional>
#include <utility>

namespace fusee::remote {

std::shared_ptr<RemoteLimits> RemoteLimits::attach(PermitChannel& channel) {
  std::shared_ptr<RemoteLimits> limits(new RemoteLimits(channel));
  std::weak_ptr<RemoteLimits> weak = limits;
  channel.set_permit_handlers(
      [weak](std::uint64_t ask) {
        if (auto alive = weak.lock()) alive->granted(ask);
      },
      [weak] {
        if (auto alive = weak.lock()) alive->resend();
      });
  return limits;
}

void RemoteLimits::set(const std::string& name, const StepLimit& limit) {
  std::lock_guard lock(mu_);
  auto& figures = figures_[name];
  figures.limit = limit;
  figures.set = true;
  if (channel_) channel_->send_limit(name, limit);
}

bool RemoteLimits::acquire(const std::string& name, Grant grant) {
  Grant dropped;  // destroyed after the lock is let go (what it holds may give permits back)
  std::lock_guard lock(mu_);
  auto& figures = figures_[name];
  if (!channel_) {
    dropped = std::move(grant);  // closed: the grant never comes
    return figures.set;
  }
  auto id = ++next_ask_;
  asks_.emplace(id, Ask{name, std::move(grant), std::chrono::steady_clock::now()});
  figures.waiting++;
  channel_->send_permit_ask(id, name, false);
  // Another worker may have set it; this one has not, which is what the
  // caller warns about.
  return figures.set;
}

void RemoteLimits::granted(std::uint64_t ask) {
  Grant grant;
  {
    std::lock_guard lock(mu_);
    auto found = asks_.find(ask);
    if (found == asks_.end()) {
      // Not asked for (any more): give it back.
      if (channel_) channel_->send_permit_release(ask);
      return;
    }
    if (!found->second.grant) return;  // held already
    grant = std::move(found->second.grant);
    found->second.grant = nullptr;
    auto& figures = figures_[found->second.name];
    figures.waiting--;
    figures.in_use++;
    figures.granted++;
    figures.waited_us += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - found->second.since)
            .count());
  }
  auto permit = std::make_shared<Permit>([weak = weak_from_this(), ask] {
    if (auto alive = weak.lock()) alive->give_back(ask);
  });
  grant(std::move(permit));
}

void RemoteLimits::give_back(std::uint64_t ask) {
  std::lock_guard lock(mu_);
  auto found = asks_.find(ask);
  if (found == asks_.end()) return;
  figures_[found->second.name].in_use--;
  asks_.erase(found);
  if (channel_) channel_->send_permit_release(ask);
}

void RemoteLimits::resend() {
  std::lock_guard lock(mu_);
  if (!channel_) return;
  for (const auto& [name, figures] : figures_) {
    if (figures.set) channel_->send_limit(name, figures.limit);
  }
  // In the order asked: what is held first counts at once, what waits
  // queues again behind the other workers' asks.
  for (const auto& [id, ask] : asks_) channel_->send_permit_ask(id, ask.name, !ask.grant);
}

void RemoteLimits::close() {
  std::vector<Grant> dropped;
  {
    std::lock_guard lock(mu_);
    if (!channel_) return;
    channel_->set_permit_handlers(nullptr, nullptr);
    channel_ = nullptr;
    for (auto it = asks_.begin(); it != asks_.end();) {
      if (!it->second.grant) {
        ++it;  // held: given back when its step lets go (nothing is sent now)
        continue;
      }
      figures_[it->second.name].waiting--;
      dropped.push_back(std::move(it->second.grant));
      it = asks_.erase(it);
    }
  }
  // Destroyed outside the lock: what they hold may give permits back.
}

std::vector<LimitStats> RemoteLimits::stats() const {
  std::lock_guard lock(mu_);
  std::vector<LimitStats> out;
  for (const auto& [name, figures] : figures_) {
    out.push_back(LimitStats{name, figures.limit, figures.in_use, figures.waiting, figures.granted, figures.waited_us});
  }
  return out;
}

}  // namespace fusee::remote
