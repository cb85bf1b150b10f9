// ReplicaHost: replicated mode's engine in an application (docs/replication.md,
// "An application's replica"). It runs the application's replica of the
// replicated log (replica/replica_node.hpp) on a thread of its own, holds
// the engine's side of the replica's directory (its lock and run store) for
// as long as it runs, and opens an engine over the log of each view the
// replica leads, as after a crash (sdk/facade/engine_over_log.hpp), on a
// thread of its own; when the view ends, that engine shuts down (its
// callers are told errc::unavailable) and the next view's opens from the
// run store. That store is replicated through the log: every replica
// applies the committed run-store records to its own (store_applier.hpp),
// and a view's engine opens once its replica has applied its whole log.
//
// The application's Engine passes its calls to the view's engine; while
// there is none, they go to the primary's (primary_router.hpp), which its
// host serves from other replicas' applications. The workflows and
// step limits it was given are given to each view's engine before anyone
// can call it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/data_dir.hpp"
#include "fusee/config.hpp"
#include "fusee/engine.hpp"
#include "replica/replica_node.hpp"
#include "sdk/facade/primary_router.hpp"
#include "sdk/facade/work_queue.hpp"
#include "sdk/facade/store_applier.hpp"
#include "sdk/facade/store_sender.hpp"

namespace fusee::facade {

class ReplicaHost {
 public:
  // Claims <dir>'s engine side and starts the replica. `config` is the
  // application's (replicated mode). Throws fusee::Error.
  explicit ReplicaHost(const Config& config);
  ~ReplicaHost();  // stop()
  ReplicaHost(const ReplicaHost&) = delete;
  ReplicaHost& operator=(const ReplicaHost&) = delete;

  // The engine of the view this replica leads; throws errc::unavailable
  // when it leads none (a backup, or a failover under way).
  std::shared_ptr<Engine> engine();
  std::shared_ptr<Engine> engine_if_any();
  std::uint32_t shard_count() const { return shards_; }
  // Where this replica's application sends its calls while it leads no
  // engine: the primary it knows of.
  PrimaryRouter& router() { return *router_; }
  // This replica's run store (applied from the log, whatever the role).
  std::shared_ptr<engine::RunStore> store() const { return store_; }

  // Given to every view's engine, now and later.
  void register_workflow(const std::string& name, const WorkflowFn& fn,
                         const WorkflowRegistration& registration);
  void limit(const std::string& name, const StepLimit& limit);
  bool has_workflow(const std::string& name);
  // This replica's part in its cluster (EngineStats::replica).
  ReplicaStats replica_stats() const;
  // Every replica as it answers now (Engine::cluster), or as it answered
  // within kClusterFresh.
  std::vector<ClusterReplica> cluster(std::chrono::milliseconds timeout) const;
  static constexpr std::chrono::milliseconds kClusterFresh{250};

  // The replica stops serving; the view's engine shuts down. Idempotent.
  void stop();

 private:
  std::vector<ClusterReplica> ask_cluster(std::chrono::milliseconds timeout) const;
  Result<void> configure(wal::LogOptions& options);
  void lead(std::uint64_t lead, replication::View view, std::shared_ptr<wal::Log> log, replication::Seq tail);
  void close_engine(std::shared_ptr<Engine> closing);  // null: the current one
  void post(std::function<void()> work);
  void run_host();
  // Below which batch this replica's log may retire, as its run store has
  // it (made durable first).
  Result<replication::Seq> retire_allowed();
  static constexpr std::chrono::seconds kRetireInterval{1};
  replication::Seq retire_allowed_ = 0;  // the last allowance given (the host thread's)

  Config config_;  // the views' engines' (local mode over the replica's directory)
  std::uint32_t shards_ = 0;
  engine::DataDir claimed_;  // the engine side's lock
  std::shared_ptr<engine::RunStore> store_;
  // Applies the log's committed run-store records to store_, whatever the
  // role; a view's engine writes through it (replicated_run_store.hpp).
  std::shared_ptr<StoreApplier> applier_;
  // The run store sent to a replica being rebuilt (while primary).
  std::unique_ptr<StoreSender> sender_;
  std::unique_ptr<io::FileSystem> own_fs_;
  io::FileSystem* fs_ = nullptr;
  std::unique_ptr<PrimaryRouter> router_;
  // Other replicas' applications' calls, off the replica's loop: parsed and
  // handed to the view's engine (64 MiB of bodies at most), and the
  // engine-wide reads, which wait on the shards (16 at most).
  WorkQueue calls_{64u << 20};
  WorkQueue engine_wide_{16};
  std::unique_ptr<replica::ReplicaNode> node_;
  std::thread node_thread_;
  std::thread host_thread_;

  mutable std::mutex cluster_mu_;  // one cluster() asking at a time
  mutable std::optional<std::chrono::steady_clock::time_point> cluster_asked_;
  mutable std::vector<ClusterReplica> cluster_answer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false;         // a view was led whose engine has not shut down yet
  std::shared_ptr<Engine> engine_;
  std::string engine_error_;  // why the last view's engine did not open
  std::chrono::steady_clock::time_point opening_since_;  // the last view's log began to open
  std::atomic<std::uint64_t> last_open_us_{0};           // ReplicaStats::last_open_us
  replication::ReplicaId known_primary_ = replication::kNoReplica;  // the node's, for messages
  // Leads so far (the loop thread's: lead and stepped_down come in pairs),
  // numbered for the store's writers (StoreApplier).
  std::uint64_t leads_ = 0;
  struct Registration {
    std::string name;
    WorkflowFn fn;
    WorkflowRegistration registration;
  };
  std::vector<Registration> registrations_;
  std::map<std::string, StepLimit> limits_;
  std::deque<std::function<void()>> posted_;
  bool stopping_ = false;
};

}  // namespace fusee::facade
