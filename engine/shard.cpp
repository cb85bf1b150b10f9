// Shard: one thread owning a slice of the runs. Its queue of posted work,
// its loop (durable positions, timers, posted work) and how it starts and
// stops; the rest of the class is in shard_*.cpp (shard_internal.hpp).
#include "engine/shard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/journal_json.hpp"
#include "engine/shard_internal.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"

namespace fusee::engine {

namespace {
thread_local const Shard* t_shard = nullptr;  // the shard whose thread this is
}  // namespace

bool Shard::on_shard_thread() noexcept { return t_shard != nullptr; }
bool Shard::on_own_thread() const noexcept { return t_shard == this; }

Shard::Shard(EngineCore& core, ShardId id, JournalSink& sink, std::size_t queue_max)
    : core_(core), id_(id), sink_(sink), queue_max_(queue_max) {}

Shard::~Shard() { stop(); }

bool Shard::post(std::function<void()> fn, bool external) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  if (external) {
    if (external_queued_ >= queue_max_) return false;
    external_queued_++;
  }
  inbox_.push_back(Message{std::move(fn), external});
  if (sleeping_) cv_.notify_one();
  return true;
}

void Shard::notify() {
  std::lock_guard lock(mu_);
  woken_ = true;
  if (sleeping_) cv_.notify_one();
}

void Shard::start() {
  thread_ = std::thread([this] { loop(); });
}

void Shard::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void Shard::loop() {
  t_shard = this;
  std::vector<Message> batch;
  while (true) {
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return !inbox_.empty() || woken_ || stopping_; };
      if (!ready() && !durable_waits_.empty()) {
        // Nothing to do but wait for the disk: write our records ourselves
        // if the log says that is the faster way.
        lock.unlock();
        bool wrote = sink_.write_inline();
        lock.lock();
        if (wrote) woken_ = true;
      }
      if (!ready()) {
        sleeping_ = true;
        auto due = timers_.next_due();
        if (next_parked_wake_ && (!due || *next_parked_wake_ < *due)) due = next_parked_wake_;
        if (!due) {
          cv_.wait(lock, ready);
        } else {
          auto wait = *due - core_.now();
          if (wait > std::chrono::system_clock::duration::zero()) {
            // A manual clock wakes us when it moves; the system clock by the
            // time waited. Either way the timers are looked at again.
            cv_.wait_for(lock, std::min<std::chrono::system_clock::duration>(wait, std::chrono::hours(1)), ready);
          }
        }
        sleeping_ = false;
      }
      woken_ = false;
      batch.swap(inbox_);
      for (const auto& message : batch) {
        if (message.external) external_queued_--;
      }
      if (stopping_ && batch.empty()) return;
    }
    for (auto& message : batch) message.fn();
    batch.clear();
    drain_durable();
    retry_waiting_appends();
    fire_timers();
    drain_durable();
  }
}

void Shard::drain_durable() {
  if (auto poison = sink_.poison()) {
    fail_storage(poison);
    return;
  }
  durable_ = sink_.durable_at_once() ? appended_ : sink_.durable_lsn(id_);
  while (!durable_waits_.empty() && durable_waits_.top().lsn <= durable_) {
    auto callback = std::move(const_cast<DurableWait&>(durable_waits_.top()).callback);
    durable_waits_.pop();
    callback({});
  }
}

void Shard::fire_timers() {
  auto now = core_.now();
  wake_parked(now);
  while (auto fire = timers_.pop_due(now)) fire();
}

}  // namespace fusee::engine
