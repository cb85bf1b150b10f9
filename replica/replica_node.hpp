// ReplicaNode: one replica of the replicated log as a running process -- the
// replica core (replication/replica_core.hpp) driven by real threads over a
// real directory, TCP and etcd (docs/replication.md, "The replica process"):
//
//   the loop thread   Asio: the core, its ticks, every socket (peers and
//                     clients on one listening port, replica_wire.hpp)
//   the disk          the core's writes, in order, each group of waiting
//                     writes made durable by one sync (replica_store.hpp):
//                     on the loop thread once a turn's sends are out, or
//                     on a thread of its own (ReplicaNodeOptions::disk_thread)
//   the etcd thread   the core's coordinator calls, one at a time, each
//                     answered within the gateway's timeout
//                     (replication/etcd_coordinator.hpp)
//
// A client's append is the core's proposal; its reply waits until the core
// publishes the batch (a quorum holds it durably). If the replica stops
// serving first, the reply says the outcome is unknown. A disk write that
// fails stops the replica (fail-stop: the core must not go on from a log it
// cannot trust); run() then returns the error.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "replica/committed_feed.hpp"
#include "replica/node_stats.hpp"
#include "replica/replica_wire.hpp"
#include "replication/etcd_coordinator.hpp"
#include "replication/replica_core.hpp"
#include "wal/io/file_system.hpp"
#include "wal/log.hpp"

namespace fusee::replica {

// The largest append a client may send (its batch's framing must fit beside
// it in one batch of the replica's segments).
inline constexpr std::size_t kAppendBytesMax = (16u << 20) - 64;

// An engine on the replicated log (docs/replication.md, "The engine on a
// primary's log"): it appends through the log of each view the replica
// leads, and the replica takes no client's record.
struct ReplicaEngineHooks {
  // The log's shard count and recovery bases, from the engine's run store
  // (PrimaryLogHooks::configure), on the opening's thread; it may wait
  // there for the previous view's engine to have shut down.
  std::function<Result<void>(wal::LogOptions&)> configure;
  // On the loop thread, and each must only post: the engine opens and shuts
  // down off it. `lead`: the view's log is open and has published the tail
  // it recovered, through batch `tail`. `stepped_down`: after a lead, the
  // view ended and its log stepped down (the engine's callers are told
  // errc::unavailable).
  std::function<void(replication::View, std::shared_ptr<wal::Log>, replication::Seq tail)> lead;
  std::function<void(replication::View)> stepped_down;
  // Each committed batch, in order, once durable here, whatever the role
  // (committed_feed.hpp): on the loop thread, so it must be quick. The
  // batches through `committed_after` were fed before this open.
  CommittedHook committed;
  replication::Seq committed_after = 0;
  // The primary this replica knows of changed (ReplicaCore::known_primary:
  // kNoReplica while it knows none), for telling callers where to go. On
  // the loop thread; it must be quick.
  std::function<void(replication::ReplicaId primary)> primary_known;
  // A call a backup's application forwarded to this replica's engine
  // (replica_wire.hpp, frame 6), on the loop thread: it must only hand the
  // call on. `reply` may be called from any thread, any number of parts
  // `more`, then one `last` or `not_here`; a reply after the caller's
  // connection closed, or after the replica stopped, is dropped. Unset: the
  // replica answers every call `not_here`.
  using CallReply = std::function<void(CallPart, std::vector<std::byte>)>;
  std::function<void(std::uint32_t shard, std::vector<std::byte> body, CallReply reply)> call;
};

struct ReplicaNodeOptions {
  replication::ReplicaId self = 0;
  std::vector<std::string> addresses;  // every replica's HOST:PORT, by id; its own is where it listens
  std::string dir;
  std::string cluster = "default";
  replication::EtcdOptions etcd;       // its cluster is set from `cluster`
  std::chrono::milliseconds tick{10};  // the core's clock: timings below are in ticks
  std::uint32_t heartbeat_ticks = 5;
  std::uint32_t election_ticks = 60;
  std::uint32_t candidacy_ticks = 300;
  std::uint32_t lease_ticks = 100;     // < etcd's lease TTL: a cut-off primary stops first
  std::function<void(const std::string&)> log;  // what it does, a line at a time (stderr)
  // Writes on a disk thread of their own rather than on the loop thread
  // after each turn's sends (docs/replication.md has the figures of both).
  bool disk_thread = false;
  // Payload bytes of recent durable batches held in memory
  // (ReplicaOptions::held_bytes_max); a backup further behind is sent
  // batches read back from the segments.
  std::uint64_t held_bytes_max = 64u << 20;
  // ReplicaOptions::retire_lag_bytes_max: past it, a lagging minority no
  // longer holds the others' retirement back (0: it always does).
  std::uint64_t retire_lag_bytes_max = 0;
  ReplicaEngineHooks engine;  // configure set: an engine appends, clients do not
};

// The protocol's timings in ticks, from the primary's etcd lease: a
// primary no quorum hears steps down after half the TTL, well before etcd
// lets another replica take over; a backup that hears no primary for a
// quarter of it asks the others. Sets tick and the etcd lease too.
inline void set_timings_from_lease(ReplicaNodeOptions& options, std::uint32_t lease_ttl_s, std::uint32_t tick_ms) {
  tick_ms = std::max<std::uint32_t>(1, tick_ms);
  const std::uint32_t lease_ms = lease_ttl_s * 1000;
  options.tick = std::chrono::milliseconds(tick_ms);
  options.etcd.lease_ttl_seconds = lease_ttl_s;
  options.lease_ticks = std::max<std::uint32_t>(2, lease_ms / 2 / tick_ms);
  options.election_ticks = std::max<std::uint32_t>(4, lease_ms / 4 / tick_ms);
  options.heartbeat_ticks = std::max<std::uint32_t>(1, 50 / tick_ms);
  options.candidacy_ticks = std::max<std::uint32_t>(10, lease_ms * 2 / tick_ms);
}

class ReplicaNode {
 public:
  // Opens and recovers the directory (ReplicaStore::open) and binds the
  // listening port; serves nothing until run().
  static Result<std::unique_ptr<ReplicaNode>> open(io::FileSystem& fs, ReplicaNodeOptions options);
  ~ReplicaNode();
  ReplicaNode(const ReplicaNode&) = delete;
  ReplicaNode& operator=(const ReplicaNode&) = delete;

  // Serves until stop() or a failed disk write (returned).
  Result<void> run();
  // From any thread.
  void stop();
  // The log may retire the batches below `below`, as far as what runs over
  // it is concerned (an engine's run store applied them and its checkpoints
  // need none of them); the replica also waits until every replica holds
  // them (ReplicaCore::allow_retire). From any thread.
  void allow_retire(replication::Seq below);
  // What it shows of itself (node_stats.hpp), as of its loop's last turn;
  // from any thread.
  NodeStatsSnapshot stats() const;

 private:
  struct Impl;
  explicit ReplicaNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusee::replica
