// Config: how an Engine is opened. Memory mode keeps nothing across a process
// exit; local mode journals to one shared log in <dir>/wal and survives
// crashes and power loss (given a disk that honours flushes).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusee/clock.hpp"

namespace fusee::io {
class FileSystem;  // internal; tests inject a fault-injecting one
}

namespace fusee {

// memory: nothing kept (tests). local: the engine owns <dir> (log and run
// store). remote: the shards send their records to `fusee server`
// (docs/server-protocol.md), which holds the log. replicated: <dir> is one
// replica of a replicated log (docs/replication.md); the engine runs on
// whichever replica is the primary.
enum class Mode { memory, local, remote, replicated };

// How the log makes a write durable.
enum class FlushMethod {
  direct,    // O_DIRECT writes carrying RWF_DSYNC (falls back to buffered if refused)
  buffered,  // buffered writes then fdatasync
};

struct Config {
  Mode mode = Mode::local;
  std::string dir = "./data";
  // Shard threads. 0: the count recorded in <dir>/fusee.meta, else the
  // number of CPUs. Fixed per data directory: opening with another count is
  // refused (errc::wrong_shard_count); `fusee reshard` changes it offline.
  std::uint32_t shards = 0;
  FlushMethod flush = FlushMethod::direct;
  // Payloads longer than this go to the log's blob area; 0 turns it off.
  std::size_t payload_offload_bytes = 64 * 1024;
  // Requests (start, signal, cancel, reads) waiting for one shard; past it,
  // calls fail with errc::busy and nothing is recorded.
  std::size_t shard_queue_max = 65536;
  // Bytes the log may hold staged before appends push back.
  std::size_t log_staged_bytes_max = 256u << 20;
  // Log segment size (tests make it small to force rolls).
  std::uint64_t segment_bytes = 64u << 20;
  // Local mode: how often each shard checkpoints its runs into the run
  // store (<dir>/runs), which lets the log retire old segments and bounds
  // the log read at the next open. Zero: only when a segment roll asks, at
  // shutdown, and on Engine::checkpoint().
  std::chrono::milliseconds checkpoint_interval{5000};
  // Local mode, parking: a run waiting at a sleep or a wait_for longer than
  // this leaves memory at its shard's next checkpoint (the run store keeps
  // its journal) and is replayed back when its timer, a signal or a request
  // wakes it. Past the memory budget (an estimate of what loaded runs hold,
  // split evenly between shards; 0: none) the longest-waiting runs go early.
  std::chrono::milliseconds park_after{std::chrono::minutes(1)};
  std::size_t run_memory_budget_bytes = std::size_t{1} << 30;
  // How long a finished run (input, result, status, times, streams) stays
  // in the run store for result(), list_runs() and read_stream().
  std::chrono::milliseconds finished_retention{std::chrono::hours(24 * 7)};
  // Whether a run's journal is kept with it once it finished, for as long
  // as the run (Engine::journal_json, GET /v1/runs/{id}/journal, `fusee
  // inspect DIR run ID`). Off: finished runs keep their summary only, and
  // loaded runs hold no second copy of their records.
  bool keep_finished_journals = true;
  // Local mode: a run's first step may begin before the run's start is on
  // disk, when nothing else of the run came before it: the start, the
  // step's start, and (when the run ends in that turn) its result and end
  // go to the disk in one write that a crash keeps whole or loses whole,
  // and only the caller's answer waits for it. A 1-step run then costs one
  // flush instead of two. A crash before that write loses the run, never
  // acknowledged, after the step's outside call may have been made; the
  // caller's resend makes it again with the same key and input, as any
  // step may run twice. Off: every step waits for its run's start
  // (docs/durability.md, "Running ahead").
  bool first_step_ahead = true;
  // Local mode, continuous backup (docs/backup.md): where the log is
  // copied to as it becomes durable, every backup_upload_interval; `fusee
  // restore` rebuilds a data directory from it as of any moment. A
  // directory (any mounted file system), or s3://BUCKET[/PREFIX] for
  // S3-compatible storage (credentials and endpoint from the AWS_*
  // variables). Empty: no backup. The log keeps every segment the backup
  // has not copied.
  std::string backup_target;
  // Unset (std::nullopt): each log segment is uploaded once it is complete
  // (the log moved on to the next), so losing the disk loses at most the
  // segment being written, and the target gets fewer, larger objects.
  std::optional<std::chrono::milliseconds> backup_upload_interval{std::chrono::milliseconds(1000)};
  // The backup also uploads snapshots of the run store, so that a restore
  // replays the log from the snapshot before its moment, not from the
  // directory's first batch: one at the first upload to a target, then
  // once backup_snapshot_log_bytes of log went up since the last, or
  // backup_snapshot_interval passed with any.
  std::uint64_t backup_snapshot_log_bytes = std::uint64_t{256} << 20;
  std::chrono::milliseconds backup_snapshot_interval{std::chrono::hours(1)};
  // How far back a restore can go: what no restore to a moment within the
  // last backup_retention needs (older snapshots, the log before the one
  // that serves the oldest such moment, their files) is deleted from the
  // target. 0: nothing is; the target keeps the directory's whole history.
  std::chrono::milliseconds backup_retention{0};
  // While the target does not answer, the engine goes on and the log keeps
  // what the backup lacks. Past this many bytes of log not on the target
  // (0: no bound, the log grows as long as the disk allows), new requests
  // (start, signal, update, cancel, reset, enqueue) fail with errc::busy and
  // nothing is recorded, as when the log is full; runs in flight go on. It
  // bounds what losing the disk would lose, at the cost of availability.
  std::uint64_t backup_backlog_bytes_max = 0;
  // Remote mode: the server's address, and its token (TCP, when it wants one).
  std::string server;
  std::string server_token;
  // Remote mode: 0, every shard (open waits for all). N: at most N of the
  // free shards at open (none, when others hold them all), more as they
  // free up while under N; calls for the runs of the other shards go to
  // their holders through the server (docs/server-protocol.md).
  std::uint32_t server_shards_max = 0;
  // Remote mode with server_shards_max 0: how long Engine::open waits for
  // the leases of shards another worker holds; past it, open fails with
  // errc::unavailable naming them. 0: as long as it takes (a standby that
  // waits to take over from the holder sets it so).
  std::chrono::milliseconds server_open_timeout{std::chrono::seconds(30)};
  // Replicated mode (docs/replication.md, "An application's replica"): this
  // replica's id, its index in `replicas`, every replica's "HOST:PORT" (3,
  // 5, 7...: the replica listens on its own), etcd's members ("HOST:PORT"
  // or "HOST:PORT,HOST:PORT,...": one down is passed over for the next), the
  // cluster's name (<dir> is made a replica of it by `fusee replica init`),
  // the protocol's clock and the primary's etcd lease, from which every
  // timeout is derived as `fusee replica run` derives them. `shards` must be
  // given, the same on every replica (a differing count is not detected
  // yet: docs/replication.md).
  std::uint32_t replica_id = 0;
  std::vector<std::string> replicas;
  std::string etcd = "127.0.0.1:2379";
  std::string cluster = "default";
  std::chrono::milliseconds replica_tick{10};
  std::chrono::seconds etcd_lease_ttl{2};
  // A replica whose log lags the primary's published end by more than this
  // many payload bytes -- down, say -- no longer holds the others' logs
  // back from retiring (one of three, two of five, at most); when it
  // returns it stops, to be rebuilt with `fusee replica rebuild`
  // (docs/replication.md, "Retiring a replica's log"). 0: every replica is
  // waited for, however long it is down.
  std::uint64_t replica_retire_lag_max_bytes = std::uint64_t{1} << 30;
  // The HTTP/JSON API (docs/http-api.md), served by this engine on
  // "host:port" (port 0: a free one, see Engine::http_endpoint()); empty:
  // off. With a token, every route but /healthz wants
  // "Authorization: Bearer <token>". Without one, Engine::open refuses any
  // address but loopback (a remote-mode worker takes its server's HTTP
  // token when it has none of its own).
  std::string http_listen;
  std::string http_token;
  std::size_t http_body_bytes_max = 1u << 20;  // larger request bodies get 413
  // Host names (with or without ":port") the API answers to besides
  // loopback's (localhost, 127.0.0.0/8, [::1]); any other Host header gets
  // 421, so a page that re-points a name of its own at this address (DNS
  // rebinding) cannot use it. On a non-loopback listener with none listed,
  // any Host is answered (the token is then the guard).
  std::vector<std::string> http_allowed_hosts;
  // Serve the API on a non-loopback address with no token: anyone who
  // reaches the port can start, signal and cancel runs. For tests and for a
  // network that is itself the guard; Engine::open refuses it otherwise.
  bool http_insecure_no_token = false;
  // Injected sources; defaults: the system clock, std::random_device, the
  // real file system. The engine reads no other clock or randomness.
  std::shared_ptr<Clock> clock;
  std::function<std::uint64_t()> random;
  io::FileSystem* file_system = nullptr;  // must outlive the Engine
  // Operator warnings (the log fell back to buffered writes, checkpoints
  // stopped). Default: one line on stderr.
  std::function<void(const std::string&)> warn;

  static Config memory() {
    Config config;
    config.mode = Mode::memory;
    config.dir.clear();
    return config;
  }
  // Remote mode: "unix:PATH" or "HOST:PORT" of a `fusee server` (or "A,B,C":
  // each of a replicated cluster's, the one that leads serving). It takes
  // every shard's lease, waiting while another worker holds one (a standby
  // takes over when the holder goes); with server_shards_max N, at most N
  // free ones. Checkpoints, parked and finished runs live in the server.
  static Config remote(std::string address) {
    Config config;
    config.mode = Mode::remote;
    config.dir.clear();
    config.server = std::move(address);
    return config;
  }
  // Replicated mode: <dir> is replica `replica_id` of `cluster`, whose
  // replicas listen on `replicas`, coordinated through etcd's members
  // `etcd` ("HOST:PORT,..."). Only the primary runs workflows; a backup
  // sends each call on a run to the primary (docs/replication.md, "Calls on
  // a backup"), and answers errc::unavailable naming the primary where it
  // cannot; during a failover a call waits for the new primary up to its
  // deadline, or fails with a retryable error.
  static Config replicated(std::string dir, std::string etcd, std::string cluster, std::uint32_t replica_id,
                           std::vector<std::string> replicas) {
    Config config;
    config.mode = Mode::replicated;
    config.dir = std::move(dir);
    config.etcd = std::move(etcd);
    config.cluster = std::move(cluster);
    config.replica_id = replica_id;
    config.replicas = std::move(replicas);
    return config;
  }
  static Config local(std::string dir) {
    Config config;
    config.mode = Mode::local;
    config.dir = std::move(dir);
    return config;
  }
};

}  // namespace fusee
