#include "sdk/facade/replica_host.hpp"

#include <fmt/format.h>
#include <future>
#include <utility>

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
  router_ = std::make_unique<PrimaryRouter>(config.replicas, 2 * std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                    config.etcd_lease_ttl));
  options.engine.primary_known = [this](replication::ReplicaId primary) {
    {
      std::lock_guard lock(mu_);
      known_primary_ = primary;
    }
    router_->primary_is(primary);
  };
  // Another replica's application's call for this replica's engine: off
  // the loop (parsing a call's body is not quick), bounded.
  options.engine.call = [this](std::uint32_t shard, std::vector<std::byte> body,
                               replica::ReplicaEngineHooks::CallReply reply) {
    std::shared_ptr<Engine> engine = engine_if_any();
    if (!engine) {
      reply(replica::CallPart::not_here,
            replica::bytes_of(fmt::format("replica {} runs no engine now (it is not the primary, or its engine is "
                                          "opening)",
                                          config_.replica_id)));
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
  config_.http_listen.clear();
  hosting::ViewHostOptions host;
  host.shards = config.shards;
  host.file_system = config.file_system;
  host.node = std::move(options);
  host.warn = config.warn;
  host.service.open = [this](hosting::ViewOpening opening) { open_engine(std::move(opening)); };
  host.service.ended = [this]() -> std::function<void()> {
    // No call reaches the view's engine from here on: it shuts down on the
    // host's thread. Its callers are told errc::unavailable; a caller still
    // inside one of its calls holds it until that call returns.
    return [this, ended = take_engine()] {
      {
        std::lock_guard lock(mu_);
        engine_error_.clear();
      }
      if (ended) ended->shutdown();
    };
  };
  host.service.close = [this] {
    if (auto closing = take_engine()) closing->shutdown();
  };
  host.service.serving = [this] { return engine_if_any() != nullptr; };
  host_ = std::make_unique<hosting::ViewHost>(std::move(host));
  shards_ = host_->shard_count();
  config_.shards = shards_;
}

ReplicaHost::~ReplicaHost() { stop(); }

void ReplicaHost::stop() {
  // Calls still out to the primary fail (the Engine shuts down). Other
  // replicas' calls queued go unanswered, and those that come are refused
  // as busy, until the replica stops (their callers ask the next primary).
  if (router_) router_->stop();
  calls_.stop();
  engine_wide_.stop();
  if (host_) host_->stop();  // the view's engine shuts down, and the directory is free
}

std::shared_ptr<Engine> ReplicaHost::take_engine() {
  std::lock_guard lock(mu_);
  return std::exchange(engine_, nullptr);
}

void ReplicaHost::open_engine(hosting::ViewOpening opening) {
  // On the host's thread, once the run store applied the view's log.
  std::shared_ptr<Engine> opened;
  try {
    opened = open_engine_over_log(config_, {std::move(opening.store), opening.shards, config_.dir,
                                            std::move(opening.bases), std::move(opening.log)});
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
  } catch (const std::exception& failed) {
    // This Engine answers unavailable, saying why, until the application
    // opens it again (the host stops the replica: another leads).
    if (opened) opened->shutdown();
    std::lock_guard lock(mu_);
    engine_error_ = failed.what();
    throw;
  }
}

ReplicaStats ReplicaHost::replica_stats() const {
  ReplicaStats stats;
  stats.enabled = true;
  stats.replica_id = config_.replica_id;
  if (!host_) return stats;
  const auto node = host_->node_stats();
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
  stats.store_applied = host_->applier_stats().batches_done;
  stats.last_open_us = host_->last_open_us();
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

}  // namespace fusee::facade
