// The server's permit broker (server/permit_broker.hpp) on a manual clock:
// a limit bounds the permits of every connection together and paces them;
// a connection that goes gives its permits back and withdraws its asks; a
// permit declared held after a reconnect counts at once, over the bound.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "fusee/clock.hpp"
#include "server/permit_broker.hpp"

using namespace fusee;
using namespace fusee::server;

namespace {

// The asks granted so far, as (connection, ask).
struct Granted {
  std::mutex mu;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> asks;
  PermitBroker::OnGrant to(std::uint64_t connection) {
    return [this, connection](std::uint64_t ask) {
      std::lock_guard lock(mu);
      asks.emplace_back(connection, ask);
    };
  }
  std::vector<std::pair<std::uint64_t, std::uint64_t>> taken() {
    std::lock_guard lock(mu);
    auto out = asks;
    asks.clear();
    return out;
  }
};

LimitStats stats_of(const PermitBroker& broker, const std::string& name) {
  for (const auto& limit : broker.stats()) {
    if (limit.name == name) return limit;
  }
  FAIL("no limit " << name);
  return {};
}

using Pairs = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("permit broker: a limit bounds every connection's permits together, in the order asked") {
    ManualClock clock;
    PermitBroker broker([&] { return clock.now(); }, false);
    Granted granted;
    broker.set("pay", StepLimit{.concurrent = 2});
    broker.ask(1, 10, "pay", false, granted.to(1));
    broker.ask(2, 20, "pay", false, granted.to(2));
    broker.ask(2, 21, "pay", false, granted.to(2));
    broker.ask(1, 11, "pay", false, granted.to(1));
    CHECK(granted.taken() == Pairs{{1, 10}, {2, 20}});
    broker.ask(2, 20, "pay", false, granted.to(2));  // sent again (a reconnect's race): ignored
    CHECK(stats_of(broker, "pay").in_use == 2);
    CHECK(stats_of(broker, "pay").waiting == 2);
    broker.release(1, 10);
    CHECK(granted.taken() == Pairs{{2, 21}});
    broker.release(2, 99);  // unknown: ignored
    broker.release(2, 20);
    CHECK(granted.taken() == Pairs{{1, 11}});
    CHECK(stats_of(broker, "pay").granted == 4);
  }

  TEST_CASE("permit broker: a connection that goes gives its permits back, and its asks are passed over") {
    ManualClock clock;
    PermitBroker broker([&] { return clock.now(); }, false);
    Granted granted;
    broker.set("one", StepLimit{.concurrent = 1});
    broker.ask(1, 1, "one", false, granted.to(1));
    broker.ask(1, 2, "one", false, granted.to(1));  // waits, then its connection goes
    broker.ask(2, 1, "one", false, granted.to(2));
    CHECK(granted.taken() == Pairs{{1, 1}});
    broker.drop(1);
    // Connection 1's second ask was first in line; it is passed over.
    CHECK(granted.taken() == Pairs{{2, 1}});
    CHECK(stats_of(broker, "one").in_use == 1);
    // A withdrawn ask (release before its grant) is passed over too.
    broker.ask(3, 1, "one", false, granted.to(3));
    broker.ask(4, 1, "one", false, granted.to(4));
    broker.release(3, 1);
    broker.release(2, 1);
    CHECK(granted.taken() == Pairs{{4, 1}});
  }

  TEST_CASE("permit broker: a permit declared held counts at once, over the bound, and what waits waits for it") {
    ManualClock clock;
    PermitBroker broker([&] { return clock.now(); }, false);
    Granted granted;
    broker.set("one", StepLimit{.concurrent = 1});
    broker.ask(1, 1, "one", false, granted.to(1));
    // After a server restart, two workers each held one (both running):
    broker.ask(2, 5, "one", true, granted.to(2));
    CHECK(granted.taken() == Pairs{{1, 1}});  // a held permit is not granted again
    CHECK(stats_of(broker, "one").in_use == 2);
    broker.ask(3, 1, "one", false, granted.to(3));
    broker.release(1, 1);
    CHECK(granted.taken().empty());  // one is still held
    broker.release(2, 5);
    CHECK(granted.taken() == Pairs{{3, 1}});
  }

  TEST_CASE("permit broker: permits come at the rate by the broker's clock, whoever asks") {
    ManualClock clock;
    PermitBroker broker([&] { return clock.now(); }, false);
    Granted granted;
    broker.set("api", StepLimit{.per_second = 10});  // one per 100 ms
    for (std::uint64_t ask = 1; ask <= 4; ++ask) broker.ask(ask % 2 + 1, ask, "api", false, granted.to(ask % 2 + 1));
    // Two at once (the pace allows one ahead), then one per 100 ms.
    CHECK(granted.taken().size() == 2);
    clock.advance(std::chrono::milliseconds(60));
    broker.poll_due();
    CHECK(granted.taken().empty());
    clock.advance(std::chrono::milliseconds(40));
    broker.poll_due();
    CHECK(granted.taken() == Pairs{{2, 3}});
    clock.advance(std::chrono::milliseconds(100));
    broker.poll_due();
    CHECK(granted.taken() == Pairs{{1, 4}});
  }

  TEST_CASE("permit broker: its own timer grants a paced permit on the real clock") {
    PermitBroker broker([] { return std::chrono::system_clock::now(); });
    std::mutex mu;
    std::condition_variable cv;
    int count = 0;
    auto on_grant = [&](std::uint64_t) {
      std::lock_guard lock(mu);
      ++count;
      cv.notify_all();
    };
    broker.set("api", StepLimit{.per_second = 50});
    for (std::uint64_t ask = 1; ask <= 4; ++ask) broker.ask(1, ask, "api", false, on_grant);
    std::unique_lock lock(mu);
    CHECK(cv.wait_for(lock, std::chrono::seconds(10), [&] { return count == 4; }));
  }
}

TEST_SUITE("unit") {
  TEST_CASE("permit broker: paused (a restarted server), it takes declared permits and grants new ones only after") {
    ManualClock clock;
    PermitBroker broker([&] { return clock.now(); }, false, true);
    Granted granted;
    broker.set("one", StepLimit{.concurrent = 1});
    // A worker reconnects and asks again before the holder has declared its
    // permit: it must not be granted over the holder's.
    broker.ask(1, 1, "one", false, granted.to(1));
    broker.ask(2, 1, "one", true, granted.to(2));
    broker.ask(1, 2, "one", false, granted.to(1));
    broker.release(1, 2);  // withdrawn during the pause
    CHECK(granted.taken().empty());
    broker.resume();
    CHECK(granted.taken().empty());  // the declared one is in use
    broker.release(2, 1);
    CHECK(granted.taken() == Pairs{{1, 1}});
  }
}
