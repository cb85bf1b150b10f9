// Remote mode against a log service in this process: a worker that lost the
// server reconnects and carries on; one whose shards another worker held
// meanwhile finds itself deposed and stops, rather than append over the
// other's records; a worker names several servers (a replicated cluster's)
// and leaves one that falls silent.
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <fusee/fusee.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "server/log_service.hpp"
#include "tests/support/log_server.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

using namespace fusee;

namespace {

const WorkflowRef<int, int> kDouble{"double"};
const Signal<int> kGo{"go"};

// Two shards.
struct Server : testing::LogServer {
  Server() : LogServer(2) {}
};

struct Warnings {
  std::mutex mu;
  std::condition_variable added;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mu);
      lines.push_back(line);
      added.notify_all();
    };
  }
  // Whether a warning with `text` came within 5 s.
  bool wait_for(const std::string& text) {
    std::unique_lock lock(mu);
    return added.wait_for(lock, std::chrono::seconds(5), [&] {
      for (const auto& line : lines)
        if (line.find(text) != std::string::npos) return true;
      return false;
    });
  }
  bool any(const std::string& text) {
    std::lock_guard lock(mu);
    for (const auto& line : lines)
      if (line.find(text) != std::string::npos) return true;
    return false;
  }
};

std::unique_ptr<Engine> open_worker(const std::string& address, Warnings& warnings,
                                    std::chrono::milliseconds open_timeout = std::chrono::seconds(30)) {
  auto config = Config::remote(address);
  config.warn = warnings.sink();
  config.server_open_timeout = open_timeout;
  auto engine = Engine::open(config);
  engine->register_workflow(kDouble, [](Ctx& ctx, int input) -> Task<int> {
    int doubled = co_await ctx.step("double", [input] { return input * 2; });
    auto go = co_await ctx.wait_for(kGo);
    co_return doubled + go.value_or(0);
  });
  return engine;
}

std::unique_ptr<Engine> open_worker(const Server& server, Warnings& warnings) {
  return open_worker(server.address(), warnings);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("remote: a worker reconnects to a restarted server and its runs carry on") {
    Server server;
    server.start();
    Warnings warnings;
    auto engine = open_worker(server, warnings);
    engine->start(kDouble, "d-1", 20);
    server.stop();
    server.start();  // the worker reconnects by itself
    engine->signal("d-1", kGo, 2, "go-1");
    CHECK(engine->result(kDouble, "d-1") == 42);
    engine->start(kDouble, "d-2", 1);
    engine->signal("d-2", kGo, 1, "go-2");
    CHECK(engine->result(kDouble, "d-2") == 3);
    engine->shutdown();
    // Everything is in the server's log: a new worker recovers it.
    auto again = open_worker(server, warnings);
    CHECK(again->result(kDouble, "d-1") == 42);
    CHECK(again->result(kDouble, "d-2") == 3);
  }

  TEST_CASE("remote: a worker whose shards another worker held meanwhile is deposed, not merged") {
    Server server;
    server.start();
    Warnings first_warnings, second_warnings;
    auto first = open_worker(server, first_warnings);
    first->start(kDouble, "d-1", 5);
    server.stop();
    // Back where the first worker does not look: the second gets the shards
    // and appends, whatever the first's reconnects do meanwhile.
    server.start("elsewhere");
    auto second = open_worker(server.address("elsewhere"), second_warnings);
    second->start(kDouble, "d-2", 7);
    second->signal("d-2", kGo, 0, "go-2");
    CHECK(second->result(kDouble, "d-2") == 14);
    second->shutdown();
    server.stop();
    // Back where the first looks: it reconnects and finds records it never saw.
    server.start();
    CHECK(first_warnings.wait_for("this engine was deposed; reopen it"));
    CHECK_THROWS_AS(first->start(kDouble, "d-3", 1), Error);
    first.reset();
    // A reopened worker sees both.
    Warnings third_warnings;
    auto third = open_worker(server, third_warnings);
    third->signal("d-1", kGo, 1, "go-1");
    CHECK(third->result(kDouble, "d-1") == 11);
    CHECK(third->result(kDouble, "d-2") == 14);
  }
}

TEST_SUITE("unit") {
  TEST_CASE("remote: Engine::open waits for shards another worker holds up to its deadline, then names them") {
    Server server;
    server.start();
    Warnings first_warnings, second_warnings;
    auto first = open_worker(server, first_warnings);
    try {
      (void)open_worker(server.address(), second_warnings, std::chrono::milliseconds(300));
      FAIL("the second worker opened while the first held every shard");
    } catch (const Error& error) {
      CHECK(error.error() == errc::unavailable);
      CHECK_MESSAGE(std::string(error.what()).find("another worker holds shards 0, 1") != std::string::npos,
                    error.what());
      CHECK_MESSAGE(std::string(error.what()).find("server_open_timeout") != std::string::npos, error.what());
    }
    // The first goes on as before; once it is gone, a worker that waits as
    // a standby (no deadline) gets every shard.
    first->start(kDouble, "d-1", 5);
    auto standby = std::async(std::launch::async, [&] {
      return open_worker(server.address(), second_warnings, std::chrono::milliseconds::zero());
    });
    first->shutdown();
    auto second = standby.get();
    second->signal("d-1", kGo, 1, "go-1");
    CHECK(second->result(kDouble, "d-1") == 11);
  }

  TEST_CASE("remote: a stopping server has its workers checkpoint first, and the next worker starts from there") {
    Server server;
    server.start();
    Warnings warnings;
    auto engine = open_worker(server, warnings);
    for (int run = 0; run < 6; ++run) engine->start(kDouble, "d-" + std::to_string(run), run);
    for (int run = 0; run < 3; ++run) engine->signal("d-" + std::to_string(run), kGo, 100);
    for (int run = 0; run < 3; ++run) CHECK(engine->result(kDouble, "d-" + std::to_string(run)) == 100 + 2 * run);
    auto before = server.service->stats().checkpoints;
    CHECK(engine->stats().checkpoints == 0);  // the interval (5 s) has not come
    server.service->stop();
    // One checkpoint per shard, asked for by the stop and written before it
    // closed the connection.
    CHECK(server.service->stats().checkpoints == before + 2);
    CHECK(engine->stats().checkpoints == 2);
    server.service.reset();
    server.start();
    engine->shutdown();
    // The finished runs are in the server's run store, the waiting ones'
    // records too: a new worker answers and resumes them.
    auto next = open_worker(server, warnings);
    for (int run = 0; run < 3; ++run) CHECK(next->result(kDouble, "d-" + std::to_string(run)) == 100 + 2 * run);
    for (int run = 3; run < 6; ++run) next->signal("d-" + std::to_string(run), kGo, 1);
    for (int run = 3; run < 6; ++run) CHECK(next->result(kDouble, "d-" + std::to_string(run)) == 1 + 2 * run);
    CHECK(next->list_finished_runs(RunFilter{}, 10).runs.size() == 3);  // the store holds the first three
  }

  TEST_CASE("remote: an idle worker keeps its leases (it pings within the server's lease TTL)") {
    testing::TempDir dir;
    io::PosixFileSystem fs;
    server::LogServiceOptions options;
    options.dir = dir.sub("data");
    options.listen = "unix:" + dir.sub("sock");
    options.shards = 2;
    options.direct_io = false;
    options.lease_ttl = std::chrono::milliseconds(500);
    options.log = [](const std::string&) {};
    auto service = server::LogService::open(fs, options);
    Warnings warnings;
    auto config = Config::remote("unix:" + dir.sub("sock"));
    config.warn = warnings.sink();
    auto engine = Engine::open(config);
    engine->register_workflow(kDouble, [](Ctx& ctx, int input) -> Task<int> {
      co_return co_await ctx.step("double", [input] { return input * 2; });
    });
    // Four TTLs with nothing to do: 16 heartbeats, at a quarter of the TTL
    // each. A lease lapses in real time by design (a hung worker is one
    // whose time passes without a word), so this test lets real time pass;
    // the heartbeat is what keeps the leases.
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (service->stats().pings < 16 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    REQUIRE(service->stats().pings >= 16);
    CHECK(engine->execute(kDouble, "idle-1", 4) == 8);
    CHECK(engine->stats().log_error.empty());
    CHECK_FALSE(warnings.any("lapse"));
  }
}

TEST_SUITE("unit") {
  TEST_CASE("remote: a worker naming several servers connects to whichever listens; a list with a hole is refused") {
    Server server;
    server.start();
    Warnings warnings;
    // A port nobody listens on first: refused at once, the next one tried.
    auto engine = open_worker("127.0.0.1:1," + server.address(), warnings);
    engine->start(kDouble, "listed-1", 5);
    engine->signal("listed-1", kGo, 1);
    CHECK(engine->result(kDouble, "listed-1") == 11);
    engine.reset();
    for (const std::string& listed : {server.address() + ",", "," + server.address(),
                                      "127.0.0.1:1,," + server.address()}) {
      CAPTURE(listed);
      try {
        (void)open_worker(listed, warnings);
        FAIL("a server list with an empty address was taken");
      } catch (const Error& error) {
        CHECK(error.error() == errc::invalid_argument);
      }
    }
  }

  TEST_CASE("remote: a server that falls silent with its connection open is left after the lease TTL, and the "
            "worker carries on through the next address") {
    // A cut link (or a stopped server: its kernel keeps the connection
    // open) delivers no FIN; only the server's silence -- no pong to its
    // pings -- tells the worker. Both addresses lead to the same server
    // here, each through a proxy; the test cuts the one the worker took.
    testing::TempDir dir;
    io::PosixFileSystem fs;
    server::LogServiceOptions options;
    options.dir = dir.sub("data");
    options.listen = "127.0.0.1:0";
    options.shards = 2;
    options.direct_io = false;
    options.lease_ttl = std::chrono::milliseconds(500);
    options.log = [](const std::string&) {};
    auto service = server::LogService::open(fs, options);
    const auto port = static_cast<std::uint16_t>(std::stoi(service->endpoint().substr(service->endpoint().rfind(':') + 1)));
    testing::TcpProxy first("127.0.0.1", port);
    testing::TcpProxy second("127.0.0.1", port);
    Warnings warnings;
    auto engine = open_worker(fmt::format("127.0.0.1:{},127.0.0.1:{}", first.port(), second.port()), warnings);
    engine->start(kDouble, "silent-1", 2);
    engine->signal("silent-1", kGo, 1);
    CHECK(engine->result(kDouble, "silent-1") == 5);
    // A worker starts at a server of its own: the link it took is cut.
    REQUIRE(first.connections() + second.connections() == 1);
    testing::TcpProxy& taken = first.connections() == 1 ? first : second;
    testing::TcpProxy& other = first.connections() == 1 ? second : first;
    taken.cut(true, true);
    // These wait until the worker has left the silent link, the server has
    // let the cut connection's leases lapse, and the worker has taken them
    // again through the second address (a bound on a hang, not a timing).
    auto later = std::async(std::launch::async, [&] {
      engine->start(kDouble, "silent-2", 3);
      engine->signal("silent-2", kGo, 1);
      return engine->result(kDouble, "silent-2");
    });
    REQUIRE(later.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    CHECK(later.get() == 7);
    CHECK(warnings.any("nothing from the server for"));
    CHECK(other.connections() == 1);
    CHECK(engine->result(kDouble, "silent-1") == 5);
    CHECK(engine->stats().log_error.empty());
  }
}
