#include "sdk/facade/replica_host.hpp"

#include <fmt/format.h>
#include <future>

#include "engine/meta.hpp"
#include "protocol/address.hpp"
#include "queue/queue_state.hpp"
#include "schedule/schedule_state.hpp"
#include "remote/forwarded_call.hpp"
#include "replica/call_replies.hpp"
#include "replica/etcd_members.hpp"
#include "replica/replica_client.hpp"
#include "sdk/facade/engine_over_log.hpp"
#include "sdk/facade/engine_wide_calls.hpp"
#include "replica/store_transfer.hpp"
#include "sdk/facade/replicated_run_store.hpp"
#include "wal/errc.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::facade {

ReplicaHost::ReplicaHost(const Config& config) : config_(config) {
  if (config.replicas.size() < 3 || config.replicas.size() % 2 == 0 || config.replica_id >= config.replicas.size()) {
    throw Error(errc::invalid_argument,
                fmt::format("replicated mode: Config::replicas names 3, 5, 7... addresses and replica_id one of "
                            "them (0-based); it names {} and replica_id is {}",
                            config.replicas.size(), config.replica_id));
  }
  if (config.shards == 0) {
    // Every replica's engine must split the runs alike: a count from each
    // machine's CPUs would not.
    throw Error(errc::invalid_argument,
                "replicated mode: Config::shards must be given, and the same on every replica of the cluster");
  }
  if (config.replica_tick.count() <= 0 || config.etcd_lease_ttl.count() <= 0) {
    throw Error(errc::invalid_argument, "replicated mode: replica_tick and etcd_lease_ttl must be positive");
  }
  replica::ReplicaNodeOptions options;
  options.self = config.replica_id;
  options.addresses = config.replicas;
  options.dir = config.dir;
  options.cluster = config.cluster;
  options.retire_lag_bytes_max = config.replica_retire_lag_max_bytes;
  replica::set_etcd_members(config.etcd, "Config::etcd", options.etcd);
  for (const std::string& address : config.replicas) protocol::parse_address(address, "Config::replicas", false);
  replica::set_timings_from_lease(options, static_cast<std::uint32_t>(config.etcd_lease_ttl.count()),
                                  static_cast<std::uint32_t>(config.replica_tick.count()));
  if (config.warn) options.log = [warn = config.warn](const std::string& line) { warn("replica: " + line); };
  options.engine.configure = [this](wal::LogOptions& log_options) { return configure(log_options); };
  options.engine.lead = [this](replication::View view, std::shared_ptr<wal::Log> log, replication::Seq tail) {
    lead(++leads_, view, std::move(log), tail);
  };
  options.engine.stepped_down = [this](replication::View) {
    // No call reaches the view's engine from here on (its log stepped
    // down); it shuts down on the host's thread. Its run-store writes
    // still waiting have unknown outcomes.
    applier_->lead_ended(leads_);
    std::shared_ptr<Engine> ended;
    {
      std::lock_guard lock(mu_);
      ended = std::move(engine_);
      engine_.reset();
    }
    post([this, ended = std::move(ended)]() mutable { close_engine(std::move(ended)); });
  };

  if (config.file_system) {
    fs_ = config.file_system;
  } else {
    own_fs_ = std::make_unique<io::PosixFileSystem>();
    fs_ = own_fs_.get();
  }
  // A directory `fusee replica init` never made is refused before anything
  // is written in it.
  auto replica = engine::is_replica_dir(*fs_, config.dir);
  if (!replica || !*replica) {
    throw Error(errc::invalid_argument,
                fmt::format("replicated mode: {} is not a replica's directory (make it one with `fusee replica init "
                            "--dir {} --cluster {}`)",
                            config.dir, config.dir, config.cluster));
  }
  claimed_ = engine::claim_data_dir(*fs_, config.dir, config.shards, config.file_system != nullptr,
                                    engine::DirOwner::replicated);
  shards_ = claimed_.shards;
  store_ = std::move(claimed_.store);
  // The run store's records travel in the shard after the engine's.
  applier_ = std::make_shared<StoreApplier>(store_, engine::replica_store_shard(shards_), [this](const std::string& why) {
    if (config_.warn) {
      config_.warn(fmt::format("replicated mode: {}; this replica's run store no longer follows the log, and the "
                               "replica stops",
                               why));
    }
    node_->stop();
  });
  options.engine.committed = [applier = applier_.get()](replication::Seq seq, replication::View view,
                                                         std::string_view body) {
    return applier->committed(seq, view, body);
  };
  options.engine.committed_after = applier_->feed_after();
  sender_ = std::make_unique<StoreSender>(*fs_, store_, config.cluster);
  router_ = std::make_unique<PrimaryRouter>(config.replicas, 2 * std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                    config.etcd_lease_ttl));
  options.engine.primary_known = [this](replication::ReplicaId primary) {
    {
      std::lock_guard lock(mu_);
      known_primary_ = primary;
    }
    router_->primary_is(primary);
  };
  // Another replica's application's call for this replica's engine.
  // Another replica's application's call for this replica's engine: off
  // the loop (parsing a call's body is not quick), bounded.
  options.engine.call = [this](std::uint32_t shard, std::vector<std::byte> body,
                               replica::ReplicaEngineHooks::CallReply reply) {
    std::shared_ptr<Engine> engine = engine_if_any();
    if (!engine) {
      reply(replica::CallPart::not_here,
            replica::bytes_of(fmt::format("replica {} runs no engine now (it is not the primary, or its engine is "
                                          "opening){}",
                                          config_.replica_id,
                                          shard == replica::kStoreTransferShard ? ": its run store is not sent" : "")));
      return;
    }
    if (shard == replica::kStoreTransferShard) {
      // A replica being rebuilt fetches the primary's run store: only the
      // primary's (its log's start is where the rebuilt one's will be, and
      // its store has applied past it), off the loop (it reads files).
      auto send = [this, body = std::move(body), reply] { reply(replica::CallPart::last, sender_->answer(body)); };
      if (!engine_wide_.try_post(1, std::move(send))) {
        reply(replica::CallPart::not_here, replica::bytes_of("the primary is busy: too many reads wait"));
      }
      return;
    }
    const std::size_t bytes = body.size();
    auto serve = [this, engine, shard, body = std::move(body), reply]() mutable {
      if (auto wide = engine_wide_call(body)) {
        // Read from the index, waiting on the shards: on a thread of their
        // own, a few at a time.
        auto read = [engine, call = std::move(*wide), reply] {
          auto answer = answer_engine_wide(*engine, call);
          if (!answer) return reply(replica::CallPart::not_here, replica::bytes_of("the primary's engine is stopping"));
          reply(replica::CallPart::last, remote::forwarded::to_bytes(*answer));
        };
        if (!engine_wide_.try_post(1, std::move(read))) {
          reply(replica::CallPart::not_here, replica::bytes_of("the primary is busy: too many lists wait"));
        }
        return;
      }
      try {
        serve_forwarded(*engine, {shard, std::move(body), [reply](bool last, std::vector<std::byte> part) {
                                    reply(last ? replica::CallPart::last : replica::CallPart::more, std::move(part));
                                  }});
      } catch (const std::exception& error) {
        // Nothing a caller sends may stop this thread; it is answered.
        reply(replica::CallPart::last,
              remote::forwarded::to_bytes(remote::forwarded::error_json(
                  errc::invalid_argument, fmt::format("a forwarded call that could not be served: {}", error.what()))));
      }
    };
    if (!calls_.try_post(bytes, std::move(serve))) {
      reply(replica::CallPart::not_here, replica::bytes_of("the primary is busy: its forwarded calls' queue is full"));
    }
  };
  // Each view's engine: a local engine over the replica's log, with no HTTP
  // front of its own (the application's Engine serves it on every replica).
  config_.mode = Mode::local;
  config_.shards = shards_;
  config_.http_listen.clear();
  auto node = replica::ReplicaNode::open(*fs_, std::move(options));
  if (!node) {
    throw Error(errc::storage, fmt::format("replicated mode: cannot open the replica in {}: {}", config.dir,
                                           node.error() == std::errc::operation_would_block
                                               ? "another process runs it (it holds replica/lock)"
                                               : node.error().message()));
  }
  node_ = std::move(*node);
  host_thread_ = std::thread([this] { run_host(); });
  node_thread_ = std::thread([this] {
    if (auto served = node_->run(); !served && config_.warn) {
      config_.warn(fmt::format("replica: stopped: {} (this replica runs no workflows until it is opened again)",
                               served.error().message()));
    }
  });
}

ReplicaHost::~ReplicaHost() { stop(); }

void ReplicaHost::stop() {
  if (node_thread_.joinable()) {
    node_->stop();  // its log steps down: stepped_down posts the engine's shutdown
    node_thread_.join();
  }
  // No call comes in any more: those queued go unanswered (their
  // connections closed with the replica).
  calls_.stop();
  engine_wide_.stop();
  // What waits on the store's applying (an opening, an engine's writes)
  // is let go: the replica feeds it no more.
  if (applier_) applier_->stop();
  // Calls still out to the primary fail (the Engine shuts down).
  if (router_) router_->stop();
  if (host_thread_.joinable()) {
    post([this] { close_engine(nullptr); });
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    host_thread_.join();
  }
  // The replica's directory is free for the next Engine: its lock, its
  // opening threads (joined here, while what they wait on is alive), the
  // engine side's lock and store.
  node_.reset();
  applier_.reset();
  // After the host's thread (its retire checks ask the sender): a copy it
  // holds keeps the store's files from deletion, and the store open.
  sender_.reset();
  store_.reset();
  claimed_.lock.reset();
}

Result<void> ReplicaHost::configure(wal::LogOptions& options) {
  // On the log's opening thread: the last view's engine must have shut down
  // (its last checkpoint written) before this view's bases are read.
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_ || stopping_; });
  if (stopping_) return make_error_code(wal::errc::closed);
  opening_since_ = std::chrono::steady_clock::now();
  engine::ShardBases bases;
  try {
    bases = engine::read_checkpoints(*store_, shards_, config_.dir);
  } catch (const std::exception& error) {
    if (config_.warn) config_.warn(fmt::format("replicated mode: {}", error.what()));
    return std::make_error_code(std::errc::io_error);
  }
  engine::set_log_base(config_.dir, shards_, bases, options);
  options.shard_count = engine::replica_log_shards(shards_);  // the run store's records: StoreApplier
  // The run store's shard: its records before the last one applied may
  // have been retired (the log retires below what the store applied).
  auto applied = store_->replica_applied();
  if (!applied) return applied.error();
  options.base.shard_lsn_floors.resize(options.shard_count, 0);
  options.base.shard_lsn_floors[engine::replica_store_shard(shards_)] = applied->lsn;
  return ok();
}

void ReplicaHost::lead(std::uint64_t lead, replication::View view, std::shared_ptr<wal::Log> log,
                       replication::Seq tail) {
  // On the replica's loop thread: the engine opens on the host's.
  {
    std::lock_guard lock(mu_);
    busy_ = true;
  }
  post([this, lead, view, tail, log = std::move(log)]() mutable {
    // The run store must hold every checkpoint the log committed before
    // the engine reads it: an engine that loaded a run its store parks
    // later would diverge from it. The lead ended first: nothing opens
    // (its stepped_down closes what there is); applying stopped: the
    // replica is stopping.
    if (!applier_->wait_done(tail, lead)) return;
    std::shared_ptr<Engine> opened;
    std::string error;
    try {
      // The checkpoints as applied through the tail (the log opened over
      // those read before: earlier ones, so it holds what these need).
      auto bases = engine::read_checkpoints(*store_, shards_, config_.dir);
      auto store = std::make_shared<ReplicatedRunStore>(store_, applier_, log, lead, view,
                                                        engine::replica_store_shard(shards_));
      opened = open_engine_over_log(config_, {std::move(store), shards_, config_.dir, std::move(bases), std::move(log)});
      std::lock_guard lock(mu_);
      // Before anyone can call it: the application's workflows (the
      // built-in ones it registered itself) and limits.
      for (const auto& registration : registrations_) {
        if (registration.name == schedule::kScheduleWorkflow || registration.name == queue::kQueueWorkflow) continue;
        opened->register_workflow_json(registration.name, registration.fn, registration.registration);
      }
      for (const auto& [name, step_limit] : limits_) opened->limit(name, step_limit);
      engine_ = opened;
      engine_error_.clear();
      last_open_us_ = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                     std::chrono::steady_clock::now() - opening_since_)
                                                     .count());
      return;
    } catch (const std::exception& failed) {
      error = failed.what();
    }
    if (opened) opened->shutdown();
    {
      std::lock_guard lock(mu_);
      engine_error_ = error;
    }
    // A primary that cannot run its engine must not hold the view: the
    // replica stops (its lease lapses, another replica leads), and this
    // Engine answers unavailable until the application opens it again.
    if (config_.warn) {
      config_.warn(fmt::format("replicated mode: this view's engine did not open: {}; the replica stops", error));
    }
    node_->stop();
  });
}

void ReplicaHost::close_engine(std::shared_ptr<Engine> closing) {
  {
    std::lock_guard lock(mu_);
    if (!closing) closing = std::move(engine_);
    engine_.reset();
    engine_error_.clear();
  }
  // Its callers are told errc::unavailable; a caller still inside one of
  // its calls holds it until that call returns.
  if (closing) closing->shutdown();
  closing.reset();
  {
    std::lock_guard lock(mu_);
    busy_ = false;
  }
  cv_.notify_all();
}

ReplicaStats ReplicaHost::replica_stats() const {
  ReplicaStats stats;
  stats.enabled = true;
  stats.replica_id = config_.replica_id;
  if (!node_) return stats;
  const auto node = node_->stats();
  stats.role = replication::role_name(node.status.role);
  stats.view = node.status.promised;
  if (node.known_primary != replication::kNoReplica) stats.primary = node.known_primary;
  stats.commit = node.status.commit;
  stats.log_end = node.status.log_end;
  stats.durable_end = node.status.durable_end;
  stats.suspect = node.status.suspect;
  stats.view_changes = node.view_changes;
  stats.leads = node.leads;
  for (auto holds : node.status.holds) stats.lag_batches.push_back(node.status.log_end - std::min(holds, node.status.log_end));
  stats.lag_bytes = node.status.lag_bytes;
  stats.lag_us = node.status.lag_us;
  stats.retired_through = node.status.retired_through;
  stats.publish_latency_counts = node.publish_latency_counts;
  stats.publish_latency_sum_us = node.publish_latency_sum_us;
  if (applier_) stats.store_applied = applier_->stats().batches_done;
  stats.last_open_us = last_open_us_.load();
  return stats;
}

std::vector<ClusterReplica> ReplicaHost::cluster(std::chrono::milliseconds timeout) const {
  // One asking at a time, and an answer younger than kClusterFresh serves
  // every caller: a flood of GET /v1/cluster costs the replicas a few
  // status requests a second, and ties up no more threads than one asking.
  std::lock_guard asking(cluster_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (cluster_asked_ && now - *cluster_asked_ < kClusterFresh) return cluster_answer_;
  cluster_answer_ = ask_cluster(timeout);
  cluster_asked_ = std::chrono::steady_clock::now();
  return cluster_answer_;
}

std::vector<ClusterReplica> ReplicaHost::ask_cluster(std::chrono::milliseconds timeout) const {
  // Every replica at once, each on a client of its own (a stopped one
  // answers nothing: the others are not held up behind it).
  std::vector<std::future<std::optional<replica::ReplicaStatus>>> asked;
  for (std::uint32_t id = 0; id < config_.replicas.size(); ++id) {
    asked.push_back(std::async(std::launch::async, [addresses = config_.replicas, id, timeout] {
      replica::ReplicaClient client(addresses);
      return client.status(id, timeout);
    }));
  }
  std::vector<ClusterReplica> replicas;
  std::vector<std::optional<replica::ReplicaStatus>> statuses;
  for (auto& answer : asked) statuses.push_back(answer.get());
  std::optional<replica::ReplicaStatus> primary;
  if (auto id = replica::newest_primary(statuses)) primary = statuses[*id];
  for (std::uint32_t id = 0; id < statuses.size(); ++id) {
    ClusterReplica replica;
    replica.id = id;
    replica.address = config_.replicas[id];
    if (const auto& status = statuses[id]) {
      replica.answered = true;
      replica.role = replication::role_name(status->role);
      replica.view = status->promised;
      replica.commit = status->commit;
      replica.log_end = status->log_end;
      replica.durable_end = status->durable_end;
      replica.suspect = status->suspect;
      replica.retired_through = status->retired_through;
    }
    if (primary && id < primary->holds.size()) {
      replica.lag_batches = primary->log_end - std::min(primary->holds[id], primary->log_end);
      if (id < primary->lag_bytes.size()) replica.lag_bytes = primary->lag_bytes[id];
      if (id < primary->lag_us.size()) replica.lag_us = primary->lag_us[id];
    }
    replicas.push_back(std::move(replica));
  }
  return replicas;
}

std::shared_ptr<Engine> ReplicaHost::engine_if_any() {
  std::lock_guard lock(mu_);
  return engine_;
}

std::shared_ptr<Engine> ReplicaHost::engine() {
  std::lock_guard lock(mu_);
  if (engine_) return engine_;
  if (!engine_error_.empty()) {
    throw Error(errc::unavailable,
                fmt::format("replica {} leads, but its engine did not open: {}", config_.replica_id, engine_error_));
  }
  // Where to go instead, when this replica knows.
  if (known_primary_ != replication::kNoReplica && known_primary_ != config_.replica_id &&
      known_primary_ < config_.replicas.size()) {
    throw Error(errc::unavailable,
                fmt::format("replica {} of cluster {} is a backup: the primary is replica {} (replica address {}); call "
                            "it there",
                            config_.replica_id, config_.cluster, known_primary_, config_.replicas[known_primary_]));
  }
  throw Error(errc::unavailable,
              fmt::format("replica {} of cluster {} is not the primary now, and knows no primary yet (a failover "
                          "is under way): try again",
                          config_.replica_id, config_.cluster));
}

void ReplicaHost::register_workflow(const std::string& name, const WorkflowFn& fn,
                                    const WorkflowRegistration& registration) {
  std::lock_guard lock(mu_);
  // Refused here as an engine refuses it, so that no view's engine is
  // given what it would refuse.
  for (const auto& registered : registrations_) {
    if (registered.name == name && registered.registration.version == registration.version) {
      throw Error(errc::invalid_argument, fmt::format("version {} of workflow '{}' is already registered",
                                                      registration.version, name));
    }
  }
  if (engine_) engine_->register_workflow_json(name, fn, registration);
  registrations_.push_back({name, fn, registration});
}

void ReplicaHost::limit(const std::string& name, const StepLimit& step_limit) {
  std::lock_guard lock(mu_);
  if (engine_) engine_->limit(name, step_limit);
  limits_[name] = step_limit;
}

bool ReplicaHost::has_workflow(const std::string& name) {
  std::lock_guard lock(mu_);
  for (const auto& registration : registrations_) {
    if (registration.name == name) return true;
  }
  return false;
}

void ReplicaHost::post(std::function<void()> work) {
  {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(work));
  }
  cv_.notify_all();
}

Result<replication::Seq> ReplicaHost::retire_allowed() {
  // Where the store stands, and the checkpoints in it, read before the
  // sync: the sync makes both durable. The log must keep every batch the
  // store has not wholly applied (the one it stands in included), and
  // every batch a checkpoint's recovery reads.
  const auto applied = FUSEE_TRY(store_->replica_applied());
  // A store written before it kept the run-store shard's last LSN: a log
  // retired below it would have no floor for that shard at its next open
  // (ReplicaHost::configure), so nothing retires until an apply writes one.
  if (applied.seq > 0 && applied.lsn == 0) return replication::Seq{0};
  // Nor past the store a replica being rebuilt fetched from here: its log
  // restarts at this log's start, which must not pass what it fetched.
  replication::Seq allowed = std::min(applied.seq, sender_->hold_below());
  for (std::uint32_t shard = 0; shard < shards_; ++shard) {
    auto checkpoint = FUSEE_TRY(store_->checkpoint(shard));
    allowed = std::min<replication::Seq>(allowed, checkpoint ? checkpoint->keep_from_sequence : 0);
  }
  if (allowed <= retire_allowed_) return allowed;  // nothing new: no sync
  FUSEE_TRY_VOID(store_->sync());
  return allowed;
}

void ReplicaHost::run_host() {
  auto next_retire = std::chrono::steady_clock::now();
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, next_retire, [&] { return stopping_ || !posted_.empty(); });
      if (stopping_ && posted_.empty()) return;
      if (posted_.empty()) {
        // Once a retire interval: the replica may retire what this
        // replica's run store no longer needs (the core also waits for
        // every replica to hold it, docs/replication.md).
        lock.unlock();
        next_retire = std::chrono::steady_clock::now() + kRetireInterval;
        sender_->expire_idle();
        auto allowed = retire_allowed();
        if (allowed) {
          if (*allowed > retire_allowed_) node_->allow_retire(*allowed);
          retire_allowed_ = std::max(retire_allowed_, *allowed);
        } else if (config_.warn) {
          config_.warn(fmt::format("replicated mode: cannot tell what the log may retire: {}",
                                   allowed.error().message()));
        }
        continue;
      }
      work = std::move(posted_.front());
      posted_.pop_front();
    }
    try {
      work();
    } catch (const std::exception& error) {
      // Nothing thrown here may end the process; the view's engine is the
      // next one's to open.
      if (config_.warn) config_.warn(fmt::format("replicated mode: {}", error.what()));
    }
  }
}

}  // namespace fusee::facade
