// RemoteLimits: a worker's step limits in server mode. The server grants
// the permits (server/permit_broker.hpp), so a limit holds across every
// worker of a `fusee server`, and a permit is a lease of the worker's
// connection: a worker that dies or goes silent for the lease TTL does not
// keep it. Rates are paced by the server's clock, not the engine's.
//
// Each ask has an id of this worker's; the server answers it with a grant,
// and the permit's last reference dropping sends it back. When the
// connection is made again (the server restarted, and forgot this
// worker's), the limits are sent again, what is held is declared held,
// and what waits is asked for again, in order.
//
// Thread-safe as StepLimits. Grants run on the connection's reading thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/step_limits.hpp"

namespace fusee::remote {

// The connection's side of it (the remote sink, remote/remote_sink.hpp).
// What is sent while not connected is dropped: the reconnect hook sends
// the whole state again.
class PermitChannel {
 public:
  virtual ~PermitChannel() = default;
  // on_grant: the server granted ask `ask`. on_reconnect: a new connection
  // to the server is up (send everything again). Empty functions detach.
  virtual void set_permit_handlers(std::function<void(std::uint64_t ask)> on_grant,
                                   std::function<void()> on_reconnect) = 0;
  virtual void send_limit(const std::string& name, const StepLimit& limit) = 0;
  virtual void send_permit_ask(std::uint64_t ask, const std::string& name, bool held) = 0;
  virtual void send_permit_release(std::uint64_t ask) = 0;
};

class RemoteLimits final : public engine::StepLimits, public std::enable_shared_from_this<RemoteLimits> {
 public:
  // Attaches itself to `channel` (which must outlive it, or close() be
  // called first).
  static std::shared_ptr<RemoteLimits> attach(PermitChannel& channel);

  void set(const std::string& name, const StepLimit& limit) override;
  bool acquire(const std::string& name, Grant grant) override;
  // Detaches from the channel: no more grants, the waiters dropped.
  void close() override;
  std::vector<LimitStats> stats() const override;

 private:
  explicit RemoteLimits(PermitChannel& channel) : channel_(&channel) {}
  void granted(std::uint64_t ask);
  void give_back(std::uint64_t ask);
  void resend();

  struct Ask {
    std::string name;
    Grant grant;  // empty once granted
    std::chrono::steady_clock::time_point since;
  };
  struct Figures {
    StepLimit limit;
    bool set = false;
    std::uint64_t in_use = 0;
    std::uint64_t waiting = 0;
    std::uint64_t granted = 0;
    std::uint64_t waited_us = 0;
  };
  mutable std::mutex mu_;  // taken before the channel's (every send is under it, so they go out in order)
  PermitChannel* channel_ = nullptr;  // null once closed
  std::uint64_t next_ask_ = 0;
  std::map<std::uint64_t, Ask> asks_;  // waiting and held, by id (so in the order asked)
  std::map<std::string, Figures> figures_;
};

}  // namespace fusee::remote
