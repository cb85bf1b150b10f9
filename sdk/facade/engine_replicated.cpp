// Replicated mode's Engine (docs/replication.md, "An application's
// replica"): every replica's application opens one; its calls go to the
// engine of the view the replica leads (sdk/facade/replica_host.hpp). Each
// method of Engine turns to that engine first (Impl::led()); on a backup,
// and while a view's engine opens, there is none, and a call for a run goes
// to the primary's engine as a split worker's goes to the holder of a shard
// (sdk/facade/primary_router.hpp). A backup's finished-run listing reads
// its own run store, which follows the primary's through the log.
#include "sdk/facade/engine_impl.hpp"

namespace fusee {

std::unique_ptr<Engine> Engine::Impl::open_replicated(std::unique_ptr<Impl> impl, Config config) {
  if (!config.backup_target.empty()) {
    throw Error(errc::invalid_argument,
                "backup_target: a replica's directory is not backed up yet (its replicas are its copies)");
  }
  if (config.dir.empty()) throw Error(errc::invalid_argument, "replicated mode needs the replica's directory");
  impl->config = config;
  impl->replica_host = std::make_unique<facade::ReplicaHost>(config);
  impl->router = &impl->replica_host->router();
  impl->store = impl->replica_host->store();
  // Sent again soon while a failover runs: a call waits at most this
  // long past the moment the next primary's engine could take it (a split
  // worker's 500 ms would add up to that to every failover a caller sees).
  impl->remote_calls = std::make_unique<remote::RemoteCalls>(*impl->router, impl->shards, &facade::run_info_of,
                                                             std::chrono::milliseconds(50));
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(impl)));
  facade::register_builtins(*engine);
  // The API answers on every replica: a backup's calls say where to go.
  start_http(*engine, config, [] { return std::string(); });
  return engine;
}

std::vector<ClusterReplica> Engine::cluster(std::chrono::milliseconds timeout) const {
  if (!impl_->replica_host) return {};
  impl_->check_open();
  return impl_->replica_host->cluster(timeout);
}

}  // namespace fusee
