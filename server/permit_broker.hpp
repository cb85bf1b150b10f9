// PermitBroker: the step limits' permits of every worker of a `fusee
// server` (Engine::limit, ctx.step(...).limit), so that a limit holds across
// workers, not per process. Workers send a limit's bounds, ask for permits
// and give them back over their connections (docs/server-protocol.md,
// "Step limits"); the broker grants them with the engine's Limiter, paced by
// the server's clock.
//
// A permit is a lease of its connection: when the connection goes (the
// worker closed it, died, or went silent for the lease TTL), what it held
// goes back and what it asked for is withdrawn. A worker that reconnects
// (the server restarted) asks again for what it waits for and declares
// what it holds, which is counted at once, over the bound if need be: those
// steps are running. So that every reconnecting worker has declared its
// permits before any new one is granted, a restarted server starts paused
// (no grants until resume(), at the end of its reclaim grace).
//
// Thread-safe. Grants are sent (on_grant) from the thread that made them
// possible, outside the broker's lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/limiter.hpp"
#include "fusee/engine.hpp"

namespace fusee::server {

class PermitBroker {
 public:
  using Now = engine::Limiter::Now;
  // Tells a connection its ask `ask` is granted.
  using OnGrant = std::function<void(std::uint64_t ask)>;

  // `now` paces the rates; the broker polls the limiter at the times it asks
  // for, on a thread of its own (poll_due() does it by hand when `timer` is
  // false, for a test with a manual clock).
  explicit PermitBroker(Now now, bool timer = true, bool paused = false);
  ~PermitBroker();
  PermitBroker(const PermitBroker&) = delete;
  PermitBroker& operator=(const PermitBroker&) = delete;

  // A limit's bounds, as a worker set them (the last one wins; `changed`
  // says whether they differ from what another worker set).
  void set(const std::string& name, const StepLimit& limit, bool* changed = nullptr);
  // Connection `connection` asks for a permit of `name` under its id `ask`;
  // on_grant runs once it is granted. `held`: the worker holds it already,
  // counted at once. An ask id the connection already has is ignored (a
  // reconnecting worker may send one twice).
  void ask(std::uint64_t connection, std::uint64_t ask, const std::string& name, bool held, OnGrant on_grant);
  // The permit goes back, or the ask is withdrawn; an unknown id is ignored.
  void release(std::uint64_t connection, std::uint64_t ask);
  // The connection went: its permits go back and its asks are withdrawn.
  void drop(std::uint64_t connection);
  // Grants what the clock now allows (what the timer thread does).
  void poll_due();
  // Ends the pause: the asks that came during it queue, in the order they came.
  void resume();
  // Grants nothing more, and returns once no grant is being sent: the
  // server stops, and the permits its closing connections give back must
  // not go to the others (each worker declares what it holds to the next
  // server, so a permit granted now would be counted twice).
  void stop();
  // Every limit, over every worker.
  std::vector<LimitStats> stats() const;

 private:
  struct Entry {
    std::string name;
    std::shared_ptr<engine::StepLimits::Permit> permit;  // null while it waits
    OnGrant on_grant;
  };
  void granted(std::uint64_t connection, std::uint64_t ask, std::shared_ptr<engine::StepLimits::Permit> permit);
  void queue(std::uint64_t connection, std::uint64_t ask, const std::string& name);
  void arm(TimePoint at);
  void timer_loop();

  std::shared_ptr<engine::Limiter> limiter_;
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::map<std::uint64_t, Entry>> asks_;  // by connection, then ask id
  std::map<std::string, StepLimit> limits_;
  bool paused_ = false;
  bool stopped_ = false;
  int telling_ = 0;  // grants being sent now, outside the lock
  std::condition_variable told_;
  struct Deferred {
    std::uint64_t connection = 0;
    std::uint64_t ask = 0;
    std::string name;
  };
  std::vector<Deferred> deferred_;  // asks that came while paused
  // The timer: the next poll the limiter asked for.
  Now now_;
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  std::optional<TimePoint> due_;
  bool stopping_ = false;
  std::thread timer_;
};

}  // namespace fusee::server
