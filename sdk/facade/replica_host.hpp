// ReplicaHost: replicated mode's engine in an application (docs/replication.md,
// "An application's replica"). It runs the application's replica of the
// replicated log in a view host (hosting/view_host.hpp), whose service is an
// engine over the log of each view the replica leads, opened as after a
// crash (sdk/facade/engine_over_log.hpp); when the view ends, that engine
// shuts down (its callers are told errc::unavailable) and the next view's
// opens from the run store, which every replica applies from the log.
//
// The application's Engine passes its calls to the view's engine; while
// there is none, they go to the primary's (primary_router.hpp), which its
// host serves from other replicas' applications. The workflows and
// step limits it was given are given to each view's engine before anyone
// can call it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fusee/config.hpp"
#include "fusee/engine.hpp"
#include "hosting/cluster_view.hpp"
#include "hosting/view_host.hpp"
#include "hosting/work_queue.hpp"
#include "sdk/facade/primary_router.hpp"

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
  std::shared_ptr<engine::RunStore> store() const { return host_->store(); }

  // Given to every view's engine, now and later.
  void register_workflow(const std::string& name, const WorkflowFn& fn,
                         const WorkflowRegistration& registration);
  void limit(const std::string& name, const StepLimit& limit);
  bool has_workflow(const std::string& name);
  // This replica's part in its cluster (EngineStats::replica).
  ReplicaStats replica_stats() const;
  // Every replica as it answers now (Engine::cluster), or as it answered
  // within hosting::ClusterView::kFresh.
  std::vector<ClusterReplica> cluster(std::chrono::milliseconds timeout) const;

  // The replica stops serving; the view's engine shuts down. Idempotent.
  void stop();

 private:
  // The view's engine, on the host's thread (hosting::ViewService::open).
  void open_engine(hosting::ViewOpening opening);
  // The view's engine, no longer reachable by any call; null if none.
  std::shared_ptr<Engine> take_engine();

  Config config_;  // the views' engines' (local mode over the replica's directory)
  std::uint32_t shards_ = 0;
  std::unique_ptr<PrimaryRouter> router_;
  // Other replicas' applications' calls, off the replica's loop: parsed and
  // handed to the view's engine (64 MiB of bodies at most), and the
  // engine-wide reads, which wait on the shards (16 at most).
  hosting::WorkQueue calls_{64u << 20};
  hosting::WorkQueue engine_wide_{16};
  hosting::ClusterView cluster_view_;
  std::mutex mu_;
  std::shared_ptr<Engine> engine_;
  std::string engine_error_;  // why the last view's engine did not open
  replication::ReplicaId known_primary_ = replication::kNoReplica;  // the node's, for messages
  struct Registration {
    std::string name;
    WorkflowFn fn;
    WorkflowRegistration registration;
  };
  std::vector<Registration> registrations_;
  std::map<std::string, StepLimit> limits_;
  // The replica, the run store it applies, and the engine of each view it
  // leads; last, so that it is gone before what its hooks use.
  std::unique_ptr<hosting::ViewHost> host_;
};

}  // namespace fusee::facade
