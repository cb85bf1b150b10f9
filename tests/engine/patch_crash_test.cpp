// Crash-point enumeration for a patch deployed while commands are in
// flight (issue 35): the old code starts a charge (a step whose outside
// call is under way), a child, a timer and a wait together; the process
// dies at every operation boundary of that life (four crash outcomes each);
// the new code puts a patch before each of the four and one after them.
// Whatever the crash kept, the charge runs under one key only (a provider
// that deduplicates by key charges once), the fraud check the patch adds
// before it never runs once the charge had begun, the patches' answers are
// ordered (once one is new, every later one is), and the result is stable
// across another open that runs nothing.
#include <doctest/doctest.h>

#include <condition_variable>
#include <fusee/fusee.hpp>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/engine/gate.hpp"
#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, std::string> kOrder{"order"};
const WorkflowRef<int, int> kKid{"kid"};
const Signal<int> kGo{"go"};
// The old life's clock, and the later lives': past the timer's due time.
constexpr TimePoint kOldTime{std::chrono::hours(24 * 365 * 56)};
constexpr TimePoint kNewTime = kOldTime + std::chrono::hours(2);

struct Life {
  std::mutex mu;
  std::condition_variable changed;
  std::vector<std::string> charge_keys;
  int fraud = 0;
  void charged(const std::string& key) {
    std::lock_guard lock(mu);
    charge_keys.push_back(key);
    changed.notify_all();
  }
  void frauded() {
    std::lock_guard lock(mu);
    ++fraud;
  }
  std::size_t charges() {
    std::lock_guard lock(mu);
    return charge_keys.size();
  }
};

void register_kid(Engine& engine) {
  engine.register_workflow(kKid, [](Ctx& ctx, int input) -> Task<int> {
    auto add = [input] { return input + 1; };
    co_return co_await ctx.step("add", add);
  });
}

// The old code. The charge's outside call does not answer in this life.
void register_old(Engine& engine, Life& life) {
  register_kid(engine);
  engine.register_workflow(kOrder, [&life](Ctx& ctx, int input) -> Task<std::string> {
    auto quote = [input] { return input * 10; };
    int price = co_await ctx.step("quote", quote);
    auto charge = [&life, price](StepContext& step) -> Task<int> {
      life.charged(step.key());
      co_await UntilStopped{step.stop_token()};
      co_return price;
    };
    auto charged = ctx.step("charge", charge).start();
    auto kid = ctx.child(kKid, ctx.run_id() + "-kid", input).start();
    auto timer = ctx.sleep("timer", std::chrono::hours(1)).start();
    auto go = ctx.wait_for(kGo).start();
    auto [paid, grown, slept, went] = co_await ctx.all(charged, kid, timer, go);
    (void)slept;
    co_return std::to_string(paid + grown + went.value_or(0));
  });
}

// The new code: a patch before each command and one after them; the
// result lists the patches taken.
void register_new(Engine& engine, Life& life) {
  register_kid(engine);
  engine.register_workflow(kOrder, [&life](Ctx& ctx, int input) -> Task<std::string> {
    auto quote = [input] { return input * 10; };
    int price = co_await ctx.step("quote", quote);
    std::string taken;
    if (ctx.patched("before-charge")) {
      auto fraud = [&life] {
        life.frauded();
        return true;
      };
      (void)co_await ctx.step("fraud", fraud);
      taken += "c";
    }
    auto charge = [&life, price](StepContext& step) {
      life.charged(step.key());
      return price;
    };
    auto charged = ctx.step("charge", charge).start();
    if (ctx.patched("before-child")) taken += "k";
    auto kid = ctx.child(kKid, ctx.run_id() + "-kid", input).start();
    if (ctx.patched("before-timer")) taken += "t";
    auto timer = ctx.sleep("timer", std::chrono::hours(1)).start();
    if (ctx.patched("before-wait")) taken += "w";
    auto go = ctx.wait_for(kGo).start();
    if (ctx.patched("after")) taken += "a";
    auto [paid, grown, slept, went] = co_await ctx.all(charged, kid, timer, go);
    (void)slept;
    co_return taken + " " + std::to_string(paid + grown + went.value_or(0));
  });
}

Config config_at(FaultFileSystem& fs, TimePoint time) {
  return crash_config(fs, std::make_shared<ManualClock>(time));
}

void crashing_life(FaultFileSystem& fs, Life& life) {
  try {
    auto engine = Engine::open(config_at(fs, kOldTime));
    register_old(*engine, life);
    engine->start(kOrder, "o-1", 1);
    // Until the charge is under way, or the disk is gone (which nothing
    // announces: looked at again each millisecond the charge has not come).
    {
      std::unique_lock lock(life.mu);
      for (int waited_ms = 0; waited_ms < 30'000 && life.charge_keys.empty() && !fs.crashed(); ++waited_ms) {
        life.changed.wait_for(lock, std::chrono::milliseconds(1), [&] { return !life.charge_keys.empty(); });
      }
    }
    engine->shutdown();  // a deploy: the charge's call has not answered
  } catch (const Error& error) {
    CHECK_MESSAGE(fs.crashed(), "an error without a crash: " << error.what());
  }
}

// What the crash states covered: the charge under way or not, and how far
// the old journal reached (the first patch the new code took).
struct Coverage {
  int charge_begun = 0;
  int charge_not_begun = 0;
  std::set<char> first_new;
};

void check_after_crash(FaultFileSystem& image, Life& before, const std::string& where, Coverage& coverage) {
  INFO(where);
  Life after;
  std::string result;
  {
    auto clock = std::make_shared<ManualClock>(kNewTime);
    auto engine = Engine::open(crash_config(image, clock));
    register_new(*engine, after);
    engine->start(kOrder, "o-1", 1);  // attaches, or starts it on the new code if its start was lost
    engine->signal("o-1", kGo, 100, "go-1");
    // Time goes on until the run ends: its timer fires, wherever it was set.
    std::mutex ticking;
    std::condition_variable stop_ticking;
    bool ended = false;
    std::thread ticker([&] {
      std::unique_lock lock(ticking);
      while (!ended) {
        clock->advance(std::chrono::hours(1));
        stop_ticking.wait_for(lock, std::chrono::milliseconds(5), [&] { return ended; });
      }
    });
    auto stop = [&] {
      {
        std::lock_guard lock(ticking);
        ended = true;
      }
      stop_ticking.notify_all();
      ticker.join();
    };
    try {
      result = engine->result(kOrder, "o-1");
    } catch (...) {
      stop();
      throw;
    }
    stop();
    engine->shutdown();
  }
  std::set<std::string> keys(before.charge_keys.begin(), before.charge_keys.end());
  keys.insert(after.charge_keys.begin(), after.charge_keys.end());
  CHECK_MESSAGE(keys.size() == 1, "the charge ran under " << keys.size() << " keys");
  const auto space = result.find(' ');
  REQUIRE(space != std::string::npos);
  const std::string taken = result.substr(0, space);
  CHECK(result.substr(space + 1) == "112");  // 10 + 2 + 100
  if (!before.charge_keys.empty()) {
    // The charge had begun: its start was durable, so the old code went
    // past the first patch.
    CHECK_MESSAGE(taken.find('c') == std::string::npos, "a patch was put before a charge under way: " << taken);
    CHECK(after.fraud == 0);
  } else {
    CHECK(after.fraud == (taken.find('c') != std::string::npos ? 1 : 0));
  }
  // Ordered: the journal ends somewhere, and every patch past it is new
  // (the last at least: the old code journals nothing while it waits).
  const std::string all = "cktwa";
  REQUIRE(!taken.empty());
  CHECK_MESSAGE(taken == all.substr(all.find(taken.front())), "patches taken out of order: " << taken);
  (before.charge_keys.empty() ? coverage.charge_not_begun : coverage.charge_begun)++;
  coverage.first_new.insert(taken.front());
  // Stable: the next open runs nothing and answers the same.
  Life third;
  auto again = Engine::open(config_at(image, kNewTime));
  register_new(*again, third);
  CHECK(again->result(kOrder, "o-1") == result);
  CHECK(third.charges() == 0);
  CHECK(third.fraud == 0);
}

void enumerate_points() {
  Coverage coverage;
  auto crash_points = enumerate_life_crash_points<Life>(
      "patch in flight", std::chrono::seconds(6), [&](FaultFileSystem& fs, Life& life) { crashing_life(fs, life); },
      [&](FaultFileSystem& image, Life& life, const std::string& where) {
        check_after_crash(image, life, where, coverage);
      });
  CHECK(crash_points > 10);
  // Not vacuous: states with the charge under way and without, and the old
  // journal ending before the first patch and after the last start (only
  // the last patch new). The four starts go to the log in one batch, so no
  // crash falls between them.
  // (Every point in make test-long; a sample may miss the few states of
  // one kind, so make test only prints what it saw.)
  if (crash_whole()) {
    CHECK(coverage.charge_begun > 0);
    CHECK(coverage.charge_not_begun > 0);
    CHECK(coverage.first_new.count('c') == 1);
    CHECK(coverage.first_new.count('a') == 1);
  }
  std::cout << "patch in flight: " << coverage.charge_begun << " states with the charge under way, "
            << coverage.charge_not_begun << " without; first new patch seen: "
            << std::string(coverage.first_new.begin(), coverage.first_new.end()) << "\n";
}

}  // namespace

TEST_SUITE("crash") {
  TEST_CASE("engine: a patch deployed while a step, a child, a timer and a wait are in flight moves none of them") {
    enumerate_points();
  }
}
