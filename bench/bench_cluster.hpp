// BenchCluster: engine_bench's replicated cases (docs/replication.md,
// "Figures"): three replicas of one cluster in this process, each an
// application's Engine::open(Config::replicated(...)) over a directory of
// its own, and an etcd of the benchmark's own (replica/local_etcd.hpp).
// Every replica is given the case's workflows before it can lead; the
// case then runs on the primary's Engine, which appends through the
// replicated log: a step is durable once a quorum (the primary and one
// backup) holds its batch. All three share this machine's cores and disk,
// which three machines would not: the figures are what one machine costs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fusee/fusee.hpp"
#include "replica/local_etcd.hpp"

namespace fusee::bench {

class BenchCluster {
 public:
  // Starts etcd and the three replicas under `dir` (made here), calls
  // `prepare` on each Engine, and waits (up to 30 s) for one to lead.
  // Throws std::runtime_error (etcd missing, no primary) or fusee::Error.
  BenchCluster(const std::string& dir, std::uint32_t shards, const std::function<void(Engine&)>& prepare);
  ~BenchCluster();  // shutdown()
  BenchCluster(const BenchCluster&) = delete;
  BenchCluster& operator=(const BenchCluster&) = delete;

  Engine& primary() { return *engines_[primary_]; }
  // The backups first, then the primary; etcd last.
  void shutdown();

 private:
  std::unique_ptr<replica::LocalEtcd> etcd_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::size_t primary_ = 0;
};

}  // namespace fusee::bench
