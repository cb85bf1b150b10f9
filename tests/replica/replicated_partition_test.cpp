// Replicated mode's workflows across network partitions: three
// applications' Engines (Config::replicated) in this process, every link
// between their replicas and each one's link to etcd through a TcpProxy the
// test cuts (tests/support/tcp_proxy.hpp). The primary cut from both
// backups steps down and a backup's Engine finishes its runs, no durable
// step run again; healed, the old primary follows the new one. A backup cut
// off alone (a minority island) stops nothing, and catches up once healed.
// The primary cut from etcd alone goes on serving: no view needs to change.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "replica/local_etcd.hpp"
#include "replica/replica_store.hpp"
#include "tests/replica/replicated_runs.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;

const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kGo{"go"};

// How often each run's steps ran, by run input.
struct StepLedger {
  std::mutex mu;
  std::map<int, int> a;
  std::map<int, int> b;
  int runs_of(std::map<int, int>& steps, int n) {
    std::lock_guard lock(mu);
    return steps[n];
  }
};
StepLedger ledger;

void register_order(Engine& engine) {
  engine.register_workflow(kOrder, [](Ctx& ctx, int input) -> Task<int> {
    int a = co_await ctx.step("a", [input] {
      std::lock_guard lock(ledger.mu);
      ++ledger.a[input];
      return input * 2;
    });
    auto go = co_await ctx.wait_for(kGo);
    co_return co_await ctx.step("b", [input, a, go] {
      std::lock_guard lock(ledger.mu);
      ++ledger.b[input];
      return a + go.value_or(-1000);
    });
  });
}

using testing::run_name;

std::uint16_t port_of(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

class ProxiedCluster {
 public:
  explicit ProxiedCluster(const std::string& dir) : etcd_(dir) {
    if (!etcd_.ready()) return;
    for (int id = 0; id < 3; ++id) listen_.push_back("127.0.0.1:" + std::to_string(free_loopback_port()));
    links_.resize(3);
    for (std::uint32_t from = 0; from < 3; ++from) {
      etcd_links_.push_back(std::make_unique<testing::TcpProxy>("127.0.0.1", etcd_.client_port()));
      for (std::uint32_t to = 0; to < 3; ++to) {
        links_[from].push_back(from == to ? nullptr
                                          : std::make_unique<testing::TcpProxy>("127.0.0.1", port_of(listen_[to])));
      }
    }
    for (std::uint32_t id = 0; id < 3; ++id) {
      const std::string replica_dir = dir + "/replica-" + std::to_string(id);
      testing::ok_or_fail(ReplicaStore::initialize(fs_, replica_dir, "app", false));
      // Each replica reaches the others, and etcd, through its own links.
      std::vector<std::string> addresses = listen_;
      for (std::uint32_t to = 0; to < 3; ++to) {
        if (to != id) addresses[to] = "127.0.0.1:" + std::to_string(links_[id][to]->port());
      }
      auto config = Config::replicated(replica_dir, "127.0.0.1:" + std::to_string(etcd_links_[id]->port()), "app", id,
                                       addresses);
      config.shards = 2;
      config.replica_tick = 5ms;
      config.etcd_lease_ttl = 2s;  // a primary no quorum hears steps down after 1 s
      config.checkpoint_interval = 200ms;
      config.warn = [](const std::string&) {};
      engines_.push_back(Engine::open(config));
      register_order(*engines_.back());
    }
  }
  ~ProxiedCluster() {
    heal_all();
    for (auto& engine : engines_) {
      if (engine) engine->shutdown();
    }
  }
  bool ready() const { return etcd_.ready(); }
  Engine& engine(std::uint32_t id) { return *engines_[id]; }
  ReplicaStats stats(std::uint32_t id) { return engines_[id]->stats().replica; }

  // The replica whose Engine runs workflows, other than `not_this`, within 30 s.
  std::optional<std::uint32_t> primary(std::optional<std::uint32_t> not_this = std::nullopt) {
    return testing::primary_of(engines_, 30s, not_this);
  }
  // Waits up to 30 s for `holds`.
  template <typename Holds>
  bool eventually(Holds holds) {
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (!holds()) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }

  // Cuts replica `id` from the others, both ways (and from etcd too).
  void isolate(std::uint32_t id, bool from_etcd) {
    for (std::uint32_t other = 0; other < 3; ++other) {
      if (other == id) continue;
      links_[id][other]->cut(true, true);
      links_[other][id]->cut(true, true);
    }
    if (from_etcd) etcd_links_[id]->cut(true, true);
  }
  void cut_from_etcd(std::uint32_t id) { etcd_links_[id]->cut(true, true); }
  void heal_all() {
    for (auto& row : links_) {
      for (auto& proxy : row) {
        if (proxy) proxy->heal();
      }
    }
    for (auto& proxy : etcd_links_) proxy->heal();
  }

 private:
  io::PosixFileSystem fs_;
  LocalEtcd etcd_;
  std::vector<std::string> listen_;
  std::vector<std::vector<std::unique_ptr<testing::TcpProxy>>> links_;
  std::vector<std::unique_ptr<testing::TcpProxy>> etcd_links_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

// Starts runs [from, to) on `engine` and waits until each waits for its
// signal with its step "a" durable (a signal after it is acknowledged only
// once durable with every earlier record of its shard).
void start_waiting(Engine& engine, int from, int to) {
  for (int n = from; n < to; ++n) engine.start(kOrder, run_name(n), n);
  for (int n = from; n < to; ++n) testing::take_to_wait(engine, n, 20s);
}

TEST_SUITE("unit") {
  TEST_CASE("replicated mode across partitions: a primary cut off is replaced and its runs finished, a minority "
            "island stops nothing, a primary cut from etcd alone goes on") {
    testing::TempDir dir;
    ProxiedCluster cluster(dir.path());
    if (!cluster.ready()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    const auto first = cluster.primary();
    REQUIRE(first.has_value());
    start_waiting(cluster.engine(*first), 0, 10);

    // The primary cut from both backups (and etcd): it steps down, and a
    // backup's Engine takes the runs over.
    cluster.isolate(*first, true);
    const auto second = cluster.primary(*first);
    REQUIRE(second.has_value());
    CHECK(cluster.eventually([&] { return cluster.stats(*first).role != "primary"; }));
    Engine& next = cluster.engine(*second);
    for (int n = 0; n < 10; ++n) next.signal(run_name(n), kGo, 100, "go-" + std::to_string(n));
    for (int n = 0; n < 10; ++n) CHECK(next.result(kOrder, run_name(n)) == 2 * n + 100);
    for (int n = 0; n < 10; ++n) {
      CAPTURE(n);
      CHECK(ledger.runs_of(ledger.a, n) == 1);  // durable on the old primary: not run again
      CHECK(ledger.runs_of(ledger.b, n) == 1);
    }
    // The old primary, cut off, runs nothing (its calls wait for a
    // primary it can reach, up to their patience).
    CHECK(cluster.engine(*first).stats().shards_held == 0);

    // Healed, it follows the new primary.
    cluster.heal_all();
    CHECK(cluster.eventually([&] {
      auto stats = cluster.stats(*first);
      return stats.role == "backup" && stats.primary == *second;
    }));

    // A backup cut off alone: the other two go on.
    const std::uint32_t island = 3 - *first - *second;
    cluster.isolate(island, true);
    start_waiting(next, 10, 15);
    for (int n = 10; n < 15; ++n) next.signal(run_name(n), kGo, 7, "go-" + std::to_string(n));
    for (int n = 10; n < 15; ++n) CHECK(next.result(kOrder, run_name(n)) == 2 * n + 7);
    CHECK(cluster.primary() == *second);
    // Healed, it catches up with the commit and applies the run store's records.
    const auto commit = cluster.stats(*second).commit;
    cluster.heal_all();
    CHECK(cluster.eventually([&] {
      auto stats = cluster.stats(island);
      return stats.durable_end >= commit && stats.store_applied >= commit && stats.primary == *second;
    }));

    // The primary cut from etcd alone, past its etcd lease: it still hears a
    // quorum, so no view changes, and it goes on serving.
    cluster.cut_from_etcd(*second);
    const auto view = cluster.stats(*second).view;
    start_waiting(next, 15, 20);
    std::this_thread::sleep_for(3s);
    for (int n = 15; n < 20; ++n) next.signal(run_name(n), kGo, 1, "go-" + std::to_string(n));
    for (int n = 15; n < 20; ++n) CHECK(next.result(kOrder, run_name(n)) == 2 * n + 1);
    CHECK(cluster.stats(*second).view == view);
    CHECK(cluster.stats(*second).role == "primary");
    cluster.heal_all();
    for (int n = 10; n < 20; ++n) {
      CAPTURE(n);
      CHECK(ledger.runs_of(ledger.a, n) == 1);
      CHECK(ledger.runs_of(ledger.b, n) == 1);
    }
  }
}

}  // namespace
}  // namespace fusee::replica
