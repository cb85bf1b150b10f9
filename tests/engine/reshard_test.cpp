// Resharding (engine/reshard.hpp): a workload interrupted by crashes and
// resharded 4 -> 7 -> 2 finishes every run with the result of an
// uninterrupted run; a crash at any operation of a reshard leaves a
// directory that opens as the old layout or the new, with nothing lost; a
// directory in use is refused. The offline reader (engine/offline_dir.hpp)
// that reshard moves runs with is what these check: a run it assembled
// wrongly would not finish with its result.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <iostream>
#include <map>
#include <set>

#include "engine/meta.hpp"
#include "engine/reshard.hpp"
#include "tests/support/fault_file_system.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;
using namespace std::chrono_literals;

namespace {

const WorkflowRef<int, int> kCalc{"calc"};
const Signal<int> kBump{"bump"};
constexpr int kRuns = 24;    // started in the first open: 0 .. kRuns-1
constexpr int kLateRun = 100;  // three more, started after its checkpoint

std::string run_name(int n) { return "calc-" + std::to_string(n); }
int bump_for(int n) { return n + 7; }
std::vector<int> all_inputs() {
  std::vector<int> inputs;
  for (int n = 0; n < kRuns; ++n) inputs.push_back(n);
  for (int n = kLateRun; n < kLateRun + 3; ++n) inputs.push_back(n);
  return inputs;
}

// calc: a step, a chunk, a 10 s sleep, a wait for "bump", a step, a chunk.
void register_calc(Engine& engine) {
  engine.register_workflow(kCalc, [](Ctx& ctx, int input) -> Task<int> {
    int a = co_await ctx.step("a", [input] { return input * 3; });
    co_await ctx.stream("out").write(a);
    co_await ctx.sleep("nap", 10s);
    auto bump = co_await ctx.wait_for(kBump);
    int b = co_await ctx.step("b", [a, bump] { return a + bump.value_or(-1000); });
    co_await ctx.stream("out").write(b);
    co_return b;
  });
}

Config config_for(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock, std::uint32_t shards,
                  bool park_at_once = false) {
  auto config = Config::local("/data");
  config.warn = [](const std::string&) {};
  config.file_system = &fs;
  config.flush = FlushMethod::buffered;
  config.segment_bytes = 64 * 1024;
  config.shards = shards;
  config.clock = clock;
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = park_at_once ? std::chrono::milliseconds::zero() : std::chrono::hours(1000);
  config.random = [n = std::uint64_t{0}]() mutable { return ++n; };
  return config;
}

void bump(Engine& engine, int n) { engine.signal(run_name(n), kBump, bump_for(n), "bump-" + run_name(n)); }

// What an uninterrupted run gives: the same workflow in memory, start to end.
std::map<std::string, int> uninterrupted_results() {
  auto clock = std::make_shared<ManualClock>();
  Config config = Config::memory();
  config.clock = clock;
  config.shards = 2;
  auto engine = Engine::open(config);
  register_calc(*engine);
  for (int n : all_inputs()) {
    engine->start(kCalc, run_name(n), n);
    bump(*engine, n);
  }
  clock->advance(10s);
  std::map<std::string, int> results;
  for (int n : all_inputs()) results[run_name(n)] = engine->result(kCalc, run_name(n));
  return results;
}

// The interrupted state every test starts from, on 4 shards: runs finished
// and in the store; runs parked at their wait; runs finished since the last
// checkpoint (only in the log); runs started since it (only in the log,
// asleep); then a crash.
std::unique_ptr<FaultFileSystem> interrupted_directory(const std::shared_ptr<ManualClock>& clock) {
  FaultFileSystem fs;
  auto engine = Engine::open(config_for(fs, clock, 4, /*park_at_once=*/true));
  register_calc(*engine);
  for (int n = 0; n < kRuns; ++n) engine->start(kCalc, run_name(n), n);
  for (int n = 0; n < 6; ++n) bump(*engine, n);
  for (int n = 0; n < kRuns; ++n) {
    auto reader = engine->read_stream(run_name(n), "out", StreamFrom::earliest());
    REQUIRE(reader.next().has_value());
  }
  clock->advance(10s);
  for (int n = 0; n < 6; ++n) REQUIRE(engine->result(kCalc, run_name(n)) == 3 * n + bump_for(n));
  // The others wait for their bump: park them.
  auto give_up = std::chrono::steady_clock::now() + 30s;
  while (engine->stats().runs_parked < kRuns - 6) {
    engine->checkpoint();
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < give_up, "only " << engine->stats().runs_parked << " parked");
  }
  // A run the store does not hold yet is left out of one checkpoint: the
  // next puts the finished runs' summaries in.
  engine->checkpoint();
  for (int n = 6; n < 9; ++n) {
    bump(*engine, n);
    REQUIRE(engine->result(kCalc, run_name(n)) == 3 * n + bump_for(n));
  }
  for (int n = kLateRun; n < kLateRun + 3; ++n) {
    engine->start(kCalc, run_name(n), n);
    auto reader = engine->read_stream(run_name(n), "out", StreamFrom::earliest());
    REQUIRE(reader.next().has_value());
  }
  // The process dies: what the kernel had stays, nothing more is written.
  auto image = fs.crash_image(CrashOutcome::keep_all(CrashOutcome::Names::keep));
  engine.reset();
  return image;
}

engine::ReshardOptions options_for(std::uint32_t shards) {
  engine::ReshardOptions options;
  options.shards = shards;
  options.segment_bytes = 64 * 1024;
  options.direct_io = false;
  return options;
}

engine::ReshardReport reshard_to(FaultFileSystem& fs, std::uint32_t shards) {
  std::string problem;
  auto report = engine::reshard(fs, "/data", options_for(shards), &problem);
  REQUIRE_MESSAGE(report.has_value(), problem);
  return *report;
}

// Every entry of /data belongs to the current layout.
void check_no_leftovers(FaultFileSystem& fs) {
  auto meta = engine::read_meta(fs, "/data");
  REQUIRE(meta.has_value());
  REQUIRE(meta->has_value());
  auto leftovers = engine::leftover_layouts(fs, "/data", **meta);
  REQUIRE(leftovers.has_value());
  CHECK_MESSAGE(leftovers->empty(), "left over: " << (leftovers->empty() ? "" : leftovers->front()));
}

// Opens whatever layout is current, bumps every run (repeats carry the same
// signal id, so they are acknowledged and dropped), and checks each result
// and stream against the uninterrupted runs'.
void finish_and_check(FaultFileSystem& fs, const std::shared_ptr<ManualClock>& clock,
                      const std::map<std::string, int>& expected, std::uint32_t shards_expected) {
  auto engine = Engine::open(config_for(fs, clock, 0));
  CHECK(engine->shard_count() == shards_expected);
  check_no_leftovers(fs);
  register_calc(*engine);
  for (int n : all_inputs()) {
    engine->start(kCalc, run_name(n), n);  // attaches to the run if it exists
    bump(*engine, n);
  }
  clock->advance(10s);
  for (int n : all_inputs()) {
    auto id = run_name(n);
    CHECK_MESSAGE(engine->result(kCalc, id) == expected.at(id), id);
    auto reader = engine->read_stream(id, "out", StreamFrom::earliest());
    std::vector<int> chunks;
    while (auto chunk = reader.next()) chunks.push_back(boost::json::value_to<int>(chunk->value));
    CHECK_MESSAGE((chunks == std::vector<int>{3 * n, expected.at(id)}), id);
  }
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("reshard: a workload interrupted and resharded 4 -> 7 -> 2 gives every run the result of an "
            "uninterrupted run") {
    auto expected = uninterrupted_results();
    auto clock = std::make_shared<ManualClock>();
    auto first = interrupted_directory(clock);

    auto to_seven = reshard_to(*first, 7);
    CHECK(to_seven.changed);
    CHECK(to_seven.shards_from == 4);
    CHECK(to_seven.layout_to == 1);
    // Every run is either a finished one in the store or a journal moved:
    // the ones checkpointed before the crash (a segment roll may have
    // checkpointed more), the parked ones, and those only in the log.
    CHECK(to_seven.finished_copied >= 6);
    CHECK(to_seven.finished_copied + to_seven.runs_moved == kRuns + 3);
    CHECK(to_seven.runs_parked > 0);
    check_no_leftovers(*first);

    // Resume on 7 shards, get some runs done, and crash again.
    std::unique_ptr<FaultFileSystem> second;
    {
      auto engine = Engine::open(config_for(*first, clock, 0));
      CHECK(engine->shard_count() == 7);
      register_calc(*engine);
      for (int n = 6; n < 9; ++n) CHECK(engine->result(kCalc, run_name(n)) == expected.at(run_name(n)));
      for (int n = 9; n < 14; ++n) bump(*engine, n);
      clock->advance(10s);
      for (int n = kLateRun; n < kLateRun + 3; ++n) bump(*engine, n);
      for (int n = 9; n < 14; ++n) CHECK(engine->result(kCalc, run_name(n)) == expected.at(run_name(n)));
      engine->checkpoint();
      bump(*engine, 14);
      CHECK(engine->result(kCalc, run_name(14)) == expected.at(run_name(14)));
      second = first->crash_image(CrashOutcome::keep_all(CrashOutcome::Names::keep));
    }

    auto to_two = reshard_to(*second, 2);
    CHECK(to_two.changed);
    CHECK(to_two.shards_from == 7);
    CHECK(to_two.layout_to == 2);
    finish_and_check(*second, clock, expected, 2);
    // Stable: a second open finds the same.
    finish_and_check(*second, clock, expected, 2);
  }

  TEST_CASE("reshard: the same shard count changes nothing; bad counts and non-directories are refused") {
    auto clock = std::make_shared<ManualClock>();
    auto fs = interrupted_directory(clock);
    auto same = reshard_to(*fs, 4);
    CHECK_FALSE(same.changed);
    std::string problem;
    CHECK_FALSE(engine::reshard(*fs, "/data", options_for(0), &problem).has_value());
    CHECK(problem.find("must be 1 to") != std::string::npos);
    problem.clear();
    REQUIRE(fs->create_dir("/empty").has_value());
    CHECK_FALSE(engine::reshard(*fs, "/empty", options_for(2), &problem).has_value());
    CHECK(problem.find("not a Fusee data directory") != std::string::npos);
  }

  TEST_CASE("reshard: refuses while an engine holds the directory") {
    TempDir dir;
    auto engine = Engine::open(Config::local(dir.path()));
    io::PosixFileSystem fs;
    std::string problem;
    CHECK_FALSE(engine::reshard(fs, dir.path(), {.shards = 3}, &problem).has_value());
    CHECK(problem.find("is in use") != std::string::npos);
    engine->shutdown();
    engine.reset();
    CHECK(engine::reshard(fs, dir.path(), {.shards = 3}, &problem).has_value());
    CHECK(Engine::open(Config::local(dir.path()))->shard_count() == 3);
  }
}

TEST_SUITE("crash") {
  TEST_CASE("reshard: a crash at any operation leaves the old layout or the new, and every run finishes") {
    auto expected = uninterrupted_results();
    auto clock = std::make_shared<ManualClock>();
    auto base = interrupted_directory(clock);
    std::uint64_t crash_points = 0;
    std::uint64_t crash_states = 0;
    std::set<std::uint32_t> layouts_seen;
    for (std::uint64_t crash_at = 0;; ++crash_at) {
      auto fs = base->crash_image(CrashOutcome::keep_all(CrashOutcome::Names::keep));
      fs->set_crash_after_ops(crash_at);
      std::string problem;
      auto report = engine::reshard(*fs, "/data", options_for(3), &problem);
      bool crashed = fs->crashed();
      if (!crashed) REQUIRE_MESSAGE(report.has_value(), problem);
      ++crash_points;
      auto pending = fs->pending_data_op_count();
      std::vector<CrashOutcome> outcomes;
      for (auto names : {CrashOutcome::Names::revert, CrashOutcome::Names::keep}) {
        outcomes.push_back(CrashOutcome::drop_all(names));
        outcomes.push_back(CrashOutcome::keep_all(names));
        if (pending > 1) outcomes.push_back(CrashOutcome::keep_first_k(pending / 2, names));
        outcomes.push_back(CrashOutcome::random_subset(crash_at, names));
      }
      for (const auto& outcome : outcomes) {
        INFO("crash after " << crash_at << " ops, " << outcome.describe());
        auto image = fs->crash_image(outcome);
        auto meta = engine::read_meta(*image, "/data");
        REQUIRE(meta.has_value());
        REQUIRE(meta->has_value());
        auto shards = (*meta)->shards;
        CHECK((shards == 4 || shards == 3));
        if (!crashed) CHECK(shards == 3);
        layouts_seen.insert((*meta)->layout);
        finish_and_check(*image, clock, expected, shards);
        ++crash_states;
      }
      if (!crashed) break;
    }
    std::cout << "reshard crash enumeration: " << crash_points << " crash points, " << crash_states
              << " crash states checked\n";
    CHECK(layouts_seen == std::set<std::uint32_t>{0, 1});
    CHECK(crash_points > 10);
  }
}
