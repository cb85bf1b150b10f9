// The server's log service over real sockets, spoken to frame by frame:
// leases and their epochs, fencing of a deposed holder, pipelined appends
// and durable positions, reads, the token on TCP, and bad input closing only
// the connection that sent it.
#include <algorithm>
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <chrono>
#include <thread>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "engine/id_filter.hpp"
#include "engine/run_hash.hpp"
#include "engine/run_store.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "protocol/store_call.hpp"
#include "server/log_service.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

using namespace fusee;
using namespace fusee::protocol;
using namespace fusee::server;

namespace {

class Client {
 public:
  explicit Client(const std::string& endpoint) {
    if (endpoint.starts_with("unix:")) {
      sockaddr_un where{};
      where.sun_family = AF_UNIX;
      auto path = endpoint.substr(5);
      std::memcpy(where.sun_path, path.data(), path.size());
      fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
      REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&where), sizeof where) == 0);
    } else {
      auto colon = endpoint.rfind(':');
      sockaddr_in where{};
      where.sin_family = AF_INET;
      where.sin_port = htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1))));
      ::inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &where.sin_addr);
      fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&where), sizeof where) == 0);
    }
  }
  ~Client() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(MessageType type, const std::vector<std::byte>& payload, std::uint64_t request = 0) {
    std::vector<std::byte> frame;
    encode_frame(static_cast<std::uint8_t>(type), request, payload, frame);
    send_raw(frame);
  }
  void send_raw(std::span<const std::byte> bytes) { (void)!::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  // The next frame within 5 s; nothing when the server closed the connection.
  std::optional<Frame> next() {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::vector<std::byte> buffer(65536);
    for (;;) {
      if (auto frame = decoder_.next()) return frame;
      pollfd wait{fd_, POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0 || ::poll(&wait, 1, static_cast<int>(left.count())) <= 0) {
        FAIL("no frame within 5 s");
        return std::nullopt;
      }
      auto got = ::recv(fd_, buffer.data(), buffer.size(), 0);
      if (got <= 0) return std::nullopt;
      decoder_.feed(std::span(buffer.data(), static_cast<std::size_t>(got)));
    }
  }
  // The next frame of `type`, skipping durable positions.
  Frame expect(MessageType type) {
    for (;;) {
      auto frame = next();
      REQUIRE(frame.has_value());
      if (static_cast<MessageType>(frame->type) == MessageType::durable && type != MessageType::durable) continue;
      if (static_cast<MessageType>(frame->type) == MessageType::acquired && type != MessageType::acquired) continue;
      REQUIRE_MESSAGE(static_cast<MessageType>(frame->type) == type,
                      "got " << message_type_name(static_cast<MessageType>(frame->type)));
      return *frame;
    }
  }
  // Nothing arrives for `wait` (what a test that something does not happen
  // can check: not within its reaction time).
  bool quiet_for(std::chrono::milliseconds wait) {
    if (decoder_.next()) return false;
    pollfd ready{fd_, POLLIN, 0};
    return ::poll(&ready, 1, static_cast<int>(wait.count())) == 0;
  }
  ErrorMessage expect_error() {
    auto frame = expect(MessageType::error);
    auto error = decode_error(frame.payload);
    REQUIRE(error.has_value());
    CHECK_FALSE(next().has_value());  // and the connection is closed
    return *error;
  }
  // Greets the server and asks for at most `most` shards, `named` first.
  void hello_and_ask(std::uint32_t most, std::vector<std::uint32_t> named = {}) {
    send(MessageType::hello, encode(Hello{"", "test"}));
    expect(MessageType::welcome);
    send(MessageType::acquire, encode(Acquire{most, std::move(named)}));
  }
  std::vector<Lease> hello_and_acquire(std::uint32_t shards) {
    send(MessageType::hello, encode(Hello{"", "test"}));
    CHECK(decode_welcome(expect(MessageType::welcome).payload)->shard_count == shards);
    send(MessageType::acquire, encode(Acquire{0}));
    std::vector<Lease> leases;
    for (std::uint32_t i = 0; i < shards; ++i) leases.push_back(*decode_lease(expect(MessageType::lease).payload));
    return leases;
  }

 private:
  int fd_ = -1;
  FrameDecoder decoder_;
};

// A quiet 2-shard service in `dir`, on a Unix socket there.
LogServiceOptions options_in(testing::TempDir& dir) {
  LogServiceOptions options;
  options.dir = dir.sub("data");
  options.listen = "unix:" + dir.sub("sock");
  options.shards = 2;
  options.direct_io = false;
  options.log = [](const std::string&) {};
  // The raw clients here never answer a checkpoint request: a stop would
  // wait 5 s for each shard they hold.
  options.stop_checkpoint_wait = std::chrono::milliseconds(0);
  return options;
}

struct Service {
  testing::TempDir dir;
  io::PosixFileSystem fs;
  std::unique_ptr<LogService> service;
  explicit Service(std::string listen = {}, std::string token = {}) {
    auto options = options_in(dir);
    if (!listen.empty()) options.listen = listen;
    options.token = std::move(token);
    service = LogService::open(fs, options);
  }
};

std::vector<std::byte> bytes_of(const std::string& text) {
  auto view = std::as_bytes(std::span(text));
  return {view.begin(), view.end()};
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("log service: pipelined appends become durable, and a read gives them back") {
    Service served;
    Client client(served.service->endpoint());
    auto leases = client.hello_and_acquire(2);
    CHECK(leases[0].durable_lsn == 0);
    for (std::uint64_t lsn = 1; lsn <= 100; ++lsn) {
      client.send(MessageType::append, encode(Append{0, leases[0].epoch, lsn, bytes_of("r" + std::to_string(lsn))}));
    }
    std::uint64_t durable = 0;
    while (durable < 100) {
      auto position = decode_durable(client.expect(MessageType::durable).payload);
      CHECK(position->shard == 0);
      CHECK(position->lsn > durable);  // positions only grow
      durable = position->lsn;
    }
    client.send(MessageType::read, encode(Read{0, leases[0].epoch, 91}), 7);
    std::vector<std::uint64_t> lsns;
    for (;;) {
      auto frame = client.next();
      REQUIRE(frame.has_value());
      auto type = static_cast<MessageType>(frame->type);
      if (type == MessageType::durable) continue;
      CHECK(frame->request_id == 7);
      if (type == MessageType::read_end) break;
      REQUIRE(type == MessageType::records);
      auto chunk = decode_records(frame->payload);
      REQUIRE(chunk.has_value());
      for (const auto& [lsn, bytes] : chunk->records) {
        CHECK(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()) == "r" + std::to_string(lsn));
        lsns.push_back(lsn);
      }
    }
    CHECK(lsns == std::vector<std::uint64_t>{91, 92, 93, 94, 95, 96, 97, 98, 99, 100});
  }

  TEST_CASE("log service: after a restart, a shard with records waits for the worker that names it") {
    testing::TempDir dir;
    io::PosixFileSystem fs;
    auto options = options_in(dir);
    {
      // Shard 0 gets a record; shard 1 none.
      auto service = LogService::open(fs, options);
      Client client(service->endpoint());
      auto leases = client.hello_and_acquire(2);
      client.send(MessageType::append, encode(Append{0, leases[0].epoch, 1, bytes_of("r1")}));
      CHECK(decode_durable(client.expect(MessageType::durable).payload)->lsn == 1);
      service->stop();
    }
    // Restarted with a grace no test outlasts: a new worker that asks for
    // any shard gets shard 1 only; the worker that held shard 0 names it and
    // gets it.
    options.reclaim_grace = std::chrono::hours(1);
    {
      auto service = LogService::open(fs, options);
      Client newcomer(service->endpoint());
      newcomer.hello_and_ask(2);
      CHECK(decode_lease(newcomer.expect(MessageType::lease).payload)->shard == 1);
      CHECK(decode_acquired(newcomer.expect(MessageType::acquired).payload)->granted == 1);
      Client returning(service->endpoint());
      returning.hello_and_ask(1, {0});
      auto lease = decode_lease(returning.expect(MessageType::lease).payload);
      CHECK(lease->shard == 0);
      CHECK(lease->durable_lsn == 1);
      service->stop();
    }
    // With the grace over, nobody named shard 0: the newcomer gets it.
    options.reclaim_grace = std::chrono::milliseconds(1);
    {
      auto service = LogService::open(fs, options);
      Client newcomer(service->endpoint());
      newcomer.hello_and_ask(2);
      std::vector<std::uint32_t> shards;
      for (int i = 0; i < 2; ++i) shards.push_back(decode_lease(newcomer.expect(MessageType::lease).payload)->shard);
      std::sort(shards.begin(), shards.end());
      CHECK(shards == std::vector<std::uint32_t>{0, 1});
      service->stop();
    }
  }

  TEST_CASE("log service: a shard goes to the waiting worker when its holder goes, and the old epoch is fenced") {
    Service served;
    auto endpoint = served.service->endpoint();
    auto first = std::make_unique<Client>(endpoint);
    auto old_leases = first->hello_and_acquire(2);
    first->send(MessageType::append, encode(Append{1, old_leases[1].epoch, 1, bytes_of("before")}));
    CHECK(decode_durable(first->expect(MessageType::durable).payload)->lsn == 1);

    Client standby(endpoint);
    standby.send(MessageType::hello, encode(Hello{"", "standby"}));
    standby.expect(MessageType::welcome);
    standby.send(MessageType::acquire, encode(Acquire{0}));
    first->close();  // the holder dies
    std::vector<Lease> new_leases;
    for (int i = 0; i < 2; ++i) new_leases.push_back(*decode_lease(standby.expect(MessageType::lease).payload));
    for (const auto& lease : new_leases) {
      CHECK(lease.epoch > old_leases[lease.shard].epoch);
      if (lease.shard == 1) CHECK(lease.durable_lsn == 1);
    }
    // The deposed worker comes back with its old epoch: refused, closed.
    Client deposed(endpoint);
    deposed.send(MessageType::hello, encode(Hello{"", "deposed"}));
    deposed.expect(MessageType::welcome);
    deposed.send(MessageType::append, encode(Append{1, old_leases[1].epoch, 2, bytes_of("late")}));
    CHECK(deposed.expect_error().code == "fenced");
    // The new holder appends at the next LSN; a wrong LSN is fenced too.
    std::uint64_t epoch1 = new_leases[0].shard == 1 ? new_leases[0].epoch : new_leases[1].epoch;
    standby.send(MessageType::append, encode(Append{1, epoch1, 2, bytes_of("after")}));
    CHECK(decode_durable(standby.expect(MessageType::durable).payload)->lsn == 2);
    standby.send(MessageType::append, encode(Append{1, epoch1, 7, bytes_of("skips")}));
    CHECK(standby.expect_error().code == "fenced");
  }

  TEST_CASE("log service: workers split the shards, and a call for a shard goes to its holder and back") {
    Service service;
    Client first(service.service->endpoint());
    Client second(service.service->endpoint());
    Client standby(service.service->endpoint());
    first.hello_and_ask(1);
    auto first_lease = *decode_lease(first.expect(MessageType::lease).payload);
    CHECK(decode_acquired(first.expect(MessageType::acquired).payload)->granted == 1);
    second.hello_and_ask(1);
    auto second_lease = *decode_lease(second.expect(MessageType::lease).payload);
    CHECK(decode_acquired(second.expect(MessageType::acquired).payload)->granted == 1);
    CHECK(first_lease.shard != second_lease.shard);
    // The standby names the second's shard: it waits for that one.
    standby.hello_and_ask(1, {second_lease.shard});
    CHECK(decode_acquired(standby.expect(MessageType::acquired).payload)->granted == 0);

    // A call for the second's shard, through the server: parts, then the end.
    first.send(MessageType::forward, encode(Forward{second_lease.shard, bytes_of("ping")}), 41);
    auto passed = second.expect(MessageType::forwarded);
    auto call = decode_forward(passed.payload);
    REQUIRE(call.has_value());
    CHECK(call->shard == second_lease.shard);
    CHECK(call->body == bytes_of("ping"));
    second.send(MessageType::forward_reply, encode(ForwardReply{ReplyPart::more, bytes_of("part")}), passed.request_id);
    second.send(MessageType::forward_reply, encode(ForwardReply{ReplyPart::last, bytes_of("pong")}), passed.request_id);
    auto part = first.expect(MessageType::forward_reply);
    CHECK(part.request_id == 41);
    CHECK(decode_forward_reply(part.payload)->part == ReplyPart::more);
    auto end = first.expect(MessageType::forward_reply);
    CHECK(end.request_id == 41);
    CHECK(decode_forward_reply(end.payload)->part == ReplyPart::last);
    CHECK(decode_forward_reply(end.payload)->body == bytes_of("pong"));
    // A late answer to a finished call goes nowhere.
    second.send(MessageType::forward_reply, encode(ForwardReply{ReplyPart::last, bytes_of("late")}), passed.request_id);

    // The holder goes before it answers: the caller hears the call was lost,
    // and the standby takes the shard it named.
    first.send(MessageType::forward, encode(Forward{second_lease.shard, bytes_of("again")}), 42);
    second.expect(MessageType::forwarded);
    second.close();
    auto lost = first.expect(MessageType::forward_reply);
    CHECK(lost.request_id == 42);
    CHECK(decode_forward_reply(lost.payload)->part == ReplyPart::lost);
    auto taken = *decode_lease(standby.expect(MessageType::lease).payload);
    CHECK(taken.shard == second_lease.shard);
    CHECK(taken.epoch > second_lease.epoch);

    // A shard nobody holds: the call went nowhere.
    standby.close();
    // (Until the server has seen the standby go, a call may still reach it
    // and be lost.)
    std::optional<ForwardReply> nobody;
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (std::uint64_t call_id = 43; std::chrono::steady_clock::now() < give_up; ++call_id) {
      first.send(MessageType::forward, encode(Forward{second_lease.shard, bytes_of("anyone?")}), call_id);
      auto reply = first.expect(MessageType::forward_reply);
      CHECK(reply.request_id == call_id);
      nobody = decode_forward_reply(reply.payload);
      REQUIRE(nobody.has_value());
      if (nobody->part != ReplyPart::lost) break;
    }
    CHECK(nobody->part == ReplyPart::no_holder);
    // A reply part a worker may not send closes its connection.
    first.send(MessageType::forward_reply, encode(ForwardReply{ReplyPart::no_holder, {}}), 7);
    CHECK(first.expect_error().code == "bad_request");
  }

  TEST_CASE("log service: store calls read and write the run store, and writes are fenced by the shards' leases") {
    Service served;
    auto endpoint = served.service->endpoint();
    Client holder(endpoint);
    auto leases = holder.hello_and_acquire(2);
    auto epoch_of = [&](std::uint32_t shard) {
      for (const auto& lease : leases) {
        if (lease.shard == shard) return lease.epoch;
      }
      FAIL("no lease for shard " << shard);
      return std::uint64_t{0};
    };
    holder.send(MessageType::append, encode(Append{0, epoch_of(0), 1, bytes_of("step")}));
    CHECK(decode_durable(holder.expect(MessageType::durable).payload)->lsn == 1);
    std::uint64_t next_request = 100;
    // One call: its rows and its reply.
    auto call = [&](Client& client, const protocol::StoreCall& store_call, std::vector<std::vector<std::byte>>* rows = nullptr) {
      auto request = ++next_request;
      client.send(MessageType::store_call, protocol::encode(store_call), request);
      for (;;) {
        auto frame = client.next();
        REQUIRE(frame.has_value());
        auto type = static_cast<MessageType>(frame->type);
        if (type == MessageType::durable || type == MessageType::checkpoint_soon) continue;
        CHECK(frame->request_id == request);
        if (type == MessageType::store_rows) {
          auto got = protocol::decode_rows(frame->payload);
          REQUIRE(got.has_value());
          if (rows) rows->insert(rows->end(), got->begin(), got->end());
          continue;
        }
        REQUIRE(type == MessageType::store_reply);
        auto reply = protocol::decode_store_reply(frame->payload);
        REQUIRE(reply.has_value());
        return *reply;
      }
    };
    auto write_call = [&](engine::RunStore::Batch batch, std::vector<std::pair<std::uint32_t, std::uint64_t>> epochs) {
      protocol::StoreCall write;
      write.op = protocol::StoreOp::write;
      write.epochs = std::move(epochs);
      write.batch = batch.encode();
      return write;
    };
    auto checkpoint_batch = [&](std::uint32_t shard) {
      engine::RunStore::Batch batch;
      batch.put_journal_record(engine::JournalPlace::live, shard, "run-a", 1, bytes_of("step"));
      batch.put_checkpoint(engine::Checkpoint{shard, 1, 0, {}, 1});
      return batch;
    };

    auto written = call(holder, write_call(checkpoint_batch(0), {{0, epoch_of(0)}}));
    CHECK(written.error == "");
    protocol::StoreCall read;
    read.op = protocol::StoreOp::checkpoint;
    read.shard = 0;
    auto answer = call(holder, read);
    auto present = protocol::decode_optional(answer.value);
    REQUIRE(present.has_value());
    REQUIRE(present->has_value());
    auto checkpoint = protocol::decode_checkpoint(**present);
    REQUIRE(checkpoint.has_value());
    CHECK(checkpoint->lsn == 1);
    CHECK(checkpoint->keep_from_sequence > 0);  // the server's log filled it in
    std::vector<std::vector<std::byte>> rows;
    read.op = protocol::StoreOp::load_journals;
    CHECK(call(holder, read, &rows).error == "");
    REQUIRE(rows.size() == 1);
    CHECK(protocol::decode_journal_row(rows[0])->id == "run-a");

    // A wrong epoch, a shard the call does not name, a connection without
    // the lease: each write is refused as fenced and changes nothing.
    CHECK(call(holder, write_call(checkpoint_batch(1), {{1, epoch_of(1) + 1}})).error == "fenced");
    CHECK(call(holder, write_call(checkpoint_batch(1), {{0, epoch_of(0)}})).error == "fenced");
    Client other(endpoint);
    other.send(MessageType::hello, encode(Hello{"", "other"}));
    other.expect(MessageType::welcome);
    CHECK(call(other, write_call(checkpoint_batch(1), {{1, epoch_of(1)}})).error == "fenced");
    read.shard = 1;
    read.op = protocol::StoreOp::checkpoint;
    CHECK(*protocol::decode_optional(call(other, read).value) == std::nullopt);  // reads need no lease
    // A batch that is not one is a bad request; the connection goes on.
    auto garbage = write_call(engine::RunStore::Batch(), {});
    garbage.batch = std::vector<std::byte>(40, std::byte{0x7f});
    CHECK(call(holder, garbage).error == "bad_request");
    engine::RunStore::Batch no_shard;
    no_shard.put_streams("run-a", "{}");
    CHECK(call(holder, write_call(std::move(no_shard), {})).error == "bad_request");
    CHECK(call(holder, write_call(checkpoint_batch(1), {{1, epoch_of(1)}})).error == "");

    // The id filters: one per shard, holding the ids of the runs stored.
    engine::RunStore::Batch finished = checkpoint_batch(0);
    engine::FinishedRun done;
    done.id = "run-done";
    done.workflow = "w";
    finished.put_finished(done);
    CHECK(call(holder, write_call(std::move(finished), {{0, epoch_of(0)}})).error == "");
    protocol::StoreCall filters;
    filters.op = protocol::StoreOp::id_filters;
    filters.limit = 2;
    rows.clear();
    CHECK(call(holder, filters, &rows).error == "");
    REQUIRE(rows.size() == 2);
    auto filter = engine::IdFilter::decode(rows[engine::shard_of("run-done", 2)]);
    REQUIRE(filter.has_value());
    CHECK(filter->may_contain("run-done"));
    filters.limit = 0;
    CHECK(call(holder, filters).error == "bad_request");
  }

  TEST_CASE("log service: mangled store calls get a refusal, and the store and the other connections are unharmed") {
    Service served;
    auto endpoint = served.service->endpoint();
    Client holder(endpoint);
    auto leases = holder.hello_and_acquire(2);
    // A valid write to mangle: a checkpoint of shard 0 with a journal record.
    engine::RunStore::Batch batch;
    batch.put_journal_record(engine::JournalPlace::live, 0, "run-a", 1, bytes_of("step"));
    batch.put_checkpoint(engine::Checkpoint{0, 0, 0, {}, 1});
    protocol::StoreCall write;
    write.op = protocol::StoreOp::write;
    write.epochs = {{0, leases[0].shard == 0 ? leases[0].epoch : leases[1].epoch}};
    write.batch = batch.encode();
    auto valid = protocol::encode(write);
    std::uint64_t state = 0x9e3779b97f4a7c15ull;
    auto random = [&] {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      return state;
    };
    int replies = 0;
    int closed = 0;
    for (int attempt = 0; attempt < 300; ++attempt) {
      auto mangled = valid;
      // A few bytes flipped, or the payload cut short, or noise.
      switch (attempt % 3) {
        case 0:
          for (int flips = 0; flips < 3; ++flips) mangled[random() % mangled.size()] ^= std::byte(1 + random() % 255);
          break;
        case 1:
          mangled.resize(random() % mangled.size());
          break;
        default:
          mangled.assign(random() % 200, std::byte{0});
          for (auto& byte : mangled) byte = std::byte(random() & 0xff);
      }
      Client client(endpoint);
      client.send(MessageType::hello, encode(Hello{"", "fuzz"}));
      client.expect(MessageType::welcome);
      client.send(MessageType::store_call, mangled, 7);
      auto frame = client.next();
      if (!frame) {
        ++closed;
        continue;
      }
      auto type = static_cast<MessageType>(frame->type);
      if (type == MessageType::store_rows) continue;  // a mangled read that still reads
      if (type == MessageType::error) {
        CHECK(decode_error(frame->payload)->code == "bad_request");
        ++closed;
        continue;
      }
      REQUIRE(type == MessageType::store_reply);
      auto reply = protocol::decode_store_reply(frame->payload);
      REQUIRE(reply.has_value());
      // This connection holds no lease: a write that decodes is fenced.
      if (reply->error == "") CHECK(protocol::decode_store_call(mangled)->op != protocol::StoreOp::write);
      ++replies;
    }
    MESSAGE(replies << " mangled calls answered, " << closed << " refused with the connection closed");
    // The holder's connection and the store are as they were.
    holder.send(MessageType::store_call, valid, 8);
    auto answer = holder.expect(MessageType::store_reply);
    CHECK(protocol::decode_store_reply(answer.payload)->error == "");
    protocol::StoreCall read;
    read.op = protocol::StoreOp::load_journals;
    read.shard = 0;
    holder.send(MessageType::store_call, protocol::encode(read), 9);
    auto rows = holder.expect(MessageType::store_rows);
    CHECK(protocol::decode_rows(rows.payload)->size() == 1);
    CHECK(protocol::decode_store_reply(holder.expect(MessageType::store_reply).payload)->error == "");
  }

  TEST_CASE("log service: bad input closes only its connection") {
    Service served;
    auto endpoint = served.service->endpoint();
    Client good(endpoint);
    auto leases = good.hello_and_acquire(2);

    Client garbage(endpoint);
    std::vector<std::byte> noise(64, std::byte{0x5a});
    garbage.send_raw(noise);
    CHECK(garbage.expect_error().code == "bad_frame");

    Client rude(endpoint);
    rude.send(MessageType::acquire, encode(Acquire{0}));
    CHECK(rude.expect_error().code == "bad_request");

    Client malformed(endpoint);
    malformed.send(MessageType::hello, encode(Hello{"", "m"}));
    malformed.expect(MessageType::welcome);
    malformed.send(MessageType::append, std::vector<std::byte>(3, std::byte{1}));
    CHECK(malformed.expect_error().code == "bad_request");

    Client backwards(endpoint);
    backwards.send(MessageType::hello, encode(Hello{"", "b"}));
    backwards.expect(MessageType::welcome);
    backwards.send(MessageType::durable, encode(Durable{0, 1}));
    CHECK(backwards.expect_error().code == "bad_request");

    // The good connection carries on.
    good.send(MessageType::append, encode(Append{0, leases[0].epoch, 1, bytes_of("fine")}));
    CHECK(decode_durable(good.expect(MessageType::durable).payload)->lsn == 1);
  }

  TEST_CASE("log service: on TCP with a token, a wrong token is refused") {
    Service served("127.0.0.1:0", "s3cret");
    auto endpoint = served.service->endpoint();
    Client wrong(endpoint);
    wrong.send(MessageType::hello, encode(Hello{"guess", "w"}));
    CHECK(wrong.expect_error().code == "unauthorized");
    Client right(endpoint);
    right.send(MessageType::hello, encode(Hello{"s3cret", "r"}));
    CHECK(decode_welcome(right.expect(MessageType::welcome).payload)->shard_count == 2);
  }
}

TEST_SUITE("unit") {
  TEST_CASE("log service: a worker that goes silent loses its leases and permits to the one waiting") {
    testing::TempDir dir;
    io::PosixFileSystem fs;
    LogServiceOptions options;
    options.dir = dir.sub("data");
    options.listen = "unix:" + dir.sub("sock");
    options.shards = 2;
    options.direct_io = false;
    options.lease_ttl = std::chrono::milliseconds(500);
    options.log = [](const std::string&) {};
    auto service = LogService::open(fs, options);
    Client silent(service->endpoint());
    auto old_leases = silent.hello_and_acquire(2);
    // It holds a permit too, which is a lease as well.
    silent.send(MessageType::limit, encode(Limit{"pay", 1, 0}));
    silent.send(MessageType::permit_ask, encode(PermitAsk{"pay", false}), 1);
    CHECK(silent.expect(MessageType::permit_grant).request_id == 1);
    Client standby(service->endpoint());
    standby.send(MessageType::hello, encode(Hello{"", "standby"}));
    CHECK(decode_welcome(standby.expect(MessageType::welcome).payload)->lease_ttl_ms == 500);
    standby.send(MessageType::acquire, encode(Acquire{0}));
    standby.send(MessageType::permit_ask, encode(PermitAsk{"pay", false}), 1);
    // The standby pings (from a thread of its own, as a worker does); the
    // holder does not.
    std::mutex mu;
    std::condition_variable stop;
    bool done = false;
    std::thread pinger([&] {
      std::unique_lock lock(mu);
      do {
        standby.send(MessageType::ping, {});
      } while (!stop.wait_for(lock, std::chrono::milliseconds(50), [&] { return done; }));
    });
    std::vector<Lease> leases;
    bool permitted = false;
    while (leases.size() < 2 || !permitted) {
      auto frame = standby.next();
      if (!frame) break;
      if (static_cast<MessageType>(frame->type) == MessageType::lease) leases.push_back(*decode_lease(frame->payload));
      if (static_cast<MessageType>(frame->type) == MessageType::permit_grant) permitted = true;
    }
    CHECK(permitted);
    {
      std::lock_guard lock(mu);
      done = true;
    }
    stop.notify_all();
    pinger.join();
    REQUIRE(leases.size() == 2);
    CHECK(leases[0].epoch > old_leases[1].epoch);
    CHECK(silent.expect_error().code == "lease_lapsed");
  }
}

TEST_SUITE("unit") {
  TEST_CASE("log service: a step limit's permits hold across connections, and a connection that goes gives its back") {
    Service served;
    auto endpoint = served.service->endpoint();
    Client first(endpoint);
    Client second(endpoint);
    for (auto* client : {&first, &second}) {
      client->send(MessageType::hello, encode(Hello{"", "worker"}));
      client->expect(MessageType::welcome);
    }
    constexpr auto kQuiet = std::chrono::milliseconds(200);
    first.send(MessageType::limit, encode(Limit{"pay", 1, 0}));
    first.send(MessageType::permit_ask, encode(PermitAsk{"pay", false}), 7);
    CHECK(first.expect(MessageType::permit_grant).request_id == 7);
    second.send(MessageType::permit_ask, encode(PermitAsk{"pay", false}), 1);
    second.send(MessageType::permit_ask, encode(PermitAsk{"pay", false}), 2);
    CHECK(second.quiet_for(kQuiet));
    first.send(MessageType::permit_release, {}, 7);
    CHECK(second.expect(MessageType::permit_grant).request_id == 1);
    // A permit the first worker declares held (it reconnected) counts at
    // once: the second's next ask waits for it too.
    first.send(MessageType::permit_ask, encode(PermitAsk{"pay", true}), 8);
    CHECK(first.quiet_for(kQuiet));  // no grant for a permit held
    second.send(MessageType::permit_release, {}, 1);
    CHECK(second.quiet_for(kQuiet));
    // The first worker's connection goes (its process died): its permit
    // goes back.
    first.close();
    CHECK(second.expect(MessageType::permit_grant).request_id == 2);

    // Malformed: a rate that is not a number, a release with a payload.
    Client bad(endpoint);
    bad.send(MessageType::hello, encode(Hello{"", "bad"}));
    bad.expect(MessageType::welcome);
    bad.send(MessageType::limit, encode(Limit{"pay", 1, std::numeric_limits<double>::quiet_NaN()}));
    CHECK(bad.expect_error().code == "bad_request");
    Client rude(endpoint);
    rude.send(MessageType::hello, encode(Hello{"", "rude"}));
    rude.expect(MessageType::welcome);
    rude.send(MessageType::permit_release, bytes_of("x"), 2);
    CHECK(rude.expect_error().code == "bad_request");
    // And the limit is as the first worker set it.
    second.send(MessageType::permit_ask, encode(PermitAsk{"pay", false}), 3);
    CHECK(second.quiet_for(kQuiet));
    second.send(MessageType::permit_release, {}, 2);
    CHECK(second.expect(MessageType::permit_grant).request_id == 3);
  }
}
