// The engine over a primary's log (sdk/facade/engine_over_log.hpp,
// replica/primary_log.hpp): a replica's directory holds the engine's run
// store beside its log, the engine appends to the log the replica opened as
// its view's primary, the core is played by the test and the replica's loop
// by a thread of the test's. What is checked: an engine's call is answered
// only once a quorum holds its record (the core's publication), never on
// the log's seal; the engine's records are sealed on the loop, which the
// log's staged wake asks for; a step-down answers the calls in flight with
// errc::unavailable (their outcome is the next primary's to tell); the next
// view's engine opens only once the tail it recovered is published, and
// then finishes the runs with no durable step run again; a local open and
// a reshard refuse a replica's directory before writing anything.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <fusee/fusee.hpp>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>

#include "engine/data_dir.hpp"
#include "engine/meta.hpp"
#include "engine/reshard.hpp"
#include "engine/run_hash.hpp"
#include "remote/forwarded_call.hpp"
#include "replica/primary_log.hpp"
#include "replica/replica_store.hpp"
#include "sdk/facade/engine_over_log.hpp"
#include "tests/support/error_checks.hpp"
#include "tests/support/fault_file_system.hpp"
#include "wal/io/file_system.hpp"
#include "tests/support/result_checks.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;
using replication::Seq;
using replication::View;
using testing::FaultFileSystem;
using testing::ok_or_fail;
using testing::value_or_fail;

constexpr const char* kDir = "/r";
constexpr std::uint32_t kShards = 2;

const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kGo{"go"};
const Signal<int> kNoise{"noise"};

// How often each step ran, across every engine of the test.
struct Counts {
  std::atomic<int> a{0};
  std::atomic<int> b{0};
};

void register_order(Engine& engine, Counts& counts) {
  engine.register_workflow(kOrder, [&counts](Ctx& ctx, int input) -> Task<int> {
    int a = co_await ctx.step("a", [&counts, input] {
      ++counts.a;
      return input * 2;
    });
    auto go = co_await ctx.wait_for(kGo);
    int b = co_await ctx.step("b", [&counts, a, go] {
      ++counts.b;
      return a + go.value_or(-1000);
    });
    co_return b;
  });
}

// One replica: its disk, its store, its primary log run by a loop thread,
// and the core's part (every proposal written and synced, then published
// unless the test holds publication).
class Replica {
 public:
  Replica() {
    ok_or_fail(ReplicaStore::initialize(fs_, kDir, "c", false, kSegmentBytesMin));
    StoreRecovery recovered;
    store_ = value_or_fail(ReplicaStore::open(fs_, kDir, "c", recovered, kSegmentBytesMin));
    PrimaryLogHooks hooks;
    hooks.propose = [this](Seq seq, std::string body) {
      // As the core would: the batch written and synced by every replica.
      ok_or_fail(store_->apply({seq, store_->end(), {{seq, view_, published_, std::move(body)}}, false}));
      ok_or_fail(store_->sync());
      ++proposals_;
      // Published on a later turn: the sink must not call into the log.
      if (publishing_) post([this, seq] { publish(seq); });
      return true;
    };
    hooks.published = [](wal::Lsn) { FAIL("an engine's log has the engine's durable hook"); };
    hooks.post = [this](std::function<void()> run) { post(std::move(run)); };
    hooks.opened = [this](Result<void> result) {
      std::lock_guard lock(mu_);
      opened_ = result ? std::error_code() : result.error();
      cv_.notify_all();
    };
    hooks.warn = [](const std::string&) {};
    hooks.configure = [this](wal::LogOptions& options) -> Result<void> {
      // No engine is open (the test shuts one down before the next view).
      bases_ = engine::read_checkpoints(*run_store_, shards_, kDir);
      engine::set_log_base(kDir, shards_, bases_, options);
      return ok();
    };
    hooks.lead = [this](View view, std::shared_ptr<wal::Log> log, replication::Seq) {
      std::lock_guard lock(mu_);
      led_ = {view, std::move(log)};
      cv_.notify_all();
    };
    hooks.stepped_down = [this](View view) {
      std::lock_guard lock(mu_);
      stepped_down_.push_back(view);
    };
    hooks.staged = [this] {
      ++wakes_;
      post([this] { REQUIRE(log_->seal()); });
    };
    log_ = std::make_unique<PrimaryLog>(fs_, kDir, *store_, std::move(hooks));
    // The replica holds its engine's directory for as long as it runs.
    claimed_ = engine::claim_data_dir(fs_, kDir, kShards, true, engine::DirOwner::replicated);
    run_store_ = std::move(claimed_.store);
    loop_ = std::thread([this] { run_loop(); });
  }
  ~Replica() {
    if (engine) engine->shutdown();
    engine.reset();
    call([this] { log_.reset(); });
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    loop_.join();
  }

  // Leads `view`: the log opened over the replica's batches, a quorum's
  // through `published`; then the tail published (as the new view's core
  // does once a quorum holds it), and only then the engine opened.
  void lead(View view, Seq published) {
    {
      std::lock_guard lock(mu_);
      opened_.reset();
      led_.reset();
    }
    call([this, view, published] {
      view_ = view;
      published_ = published;
      publishing_ = true;  // the new view's quorum answers
      log_->open(view, store_->end(), published);
    });
    {
      std::unique_lock lock(mu_);
      REQUIRE(cv_.wait_for(lock, 10s, [&] { return opened_.has_value(); }));
      REQUIRE_FALSE(*opened_);
    }
    const Seq end = call([this] { return store_->end(); });
    {
      // Led at once, unless the log holds a tail a quorum has not published.
      std::lock_guard lock(mu_);
      tail_held_at_open = !led_.has_value();
      CHECK(tail_held_at_open == (end > published));
    }
    call([this, end] { publish(end); });
    std::shared_ptr<wal::Log> log;
    {
      std::unique_lock lock(mu_);
      REQUIRE(cv_.wait_for(lock, 10s, [&] { return led_.has_value(); }));
      CHECK(led_->first == view);
      log = led_->second;
    }
    auto config = Config::local(kDir);
    config.warn = [](const std::string&) {};
    config.shards = shards_;
    config.checkpoint_interval = std::chrono::milliseconds::zero();
    engine = facade::open_engine_over_log(config, {run_store_, shards_, kDir, bases_, std::move(log)});
    register_order(*engine, counts);
  }

  // As another replica of the cluster that never led would be, but given
  // `shards`: the engine's side of the directory made again, the log kept.
  void reclaim(std::uint32_t shards) {
    run_store_.reset();
    claimed_ = engine::DataDir{};
    ok_or_fail(fs_.remove(std::string(kDir) + "/" + engine::kMetaFileName));
    ok_or_fail(io::remove_tree(fs_, std::string(kDir) + "/runs"));
    shards_ = shards;
    claimed_ = engine::claim_data_dir(fs_, kDir, shards_, true, engine::DirOwner::replicated);
    run_store_ = std::move(claimed_.store);
  }

  // The view ends: the log steps down; the engine goes after it.
  void step_down() {
    call([this] { log_->close(); });
    std::lock_guard lock(mu_);
    CHECK(stepped_down_ == std::vector<View>{view_});  // the engine is told, once
    stepped_down_.clear();
  }
  void close_engine() {
    engine->shutdown();
    engine.reset();
  }

  void hold_publication() {
    call([this] { publishing_ = false; });
  }
  int proposals() {
    return call([this] { return proposals_; });
  }
  Seq published() {
    return call([this] { return published_; });
  }

  FaultFileSystem& fs() { return fs_; }

  std::unique_ptr<Engine> engine;
  Counts counts;
  bool tail_held_at_open = false;
  std::atomic<int> wakes_{0};

 private:
  void publish(Seq seq) {
    published_ = std::max(published_, seq);
    log_->publish_through(seq);
  }
  void post(std::function<void()> run) {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(run));
    cv_.notify_all();
  }
  // Runs `fn` on the loop thread and returns what it returned.
  template <typename Fn>
  std::invoke_result_t<Fn> call(Fn fn) {
    std::packaged_task<std::invoke_result_t<Fn>()> task(std::move(fn));
    auto result = task.get_future();
    post([&task] { task(); });
    return result.get();
  }
  void run_loop() {
    for (;;) {
      std::function<void()> run;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !posted_.empty(); });
        if (posted_.empty()) return;
        run = std::move(posted_.front());
        posted_.pop_front();
      }
      run();
    }
  }

  FaultFileSystem fs_;
  std::unique_ptr<ReplicaStore> store_;
  std::unique_ptr<PrimaryLog> log_;
  engine::DataDir claimed_;  // its lock
  std::shared_ptr<engine::RunStore> run_store_;
  engine::ShardBases bases_;  // configure's, for the view it opens
  std::uint32_t shards_ = kShards;
  // The loop thread's.
  View view_ = 0;
  Seq published_ = 0;
  bool publishing_ = true;
  int proposals_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> posted_;
  std::optional<std::error_code> opened_;
  std::optional<std::pair<View, std::shared_ptr<wal::Log>>> led_;
  std::vector<View> stepped_down_;
  bool stopping_ = false;
  std::thread loop_;
};

// Until `run` waits on something (its code has run as far as it can).
void until_waiting(Engine& engine, const std::string& run) {
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto info = engine.get_run(run);
    if (info && !info->waiting_on.empty()) return;
    REQUIRE(std::chrono::steady_clock::now() < give_up);
    std::this_thread::sleep_for(1ms);
  }
}

using testing::error_of;

TEST_SUITE("unit") {
  TEST_CASE("engine over a primary's log: answered on publication; a step-down says unavailable; the next view "
            "finishes the runs") {
    Replica replica;
    replica.lead(2, 0);
    Engine& engine = *replica.engine;
    // Sealed on the loop, proposed, published: the start is answered (a
    // record no staged wake seals would hold it for ever).
    auto started = std::async(std::launch::async, [&] { engine.start(kOrder, "o1", 5); });
    REQUIRE(started.wait_for(10s) == std::future_status::ready);
    started.get();
    CHECK(replica.wakes_ > 0);
    until_waiting(engine, "o1");
    // Every record of o1 before this one -- step a's -- is durable once
    // this signal is (a shard's records are durable in order).
    engine.signal("o1", kNoise, 1, "noise-1");
    CHECK(replica.counts.a == 1);

    // A quorum no longer answers: the signal is proposed, never published.
    replica.hold_publication();
    const int proposed_before = replica.proposals();
    auto signal = std::async(std::launch::async, [&] { engine.signal("o1", kGo, 10, "go-1"); });
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (replica.proposals() == proposed_before) {
      REQUIRE(std::chrono::steady_clock::now() < give_up);
      std::this_thread::sleep_for(1ms);
    }
    CHECK(signal.wait_for(100ms) == std::future_status::timeout);  // proposed is not published
    auto result = std::async(std::launch::async, [&] { return engine.result(kOrder, "o1"); });
    // The same from a backup's application (forwarded: primary_router.hpp).
    auto forward = [&](boost::json::object call) {
      auto answer = std::make_shared<std::promise<boost::json::object>>();
      facade::serve_forwarded(engine, {engine::shard_of("o1", engine.shard_count()), remote::forwarded::to_bytes(call),
                                       [answer](bool last, std::vector<std::byte> body) {
                                         if (last) answer->set_value(*remote::forwarded::from_bytes(body));
                                       }});
      return answer->get_future();
    };
    auto forwarded_signal = forward({{"op", "signal"}, {"id", "o1"}, {"signal", "go"}, {"value", 11}, {"signal_id", "go-f"}});
    auto forwarded_result = forward({{"op", "result"}, {"id", "o1"}});
    CHECK(forwarded_signal.wait_for(100ms) == std::future_status::timeout);

    // The view ends: both calls are told to try the next primary; a
    // backup's, that their outcome is unknown (not an answer of this view).
    const Seq published = replica.published();
    replica.step_down();
    CHECK(error_of([&] { signal.get(); }) == errc::unavailable);
    CHECK(error_of([&] { (void)result.get(); }) == errc::unavailable);
    REQUIRE(forwarded_signal.wait_for(10s) == std::future_status::ready);
    CHECK(forwarded_signal.get().contains("unknown"));
    REQUIRE(forwarded_result.wait_for(10s) == std::future_status::ready);
    CHECK(forwarded_result.get().contains("unknown"));
    CHECK(error_of([&] { engine.start(kOrder, "o2", 1); }) == errc::unavailable);
    replica.close_engine();

    // The next view: the signal's batch is the tail, held until published.
    replica.lead(3, published);
    CHECK(replica.tail_held_at_open);
    Engine& next = *replica.engine;
    CHECK(next.result(kOrder, "o1") == 20);  // the signal was kept: 5 * 2 + 10
    CHECK(replica.counts.a == 1);            // durable, not run again
    CHECK(replica.counts.b == 1);
    next.start(kOrder, "o3", 7);
    next.signal("o3", kGo, 1, "go-3");
    CHECK(next.result(kOrder, "o3") == 15);
  }

  TEST_CASE("engine over a primary's log: an engine given another shard count than the log was written with is "
            "refused") {
    // Runs sharded 2 ways; then the directory's engine side as another
    // replica's given 3: its recovery finds runs in shards 3 would not put
    // them in, and says so rather than answer for the wrong runs.
    Replica replica;
    replica.lead(2, 0);
    for (int n = 0; n < 8; ++n) replica.engine->start(kOrder, "o" + std::to_string(n), n);
    const Seq published = replica.published();
    replica.step_down();
    replica.close_engine();
    replica.reclaim(3);
    CHECK(error_of([&] { replica.lead(3, published); }) == errc::wrong_shard_count);
  }

  TEST_CASE("engine over a primary's log: a replica's directory is refused to a local engine and to reshard, "
            "before anything is written") {
    FaultFileSystem fs;
    ok_or_fail(ReplicaStore::initialize(fs, kDir, "c", false, kSegmentBytesMin));
    auto config = Config::local(kDir);
    config.file_system = &fs;
    config.warn = [](const std::string&) {};
    CHECK(error_of([&] { (void)Engine::open(config); }) == errc::invalid_argument);
    CHECK_FALSE(value_or_fail(fs.exists(std::string(kDir) + "/" + engine::kMetaFileName)));
    CHECK_FALSE(value_or_fail(fs.exists(std::string(kDir) + "/runs")));
    std::string problem;
    engine::ReshardOptions options;
    options.shards = 3;
    auto resharded = engine::reshard(fs, kDir, options, &problem);
    REQUIRE_FALSE(resharded.has_value());
    CHECK(problem.find("replica") != std::string::npos);
    CHECK_FALSE(value_or_fail(fs.exists(std::string(kDir) + "/" + engine::kMetaFileName)));
  }
}

}  // namespace
}  // namespace fusee::replica
