// Workflows across failovers: three applications' Engines
// (Config::replicated) in this process against a real etcd. The primary's
// Engine starts runs and takes each as far as its durable first step; its
// application stops; a backup becomes primary, opens its engine as after a
// crash over its copy of the log and its run store, and finishes every run,
// with no durable step run again, while the old primary's callers were told
// errc::unavailable. Four times, so that a replica leads again over a store
// and log that went on without it.
#include <doctest/doctest.h>

#include <future>
#include <variant>
#include <fusee/fusee.hpp>
#include <mutex>
#include <set>
#include <thread>

#include "replica/local_etcd.hpp"
#include "replica/replica_store.hpp"
#include "tests/replica/replicated_runs.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;
using replication::ReplicaId;

constexpr std::uint32_t kShards = 2;
constexpr int kRuns = 12;

const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kGo{"go"};

// How often each step ran, in every replica's engine.
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

// What an application's replica does with the hooks: it holds its engine's
// directory while it runs, and opens an engine for each view it leads, on
// a thread of its own (never the replica's loop), shutting it down when
// the view ends.
using testing::run_name;

// Three applications' Engines (Config::replicated) in this process.
class EngineCluster {
 public:
  explicit EngineCluster(const std::string& dir) : dir_(dir), etcd_(dir) {
    if (!etcd_.ready()) return;
    for (int id = 0; id < 3; ++id) addresses_.push_back("127.0.0.1:" + std::to_string(free_loopback_port()));
    engines_.resize(3);
    for (ReplicaId id = 0; id < 3; ++id) {
      testing::ok_or_fail(ReplicaStore::initialize(fs_, replica_dir(id), "app", false));
      restart(id);
    }
  }
  ~EngineCluster() {
    for (ReplicaId id = 0; id < engines_.size(); ++id) stop(id);
  }
  bool ready() const { return etcd_.ready(); }
  // The application stops (its replica and engine with it).
  void stop(ReplicaId id) {
    if (engines_[id]) engines_[id]->shutdown();
    engines_[id].reset();
  }
  // The application opens again, a backup until it leads.
  void restart(ReplicaId id) {
    auto config = Config::replicated(replica_dir(id), "127.0.0.1:" + std::to_string(etcd_.client_port()), "app", id,
                                     addresses_);
    config.shards = kShards;
    config.replica_tick = 5ms;
    // A 2 s lease: a primary no quorum hears for 1 s steps down, so a loaded
    // machine's stall does not change the view under the test's calls.
    config.etcd_lease_ttl = 2s;
    config.checkpoint_interval = 100ms;  // run-store records through every failover
    config.warn = [](const std::string&) {};
    engines_[id] = Engine::open(config);
    register_order(*engines_[id]);
  }
  // The replica whose Engine runs workflows, other than `not_this`, within 30 s.
  std::optional<ReplicaId> leader(std::optional<ReplicaId> not_this = {}) {
    return testing::primary_of(engines_, 30s, not_this);
  }
  Engine& engine(ReplicaId id) { return *engines_[id]; }

 private:
  std::string replica_dir(ReplicaId id) const { return dir_ + "/replica-" + std::to_string(id); }
  std::string dir_;
  io::PosixFileSystem fs_;
  LocalEtcd etcd_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

TEST_SUITE("unit") {
  TEST_CASE("engine failover: each new primary's engine finishes the last one's runs; no durable step runs again") {
    // Four failovers. Each round, the primary's engine starts runs and takes
    // them to their wait, finishes the last round's, and its application
    // stops; the next primary opens over its copy of the log and its run
    // store (applied from the log, checkpoints every 100 ms), and the
    // stopped application comes back as a backup.
    testing::TempDir dir;
    EngineCluster cluster(dir.path());
    if (!cluster.ready()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    a_runs = 0;
    b_runs = 0;
    constexpr int kRounds = 4;
    std::optional<ReplicaId> last;
    std::set<ReplicaId> leaders;
    for (int round = 0; round <= kRounds; ++round) {
      const auto leader = cluster.leader(last);
      REQUIRE(leader.has_value());
      Engine* engine = &cluster.engine(*leader);
      leaders.insert(*leader);
      if (last) cluster.restart(*last);
      // The last round's runs: recovered here, each signalled and finished.
      const int recovered_from = std::max(0, round - 1) * kRuns;
      for (int n = recovered_from; n < round * kRuns; ++n) {
        engine->signal(run_name(n), kGo, 100, "go-" + std::to_string(n));
      }
      for (int n = recovered_from; n < round * kRuns; ++n) {
        CHECK(engine->result(kOrder, run_name(n)) == 2 * n + 100);
      }
      if (round == kRounds) break;
      for (int n = round * kRuns; n < (round + 1) * kRuns; ++n) engine->start(kOrder, run_name(n), n);
      for (int n = round * kRuns; n < (round + 1) * kRuns; ++n) testing::take_to_wait(*engine, n, 10s);
      // A caller waiting on this primary is told to go elsewhere. The run's
      // shard takes calls in order: once get_run is answered, the result
      // waits on the run.
      std::promise<std::variant<boost::json::value, Error>> waiting;
      engine->result_json_then(run_name(round * kRuns), [&waiting](std::variant<boost::json::value, Error> answer) {
        waiting.set_value(std::move(answer));
      });
      (void)engine->get_run(run_name(round * kRuns));
      cluster.stop(*leader);
      auto answered = waiting.get_future();
      REQUIRE(answered.wait_for(30s) == std::future_status::ready);
      const auto answer = answered.get();
      REQUIRE(std::holds_alternative<Error>(answer));
      CHECK(std::get<Error>(answer).error() == errc::unavailable);
      last = leader;
    }
    // Durable once, run once: none was run again by a later primary.
    CHECK(a_runs == kRounds * kRuns);
    CHECK(b_runs == kRounds * kRuns);
    MESSAGE(leaders.size(), " replicas led");
  }
}

}  // namespace
}  // namespace fusee::replica
