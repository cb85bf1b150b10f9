// Workflows across a failover: three replicas in this process
// (replica/replica_node.hpp) against a real etcd, each hosting an engine
// on the replicated log (ReplicaEngineHooks, sdk/facade/engine_over_log.hpp)
// the way an application's replica will. The primary's engine starts runs
// and takes each as far as its durable first step; the primary stops; a
// backup becomes primary, opens its engine as after a crash over its copy
// of the log (its own run store never saw those runs) and finishes every
// run, with no durable step run again, while the old primary's callers were
// told errc::unavailable.
#include <doctest/doctest.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <variant>
#include <fusee/fusee.hpp>
#include <mutex>
#include <set>
#include <thread>

#include "engine/data_dir.hpp"
#include "replica/local_etcd.hpp"
#include "replica/replica_node.hpp"
#include "replica/replica_store.hpp"
#include "sdk/facade/engine_over_log.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;
using replication::ReplicaId;
using replication::View;

constexpr std::uint32_t kShards = 2;
constexpr int kRuns = 12;

const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kGo{"go"};
const Signal<int> kNoise{"noise"};

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
class EngineHost {
 public:
  EngineHost(io::FileSystem& fs, const std::string& dir) : dir_(dir) {
    claimed_ = engine::claim_data_dir(fs, dir, kShards, false, engine::DirOwner::replicated);
    store_ = std::move(claimed_.store);
    thread_ = std::thread([this] { run(); });
  }
  ~EngineHost() {
    post([this] { close_engine(); });
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  ReplicaEngineHooks hooks() {
    ReplicaEngineHooks hooks;
    hooks.configure = [this](wal::LogOptions& options) -> Result<void> {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !busy_; });  // the last view's engine has shut down
      bases_ = engine::read_checkpoints(*store_, kShards, dir_);
      engine::set_log_base(dir_, kShards, bases_, options);
      return ok();
    };
    hooks.lead = [this](View, std::shared_ptr<wal::Log> log, replication::Seq) {
      {
        std::lock_guard lock(mu_);
        busy_ = true;
      }
      post([this, log] { open_engine(log); });
    };
    hooks.stepped_down = [this](View) { post([this] { close_engine(); }); };
    return hooks;
  }

  // The engine, while this replica leads a view (null otherwise).
  std::shared_ptr<Engine> engine() {
    std::lock_guard lock(mu_);
    return engine_;
  }
  std::string error() {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  void open_engine(std::shared_ptr<wal::Log> log) {
    auto config = Config::local(dir_);
    config.warn = [](const std::string&) {};
    config.shards = kShards;
    config.checkpoint_interval = std::chrono::milliseconds::zero();
    std::shared_ptr<Engine> opened;
    try {
      opened = facade::open_engine_over_log(config, {store_, kShards, dir_, bases_, std::move(log)});
      register_order(*opened);
    } catch (const Error& error) {
      std::lock_guard lock(mu_);
      error_ = error.what();
      return;
    }
    std::lock_guard lock(mu_);
    engine_ = std::move(opened);
  }
  void close_engine() {
    std::shared_ptr<Engine> closing;
    {
      std::lock_guard lock(mu_);
      closing = std::move(engine_);
    }
    if (closing) closing->shutdown();
    closing.reset();
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
  void post(std::function<void()> run) {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(run));
    cv_.notify_all();
  }
  void run() {
    for (;;) {
      std::function<void()> next;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !posted_.empty(); });
        if (posted_.empty()) return;
        next = std::move(posted_.front());
        posted_.pop_front();
      }
      next();
    }
  }

  std::string dir_;
  engine::DataDir claimed_;  // its lock
  std::shared_ptr<engine::RunStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  engine::ShardBases bases_;  // for the view opening
  bool busy_ = false;         // an engine was led and is not shut down yet
  std::shared_ptr<Engine> engine_;
  std::string error_;
  std::deque<std::function<void()>> posted_;
  bool stopping_ = false;
  std::thread thread_;
};

class EngineCluster {
 public:
  explicit EngineCluster(const std::string& dir) : etcd_(dir) {
    if (!etcd_.ready()) return;
    std::vector<std::string> addresses;
    for (ReplicaId id = 0; id < 3; ++id) addresses.push_back("127.0.0.1:" + std::to_string(free_loopback_port()));
    for (ReplicaId id = 0; id < 3; ++id) {
      const std::string replica_dir = dir + "/replica-" + std::to_string(id);
      testing::ok_or_fail(ReplicaStore::initialize(fs_, replica_dir, "e", false));
      hosts_.push_back(std::make_unique<EngineHost>(fs_, replica_dir));
      ReplicaNodeOptions options;
      options.self = id;
      options.addresses = addresses;
      options.etcd.port = etcd_.client_port();
      options.dir = replica_dir;
      options.cluster = "e";
      // As `fusee replica run --lease-ttl-s 2` times them: a stall of a
      // loaded machine does not change the view under the test's calls.
      set_timings_from_lease(options, 2, 5);
      options.etcd.timeout = 500ms;
      options.log = [](const std::string&) {};
      options.engine = hosts_.back()->hooks();
      options_.push_back(options);
      nodes_.push_back(testing::value_or_fail(ReplicaNode::open(fs_, options)));
    }
    for (auto& node : nodes_) threads_.emplace_back([&node] { (void)node->run(); });
  }
  ~EngineCluster() {
    for (ReplicaId id = 0; id < nodes_.size(); ++id) stop(id);
  }
  bool ready() const { return etcd_.ready(); }
  void stop(ReplicaId id) {
    if (!threads_[id].joinable()) return;
    nodes_[id]->stop();
    threads_[id].join();
  }
  // Starts a stopped replica again over its directory (its host, and the
  // engine's run store, stayed).
  void restart(ReplicaId id) {
    nodes_[id].reset();  // its directory's lock
    nodes_[id] = testing::value_or_fail(ReplicaNode::open(fs_, options_[id]));
    threads_[id] = std::thread([node = nodes_[id].get()] { (void)node->run(); });
  }
  // The replica whose engine is open, within 20 s (its engine in `engine`).
  std::optional<ReplicaId> leader(std::shared_ptr<Engine>& engine, std::optional<ReplicaId> not_this = {}) {
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < give_up) {
      for (ReplicaId id = 0; id < hosts_.size(); ++id) {
        if (id == not_this) continue;
        REQUIRE_MESSAGE(hosts_[id]->error().empty(), hosts_[id]->error());
        if ((engine = hosts_[id]->engine())) return id;
      }
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }

 private:
  io::PosixFileSystem fs_;
  LocalEtcd etcd_;
  std::vector<std::unique_ptr<EngineHost>> hosts_;
  std::vector<ReplicaNodeOptions> options_;
  std::vector<std::unique_ptr<ReplicaNode>> nodes_;
  std::vector<std::thread> threads_;
};

std::string run_name(int n) { return "order-" + std::to_string(n); }

// Until run `n` waits for its signal; then a signal it ignores, answered
// once durable with every record of the run before it (a shard's records
// are durable in order): step a's result too.
void take_to_wait(Engine& engine, int n) {
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto info = engine.get_run(run_name(n));
    if (info && !info->waiting_on.empty()) break;
    REQUIRE(std::chrono::steady_clock::now() < give_up);
    std::this_thread::sleep_for(1ms);
  }
  engine.signal(run_name(n), kNoise, 0, "noise-" + std::to_string(n));
}

TEST_SUITE("unit") {
  TEST_CASE("engine failover: each new primary's engine finishes the last one's runs; no durable step runs again") {
    // Four failovers. Each round, the primary's engine starts runs and takes
    // them to their wait, finishes the last round's, and stops; the next
    // primary opens over its copy of the log, with whatever its run store
    // holds from its own earlier views (nothing, or checkpoints behind the
    // log), and the stopped replica comes back as a backup.
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
      std::shared_ptr<Engine> engine;
      const auto leader = cluster.leader(engine, last);
      REQUIRE(leader.has_value());
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
      for (int n = round * kRuns; n < (round + 1) * kRuns; ++n) take_to_wait(*engine, n);
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
