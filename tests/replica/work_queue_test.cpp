// WorkQueue (hosting/work_queue.hpp), the host's thread for forwarded
// calls: work runs in order, off the caller's thread; past its bound it is
// refused (the caller says "not now"), and taken again once the queue
// drains; a stop drops what waits; work that throws ends only itself.
#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "hosting/work_queue.hpp"

namespace fusee::hosting {
namespace {

TEST_SUITE("unit") {
  TEST_CASE("work queue: in order, bounded, drained, stopped; a throw ends only its work") {
    WorkQueue queue(10);
    std::promise<void> gate;
    auto gate_open = gate.get_future().share();
    std::vector<int> ran;
    std::mutex ran_mu;
    const auto caller = std::this_thread::get_id();
    std::atomic<bool> elsewhere{true};
    // The first holds the thread; the rest wait, up to the bound.
    REQUIRE(queue.try_post(4, [&] {
      gate_open.wait();
      if (std::this_thread::get_id() == caller) elsewhere = false;
      std::lock_guard lock(ran_mu);
      ran.push_back(0);
    }));
    REQUIRE(queue.try_post(3, [&] { throw std::runtime_error("a call that failed"); }));
    REQUIRE(queue.try_post(3, [&] {
      std::lock_guard lock(ran_mu);
      ran.push_back(2);
    }));
    CHECK_FALSE(queue.try_post(1, [] {}));  // 4 + 3 + 3 = 10: full
    gate.set_value();
    std::promise<void> drained;
    for (;;) {
      // Taken again once what waited ran (the bound counts the work under way too).
      if (queue.try_post(1, [&] { drained.set_value(); })) break;
      std::this_thread::yield();
    }
    drained.get_future().wait();
    {
      std::lock_guard lock(ran_mu);
      CHECK(ran == std::vector<int>{0, 2});
    }
    CHECK(elsewhere);
    // A stop drops what waits and refuses the rest.
    std::promise<void> hold;
    auto held = hold.get_future().share();
    std::atomic<bool> dropped_ran{false};
    REQUIRE(queue.try_post(1, [held] { held.wait(); }));
    REQUIRE(queue.try_post(1, [&] { dropped_ran = true; }));
    std::thread stopper([&] { queue.stop(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    hold.set_value();
    stopper.join();
    CHECK_FALSE(dropped_ran);
    CHECK_FALSE(queue.try_post(1, [] {}));
  }
}

}  // namespace
}  // namespace fusee::hosting
