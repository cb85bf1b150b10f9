// The log service of `fusee server`: it holds a data directory's shared log
// and run store, and leases its shards to workers (remote engines,
// remote/remote_sink.hpp) over the protocol of docs/server-protocol.md, on a
// Unix socket or TCP.
//
// - A worker says hello (with the token, on TCP when one is set), asks for
//   shards, and gets a lease per shard: an epoch and the shard's durable end.
//   A shard held by another connection is granted when that connection goes
//   (it closed, or its process died), with a higher epoch.
// - An append must name the lease its connection holds (shard and epoch) and
//   the LSN the log would give it; anything else is refused ("fenced") and
//   the connection closed, so a deposed worker can never append again.
// - Durable positions go back as the log publishes them: one flush covers
//   the records of every connection.
// - A lease lapses when its connection drops or sends nothing (not even a
//   ping) for lease_ttl: the connection is closed and the shard granted on.
// - Workers checkpoint into the run store through it (store calls,
//   server/store_service.hpp), fenced by their leases; the log retires what
//   the checkpoints cover, and asks the holders of lagging shards for a
//   checkpoint when it rolls to a new segment, and every holder at stop.
// - A malformed, oversized or unexpected frame closes that one connection,
//   with the reason logged; the service and its other connections go on.
//
// Threads: one accepting; per connection one reading and one writing (the
// log's durable hook only queues). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/run_store.hpp"
#include "fusee/engine.hpp"
#include "wal/io/file_system.hpp"
#include "wal/log.hpp"

namespace fusee::server {

struct LogServiceOptions {
  std::string dir;
  std::string listen = "127.0.0.1:7470";  // "unix:PATH" or "HOST:PORT" (port 0: a free one)
  std::string token;                       // required on TCP when set
  std::uint32_t shards = 0;                // a new directory's shard count (0: CPUs)
  bool direct_io = true;
  std::uint64_t segment_bytes = 64u << 20;
  // A connection that sends nothing for this long (a hung or partitioned
  // worker) is closed and its leases go to whoever waits. Workers ping at a
  // quarter of it.
  std::chrono::milliseconds lease_ttl{10'000};
  // After the server starts on a directory with records, a shard that has
  // records goes only to a worker that names it (one that held it before
  // the restart, reconnecting) for this long; a worker that asks for any
  // shards gets the others, and these after it. Without it a new worker
  // that connects first takes a reconnecting worker's shards, and that
  // worker is deposed.
  std::chrono::milliseconds reclaim_grace{2'000};
  // The HTTP front (server/http_front.hpp) on "host:port"; empty: none.
  // It wants `token` too, when one is set.
  std::string http_listen;
  // Host names the front answers to besides loopback's (Config::http_allowed_hosts).
  std::vector<std::string> http_allowed_hosts;
  // At stop, how long the workers get to checkpoint their shards first.
  std::chrono::milliseconds stop_checkpoint_wait{5'000};
  std::function<void(const std::string&)> log;  // one line per event worth telling; default stderr
};

struct LogServiceStats {
  std::uint64_t checkpoints = 0;       // workers wrote to the run store
  std::uint64_t segments_retired = 0;  // after them
  std::uint64_t segments_live = 0;
  std::uint64_t records_written = 0;  // made durable by the log, every worker's
  std::uint64_t batches_written = 0;  // durable writes
  std::uint64_t pings = 0;            // heartbeats received from workers
};

// What a replica's view lends the service (`fusee server --replicated`,
// server/replicated_server.hpp): the view's log, whose first `shards`
// shards are the workers' (the replica closes it when the view ends), and
// the run store, whose writes travel in that log.
struct LogServiceOver {
  std::shared_ptr<wal::Log> log;
  std::shared_ptr<engine::RunStore> store;
  std::uint32_t shards = 0;
  std::vector<std::uint64_t> keep_from;  // each shard's keep_from_sequence from its checkpoint
  // Leases' epochs start above it: a view's beat every earlier view's.
  std::uint64_t epoch_floor = 0;
  // The replica's part in its cluster, on /metrics (fusee_replica_*), and
  // every replica as it answers, GET /v1/cluster's body (JSON).
  std::function<ReplicaStats()> replica;
  // Never blocks: none while the replicas' first answers are awaited.
  std::function<std::optional<std::string>()> cluster;
};

class LogService {
 public:
  // Opens the directory (taking its lock) and its log, and listens. Throws
  // fusee::Error with what went wrong.
  static std::unique_ptr<LogService> open(io::FileSystem& fs, LogServiceOptions options);
  // Over a replica's view (options.dir, shards and the log's options are
  // not used): listens at once; stop() leaves the log open.
  static std::unique_ptr<LogService> open_over(LogServiceOptions options, LogServiceOver over);
  ~LogService();
  LogService(const LogService&) = delete;
  LogService& operator=(const LogService&) = delete;

  // Where it listens: "unix:PATH" or "HOST:PORT".
  std::string endpoint() const;
  std::string http_endpoint() const;  // empty without --http
  std::uint32_t shard_count() const;
  LogServiceStats stats() const;
  // Stops accepting, asks the workers to checkpoint (waiting at most
  // stop_checkpoint_wait), closes every connection, then closes the log
  // cleanly (everything appended becomes durable first). Idempotent.
  void stop();

  struct Impl;

 private:
  explicit LogService(std::unique_ptr<Impl> impl);
  static std::unique_ptr<LogService> start(std::unique_ptr<Impl> impl, LogServiceOptions options,
                                           std::vector<std::uint64_t> keep_from);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusee::server
