// Calls on a backup reach the primary (sdk/facade/primary_router.hpp): three
// replicas' Engines in this process against a real etcd. Every call a user
// makes on a run -- start, signal, update, query, stream, get, list, count,
// journal, result, execute -- answers on a backup as on the primary; a
// result waited on a backup is answered across a failover, by the next
// primary; updates and signals sent again through a backup count once; and
// a replica's port refuses a forwarded call that is not one.
#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <fusee/fusee.hpp>
#include <future>
#include <optional>
#include <thread>

#include "protocol/frame.hpp"
#include "protocol/wire.hpp"
#include "replica/frame_writer.hpp"
#include "replica/local_etcd.hpp"
#include "replica/replica_store.hpp"
#include "replica/replica_wire.hpp"
#include "tests/replica/replicated_runs.hpp"
#include "tests/support/error_checks.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;
using testing::run_name;

const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kGo{"go"};
const Update<int, int> kBump{"bump"};
constexpr int kRuns = 4;

std::atomic<int> a_runs{0};
std::atomic<int> b_runs{0};

// A step, a stream chunk (2n), updates adding to a total (answered with the
// total so far) and a query of it, until "go"; then a step: 2n + go + total.
void register_order(Engine& engine) {
  engine.register_workflow(kOrder, [](Ctx& ctx, int n) -> Task<int> {
    int a = co_await ctx.step("a", [n] {
      ++a_runs;
      return 2 * n;
    });
    co_await ctx.stream("progress").write(a);
    int bumped = 0;
    ctx.on_query("bumped", [&bumped] { return bumped; });
    ctx.on_update(kBump);
    auto next_bump = ctx.next_update(kBump).start();
    auto go = ctx.wait_for(kGo).start();
    while (co_await ctx.any(next_bump, go) == 0) {
      auto request = co_await next_bump;
      bumped += request.arg;
      co_await ctx.reply(request, bumped);
      next_bump = ctx.next_update(kBump).start();
    }
    const int go_value = (co_await go).value_or(-1000);
    co_return co_await ctx.step("b", [a, go_value, bumped] {
      ++b_runs;
      return a + go_value + bumped;
    });
  });
}

// An awakeable: its token as a query, then the value sent with it, plus one.
const WorkflowRef<int, int> kPayment{"payment"};

void register_payment(Engine& engine) {
  engine.register_workflow(kPayment, [](Ctx& ctx, int) -> Task<int> {
    auto paid = ctx.awakeable<int>("paid");
    ctx.on_query("token", [token = paid.token] { return token; });
    co_return (co_await paid.future) + 1;
  });
}

Config replica_config(const std::string& dir, std::uint16_t etcd_port, std::uint32_t id,
                      const std::vector<std::string>& addresses) {
  auto config = Config::replicated(dir, "127.0.0.1:" + std::to_string(etcd_port), "app", id, addresses);
  config.shards = 2;
  config.replica_tick = 5ms;
  config.etcd_lease_ttl = 2s;  // a loaded machine's stall does not change the view under the calls
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.warn = [](const std::string&) {};
  return config;
}

struct Cluster {
  testing::TempDir dir;
  std::unique_ptr<LocalEtcd> etcd = std::make_unique<LocalEtcd>(dir.path());
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<Engine>> engines;

  bool open() {
    if (!etcd->ready()) return false;
    io::PosixFileSystem fs;
    for (int id = 0; id < 3; ++id) addresses.push_back("127.0.0.1:" + std::to_string(free_loopback_port()));
    for (std::uint32_t id = 0; id < 3; ++id) {
      const std::string replica_dir = dir.sub("replica-" + std::to_string(id));
      testing::ok_or_fail(ReplicaStore::initialize(fs, replica_dir, "app", false));
      engines.push_back(Engine::open(replica_config(replica_dir, etcd->client_port(), id, addresses)));
      register_order(*engines.back());
      register_payment(*engines.back());
    }
    return true;
  }
  ~Cluster() {
    for (auto& engine : engines) {
      if (engine) engine->shutdown();
    }
  }
};

using testing::error_of;

// One frame to a replica's port, and the first frame back (nothing when the
// replica closed the connection instead).
std::optional<protocol::Frame> exchange(const std::string& address, FrameType type, std::span<const std::byte> payload) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  const auto colon = address.rfind(':');
  socket.connect({asio::ip::make_address(address.substr(0, colon)),
                  static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1)))});
  asio::write(socket, asio::buffer(frame_of(type, 7, payload)));
  protocol::FrameDecoder decoder{protocol::kFrameBytesMax, protocol::kReplicaWireVersion};
  std::array<std::byte, 4096> buffer{};
  for (;;) {
    boost::system::error_code error;
    const std::size_t n = socket.read_some(asio::buffer(buffer), error);
    if (error) return std::nullopt;
    decoder.feed(std::span(buffer.data(), n));
    if (auto frame = decoder.next()) return frame;
  }
}

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* data = reinterpret_cast<const std::byte*>(text.data());
  return {data, data + text.size()};
}

TEST_SUITE("unit") {
  TEST_CASE("replicated mode: every call on a backup answers as on the primary, and a result waited on a backup "
            "is answered across a failover") {
    Cluster cluster;
    if (!cluster.open()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    auto& engines = cluster.engines;
    a_runs = 0;
    b_runs = 0;
    const auto first = testing::primary_of(engines, 20s);
    REQUIRE(first.has_value());
    Engine& backup = *engines[(*first + 1) % 3];
    Engine& other = *engines[(*first + 2) % 3];
    CHECK(backup.stats().shards_held == 0);  // it runs nothing itself

    // Started, driven and read through the backups only.
    for (int n = 0; n < kRuns; ++n) CHECK(backup.start(kOrder, run_name(n), n) == StartOutcome::started);
    CHECK(other.start(kOrder, run_name(0), 0) == StartOutcome::attached);
    for (int n = 0; n < kRuns; ++n) testing::take_to_wait(backup, n, 10s);
    CHECK(a_runs == kRuns);
    CHECK(backup.update(run_name(1), kBump, 5, "bump-1") == 5);
    CHECK(other.update(run_name(1), kBump, 5, "bump-1") == 5);  // the same update, sent again: counted once
    CHECK(other.update(run_name(1), kBump, 3, "bump-2") == 8);
    CHECK(backup.query_json(run_name(1), "bumped", nullptr) == boost::json::value(8));
    auto reader = other.read_stream(run_name(1), "progress");
    auto chunk = reader.next();
    REQUIRE(chunk.has_value());
    CHECK(chunk->offset == 0);
    CHECK(chunk->value == boost::json::value(2));
    auto info = backup.get_run(run_name(1));
    REQUIRE(info.has_value());
    CHECK(info->status == RunStatus::running);
    CHECK(!info->waiting_on.empty());
    CHECK(!backup.get_run("no-such-run").has_value());
    CHECK(other.list_runs().size() == kRuns);
    // Counted and paged by the primary's index (a backup keeps none).
    CHECK(other.count_runs()[static_cast<std::size_t>(RunStatus::running)] == kRuns);
    RunListQuery query;
    query.order = RunListQuery::Order::id;
    query.limit = 3;
    auto page = backup.query_runs(query);
    REQUIRE(page.runs.size() == 3);
    CHECK(page.runs[0].id == run_name(0));
    CHECK(page.total == kRuns);
    query.cursor = page.next_cursor;
    page = other.query_runs(query);
    REQUIRE(page.runs.size() == 1);
    CHECK(page.runs[0].id == run_name(3));
    CHECK(page.next_cursor.empty());
    // Every replica, as each answers: one primary, every lag known.
    const auto replicas = backup.cluster();
    REQUIRE(replicas.size() == 3);
    for (const auto& replica : replicas) {
      CAPTURE(replica.id);
      CHECK(replica.answered);
      CHECK(replica.role == (replica.id == *first ? "primary" : "backup"));
      CHECK(replica.address == cluster.addresses[replica.id]);
      CHECK(replica.lag_batches.has_value());
      CHECK(replica.commit > 0);  // a backup knows it too
    }
    CHECK(backup.journal_json(run_name(1)).find("\"a\"") != std::string::npos);
    // Cancelled and terminated through a backup: the run's wait sees the
    // cancellation (no step b), and a terminated one ends at once.
    CHECK(backup.start(kOrder, "cancelled", 1) == StartOutcome::started);
    testing::take_to_wait_id(backup, "cancelled", 10s);
    backup.cancel("cancelled", "through a backup");
    CHECK(other.get_run("cancelled").has_value());
    CHECK(error_of([&] { (void)other.result(kOrder, "cancelled"); }) == errc::cancelled);
    CHECK(other.start(kOrder, "terminated", 2) == StartOutcome::started);
    testing::take_to_wait_id(other, "terminated", 10s);
    other.terminate("terminated", "through a backup");
    CHECK(backup.get_run("terminated")->status == RunStatus::cancelled);
    backup.signal(run_name(0), kGo, 1);  // no signal id: sent once
    CHECK(other.result(kOrder, run_name(0)) == 1);  // 0 + 1 + 0
    // Reset through a backup, after step a: the new generation keeps a and
    // the signal it took, and runs b again (once).
    backup.reset(run_name(0), ResetPoint::after("a"), "through a backup");
    const auto reset_give_up = std::chrono::steady_clock::now() + 10s;
    while (other.get_run(run_name(0))->generation == 0) {
      REQUIRE(std::chrono::steady_clock::now() < reset_give_up);
      std::this_thread::sleep_for(5ms);
    }
    CHECK(other.result(kOrder, run_name(0)) == 1);
    // An awakeable completed through a backup, its token asked through the other.
    CHECK(backup.start(kPayment, "pay", 0) == StartOutcome::started);
    std::string token;
    const auto token_give_up = std::chrono::steady_clock::now() + 10s;
    while (token.empty()) {
      try {
        token = other.query<std::string>("pay", "token");
      } catch (const Error&) {
        REQUIRE(std::chrono::steady_clock::now() < token_give_up);  // not there yet
        std::this_thread::sleep_for(5ms);
      }
    }
    backup.complete_awakeable(token, 41);
    CHECK(other.result(kPayment, "pay") == 42);
    // What only the primary's engine does, a backup refuses, naming it.
    try {
      backup.checkpoint();
      FAIL("a backup checkpointed");
    } catch (const Error& error) {
      CHECK(error.error() == errc::unavailable);
      CHECK(std::string(error.what()).find("the primary is replica " + std::to_string(*first)) != std::string::npos);
    }

    // A result waited on a backup, then the primary's application stops.
    auto waited = std::async(std::launch::async, [&] { return other.result(kOrder, run_name(1)); });
    std::this_thread::sleep_for(100ms);  // on its way (the answer comes whenever it was sent)
    engines[*first]->shutdown();
    const auto second = testing::primary_of(engines, 20s, *first);
    REQUIRE(second.has_value());
    // The signals go through whichever replica is not the primary now.
    Engine& still_backup = *engines[*second == (*first + 1) % 3 ? (*first + 2) % 3 : (*first + 1) % 3];
    for (int n = 1; n < kRuns; ++n) still_backup.signal(run_name(n), kGo, 100, "go-" + std::to_string(n));
    for (int n = 1; n < kRuns; ++n) {
      still_backup.signal(run_name(n), kGo, 100, "go-" + std::to_string(n));  // again: dropped
    }
    // The stopped replica answers nothing; the others show the new view
    // (once the answer kept for a flood of callers is asked again).
    auto after = still_backup.cluster();
    const auto view_give_up = std::chrono::steady_clock::now() + 10s;
    while (after.size() == 3 && after[*first].answered) {
      REQUIRE(std::chrono::steady_clock::now() < view_give_up);
      std::this_thread::yield();
      after = still_backup.cluster();
    }
    REQUIRE(after.size() == 3);
    CHECK(!after[*first].answered);
    CHECK(after[*second].role == "primary");
    CHECK(after[*second].view > replicas[*first].view);
    // The next primary timed its opening (its log's to its engine's).
    CHECK(engines[*second]->stats().replica.last_open_us > 0);
    REQUIRE(waited.wait_for(30s) == std::future_status::ready);
    CHECK(waited.get() == 2 + 100 + 8);
    for (int n = 2; n < kRuns; ++n) CHECK(still_backup.result(kOrder, run_name(n)) == 2 * n + 100);
    // And a run from start to end in one call on a backup.
    std::thread go([&] {
      for (;;) {
        try {
          still_backup.signal("executed", kGo, 10, "go-executed");
          return;
        } catch (const Error& error) {
          if (error.error() != errc::not_found) throw;
        }
        std::this_thread::sleep_for(10ms);
      }
    });
    CHECK(still_backup.execute(kOrder, "executed", 4) == 8 + 10);
    go.join();
    CHECK(a_runs == kRuns + 3);  // durable on the first primary: not run again (the cancelled and terminated ran a)
    CHECK(b_runs == kRuns + 2);  // and run_name(0)'s b again after its reset
  }

  TEST_CASE("replicated mode: a replica's port refuses a forwarded call that is not one, and says not_here with "
            "no engine") {
    Cluster cluster;
    if (!cluster.open()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    const auto primary = testing::primary_of(cluster.engines, 20s);
    REQUIRE(primary.has_value());
    const std::string at = cluster.addresses[*primary];
    // Bytes that are no call: the connection is closed.
    CHECK(!exchange(at, FrameType::call, bytes_of("xx")).has_value());
    // A call whose body is no JSON object: answered with invalid_argument.
    auto answer = exchange(at, FrameType::call, encode_call({0, bytes_of("[1, 2")}));
    REQUIRE(answer.has_value());
    CHECK(answer->type == static_cast<std::uint8_t>(FrameType::call_reply));
    CHECK(answer->request_id == 7);
    auto reply = decode_call_reply(answer->payload);
    REQUIRE(reply.has_value());
    CHECK(reply->part == CallPart::last);
    CHECK(protocol::text_of(reply->body).find("invalid_argument") != std::string::npos);
    // An unknown operation, and a shard out of range: refused, nothing done.
    answer = exchange(at, FrameType::call, encode_call({0, bytes_of(R"({"op": "drop_everything"})")}));
    REQUIRE(answer.has_value());
    reply = decode_call_reply(answer->payload);
    REQUIRE(reply.has_value());
    CHECK(protocol::text_of(reply->body).find("error") != std::string::npos);
    answer = exchange(at, FrameType::call, encode_call({99, bytes_of(R"({"op": "get", "id": "x"})")}));
    REQUIRE(answer.has_value());
    reply = decode_call_reply(answer->payload);
    REQUIRE(reply.has_value());
    CHECK(protocol::text_of(reply->body).find("retry") != std::string::npos);
    // A field of the wrong kind (Boost.JSON's own error, not Fusee's): an
    // answer, and the primary goes on.
    answer = exchange(at, FrameType::call,
                      encode_call({0, bytes_of(R"({"op": "reset", "id": "x", "reason": "", "position": "a"})")}));
    REQUIRE(answer.has_value());
    reply = decode_call_reply(answer->payload);
    REQUIRE(reply.has_value());
    CHECK(protocol::text_of(reply->body).find("invalid_argument") != std::string::npos);
    answer = exchange(at, FrameType::call,
                      encode_call({0, bytes_of(R"({"op": "reset", "id": "x", "reason": "", "position": -1.5})")}));
    REQUIRE(answer.has_value());
    CHECK(!cluster.engines[*primary]->get_run("x").has_value());
    // A backup runs no engine: not_here, and the replica goes on.
    const std::string backup = cluster.addresses[(*primary + 1) % 3];
    answer = exchange(backup, FrameType::call, encode_call({0, bytes_of(R"({"op": "get", "id": "x"})")}));
    REQUIRE(answer.has_value());
    reply = decode_call_reply(answer->payload);
    REQUIRE(reply.has_value());
    CHECK(reply->part == CallPart::not_here);
    CHECK(!cluster.engines[(*primary + 1) % 3]->get_run("x").has_value());
  }

  TEST_CASE("replicated mode: a flood of calls on a backup is answered, every one") {
    Cluster cluster;
    if (!cluster.open()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    const auto primary = testing::primary_of(cluster.engines, 20s);
    REQUIRE(primary.has_value());
    Engine& backup = *cluster.engines[(*primary + 1) % 3];
    // All in flight at once on one connection to the primary.
    constexpr int kCalls = 1000;
    std::vector<std::future<StartOutcome>> starts;
    for (int n = 0; n < kCalls; ++n) starts.push_back(backup.start_json_async("order", "flood-" + std::to_string(n), n, {}));
    for (auto& started : starts) CHECK(started.get() == StartOutcome::started);
    std::vector<std::future<StartOutcome>> again;
    for (int n = 0; n < kCalls; ++n) again.push_back(backup.start_json_async("order", "flood-" + std::to_string(n), n, {}));
    for (auto& attached : again) CHECK(attached.get() == StartOutcome::attached);
    CHECK(backup.list_runs().size() == kCalls);
    // A flood of cluster views from many threads at once: each answered
    // whole (one asks the replicas; the rest take its answer).
    std::vector<std::future<std::vector<ClusterReplica>>> views;
    for (int n = 0; n < 64; ++n) views.push_back(std::async(std::launch::async, [&backup] { return backup.cluster(); }));
    for (auto& view : views) {
      auto replicas = view.get();
      REQUIRE(replicas.size() == 3);
      CHECK(replicas[*primary].role == "primary");
    }
  }
}

}  // namespace
}  // namespace fusee::replica
