#include "bench/bench_cluster.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "replica/replica_store.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::bench {

using namespace std::chrono_literals;

BenchCluster::BenchCluster(const std::string& dir, std::uint32_t shards, const std::function<void(Engine&)>& prepare) {
  std::filesystem::create_directories(dir);
  etcd_ = std::make_unique<replica::LocalEtcd>(dir);
  if (!etcd_->ready()) throw std::runtime_error("etcd did not start (scripts/install-deps installs it): " + etcd_->problem());
  std::vector<std::string> addresses;
  for (int id = 0; id < 3; ++id) addresses.push_back(fmt::format("127.0.0.1:{}", replica::free_loopback_port()));
  io::PosixFileSystem fs;
  for (std::uint32_t id = 0; id < 3; ++id) {
    const std::string replica_dir = fmt::format("{}/replica-{}", dir, id);
    if (auto made = replica::ReplicaStore::initialize(fs, replica_dir, "bench", false); !made) {
      throw std::runtime_error(fmt::format("cannot make {}: {}", replica_dir, made.error().message()));
    }
    auto config = Config::replicated(replica_dir, fmt::format("127.0.0.1:{}", etcd_->client_port()), "bench", id,
                                     addresses);
    config.shards = shards;
    // A 10 s lease: a primary steps down after 5 s without a quorum, so a
    // loaded machine's stall does not change the view under the case.
    config.etcd_lease_ttl = std::chrono::seconds(10);
    config.warn = [](const std::string&) {};
    engines_.push_back(Engine::open(config));
    prepare(*engines_.back());
  }
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    for (std::size_t id = 0; id < engines_.size(); ++id) {
      if (engines_[id]->stats().shards_held > 0) {
        primary_ = id;
        return;
      }
    }
    if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("no replica led within 30 s");
    std::this_thread::sleep_for(10ms);
  }
}

BenchCluster::~BenchCluster() { shutdown(); }

void BenchCluster::shutdown() {
  for (std::size_t id = 0; id < engines_.size(); ++id) {
    if (id != primary_ && engines_[id]) engines_[id]->shutdown();
  }
  if (primary_ < engines_.size() && engines_[primary_]) engines_[primary_]->shutdown();
  engines_.clear();
  etcd_.reset();
}

}  // namespace fusee::bench
