// Remote mode with the shards split among workers (Config::server_shards_max)
// against a log service in this process: each worker runs its own shards
// and passes calls for the others' runs on through the server, child runs
// cross workers, a standby takes over the shards of a worker that goes,
// resuming their runs, and a step limit holds across the workers.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "engine/run_hash.hpp"
#include "server/log_service.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/engine/gate.hpp"
#include "tests/support/log_server.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

using namespace fusee;

namespace {

constexpr std::uint32_t kShards = 4;
const WorkflowRef<int, int> kWait{"wait"};        // doubles, then waits for "go" and adds it
const WorkflowRef<int, int> kFan{"fan"};          // starts `input` wait children and sums them
const WorkflowRef<int, int> kCount{"count"};      // writes 0..input-1 to stream "out"
// Starts `input` wait children together (ParentClose::cancel) and sums them.
const WorkflowRef<int, int> kFanTogether{"fan-together"};
const Signal<int> kGo{"go"};
// Takes "add" updates (positive only) until one is 0, answering the running
// total; then waits for an awakeable and returns total + its value.
const WorkflowRef<int, int> kDeal{"deal"};
const Update<int, int> kAddUpdate{"add"};

// kShards shards, started at once.
struct Server : testing::LogServer {
  Server() : LogServer(kShards) { start(); }
};

std::unique_ptr<Engine> open_worker(const Server& server, std::uint32_t shards_max) {
  auto config = Config::remote(server.address());
  config.server_shards_max = shards_max;
  config.warn = [](const std::string&) {};
  auto engine = Engine::open(config);
  engine->register_workflow(kWait, [](Ctx& ctx, int input) -> Task<int> {
    // Registered before the first command: answered once the start is acknowledged.
    ctx.on_query("input", [input] { return input; });
    int doubled = co_await ctx.step("double", [input] { return input * 2; });
    auto go = co_await ctx.wait_for(kGo);
    co_return doubled + go.value_or(0);
  });
  engine->register_workflow(kFan, [](Ctx& ctx, int children) -> Task<int> {
    int sum = 0;
    for (int child = 0; child < children; ++child) {
      sum += co_await ctx.child(kWait, ctx.run_id() + "-" + std::to_string(child), child);
    }
    co_return sum;
  });
  engine->register_workflow(kFanTogether, [](Ctx& ctx, int children) -> Task<int> {
    std::vector<Future<int>> started;
    for (int child = 0; child < children; ++child) {
      started.push_back(ctx.child(kWait, ctx.run_id() + "-" + std::to_string(child), child)
                            .on_parent_close(ParentClose::cancel)
                            .start());
    }
    int sum = 0;
    for (int value : co_await ctx.all(started)) sum += value;
    co_return sum;
  });
  engine->register_workflow(kDeal, [](Ctx& ctx, int total) -> Task<int> {
    ctx.on_update(kAddUpdate, [](const int& value) { return value >= 0 ? "" : "negative"; });
    auto paid = ctx.awakeable<int>("paid");
    ctx.on_query("token", [token = paid.token] { return token; });
    for (;;) {
      auto request = co_await ctx.next_update(kAddUpdate);
      total += request.arg;
      co_await ctx.reply(request, total);
      if (request.arg == 0) break;
    }
    co_return total + co_await paid.future;
  });
  engine->register_workflow(kCount, [](Ctx& ctx, int chunks) -> Task<int> {
    for (int chunk = 0; chunk < chunks; ++chunk) co_await ctx.stream("out").write(chunk);
    co_await ctx.stream("out").close();
    co_return chunks;
  });
  return engine;
}

std::uint32_t shard_of(const std::string& id) { return engine::shard_of(id, kShards); }

// Waits (at most 10 s) for the engine to hold `shards` shards.
bool holds_within(Engine& engine, std::uint32_t shards) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (engine.stats().shards_held != shards) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

// Signals run `id` once it exists (a parent starts its children one after
// another); at most 10 s.
void signal_when_started(Engine& engine, const std::string& id, int value) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!engine.get_run(id) && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  REQUIRE(engine.get_run(id).has_value());
  engine.signal(id, kGo, value, "go");
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("remote split: two workers share the shards, and each answers for the other's runs") {
    Server server;
    auto first = open_worker(server, 2);
    auto second = open_worker(server, 2);
    CHECK(first->stats().shards_held == 2);
    CHECK(second->stats().shards_held == 2);

    // Runs on every shard, all started through the first worker.
    std::vector<std::string> ids;
    for (int run = 0; run < 24; ++run) ids.push_back("w-" + std::to_string(run));
    std::vector<bool> seen(kShards);
    for (const auto& id : ids) seen[shard_of(id)] = true;
    REQUIRE(std::count(seen.begin(), seen.end(), true) == kShards);
    for (std::size_t run = 0; run < ids.size(); ++run) {
      CHECK(first->start(kWait, ids[run], static_cast<int>(run)) == StartOutcome::started);
      CHECK(second->start(kWait, ids[run], static_cast<int>(run)) == StartOutcome::attached);
    }
    StartOptions reject;
    reject.if_running = IfRunning::reject;
    for (const auto& id : ids) CHECK_THROWS_AS(second->start(kWait, id, 0, reject), Error);
    // Both see every run, wherever it runs.
    CHECK(first->list_runs().size() == ids.size());
    CHECK(second->list_runs(RunFilter{std::string("wait"), RunStatus::running, {}, {}}).size() == ids.size());
    for (const auto& id : ids) {
      auto info = second->get_run(id);
      REQUIRE(info.has_value());
      CHECK(info->status == RunStatus::running);
    }
    CHECK_FALSE(first->get_run("no-such-run").has_value());
    CHECK_FALSE(second->get_run("no-such-run").has_value());

    // Queries through either worker, wherever the run is.
    for (std::size_t run = 0; run < 4; ++run) {
      CHECK(first->query<int>(ids[run], "input") == static_cast<int>(run));
      CHECK(second->query<int>(ids[run], "input") == static_cast<int>(run));
    }
    try {
      (void)second->query<int>(ids[0], "nothing");
      FAIL("an unknown query");
    } catch (const Error& error) {
      CHECK(error.error() == errc::not_found);
    }

    // Updates (update-with-start, repeats by id, a refusal) and awakeable
    // completions through either worker, wherever the run is.
    for (int run = 0; run < 8; ++run) {
      auto id = "deal-" + std::to_string(run);
      CHECK(first->update_with_start(kDeal, id, 100, kAddUpdate, 1, "one-" + id) == 101);
      CHECK(second->update(id, kAddUpdate, 2, "two-" + id) == 103);
      CHECK(first->update(id, kAddUpdate, 5, "two-" + id) == 103);  // the same id: the same answer
      try {
        (void)second->update(id, kAddUpdate, -1);
        FAIL("a rejected update");
      } catch (const Error& error) {
        CHECK(error.error() == errc::rejected);
      }
      auto token = second->query<std::string>(id, "token");
      (run % 2 == 0 ? first : second)->complete_awakeable(token, run);
      (run % 2 == 0 ? second : first)->complete_awakeable(token, run);  // a repeat: acknowledged
      CHECK(second->update(id, kAddUpdate, 0) == 103);
      CHECK(first->result(kDeal, id) == 103 + run);
    }

    // Signals and a cancel through the other worker; results through either.
    for (std::size_t run = 0; run + 1 < ids.size(); ++run) second->signal(ids[run], kGo, 1000, "go-" + ids[run]);
    first->cancel(ids.back(), "enough");
    for (std::size_t run = 0; run + 1 < ids.size(); ++run) {
      CHECK(first->result(kWait, ids[run]) == 1000 + 2 * static_cast<int>(run));
      CHECK(second->result(kWait, ids[run]) == 1000 + 2 * static_cast<int>(run));
    }
    try {
      (void)second->result(kWait, ids.back());
      FAIL("a cancelled run has no result");
    } catch (const Error& error) {
      CHECK(error.error() == errc::cancelled);
    }
    // Errors cross workers as they are.
    for (const auto& id : {std::string("nobody-0"), std::string("nobody-1"), std::string("nobody-2")}) {
      try {
        first->signal(id, kGo, 1);
        second->signal(id, kGo, 1);
        FAIL("a signal to no run");
      } catch (const Error& error) {
        CHECK(error.error() == errc::not_found);
      }
    }

    // A parent's children on both workers' shards.
    for (int parent = 0; parent < 4; ++parent) {
      auto id = "fan-" + std::to_string(parent);
      first->start(kFan, id, 6);
      for (int child = 0; child < 6; ++child) signal_when_started(*second, id + "-" + std::to_string(child), 0);
    }
    for (int parent = 0; parent < 4; ++parent) {
      CHECK(second->result(kFan, "fan-" + std::to_string(parent)) == 2 * (0 + 1 + 2 + 3 + 4 + 5));
    }
    // A child started on the other worker's shard still names its parent.
    for (int child = 0; child < 6; ++child) {
      auto journal = boost::json::parse(first->journal_json("fan-0-" + std::to_string(child))).as_object();
      CHECK(journal.at("records").as_array().front().at("parent") == "fan-0");
    }

    // Streams read through the worker that does not hold them.
    for (int run = 0; run < 8; ++run) {
      auto id = "count-" + std::to_string(run);
      auto& reader_engine = run % 2 == 0 ? *first : *second;
      CHECK(reader_engine.execute(kCount, id, 5) == 5);
      auto reader = reader_engine.read_stream(id, "out", StreamFrom::at(1));
      std::vector<int> chunks;
      while (auto chunk = reader.next()) chunks.push_back(static_cast<int>(chunk->value.as_int64()));
      CHECK(chunks == std::vector<int>{1, 2, 3, 4});
    }
  }

  TEST_CASE("remote split: children started together run at once on both workers, and a cancelled parent closes them") {
    Server server;
    auto first = open_worker(server, 2);
    auto second = open_worker(server, 2);
    constexpr int kChildren = 8;
    std::vector<bool> seen(kShards);
    for (int child = 0; child < kChildren; ++child) seen[shard_of("ft-" + std::to_string(child))] = true;
    REQUIRE(std::count(seen.begin(), seen.end(), true) >= 3);  // on both workers' shards

    first->start(kFanTogether, "ft", kChildren);
    // Every child runs before any has its signal: they were started together.
    for (int child = 0; child < kChildren; ++child) {
      auto id = "ft-" + std::to_string(child);
      auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!second->get_run(id) && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      REQUIRE(second->get_run(id).has_value());
    }
    for (int child = 0; child < kChildren; ++child) second->signal("ft-" + std::to_string(child), kGo, 1, "go");
    CHECK(first->result(kFanTogether, "ft") == 2 * (kChildren * (kChildren - 1) / 2) + kChildren);

    // A cancel through the other worker reaches the parent, and its
    // ParentClose reaches every child, wherever it runs.
    second->start(kFanTogether, "fc", kChildren);
    for (int child = 0; child < kChildren; ++child) {
      auto id = "fc-" + std::to_string(child);
      auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!first->get_run(id) && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      REQUIRE(first->get_run(id).has_value());
    }
    first->cancel("fc", "enough");
    std::vector<std::string> ended{"fc"};
    for (int child = 0; child < kChildren; ++child) ended.push_back("fc-" + std::to_string(child));
    for (const auto& id : ended) {
      try {
        (void)second->result(kWait, id);
        FAIL("a cancelled run has no result");
      } catch (const Error& error) {
        CHECK(error.error() == errc::cancelled);
      }
    }
    for (int child = 0; child < kChildren; ++child) {
      auto info = second->get_run("fc-" + std::to_string(child));
      REQUIRE(info.has_value());
      CHECK(info->status == RunStatus::cancelled);
      CHECK(info->error.find("its parent run 'fc' was cancelled") != std::string::npos);
    }
  }

  TEST_CASE("remote split: a standby takes over the shards of a worker that goes, and their runs resume") {
    Server server;
    auto first = open_worker(server, 2);
    auto second = open_worker(server, 2);
    auto standby = open_worker(server, 2);
    CHECK(standby->stats().shards_held == 0);  // nothing free: it stands by
    std::vector<std::string> ids;
    for (int run = 0; run < 16; ++run) ids.push_back("s-" + std::to_string(run));
    // Started through the standby: every one goes to a holder.
    for (std::size_t run = 0; run < ids.size(); ++run) standby->start(kWait, ids[run], static_cast<int>(run));
    // A parent waits for children on every shard.
    std::string parent = "parent";
    standby->start(kFan, parent, 4);
    for (const auto& id : ids) CHECK(first->get_run(id)->status == RunStatus::running);

    // The first worker goes: the standby takes its two shards.
    first->shutdown();
    REQUIRE(holds_within(*standby, 2));
    for (std::size_t run = 0; run < ids.size(); ++run) second->signal(ids[run], kGo, 7, "go");
    for (int child = 0; child < 4; ++child) signal_when_started(*standby, parent + "-" + std::to_string(child), 1);
    for (std::size_t run = 0; run < ids.size(); ++run) {
      CHECK(standby->result(kWait, ids[run]) == 7 + 2 * static_cast<int>(run));
      CHECK(second->result(kWait, ids[run]) == 7 + 2 * static_cast<int>(run));
    }
    CHECK(standby->result(kFan, parent) == 4 + 2 * (0 + 1 + 2 + 3));

    // Then the second goes too, and a new standby takes its shards.
    auto late = open_worker(server, 2);
    CHECK(late->stats().shards_held == 0);
    second->shutdown();
    REQUIRE(holds_within(*late, 2));
    for (std::size_t run = 0; run < ids.size(); ++run) {
      CHECK(late->result(kWait, ids[run]) == 7 + 2 * static_cast<int>(run));
    }
    CHECK(late->list_runs().size() == ids.size() + 1 + 4);
  }

  TEST_CASE("remote split: after the server restarts, each worker takes back the shards it held") {
    Server server;
    auto first = open_worker(server, 2);
    auto second = open_worker(server, 2);
    auto standby = open_worker(server, 2);
    std::vector<std::string> ids;
    for (int run = 0; run < 12; ++run) ids.push_back("r-" + std::to_string(run));
    for (std::size_t run = 0; run < ids.size(); ++run) first->start(kWait, ids[run], static_cast<int>(run));
    for (int round = 0; round < 3; ++round) {
      server.restart();
      // Calls wait out the reconnects; the standby asks for nothing until
      // the holders are back.
      for (const auto& id : ids) CHECK(second->get_run(id)->status == RunStatus::running);
      CHECK(first->stats().shards_held == 2);
      CHECK(second->stats().shards_held == 2);
      CHECK(standby->stats().shards_held == 0);
    }
    for (std::size_t run = 0; run < ids.size(); ++run) standby->signal(ids[run], kGo, 3, "go");
    for (std::size_t run = 0; run < ids.size(); ++run) {
      CHECK(first->result(kWait, ids[run]) == 3 + 2 * static_cast<int>(run));
    }
    CHECK(first->stats().log_error.empty());
    CHECK(second->stats().log_error.empty());
    // The standby stood by again once the holders were back: it takes the
    // first worker's shards when that one goes.
    first->shutdown();
    REQUIRE(holds_within(*standby, 2));
    for (std::size_t run = 0; run < ids.size(); ++run) {
      CHECK(standby->result(kWait, ids[run]) == 3 + 2 * static_cast<int>(run));
    }
    CHECK(standby->stats().log_error.empty());
  }

  TEST_CASE("remote split: a call waiting for a shard nobody holds ends with the engine's shutdown") {
    Server server;
    // The server grants free shards lowest first: the first worker runs
    // shards 0 and 1, the second 2 and 3.
    auto first = open_worker(server, 2);
    auto second = open_worker(server, 2);
    std::string id;
    for (int candidate = 0; id.empty(); ++candidate) {
      auto name = "orphan-" + std::to_string(candidate);
      if (shard_of(name) >= 2) id = name;
    }
    first->start(kWait, id, 1);
    second->shutdown();  // its shards are free, and nobody stands by for them
    auto waiting = std::async(std::launch::async, [&first, id] {
      try {
        (void)first->result(kWait, id);
        return std::string("a result");
      } catch (const Error& error) {
        return std::string(errc_name(error.error()));
      }
    });
    // It asks again and again meanwhile (for as long as a result takes).
    CHECK(waiting.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
    first->shutdown();
    REQUIRE(waiting.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK(waiting.get() == "shut_down");
  }
}

TEST_SUITE("unit") {
  TEST_CASE("remote split: a step limit holds across workers, and permits held when the server restarts still count") {
    // What the workflow's code uses outlives the engines.
    const WorkflowRef<int, int> pay{"pay"};
    constexpr int kRuns = 4;
    std::array<testing::Gate, kRuns> gates;
    std::atomic<int> in_flight{0};
    std::atomic<int> most{0};
    testing::CallCounter began;
    Server server;
    auto first = open_worker(server, 2);
    auto second = open_worker(server, 2);
    for (auto* engine : {first.get(), second.get()}) {
      engine->limit("pay", StepLimit{.concurrent = 1});
      engine->register_workflow(pay, [&](Ctx& ctx, int k) -> Task<int> {
        auto charge = [&, k](StepContext& step) -> Task<int> {
          CHECK(step.attempt() == 1);
          int now = ++in_flight;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          began.add();
          co_await gates[static_cast<std::size_t>(k)].wait();
          --in_flight;
          co_return k;
        };
        co_return co_await ctx.step("charge", charge).limit("pay");
      });
    }
    // Runs on both workers' shards (free shards are granted lowest first:
    // the first worker holds 0 and 1).
    std::vector<std::string> ids;
    std::array<int, 2> per_worker{};
    for (int n = 0; ids.size() < kRuns; ++n) {
      auto id = "pay-" + std::to_string(n);
      auto& count = per_worker[shard_of(id) < 2 ? 0 : 1];
      if (count == kRuns / 2) continue;
      ++count;
      ids.push_back(id);
    }
    for (int k = 0; k < kRuns; ++k) first->start(pay, ids[static_cast<std::size_t>(k)], k);
    began.require(1);
    auto waiting = [&] {
      std::uint64_t total = 0;
      for (auto* engine : {first.get(), second.get()}) {
        for (const auto& limit : engine->stats().limits) total += limit.name == "pay" ? limit.waiting : 0;
      }
      return total;
    };
    CHECK(testing::eventually([&] { return waiting() == kRuns - 1; }));
    CHECK_FALSE(began.wait_for(2, testing::kReactionTime));
    // The server restarts: the worker holding the permit declares it, the
    // others ask again; still one at a time.
    server.restart();
    for (const auto& id : ids) CHECK(second->get_run(id)->status == RunStatus::running);
    CHECK_FALSE(began.wait_for(2, testing::kReactionTime));
    for (auto& gate : gates) gate.open();
    for (int k = 0; k < kRuns; ++k) CHECK(first->result(pay, ids[static_cast<std::size_t>(k)]) == k);
    CHECK(most.load() == 1);
    CHECK(began.count() == kRuns);
    CHECK(waiting() == 0);
  }
}
