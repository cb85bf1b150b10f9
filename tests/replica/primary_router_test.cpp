// PrimaryRouter (sdk/facade/primary_router.hpp), a backup's calls to the
// primary, against a fake primary the test scripts: each way a call can
// end is the part RemoteCalls must be told -- an answer, parts then an
// answer, "not here" and no primary known (send again: nothing happened),
// a connection lost after sending, a step-down's "unknown", and a primary
// that changes while a call is out (outcome unknown), a primary that cannot
// be reached (nothing sent), and a stop (failed).
#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <future>
#include <thread>

#include "protocol/frame.hpp"
#include "protocol/wire.hpp"
#include "remote/forwarded_call.hpp"
#include "replica/frame_writer.hpp"
#include "replica/local_etcd.hpp"
#include "replica/replica_wire.hpp"
#include "sdk/facade/primary_router.hpp"

namespace fusee::facade {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;
using Part = remote::ShardRouter::Part;

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* data = reinterpret_cast<const std::byte*>(text.data());
  return {data, data + text.size()};
}

// A fake primary: accepts one connection, reads one call, and answers it
// as `script` says (each reply sent in order; none: it closes the
// connection). It checks the call it got.
class FakePrimary {
 public:
  explicit FakePrimary(std::vector<replica::CallReply> script, bool hold = false)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this, script = std::move(script), hold] {
      tcp::socket socket(io_);
      acceptor_.accept(socket);
      protocol::FrameDecoder decoder{protocol::kFrameBytesMax, protocol::kReplicaWireVersion};
      std::array<std::byte, 4096> buffer{};
      std::optional<protocol::Frame> frame;
      while (!frame) {
        boost::system::error_code error;
        const std::size_t n = socket.read_some(asio::buffer(buffer), error);
        if (error) return;
        decoder.feed(std::span(buffer.data(), n));
        frame = decoder.next();
      }
      auto call = replica::decode_call(frame->payload);
      got_.set_value(call && frame->type == static_cast<std::uint8_t>(replica::FrameType::call)
                         ? std::optional<replica::ForwardedCall>(*call)
                         : std::nullopt);
      for (const auto& reply : script) {
        asio::write(socket, asio::buffer(replica::frame_of(replica::FrameType::call_reply, frame->request_id,
                                                           replica::encode_call_reply(reply))));
      }
      if (hold) release_.get_future().wait();  // the connection stays open, unanswered
    });
  }
  ~FakePrimary() {
    if (!released_) release_.set_value();
    thread_.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  std::optional<replica::ForwardedCall> call() { return got_.get_future().get(); }
  void release() {
    released_ = true;
    release_.set_value();
  }

 private:
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::promise<std::optional<replica::ForwardedCall>> got_;
  std::promise<void> release_;
  bool released_ = false;
  std::thread thread_;
};

// What the router told the caller: every part, the last one last.
struct Told {
  std::vector<std::pair<Part, std::string>> parts;
  std::promise<void> done;
  std::future<void> done_future = done.get_future();
  remote::ShardRouter::OnReply on_reply() {
    return [this](Part part, std::vector<std::byte> body) {
      parts.emplace_back(part, protocol::text_of(body));
      if (part != Part::more) done.set_value();
    };
  }
  bool ended() { return done_future.wait_for(10s) == std::future_status::ready; }
};

TEST_SUITE("unit") {
  TEST_CASE("a backup's router: an answer, and parts then an answer, reach the caller; the call is sent as given") {
    FakePrimary primary({{replica::CallPart::more, bytes_of(R"({"chunk": 1})")},
                         {replica::CallPart::last, bytes_of(R"({"outcome": "started"})")}});
    PrimaryRouter router({primary.address()}, 10s);
    router.primary_is(0);
    Told told;
    router.forward(3, bytes_of(R"({"op": "start"})"), told.on_reply());
    REQUIRE(told.ended());
    auto call = primary.call();
    REQUIRE(call.has_value());
    CHECK(call->shard == 3);
    CHECK(protocol::text_of(call->body) == R"({"op": "start"})");
    REQUIRE(told.parts.size() == 2);
    CHECK(told.parts[0] == std::make_pair(Part::more, std::string(R"({"chunk": 1})")));
    CHECK(told.parts[1] == std::make_pair(Part::last, std::string(R"({"outcome": "started"})")));
  }

  TEST_CASE("a backup's router: not here, and no primary known, are sent again; a step-down's answer is unknown") {
    {
      PrimaryRouter router({"127.0.0.1:1"}, 10s);
      Told told;
      router.forward(0, bytes_of("{}"), told.on_reply());  // no primary_is yet
      REQUIRE(told.ended());
      CHECK(told.parts.back().first == Part::no_holder);
    }
    {
      FakePrimary primary({{replica::CallPart::not_here, bytes_of("no engine")}});
      PrimaryRouter router({primary.address()}, 10s);
      router.primary_is(0);
      Told told;
      router.forward(0, bytes_of("{}"), told.on_reply());
      REQUIRE(told.ended());
      CHECK(told.parts.back() == std::make_pair(Part::no_holder, std::string("no engine")));
    }
    {
      FakePrimary primary({{replica::CallPart::last, bytes_of(R"({"unknown": "stepped down"})")}});
      PrimaryRouter router({primary.address()}, 10s);
      router.primary_is(0);
      Told told;
      router.forward(0, bytes_of("{}"), told.on_reply());
      REQUIRE(told.ended());
      CHECK(told.parts.back().first == Part::lost);
      CHECK(told.parts.back().second.find("stepped down") != std::string::npos);
    }
    {
      // An error is an answer, errc::unavailable too: only the primary
      // knows whether it stepped down.
      FakePrimary primary({{replica::CallPart::last, bytes_of(R"({"error": "unavailable", "message": "m"})")}});
      PrimaryRouter router({primary.address()}, 10s);
      router.primary_is(0);
      Told told;
      router.forward(0, bytes_of("{}"), told.on_reply());
      REQUIRE(told.ended());
      CHECK(told.parts.back().first == Part::last);
    }
  }

  TEST_CASE("a backup's router: a connection closed after the call, and a primary that changes, are lost; one "
            "never reached is not") {
    {
      FakePrimary primary({});  // reads the call, closes
      PrimaryRouter router({primary.address()}, 10s);
      router.primary_is(0);
      Told told;
      router.forward(0, bytes_of("{}"), told.on_reply());
      REQUIRE(told.ended());
      CHECK(told.parts.back().first == Part::lost);
    }
    {
      FakePrimary primary({}, true);  // reads the call, never answers
      PrimaryRouter router({primary.address(), "127.0.0.1:1"}, 10s);
      router.primary_is(0);
      Told told;
      router.forward(0, bytes_of("{}"), told.on_reply());
      REQUIRE(primary.call().has_value());
      router.primary_is(replication::kNoReplica);  // a failover under way: the call stays out
      CHECK(told.done_future.wait_for(200ms) == std::future_status::timeout);
      router.primary_is(1);  // another: the deposed one's answer is not awaited
      REQUIRE(told.ended());
      CHECK(told.parts.back().first == Part::lost);
      primary.release();
    }
    {
      // No primary known for longer than the router waits: this replica
      // is cut off, and so may its link be.
      FakePrimary primary({}, true);
      PrimaryRouter router({primary.address()}, 300ms);
      router.primary_is(0);
      Told told;
      router.forward(0, bytes_of("{}"), told.on_reply());
      REQUIRE(primary.call().has_value());
      router.primary_is(replication::kNoReplica);
      REQUIRE(told.ended());
      CHECK(told.parts.back().first == Part::lost);
      CHECK(told.parts.back().second.find("no primary known") != std::string::npos);
      primary.release();
    }
    {
      // Nobody listens there: nothing was sent.
      PrimaryRouter router({"127.0.0.1:" + std::to_string(replica::free_loopback_port())}, 10s);
      router.primary_is(0);
      Told told;
      router.forward(0, bytes_of("{}"), told.on_reply());
      REQUIRE(told.ended());
      CHECK(told.parts.back().first == Part::no_holder);
    }
  }

  TEST_CASE("a backup's router: a stop fails the calls out and every later one") {
    FakePrimary primary({}, true);
    PrimaryRouter router({primary.address()}, 10s);
    router.primary_is(0);
    Told out;
    router.forward(0, bytes_of("{}"), out.on_reply());
    REQUIRE(primary.call().has_value());
    router.stop();
    REQUIRE(out.ended());
    CHECK(out.parts.back().first == Part::failed);
    Told later;
    router.forward(0, bytes_of("{}"), later.on_reply());
    REQUIRE(later.ended());
    CHECK(later.parts.back().first == Part::failed);
    primary.release();
  }
}

}  // namespace
}  // namespace fusee::facade
