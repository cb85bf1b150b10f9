// Replicated mode's log retires (docs/replication.md, "Retiring a replica's
// log"; "Rebuilding a replica's run store"), as an application runs it:
// three replicas in this process against a real etcd, segments of 1 MiB,
// runs that fill them. Once the primary checkpoints, every
// replica retires the segments its run store and checkpoints no longer
// need; the next primary's engine opens over a log that starts there and
// finishes the runs. A replica whose disk is lost cannot copy what was
// retired: started with only its log remade, it stops, saying to rebuild it;
// rebuilt with the primary's run store, it follows the log again, and its
// store holds every run.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <fusee/fusee.hpp>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/run_store.hpp"
#include "replica/local_etcd.hpp"
#include "replica/replica_segments.hpp"
#include "replica/replica_store.hpp"
#include "replica/store_transfer.hpp"
#include "tests/replica/replicated_runs.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;
using testing::value_or_fail;

const WorkflowRef<int, int> kFill{"fill"};
const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kGo{"go"};
// Rounds of fills, each checkpointed: a checkpoint's run-store record
// (the runs it finished, journals kept) must fit one batch of a segment.
constexpr int kFills = 160;
constexpr int kFillsPerCheckpoint = 40;
// The first test's fills on the next primary too.
constexpr int kAllFills = kFills + 3 * kFillsPerCheckpoint;
constexpr std::uint64_t kSegmentBytes = 1u << 20;
constexpr int kOrders = 5;

void register_workflows(Engine& engine) {
  engine.register_workflow(kFill, [](Ctx& ctx, int input) -> Task<int> {
    // Three steps of 2 KiB each, kept in the journal and the finished run:
    // 160 runs fill a few 1 MiB segments.
    std::size_t total = 0;
    for (int step = 0; step < 3; ++step) {
      std::string bulk = co_await ctx.step("bulk-" + std::to_string(step),
                                           [input] { return std::string(2048, static_cast<char>('a' + input % 26)); });
      total += bulk.size();
    }
    co_return input + static_cast<int>(total);
  });
  engine.register_workflow(kOrder, [](Ctx& ctx, int input) -> Task<int> {
    int a = co_await ctx.step("a", [input] { return input * 2; });
    auto go = co_await ctx.wait_for(kGo);
    co_return a + go.value_or(-1000);
  });
}

// What a replica's application warns of, kept for the test to read.
struct Warnings {
  std::mutex mu;
  std::vector<std::string> lines;
  bool saw(const std::string& text) {
    std::lock_guard lock(mu);
    for (const auto& line : lines) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

Config replica_config(const std::string& dir, std::uint16_t etcd_port, std::uint32_t id,
                      const std::vector<std::string>& addresses, std::uint64_t lag_cap_bytes,
                      Warnings* warnings = nullptr) {
  auto config = Config::replicated(dir, "127.0.0.1:" + std::to_string(etcd_port), "app", id, addresses);
  config.replica_retire_lag_max_bytes = lag_cap_bytes;
  config.shards = 2;
  config.replica_tick = 5ms;
  config.etcd_lease_ttl = 2s;
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.warn = [warnings, id](const std::string& line) {
    if (std::getenv("FUSEE_TEST_WARN")) fprintf(stderr, "[%u] %s\n", id, line.c_str());
    if (!warnings) return;
    std::lock_guard lock(warnings->mu);
    warnings->lines.push_back(line);
  };
  return config;
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::seconds within = 20s) {
  const auto give_up = std::chrono::steady_clock::now() + within;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

std::string fill_name(int n) { return "fill-" + std::to_string(n); }

// What `fusee replica rebuild` does to a stopped replica's directory that
// is a cluster's: the primary's run store fetched and put in place (its
// log is kept: it restarts at the primary's start by itself).
FetchedStore rebuild_store(io::FileSystem& fs, const std::string& replica_dir,
                           const std::vector<std::string>& addresses, std::uint32_t primary) {
  const std::string rebuild = io::join_path(replica_dir, kRebuildDir);
  testing::ok_or_fail(io::remove_tree(fs, rebuild));
  testing::ok_or_fail(fs.create_dir(rebuild));
  std::string problem;
  auto fetched = fetch_store(fs, transfer_call_to(addresses, primary, 10s), "app", io::join_path(rebuild, "runs"),
                             &problem);
  INFO(problem);
  REQUIRE(fetched.has_value());
  testing::ok_or_fail(install_fetched_store(fs, replica_dir));
  return *fetched;
}

// Runs fills [from, to) on `engine` to their end, then checkpoints.
void fill(Engine& engine, int from, int to) {
  for (int n = from; n < to; ++n) engine.start(kFill, fill_name(n), n);
  for (int n = from; n < to; ++n) CHECK(engine.result(kFill, fill_name(n)) == n + 3 * 2048);
  engine.checkpoint();
}

// The replica's own run store, read once its application stopped: every
// fill in [0, fills) finished.
void check_store_holds_fills(io::FileSystem& fs, const std::string& replica_dir, int fills) {
  auto store = value_or_fail(engine::RunStore::open_read_only(replica_dir, fs));
  for (int n = 0; n < fills; ++n) {
    auto run = value_or_fail(store->finished(fill_name(n)));
    REQUIRE(run.has_value());
    CHECK(run->result == boost::json::value(n + 3 * 2048));
  }
}

// Three replicas' directories (1 MiB segments) and applications in this
// process, against an etcd of the test's own, each lagging replica waited
// for up to `lag_cap_bytes` (0: always).
struct ThreeReplicas {
  explicit ThreeReplicas(std::uint64_t lag_cap) : etcd(dir.path()), lag_cap_bytes(lag_cap) {
    for (int id = 0; id < 3; ++id) addresses.push_back("127.0.0.1:" + std::to_string(free_loopback_port()));
    for (std::uint32_t id = 0; id < 3; ++id) dirs.push_back(dir.sub("replica-" + std::to_string(id)));
  }
  // Makes the directories and opens every replica: false when etcd is not
  // installed (the test is skipped).
  bool start() {
    if (!etcd.ready()) return false;
    for (std::uint32_t id = 0; id < 3; ++id) {
      testing::ok_or_fail(ReplicaStore::initialize(fs, dirs[id], "app", false, kSegmentBytes));
      open(id);
    }
    return true;
  }
  void open(std::uint32_t id, Warnings* warnings = nullptr) {
    engines[id] = Engine::open(replica_config(dirs[id], etcd.client_port(), id, addresses, lag_cap_bytes, warnings));
    register_workflows(*engines[id]);
  }
  void stop(std::uint32_t id) {
    engines[id]->shutdown();
    engines[id].reset();
  }

  testing::TempDir dir;
  LocalEtcd etcd;
  io::PosixFileSystem fs;
  std::uint64_t lag_cap_bytes;
  std::vector<std::string> addresses;
  std::vector<std::string> dirs;
  std::vector<std::unique_ptr<Engine>> engines{3};
};

TEST_SUITE("unit") {
  TEST_CASE("replicated mode: the log retires what every replica's run store no longer needs; a lost replica is "
            "rebuilt from the primary's run store") {
    ThreeReplicas cluster(0);
    if (!cluster.start()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    io::PosixFileSystem& fs = cluster.fs;
    const std::vector<std::string>& addresses = cluster.addresses;
    const std::vector<std::string>& dirs = cluster.dirs;
    std::vector<std::unique_ptr<Engine>>& engines = cluster.engines;
    auto open = [&](std::uint32_t id, Warnings* warnings = nullptr) { cluster.open(id, warnings); };
    const auto first = testing::primary_of(engines, 20s);
    REQUIRE(first.has_value());
    Engine& primary = *engines[*first];
    for (int n = 0; n < kOrders; ++n) primary.start(kOrder, testing::run_name(n), n);
    for (int n = 0; n < kOrders; ++n) testing::take_to_wait(primary, n, 10s);
    for (int from = 0; from < kFills; from += kFillsPerCheckpoint) fill(primary, from, from + kFillsPerCheckpoint);

    // Checkpointed, every replica's store applies it, and each one's log
    // retires below it -- the primary's too, once every replica holds it.
    for (std::uint32_t id = 0; id < 3; ++id) {
      CAPTURE(id);
      CHECK(eventually([&] { return engines[id]->stats().replica.retired_through > 0; }));
    }
    // Retirement may still be moving on (each checkpoint lets it go further,
    // a second or so later): what is read here is only a moment's.
    MESSAGE("the primary's log retired through batch " << primary.stats().replica.retired_through << " of "
                                                       << primary.stats().replica.log_end);

    // The primary's application stops; the next primary's engine opens over
    // a log that starts past what was retired, and finishes the runs.
    cluster.stop(*first);
    const auto second = testing::primary_of(engines, 20s, *first);
    REQUIRE(second.has_value());
    Engine& next = *engines[*second];
    CHECK(next.stats().replica.retired_through > 0);
    // The stopped replica's log ends here: what its store allowed was below.
    const std::uint32_t lost = *first;
    const auto lost_end = value_or_fail(inspect_store(fs, dirs[lost])).chain.entries.back().seq;
    CHECK(next.stats().replica.retired_through < lost_end);
    for (int n = 0; n < kOrders; ++n) next.signal(testing::run_name(n), kGo, 100, "go-" + std::to_string(n));
    for (int n = 0; n < kOrders; ++n) CHECK(next.result(kOrder, testing::run_name(n)) == 2 * n + 100);
    for (int n = 0; n < kFills; n += 7) CHECK(next.result(kFill, fill_name(n)) == n + 3 * 2048);
    // More than a segment more (a log retires whole segments), each round
    // checkpointed: the others could retire far past the stopped replica's
    // end, but with no cap the primary waits for it.
    for (int from = kFills; from < kAllFills; from += kFillsPerCheckpoint) fill(next, from, from + kFillsPerCheckpoint);
    CHECK(next.stats().replica.log_end > lost_end);
    std::this_thread::sleep_for(2s);
    const auto retired = next.stats().replica.retired_through;
    CHECK(retired < lost_end);
    MESSAGE("the next primary retired through batch " << retired << "; the stopped replica's log ends at "
                                                      << lost_end << ", the primary's at "
                                                      << next.stats().replica.log_end);

    // The old primary's disk is lost. Its log remade alone cannot follow: the
    // primary retired what its store would have to apply, so it stops and
    // says what to do.
    testing::ok_or_fail(io::remove_tree(fs, dirs[lost]));
    testing::ok_or_fail(ReplicaStore::initialize(fs, dirs[lost], "app", true, kSegmentBytes));
    {
      Warnings warnings;
      open(lost, &warnings);
      // Before its log restarts (the feed's own check is the backstop).
      CHECK(eventually([&] { return warnings.saw("fusee replica rebuild"); }));
      CHECK(warnings.saw("the log must restart after batch"));
      CHECK(engines[lost]->stats().shards_held == 0);
      cluster.stop(lost);
    }

    // Rebuilt with the primary's run store (what `fusee replica rebuild`
    // does), it follows the log from the primary's start.
    {
      // A backup sends no store: only the primary's is where the log starts.
      const std::uint32_t backup = 3 - lost - *second;
      std::string refused;
      CHECK_FALSE(fetch_store(fs, transfer_call_to(addresses, backup, 10s), "app",
                              io::join_path(dirs[lost], "from-a-backup"), &refused)
                      .has_value());
      CHECK(refused.find("is not the primary") != std::string::npos);
      CHECK(rebuild_store(fs, dirs[lost], addresses, *second).applied > retired);
    }
    Warnings warnings;
    open(lost, &warnings);
    CHECK(eventually([&] {
      const auto stats = engines[lost]->stats().replica;
      return !stats.suspect && stats.store_applied >= next.stats().replica.commit;
    }));
    CHECK_FALSE(warnings.saw("rebuild"));
    // Its log restarted where the primary's started; with every replica
    // holding the log again, the primary retires on.
    CHECK(engines[lost]->stats().replica.retired_through >= retired);
    next.checkpoint();
    CHECK(eventually([&] { return next.stats().replica.retired_through > retired; }));
    for (int n = 0; n < kOrders; ++n) CHECK(engines[lost]->result(kOrder, testing::run_name(n)) == 2 * n + 100);

    for (auto& engine : engines) {
      if (engine) engine->shutdown();
    }
    engines.clear();
    // The rebuilt replica's own store holds every run, finished.
    check_store_holds_fills(fs, dirs[lost], kAllFills);
    auto store = value_or_fail(engine::RunStore::open_read_only(dirs[lost], fs));
    for (int n = 0; n < kOrders; ++n) {
      auto run = value_or_fail(store->finished(testing::run_name(n)));
      REQUIRE(run.has_value());
      CHECK(run->result == boost::json::value(2 * n + 100));
    }
  }

  TEST_CASE("replicated mode: past the lag cap, the others retire without a replica that is down; back, it stops "
            "until rebuilt, its own log kept") {
    ThreeReplicas cluster(256u << 10);
    if (!cluster.start()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    io::PosixFileSystem& fs = cluster.fs;
    const std::vector<std::string>& addresses = cluster.addresses;
    const std::vector<std::string>& dirs = cluster.dirs;
    std::vector<std::unique_ptr<Engine>>& engines = cluster.engines;
    auto open = [&](std::uint32_t id, Warnings* warnings = nullptr) { cluster.open(id, warnings); };
    const auto leader = testing::primary_of(engines, 20s);
    REQUIRE(leader.has_value());
    Engine& primary = *engines[*leader];
    fill(primary, 0, kFillsPerCheckpoint);

    // A backup stops. With every other replica holding the log, the
    // primary retires past it once it lags by more than the cap.
    const std::uint32_t down = (*leader + 1) % 3;
    CHECK(eventually([&] { return engines[down]->stats().replica.durable_end >= primary.stats().replica.commit; }));
    cluster.stop(down);
    int fills = kFillsPerCheckpoint;
    for (; fills < 8 * kFillsPerCheckpoint; fills += kFillsPerCheckpoint) fill(primary, fills, fills + kFillsPerCheckpoint);
    const auto down_end = value_or_fail(inspect_store(fs, dirs[down])).chain.entries.back().seq;
    CHECK(eventually([&] { return primary.stats().replica.retired_through > down_end; }));
    MESSAGE("the primary retired through batch " << primary.stats().replica.retired_through
                                                 << "; the stopped backup's log ends at " << down_end);

    // Back, its log would restart at the primary's start, past what its
    // store applied: it stops, saying to rebuild it.
    {
      Warnings warnings;
      open(down, &warnings);
      CHECK(eventually([&] { return warnings.saw("the log must restart after batch"); }));
      CHECK(warnings.saw("fusee replica rebuild"));
      cluster.stop(down);
    }
    // Rebuilt, its own log kept, it follows again.
    rebuild_store(fs, dirs[down], addresses, *leader);
    Warnings warnings;
    open(down, &warnings);
    CHECK(eventually([&] {
      const auto stats = engines[down]->stats().replica;
      return !stats.suspect && stats.store_applied >= primary.stats().replica.commit;
    }));
    CHECK_FALSE(warnings.saw("rebuild"));
    for (auto& engine : engines) {
      if (engine) engine->shutdown();
    }
    engines.clear();
    check_store_holds_fills(fs, dirs[down], fills);
  }
}

}  // namespace
}  // namespace fusee::replica
