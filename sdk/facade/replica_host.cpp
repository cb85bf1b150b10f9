#include "sdk/facade/replica_host.hpp"

#include <fmt/format.h>
#include <utility>

#include "engine/meta.hpp"
#include "protocol/address.hpp"
#include "queue/queue_state.hpp"
#include "schedule/schedule_state.hpp"
#include "remote/forwarded_call.hpp"
#include "replica/call_replies.hpp"
#include "replica/etcd_members.hpp"
#include "sdk/facade/engine_over_log.hpp"
#include "sdk/facade/engine_wide_calls.hpp"

namespace fusee::facade {

ReplicaHost::ReplicaHost(const Config& config) : config_(config), cluster_view_(config.replicas) {
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

ReplicaStats ReplicaHost::replica_stats() const { return hosting::replica_stats(host_.get(), config_.replica_id); }

std::vector<ClusterReplica> ReplicaHost::cluster(std::chrono::milliseconds timeout) const {
  return cluster_view_.cluster(timeout);
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
