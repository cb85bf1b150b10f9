// The coordinator against a real etcd (Debian's etcd-server, started by the
// test on loopback): each call's compare-and-swap, the lease that keeps a
// rival from campaigning until it expires, a second writer racing for the
// same view, an etcd that stops answering, and a register that is not ours.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <boost/beast.hpp>
#include <thread>

#include "replication/etcd_coordinator.hpp"
#include "replica/local_cluster.hpp"
#include "replica/etcd_members.hpp"
#include "replica/local_etcd.hpp"
#include "tests/support/temp_dir.hpp"

namespace fusee::replication {
namespace {

using namespace std::chrono_literals;

EtcdOptions options_for(std::uint16_t port, const std::string& cluster = "c1") {
  EtcdOptions options;
  options.port = port;
  options.cluster = cluster;
  options.timeout = 1000ms;
  options.lease_ttl_seconds = 2;
  return options;
}

CoordinatorAnswer run(EtcdCoordinator& coordinator, ReplicaId caller, CoordinatorOp op, View view = 0, Seq start = 0) {
  static std::uint64_t next_id = 1;
  return coordinator.run(caller, {next_id++, op, view, start});
}

// LocalEtcd is up when constructed (it waited for a read to answer).
bool ready(EtcdCoordinator& coordinator) { return run(coordinator, 0, CoordinatorOp::read).reached; }

// Whether etcd holds cluster c1's primary key (attached to the primary's
// lease, so gone once the lease expires): a range request on the gateway.
bool primary_key_alive(replica::LocalEtcd& etcd) {
  namespace beast = boost::beast;
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  stream.connect({boost::asio::ip::make_address("127.0.0.1"), etcd.client_port()});
  beast::http::request<beast::http::string_body> request{beast::http::verb::post, "/v3/kv/range", 11};
  request.set(beast::http::field::host, "127.0.0.1");
  // base64 of "/fusee/c1/primary"
  request.body() = R"({"key":"L2Z1c2VlL2MxL3ByaW1hcnk="})";
  request.prepare_payload();
  beast::http::write(stream, request);
  beast::flat_buffer buffer;
  beast::http::response<beast::http::string_body> response;
  beast::http::read(stream, buffer, response);
  return response.body().find("\"kvs\"") != std::string::npos;
}

TEST_SUITE("unit") {
  TEST_CASE("etcd coordinator: campaign, publish the start, keepalive, and a lease that expires") {
    testing::TempDir dir;
    replica::LocalEtcd etcd(dir.path());
    if (!etcd.ready()) {
      MESSAGE("etcd is not installed (scripts/install-deps installs etcd-server): skipped");
      return;
    }
    EtcdCoordinator r0(options_for(etcd.client_port()));
    EtcdCoordinator r1(options_for(etcd.client_port()));
    REQUIRE(ready(r0));

    // A cluster never seen: view 0, no primary.
    CoordinatorAnswer read = run(r0, 0, CoordinatorOp::read);
    CHECK(read.succeeded);
    CHECK(read.reg.view == 0);
    CHECK(read.reg.primary == kNoReplica);

    // r0 wins view 1; r1 cannot take view 1 again, nor view 2 while r0's
    // lease lives.
    CoordinatorAnswer won = run(r0, 0, CoordinatorOp::campaign, 1);
    REQUIRE(won.reached);
    CHECK(won.succeeded);
    CHECK(won.reg.view == 1);
    CHECK(won.reg.primary == 0);
    CHECK_FALSE(won.reg.normal);
    CoordinatorAnswer again = run(r1, 1, CoordinatorOp::campaign, 1);
    CHECK(again.reached);
    CHECK_FALSE(again.succeeded);
    CHECK(again.reg.view == 1);
    CoordinatorAnswer rival = run(r1, 1, CoordinatorOp::campaign, 2);
    CHECK(rival.reached);
    CHECK_FALSE(rival.succeeded);

    // Only view 1's primary publishes its start; a retry of the same start
    // succeeds (its first answer may have been lost), another start does not.
    CHECK_FALSE(run(r1, 1, CoordinatorOp::publish_start, 1, 5).succeeded);
    CoordinatorAnswer started = run(r0, 0, CoordinatorOp::publish_start, 1, 5);
    CHECK(started.succeeded);
    CHECK(started.reg.normal);
    CHECK(started.reg.starts == ViewStarts{{1, 5}});
    CHECK(run(r0, 0, CoordinatorOp::publish_start, 1, 5).succeeded);
    CHECK_FALSE(run(r0, 0, CoordinatorOp::publish_start, 1, 6).succeeded);

    CHECK(run(r0, 0, CoordinatorOp::keepalive, 1).succeeded);
    CHECK_FALSE(run(r1, 1, CoordinatorOp::keepalive, 1).succeeded);

    // r0 stops renewing: once etcd expires its lease, r1 wins view 2, and
    // r0's keepalive says it is deposed.
    REQUIRE(replica::wait_for(10s, [&] { return run(r1, 1, CoordinatorOp::campaign, 2).succeeded; }));
    CoordinatorAnswer deposed = run(r0, 0, CoordinatorOp::keepalive, 1);
    CHECK(deposed.reached);
    CHECK_FALSE(deposed.succeeded);
    CHECK(deposed.reg.view == 2);
    CHECK(deposed.reg.primary == 1);
    CHECK(deposed.reg.starts == ViewStarts{{1, 5}});  // the history stays
  }

  TEST_CASE("etcd coordinator: a primary whose lease expired takes it back, unless a rival campaigned first") {
    testing::TempDir dir;
    replica::LocalEtcd etcd(dir.path());
    if (!etcd.ready()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    EtcdCoordinator r0(options_for(etcd.client_port()));
    EtcdCoordinator r1(options_for(etcd.client_port()));
    REQUIRE(ready(r0));
    REQUIRE(run(r0, 0, CoordinatorOp::campaign, 1).succeeded);
    REQUIRE(run(r0, 0, CoordinatorOp::publish_start, 1, 1).succeeded);
    const auto first_lease = r0.lease();
    // r0 renews nothing past its TTL (as through an outage): its lease and
    // the primary key go. Nobody campaigned, so its keepalive takes a new one.
    const auto expired = [&] {
      return replica::wait_for(10s, [&] { return run(r1, 1, CoordinatorOp::read).reg.view == 1 && !primary_key_alive(etcd); });
    };
    REQUIRE(expired());
    CoordinatorAnswer retaken = run(r0, 0, CoordinatorOp::keepalive, 1);
    CHECK(retaken.succeeded);
    CHECK(r0.lease() != first_lease);
    // It holds it: a rival cannot take view 2.
    CHECK_FALSE(run(r1, 1, CoordinatorOp::campaign, 2).succeeded);
    // Again past the TTL, but this time the rival campaigns first: the
    // keepalive fails and names the rival's view.
    REQUIRE(expired());
    REQUIRE(run(r1, 1, CoordinatorOp::campaign, 2).succeeded);
    CoordinatorAnswer deposed = run(r0, 0, CoordinatorOp::keepalive, 1);
    CHECK(deposed.reached);
    CHECK_FALSE(deposed.succeeded);
    CHECK(deposed.reg.view == 2);
    CHECK(deposed.reg.primary == 1);
  }

  TEST_CASE("etcd coordinator: two replicas racing for the same view, one wins each time") {
    testing::TempDir dir;
    replica::LocalEtcd etcd(dir.path());
    if (!etcd.ready()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    EtcdCoordinator a(options_for(etcd.client_port(), "race"));
    EtcdCoordinator b(options_for(etcd.client_port(), "race"));
    REQUIRE(ready(a));
    for (View view = 1; view <= 20; ++view) {
      std::atomic<int> go{0};
      CoordinatorAnswer answer_a;
      CoordinatorAnswer answer_b;
      std::thread ta([&] {
        ++go;
        while (go < 2) {
        }
        answer_a = run(a, 0, CoordinatorOp::campaign, view);
      });
      std::thread tb([&] {
        ++go;
        while (go < 2) {
        }
        answer_b = run(b, 1, CoordinatorOp::campaign, view);
      });
      ta.join();
      tb.join();
      REQUIRE(answer_a.reached);
      REQUIRE(answer_b.reached);
      CHECK(answer_a.succeeded != answer_b.succeeded);
      const CoordinatorAnswer read = run(a, 0, CoordinatorOp::read);
      CHECK(read.reg.view == view);
      CHECK(read.reg.primary == (answer_a.succeeded ? 0u : 1u));
      // The winner steps down at once, so the next round need not wait for
      // its lease.
      (answer_a.succeeded ? a : b).resign();
    }
  }

  TEST_CASE("etcd coordinator: an etcd that does not answer, and a register that is not Fusee's") {
    testing::TempDir dir;
    replica::LocalEtcd etcd(dir.path());
    if (!etcd.ready()) {
      MESSAGE("etcd is not installed: skipped");
      return;
    }
    EtcdCoordinator r0(options_for(etcd.client_port(), "odd"));
    REQUIRE(ready(r0));
    REQUIRE(run(r0, 0, CoordinatorOp::campaign, 1).succeeded);

    // Stopped: the call times out, not reached, and says so.
    etcd.pause();
    const auto before = std::chrono::steady_clock::now();
    CoordinatorAnswer stalled = run(r0, 0, CoordinatorOp::keepalive, 1);
    CHECK_FALSE(stalled.reached);
    CHECK(std::chrono::steady_clock::now() - before < 5s);
    CHECK(r0.last_error().find("keepalive") != std::string::npos);
    etcd.resume();
    CHECK(replica::wait_for(5s, [&] { return run(r0, 0, CoordinatorOp::read).reached; }));

    // Nobody listening at all.
    EtcdCoordinator nowhere(options_for(replica::free_loopback_port(), "odd"));
    CHECK_FALSE(run(nowhere, 0, CoordinatorOp::read).reached);
    CHECK_FALSE(nowhere.last_error().empty());

    // Something else wrote the register: no call takes it for a view.
    EtcdCoordinator other(options_for(etcd.client_port(), "odd"));
    CHECK(parse_register_json("{\"view\":\"x\"}").has_error());
    CHECK(parse_register_json("not json").has_error());
    const Register reg{3, 1, true, {{1, 1}, {3, 9}}};
    const auto round_trip = parse_register_json(register_json(reg));
    REQUIRE(round_trip.has_value());
    CHECK(round_trip->view == 3);
    CHECK(round_trip->primary == 1);
    CHECK(round_trip->starts == reg.starts);
  }

  TEST_CASE("etcd coordinator: a member that cannot be reached is passed over for the next") {
    testing::TempDir dir;
    replica::LocalEtcd etcd(dir.path());
    if (!etcd.ready()) {
      MESSAGE("etcd is not installed (scripts/install-deps installs etcd-server): skipped");
      return;
    }
    // The first member named is down (nobody listens there); the second
    // is etcd. Every call is answered, a campaign too.
    auto options = options_for(replica::free_loopback_port(), "members");
    options.more.emplace_back("127.0.0.1", etcd.client_port());
    EtcdCoordinator coordinator(options);
    CHECK(run(coordinator, 0, CoordinatorOp::read).succeeded);
    CHECK(run(coordinator, 0, CoordinatorOp::campaign, 1).succeeded);
    CHECK(run(coordinator, 0, CoordinatorOp::keepalive, 1).succeeded);
    // Only dead members: not reached, and it says so.
    auto dead = options_for(replica::free_loopback_port(), "members");
    dead.more.emplace_back("127.0.0.1", replica::free_loopback_port());
    EtcdCoordinator nowhere(dead);
    CHECK_FALSE(run(nowhere, 0, CoordinatorOp::read).reached);
  }

  TEST_CASE("etcd members: one, a list, and lists that name none or a malformed one") {
    EtcdOptions options;
    replica::set_etcd_members("127.0.0.1:2379", "etcd", options);
    CHECK(options.host == "127.0.0.1");
    CHECK(options.port == 2379);
    CHECK(options.more.empty());
    replica::set_etcd_members("10.0.0.1:1,10.0.0.2:2,10.0.0.3:3", "etcd", options);
    CHECK(options.host == "10.0.0.1");
    CHECK(options.port == 1);
    REQUIRE(options.more.size() == 2);
    CHECK(options.more[1] == std::make_pair(std::string("10.0.0.3"), std::uint16_t{3}));
    for (const char* bad : {"", ",", "127.0.0.1:1,", "127.0.0.1:1,,127.0.0.1:2", "127.0.0.1", "127.0.0.1:1,nothing"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(replica::set_etcd_members(bad, "etcd", options), Error);
    }
  }
}

}  // namespace
}  // namespace fusee::replication
