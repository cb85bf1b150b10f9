// Replicated mode as an application uses it: Engine::open(Config::
// replicated(...)) on three replicas in this process against a real etcd
// (sdk/facade/replica_host.hpp). Only the primary's Engine runs workflows
// (a backup's calls go to it: backup_calls_test.cpp); when the primary's
// application shuts down, another replica's Engine -- given its workflows
// before it led -- finishes the runs, with no durable step run again; and a
// directory that is no replica's is refused.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <optional>
#include <thread>

#include "engine/run_store.hpp"
#include "replica/local_etcd.hpp"
#include "replica/replica_store.hpp"
#include "tests/replica/replicated_runs.hpp"
#include "tests/support/error_checks.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;

const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kGo{"go"};
constexpr int kRuns = 10;

std::atomic<int> a_runs{0};
std::atomic<int> b_runs{0};

void register_order(Engine& engine) {
  engine.register_workflow(kOrder, [](Ctx& ctx, int input) -> Task<int> {
    int a = co_await ctx.step("a", [input] {
      ++a_runs;
      return input * 2;
    });
    auto go = co_await ctx.wait_for(kGo);
    co_return co_await ctx.step("b", [a, go] {
      ++b_runs;
      return a + go.value_or(-1000);
    });
  });
}

using testing::run_name;

Config replica_config(const std::string& dir, std::uint16_t etcd_port, std::uint32_t id,
                      const std::vector<std::string>& addresses) {
  auto config = Config::replicated(dir, "127.0.0.1:" + std::to_string(etcd_port), "app", id, addresses);
  config.shards = 2;
  config.replica_tick = 5ms;
  // A 2 s lease: a primary no quorum hears for 1 s steps down, so a loaded
  // machine's stall does not change the view under the test's calls.
  config.etcd_lease_ttl = 2s;
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.warn = [](const std::string&) {};
  return config;
}

// The replica whose Engine runs workflows now, within 20 s.
std::optional<std::uint32_t> primary_of(const std::vector<std::unique_ptr<Engine>>& engines) {
  return testing::primary_of(engines, 20s);
}

using testing::error_of;

TEST_SUITE("unit") {
  TEST_CASE("replicated mode: the primary's Engine runs the workflows, a backup's none; another "
            "replica's finishes them when the primary's application stops") {
    testing::TempDir dir;
    LocalEtcd etcd(dir.path());
    if (!etcd.ready()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    io::PosixFileSystem fs;
    std::vector<std::string> addresses;
    for (int id = 0; id < 3; ++id) addresses.push_back("127.0.0.1:" + std::to_string(free_loopback_port()));
    std::vector<std::unique_ptr<Engine>> engines;
    for (std::uint32_t id = 0; id < 3; ++id) {
      const std::string replica_dir = dir.sub("replica-" + std::to_string(id));
      testing::ok_or_fail(ReplicaStore::initialize(fs, replica_dir, "app", false));
      engines.push_back(Engine::open(replica_config(replica_dir, etcd.client_port(), id, addresses)));
      register_order(*engines.back());  // before it leads: given to each view's engine
    }
    a_runs = 0;
    b_runs = 0;
    const auto first = primary_of(engines);
    REQUIRE(first.has_value());
    Engine& primary = *engines[*first];
    for (int n = 0; n < kRuns; ++n) primary.start(kOrder, run_name(n), n);
    for (int n = 0; n < kRuns; ++n) testing::take_to_wait(primary, n, 10s);  // step a durable
    CHECK(a_runs == kRuns);
    // A backup runs nothing itself: its calls go to the primary
    // (backup_calls_test.cpp); what only the primary's engine does, it
    // refuses, naming the primary, which it knows from the primary's appends.
    const std::size_t backup = (*first + 1) % 3;
    CHECK(engines[backup]->get_run(run_name(0)).has_value());
    try {
      engines[backup]->checkpoint();
      FAIL("a backup checkpointed");
    } catch (const Error& error) {
      CHECK(error.error() == errc::unavailable);
      CHECK(std::string(error.what()).find("the primary is replica " + std::to_string(*first) + " (replica address " +
                                           addresses[*first] + ")") != std::string::npos);
    }
    CHECK(engines[backup]->stats().shards_held == 0);
    // Each shows its part in the cluster.
    const auto primary_stats = primary.stats().replica;
    CHECK(primary_stats.enabled);
    CHECK(primary_stats.role == "primary");
    CHECK(primary_stats.primary == *first);
    CHECK(primary_stats.leads == 1);
    CHECK(primary_stats.lag_batches.size() == 3);
    CHECK(primary_stats.lag_bytes.size() == 3);
    CHECK(primary_stats.lag_us.size() == 3);
    CHECK(primary_stats.commit > 0);
    CHECK(primary_stats.store_applied > 0);  // the run store's records, or batches without any
    std::uint64_t published = 0;
    for (auto count : primary_stats.publish_latency_counts) published += count;
    CHECK(published > 0);
    const auto backup_stats = engines[backup]->stats().replica;
    CHECK(backup_stats.role == "backup");
    CHECK(backup_stats.replica_id == backup);
    CHECK(backup_stats.view == primary_stats.view);
    CHECK(backup_stats.primary == *first);
    CHECK(backup_stats.leads == 0);
    CHECK(backup_stats.lag_batches.empty());
    CHECK(backup_stats.lag_bytes.empty());
    CHECK(engines[backup]->has_workflow("order"));
    // What a view's engine would refuse is refused on a backup too, rather
    // than when it leads (where it could not open).
    CHECK(error_of([&] { register_order(*engines[backup]); }) == errc::invalid_argument);
    CHECK(error_of([&] { engines[backup]->limit("", StepLimit{}); }) == errc::invalid_argument);

    // The primary's application stops: another replica takes over.
    engines[*first]->shutdown();
    CHECK(error_of([&] { (void)engines[*first]->get_run(run_name(0)); }) == errc::shut_down);
    engines[*first].reset();
    const auto second = primary_of(engines);
    REQUIRE(second.has_value());
    Engine& next = *engines[*second];
    for (int n = 0; n < kRuns; ++n) next.signal(run_name(n), kGo, 100, "go-" + std::to_string(n));
    for (int n = 0; n < kRuns; ++n) CHECK(next.result(kOrder, run_name(n)) == 2 * n + 100);
    CHECK(a_runs == kRuns);  // durable on the old primary: not run again
    CHECK(b_runs == kRuns);
    for (auto& engine : engines) {
      if (engine) engine->shutdown();
    }
  }

  TEST_CASE("replicated mode: the run store travels in the log: every replica's holds the checkpoints and finished "
            "runs the primary wrote, and the next primary opens from its own") {
    testing::TempDir dir;
    LocalEtcd etcd(dir.path());
    if (!etcd.ready()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    io::PosixFileSystem fs;
    std::vector<std::string> addresses;
    std::vector<std::string> dirs;
    for (int id = 0; id < 3; ++id) addresses.push_back("127.0.0.1:" + std::to_string(free_loopback_port()));
    std::vector<std::unique_ptr<Engine>> engines;
    for (std::uint32_t id = 0; id < 3; ++id) {
      dirs.push_back(dir.sub("replica-" + std::to_string(id)));
      testing::ok_or_fail(ReplicaStore::initialize(fs, dirs.back(), "app", false));
      engines.push_back(Engine::open(replica_config(dirs.back(), etcd.client_port(), id, addresses)));
      register_order(*engines.back());
    }
    const auto first = primary_of(engines);
    REQUIRE(first.has_value());
    Engine& primary = *engines[*first];
    for (int n = 0; n < kRuns; ++n) primary.start(kOrder, run_name(n), n);
    for (int n = 0; n < kRuns; ++n) primary.signal(run_name(n), kGo, 1, "go-" + std::to_string(n));
    for (int n = 0; n < kRuns; ++n) CHECK(primary.result(kOrder, run_name(n)) == 2 * n + 1);
    primary.start(kOrder, "still-waiting", 5);
    // Written through the log: it returns once the primary's own store
    // applied it, which it does only once a quorum holds it.
    primary.checkpoint();

    // The primary's application stops at once: the next primary's engine
    // opens only once its store has applied its whole log, so its run
    // store's index already lists the finished runs, before it has
    // checkpointed anything itself.
    engines[*first]->shutdown();
    engines[*first].reset();
    const auto second = primary_of(engines);
    REQUIRE(second.has_value());
    Engine& next = *engines[*second];
    CHECK(next.list_finished_runs(RunFilter{}).runs.size() == kRuns);

    // Every replica's store comes to hold them, each applying what the log
    // committed (read while the replicas run: RocksDB's read-only open
    // reads the writes it has not synced yet).
    auto holds_all = [&](const std::string& replica_dir) {
      auto store = engine::RunStore::open_read_only(replica_dir, fs);
      if (!store) return false;
      for (int n = 0; n < kRuns; ++n) {
        auto run = (*store)->finished(run_name(n));
        if (!run || !*run || (*run)->result != boost::json::value(2 * n + 1)) return false;
      }
      for (std::uint32_t shard = 0; shard < 2; ++shard) {
        auto checkpoint = (*store)->checkpoint(shard);
        if (!checkpoint || !*checkpoint) return false;
      }
      auto applied = (*store)->replica_applied();
      return applied && applied->seq > 0;
    };
    for (const std::string& replica_dir : dirs) {
      CAPTURE(replica_dir);
      const auto give_up = std::chrono::steady_clock::now() + 20s;
      while (!holds_all(replica_dir) && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(20ms);
      CHECK(holds_all(replica_dir));
    }
    for (int n = 0; n < kRuns; ++n) CHECK(next.result(kOrder, run_name(n)) == 2 * n + 1);
    next.signal("still-waiting", kGo, 7, "go-waiting");
    CHECK(next.result(kOrder, "still-waiting") == 17);
    CHECK(next.list_runs().size() == kRuns + 1);
    for (auto& engine : engines) {
      if (engine) engine->shutdown();
    }
  }

  TEST_CASE("replicated mode: a directory that is no replica's, and a bad cluster, are refused") {
    testing::TempDir dir;
    const std::vector<std::string> addresses{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"};
    CHECK(error_of([&] { (void)Engine::open(replica_config(dir.sub("plain"), 2379, 0, addresses)); }) ==
          errc::invalid_argument);
    io::PosixFileSystem fs;
    CHECK_FALSE(testing::value_or_fail(fs.exists(dir.sub("plain") + "/fusee.meta")));
    CHECK(error_of([&] {
            (void)Engine::open(replica_config(dir.sub("two"), 2379, 0, {"127.0.0.1:1", "127.0.0.1:2"}));
          }) == errc::invalid_argument);
    CHECK(error_of([&] { (void)Engine::open(replica_config(dir.sub("id"), 2379, 3, addresses)); }) ==
          errc::invalid_argument);
    // Every replica must split the runs alike: no count from the CPUs.
    testing::ok_or_fail(ReplicaStore::initialize(fs, dir.sub("r"), "app", false));
    auto no_shards = replica_config(dir.sub("r"), 2379, 0, addresses);
    no_shards.shards = 0;
    CHECK(error_of([&] { (void)Engine::open(no_shards); }) == errc::invalid_argument);
    // A second writer where one is assumed: a second Engine on a replica's
    // directory in use is refused, naming the lock, and so is a local
    // Engine there; the first goes on.
    auto first = Engine::open(replica_config(dir.sub("r"), 2379, 0, addresses));
    try {
      (void)Engine::open(replica_config(dir.sub("r"), 2379, 0, addresses));
      FAIL("a second Engine opened a replica's directory in use");
    } catch (const Error& error) {
      CHECK(error.error() == errc::storage);
      CHECK(std::string(error.what()).find("in use by another engine") != std::string::npos);
    }
    auto local = Config::local(dir.sub("r"));
    local.warn = [](const std::string&) {};
    CHECK(error_of([&] { (void)Engine::open(local); }) != errc{});
    CHECK(first->stats().replica.enabled);
    first->shutdown();
  }
}

}  // namespace
}  // namespace fusee::replica
