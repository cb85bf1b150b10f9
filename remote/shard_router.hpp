// Remote mode with the shards split among workers: which shards this worker
// holds, and calls on the runs of the others, passed through the server to
// whichever worker holds each (docs/server-protocol.md, "Forwarded calls").
// The bodies are the engine's (remote/forwarded_call.hpp); the router only
// carries them. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "wal/log.hpp"

namespace fusee::remote {

class ShardRouter {
 public:
  enum class Part {
    more,       // part of the answer; more follow
    last,       // the answer, or its end
    no_holder,  // the call went nowhere (nobody holds the shard, or no connection now): safe to send again
    lost,       // the holder or the connection went before the answer: it may or may not have happened
    failed,     // the connection to the server failed for good (the engine is poisoned)
  };
  using OnReply = std::function<void(Part, std::vector<std::byte> body)>;
  // A call another worker sent for a shard this one holds. `reply` may be
  // called from any thread, once with last = true, after any number of
  // parts; a reply for a connection that went since is dropped.
  struct Call {
    wal::ShardId shard = 0;
    std::vector<std::byte> body;
    std::function<void(bool last, std::vector<std::byte> body)> reply;
  };

  virtual ~ShardRouter() = default;
  // Leased to this worker: its records and store writes go out under the lease.
  virtual bool leased(wal::ShardId shard) const = 0;
  // Leased, recovered and running here (set_running): calls for its runs are
  // this engine's. A shard leased and not yet running answers forwarded
  // calls with "ask again" (it is being taken over).
  virtual bool holds(wal::ShardId shard) const = 0;
  virtual void set_running(wal::ShardId shard) = 0;
  // Gives a lease back (a shard this engine could not take over) for
  // another worker to take.
  virtual void release(wal::ShardId shard) = 0;
  // Sends a call to the holder of `shard`; on_reply runs on the router's
  // reading thread (it must not block), until a part other than `more`.
  virtual void forward(wal::ShardId shard, std::vector<std::byte> body, OnReply on_reply) = 0;
  // on_call: a forwarded call arrived; on_lease: a shard was leased to this
  // worker after open (a standby's takeover). Both run on the reading
  // thread and must only hand work on. Those that came before this call are
  // handed over now.
  virtual void set_handlers(std::function<void(Call)> on_call, std::function<void(wal::ShardId)> on_lease) = 0;
};

}  // namespace fusee::remote
