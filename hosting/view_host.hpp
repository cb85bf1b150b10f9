// ViewHost: a replica of the replicated log (replica/replica_node.hpp) that
// hosts a service over the log of each view it leads -- an application's
// engine (sdk/facade/replica_host.hpp) or `fusee server --replicated`'s log
// service (server/replicated_server.hpp); docs/replication.md, "An
// application's replica" and "Server mode on three replicas".
//
// It runs the replica on a thread of its own and holds the directory's
// engine side (its lock and run store) for as long as it runs. That store is
// replicated through the log: every replica applies the committed run-store
// records to its own (store_applier.hpp). When the replica leads a view, the
// service opens on the host's thread, as after a crash, once the store has
// applied the view's whole recovered log; its writes to the store travel in
// the log (replicated_run_store.hpp). When the view ends, the service is told
// at once (nothing may reach it any more) and closed on the host's thread
// before the next view's log reads the store's checkpoints.
//
// Once a second, the host allows the log to retire what its run store no
// longer needs (the core also waits for every replica to hold it); while a
// service is open, it sends its run store to a replica being rebuilt
// (store_sender.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/data_dir.hpp"
#include "hosting/store_applier.hpp"
#include "hosting/store_sender.hpp"
#include "hosting/work_queue.hpp"
#include "replica/replica_node.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::hosting {

// What a view's service opens over.
struct ViewOpening {
  std::uint64_t lead = 0;  // this replica's leads, numbered from 1
  replication::View view{};
  std::shared_ptr<wal::Log> log;             // the view's log: the engine's shards' records
  std::shared_ptr<engine::RunStore> store;   // writes travel in the log (replicated_run_store.hpp)
  std::uint32_t shards = 0;
  engine::ShardBases bases;  // each shard's checkpoint, as applied through the view's recovered tail
};

struct ViewService {
  // On the host's thread: open the view's service. A throw stops the
  // replica (a primary that cannot serve must not hold the view: its lease
  // lapses, another replica leads); the message is warned.
  std::function<void(ViewOpening)> open;
  // On the replica's loop thread, quick: the view ended, its log stepped
  // down; nothing may reach its service from here on. Returns the work that
  // closes it, run on the host's thread; close() runs after it, for a
  // service an open still under way there opened meanwhile.
  std::function<std::function<void()>()> ended;
  // On the host's thread, at stop and after each ended view: close the
  // service if one is open.
  std::function<void()> close;
  // Whether a service is open now: the run store is sent to a replica
  // being rebuilt only from a primary's (its log's start is where the
  // rebuilt one's will be).
  std::function<bool()> serving;
};

struct ViewHostOptions {
  std::uint32_t shards = 0;             // the service's shard count: the same on every replica
  io::FileSystem* file_system = nullptr;  // null: the real disk
  // The replica: self, addresses, dir, cluster, etcd, timings, log. Its
  // engine.primary_known and engine.call may be set; the host sets the
  // rest (a call for the run store's transfer never reaches engine.call).
  replica::ReplicaNodeOptions node;
  std::function<void(const std::string&)> warn;  // one line per event worth telling
  ViewService service;
};

class ViewHost {
 public:
  // Claims the directory's engine side, opens its run store and starts the
  // replica. Throws fusee::Error (invalid_argument: not a replica's
  // directory; storage: another process runs it, or it cannot be opened).
  explicit ViewHost(ViewHostOptions options);
  ~ViewHost();  // stop()
  ViewHost(const ViewHost&) = delete;
  ViewHost& operator=(const ViewHost&) = delete;

  std::uint32_t shard_count() const { return shards_; }
  // This replica's run store (applied from the log, whatever the role).
  std::shared_ptr<engine::RunStore> store() const { return store_; }
  replica::NodeStatsSnapshot node_stats() const;
  StoreApplierStats applier_stats() const;
  // How long the last view's opening took, from its log's opening to its
  // service's (µs; 0 before one).
  std::uint64_t last_open_us() const { return last_open_us_.load(); }

  // The replica stops serving; the view's service closes. Idempotent.
  void stop();

 private:
  Result<void> configure(wal::LogOptions& options);
  void lead(std::uint64_t lead, replication::View view, std::shared_ptr<wal::Log> log, replication::Seq tail);
  void post(std::function<void()> work);
  void closed();  // on the host's thread, once the view's service closed
  void run_host();
  // Below which batch this replica's log may retire, as its run store has
  // it (made durable first).
  Result<replication::Seq> retire_allowed();
  static constexpr std::chrono::seconds kRetireInterval{1};
  replication::Seq retire_allowed_ = 0;  // the last allowance given (the host thread's)

  std::string dir_;
  replication::ReplicaId self_ = 0;
  std::function<void(const std::string&)> warn_;
  ViewService service_;
  std::uint32_t shards_ = 0;
  std::unique_ptr<io::FileSystem> own_fs_;
  io::FileSystem* fs_ = nullptr;
  engine::DataDir claimed_;  // the engine side's lock
  std::shared_ptr<engine::RunStore> store_;
  std::shared_ptr<StoreApplier> applier_;
  std::unique_ptr<StoreSender> sender_;  // the run store sent to a replica being rebuilt (while primary)
  // Its answers, off the replica's loop (they read files), one at a time;
  // 16 may wait (a rebuild whose request finds the queue full fails).
  WorkQueue transfers_{16};
  std::unique_ptr<replica::ReplicaNode> node_;
  std::thread node_thread_;
  std::thread host_thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false;  // a view was led whose service has not closed yet
  std::chrono::steady_clock::time_point opening_since_;  // the last view's log began to open
  std::atomic<std::uint64_t> last_open_us_{0};
  // Leads so far (the loop thread's: lead and stepped_down come in pairs),
  // numbered for the store's writers (StoreApplier).
  std::uint64_t leads_ = 0;
  std::deque<std::function<void()>> posted_;
  bool stopping_ = false;
};

}  // namespace fusee::hosting
