#include "server/log_service.hpp"

#include <fmt/format.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/data_dir.hpp"
#include "engine/run_store.hpp"
#include "fusee/error.hpp"
#include "http/http_server.hpp"
#include "http/prometheus.hpp"
#include "http/request_guard.hpp"
#include "http/log_figures.hpp"
#include "protocol/address.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "protocol/store_call.hpp"
#include "protocol/wire.hpp"
#include "server/http_front.hpp"
#include "server/permit_broker.hpp"
#include "server/store_service.hpp"
#include "wal/errc.hpp"
#include "wal/log.hpp"

namespace fusee::server {

using http::HttpRouter;
using http::HttpServer;
using http::append_seconds_histogram;
using http::append_metric;
using http::records_per_flush;
using protocol::Acquired;
using protocol::CheckpointSoon;
using protocol::Durable;
using protocol::ErrorMessage;
using protocol::Forward;
using protocol::ForwardReply;
using protocol::Frame;
using protocol::FrameDecoder;
using protocol::Lease;
using protocol::MessageType;
using protocol::ReadEnd;
using protocol::RecordsChunk;
using protocol::ReplyPart;
using protocol::StoreCall;
using protocol::StoreOp;
using protocol::StoreReply;
using protocol::Welcome;
using protocol::bytes_of;
using protocol::decode_acquire;
using protocol::decode_announce;
using protocol::decode_append;
using protocol::decode_forward;
using protocol::decode_forward_reply;
using protocol::decode_hello;
using protocol::decode_read;
using protocol::decode_release;
using protocol::decode_store_call;
using protocol::encode;
using protocol::encode_frame;
using protocol::encode_rows;
using protocol::parse_address;
using protocol::store_op_name;

namespace {

// What one RECORDS frame carries at most, so a read streams in pieces.
constexpr std::size_t kRecordsChunkBytes = 1u << 20;
// What a connection may send in store_part frames ahead of their call.
constexpr std::size_t kStorePartsBytesMax = 1u << 30;


bool write_all(int fd, const std::byte* data, std::size_t size) {
  while (size > 0) {
    auto written = ::send(fd, data, size, MSG_NOSIGNAL);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

}  // namespace

// One worker's connection: a reading thread (this service's requests) and a
// writing thread (replies and durable positions, queued).
struct Connection {
  int fd = -1;
  std::uint64_t id = 0;
  bool tcp = false;
  std::string worker = "?";
  std::string http;  // its HTTP API, once announced (under the service's mu)
  bool greeted = false;
  std::mutex mu;
  std::condition_variable wake;
  std::deque<std::vector<std::byte>> out;
  bool closing = false;
  std::thread reader;
  std::thread writer;
  std::atomic<bool> finished{false};  // the reader is done: the accept loop reaps it

  bool writing = false;  // the writing thread is sending, outside the lock
  // Leading pieces of store calls not yet whole (the reading thread's).
  std::map<std::uint64_t, std::vector<std::byte>> store_parts;
  std::size_t store_parts_bytes = 0;
  // Calls other workers forwarded to this holder, by the relay id it
  // answers with (under the service's mu): who asked, and their call id.
  struct Relay {
    std::weak_ptr<Connection> caller;
    std::uint64_t call_id = 0;
  };
  std::map<std::uint64_t, Relay> relayed;

  // Sends at once when nothing is queued and the socket takes the whole
  // frame without blocking (a durable position costs no thread hand-off);
  // otherwise the writing thread sends it, in order.
  void send(MessageType type, std::uint64_t request_id, const std::vector<std::byte>& payload) {
    std::vector<std::byte> frame;
    encode_frame(static_cast<std::uint8_t>(type), request_id, payload, frame);
    std::lock_guard lock(mu);
    if (closing) return;
    if (out.empty() && !writing) {
      auto sent = ::send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent == static_cast<ssize_t>(frame.size())) return;
      if (sent > 0) frame.erase(frame.begin(), frame.begin() + sent);
    }
    out.push_back(std::move(frame));
    wake.notify_one();
  }
};

struct LogService::Impl {
  io::FileSystem* fs = nullptr;
  LogServiceOptions options;
  std::unique_ptr<io::FileSystem::Lock> lock;
  std::shared_ptr<engine::RunStore> store;  // after the log, so it closes after it
  std::shared_ptr<wal::Log> log;
  bool owns_log = true;  // a replica's view's log is the replica's to close (open_over)
  std::function<ReplicaStats()> replica;  // a replica's view's (open_over)
  std::function<std::optional<std::string>()> cluster;
  std::unique_ptr<StoreService> store_service;
  // Step limits' permits for every worker (declared before the connections,
  // so it outlives them: their threads give permits back).
  std::unique_ptr<PermitBroker> permits;
  std::uint32_t shards = 0;
  // Store writes (and expiries), done in order on one thread so that a
  // checkpoint's synced write holds up no connection's appends; reads are
  // answered on the connection's own thread.
  struct StoreJob {
    std::shared_ptr<Connection> connection;
    std::uint64_t request_id = 0;
    protocol::StoreCall call;
  };
  std::mutex store_mu;
  std::condition_variable store_cv;
  std::deque<StoreJob> store_jobs;
  bool store_stopping = false;
  std::thread store_thread;
  int listen_fd = -1;
  std::string endpoint;
  std::thread acceptor;
  std::unique_ptr<HttpServer> http;  // --http
  std::atomic<bool> stop_begun{false};
  std::atomic<bool> stopping{false};  // connections are closing
  static thread_local bool appended_;  // this reading thread staged records since its last read

  std::mutex mu;  // the lease table and the connections
  struct ShardLease {
    std::uint64_t epoch = 0;
    std::shared_ptr<Connection> holder;
  };
  std::vector<ShardLease> leases;
  // Per shard, appends not yet durable and when they arrived (under mu).
  std::vector<std::deque<std::pair<wal::Lsn, std::chrono::steady_clock::time_point>>> arrivals;
  std::array<std::atomic<std::uint64_t>, wal::kFlushLatencyBoundsUs.size() + 1> append_latency_counts{};
  std::atomic<std::uint64_t> append_latency_sum_us{0};
  std::atomic<std::uint64_t> pings{0};  // heartbeats received, every connection's
  std::uint64_t next_epoch = 0;
  struct Waiting {
    std::shared_ptr<Connection> connection;
    std::uint32_t wanted = 0;              // shards still to grant
    std::vector<std::uint32_t> specific;  // named ones still to grant, before any other
  };
  std::uint64_t next_relay = 0;  // under mu
  std::list<Waiting> waiting;
  // Shards held back for their previous holders until reclaim_until
  // (ServiceOptions::reclaim_grace), under mu; a grant clears its shard.
  std::vector<bool> reclaimable;
  std::chrono::steady_clock::time_point reclaim_until;
  std::thread reclaim_timer;
  std::mutex reclaim_mu;
  std::condition_variable reclaim_cv;
  bool reclaim_stopping = false;
  std::list<std::shared_ptr<Connection>> connections;
  std::uint64_t next_connection = 1;

  void say(const std::string& line) {
    if (options.log) options.log(line);
  }

  void accept_loop() {
    for (;;) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (stopping) {
        if (fd >= 0) ::close(fd);
        return;
      }
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        return;
      }
      auto connection = std::make_shared<Connection>();
      connection->fd = fd;
      connection->tcp = !options.listen.starts_with("unix:");
      if (connection->tcp) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      }
      {
        std::lock_guard lock(mu);
        connection->id = next_connection++;
        // Reap the connections whose threads are done.
        for (auto it = connections.begin(); it != connections.end();) {
          if (!(*it)->finished) {
            ++it;
            continue;
          }
          (*it)->reader.join();
          ::close((*it)->fd);
          it = connections.erase(it);
        }
        connections.push_back(connection);
      }
      connection->writer = std::thread([connection] { write_loop(*connection); });
      connection->reader = std::thread([this, connection] { read_loop(connection); });
    }
  }

  static void write_loop(Connection& connection) {
    std::unique_lock lock(connection.mu);
    for (;;) {
      connection.wake.wait(lock, [&] { return connection.closing || !connection.out.empty(); });
      if (connection.out.empty()) return;  // closing, all sent
      auto frame = std::move(connection.out.front());
      connection.out.pop_front();
      connection.writing = true;
      lock.unlock();
      bool sent = write_all(connection.fd, frame.data(), frame.size());
      lock.lock();
      connection.writing = false;
      if (!sent) {
        connection.out.clear();
        return;
      }
    }
  }

  // Refuses and closes: the reason goes to the worker and to the log.
  void refuse(Connection& connection, std::uint64_t request_id, const std::string& code, const std::string& why) {
    say(fmt::format("connection {} ({}): {}: {}", connection.id, connection.worker, code, why));
    connection.send(MessageType::error, request_id, encode(ErrorMessage{code, why}));
  }

  void read_loop(const std::shared_ptr<Connection>& connection) {
    FrameDecoder decoder;
    std::vector<std::byte> buffer(1 << 16);
    bool open = true;
    while (open && !stopping) {
      pollfd ready{connection->fd, POLLIN, 0};
      auto waited = ::poll(&ready, 1, static_cast<int>(options.lease_ttl.count()));
      if (waited < 0 && errno == EINTR) continue;
      if (waited == 0) {
        refuse(*connection, 0, "lease_lapsed",
               fmt::format("nothing from the worker for {} ms: its leases lapse", options.lease_ttl.count()));
        break;
      }
      auto got = ::recv(connection->fd, buffer.data(), buffer.size(), 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      decoder.feed(std::span(buffer.data(), static_cast<std::size_t>(got)));
      appended_ = false;
      while (auto frame = decoder.next()) {
        if (!handle(connection, *frame)) {
          open = false;
          break;
        }
      }
      // Everything this read brought is staged. When the worker has sent
      // nothing more yet (a sequential step waits for this very flush), this
      // thread writes the batch itself, every connection's staged records
      // with it, rather than waking a log thread, as a local engine's shard
      // does; while more is coming it goes on reading and the log's own
      // writer flushes, so a busy connection keeps its pipeline full.
      if (open && appended_) {
        char peek = 0;
        if (::recv(connection->fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && errno == EAGAIN) log->write_inline();
      }
      if (!decoder.error().empty()) {
        refuse(*connection, 0, "bad_frame", decoder.error());
        break;
      }
    }
    drop(connection);
    connection->finished = true;
  }

  bool handle(const std::shared_ptr<Connection>& connection, const Frame& frame) {
    auto type = static_cast<MessageType>(frame.type);
    if (!connection->greeted && type != MessageType::hello) {
      refuse(*connection, frame.request_id, "bad_request", "the first message must be hello");
      return false;
    }
    switch (type) {
      case MessageType::hello: {
        auto hello = decode_hello(frame.payload);
        if (!hello) return malformed(*connection, frame);
        if (connection->tcp && !options.token.empty() && hello->token != options.token) {
          refuse(*connection, frame.request_id, "unauthorized", "a wrong or missing token");
          return false;
        }
        connection->worker = hello->worker.empty() ? "?" : hello->worker;
        connection->greeted = true;
        connection->send(MessageType::welcome, frame.request_id,
                         encode(Welcome{shards, static_cast<std::uint32_t>(options.lease_ttl.count()),
                                        options.http_listen.empty() ? std::string() : options.token}));
        return true;
      }
      case MessageType::acquire: {
        auto acquire = decode_acquire(frame.payload);
        if (!acquire) return malformed(*connection, frame);
        std::vector<Grant> grants;
        {
          std::lock_guard lock(mu);
          std::uint32_t wanted = acquire->shards_max == 0 ? shards : std::min(acquire->shards_max, shards);
          std::vector<std::uint32_t> specific;
          for (auto shard : acquire->shards) {
            if (shard >= shards || std::find(specific.begin(), specific.end(), shard) != specific.end()) {
              continue;
            }
            specific.push_back(shard);
          }
          wanted = std::max<std::uint32_t>(wanted, static_cast<std::uint32_t>(specific.size()));
          waiting.push_back(Waiting{connection, wanted, std::move(specific)});
          grants = grant_locked();
        }
        deliver(grants);
        std::uint32_t granted = 0;
        for (const auto& grant : grants) granted += grant.connection == connection ? 1 : 0;
        // The worker knows what it has now, and stands by for the rest.
        connection->send(MessageType::acquired, frame.request_id, encode(Acquired{granted}));
        return true;
      }
      case MessageType::forward: {
        auto forward = decode_forward(frame.payload);
        if (!forward) return malformed(*connection, frame);
        std::shared_ptr<Connection> holder;
        std::uint64_t relay = 0;
        {
          std::lock_guard lock(mu);
          if (forward->shard < shards) holder = leases[forward->shard].holder;
          if (holder) {
            relay = ++next_relay;
            holder->relayed[relay] = Connection::Relay{connection, frame.request_id};
          }
        }
        if (!holder) {
          auto why = forward->shard < shards ? fmt::format("no worker holds shard {} now", forward->shard)
                                             : fmt::format("there is no shard {}", forward->shard);
          connection->send(MessageType::forward_reply, frame.request_id,
                           encode(ForwardReply{ReplyPart::no_holder, bytes_of(why)}));
          return true;
        }
        holder->send(MessageType::forwarded, relay, encode(Forward{forward->shard, std::move(forward->body)}));
        return true;
      }
      case MessageType::forward_reply: {
        auto reply = decode_forward_reply(frame.payload);
        if (!reply || (reply->part != ReplyPart::more && reply->part != ReplyPart::last)) {
          return malformed(*connection, frame);
        }
        std::shared_ptr<Connection> caller;
        std::uint64_t call_id = 0;
        {
          std::lock_guard lock(mu);
          auto found = connection->relayed.find(frame.request_id);
          if (found == connection->relayed.end()) return true;  // its caller went, or a late answer
          caller = found->second.caller.lock();
          call_id = found->second.call_id;
          if (reply->part == ReplyPart::last || !caller) connection->relayed.erase(found);
        }
        if (caller) caller->send(MessageType::forward_reply, call_id, encode(*reply));
        return true;
      }
      case MessageType::append: {
        auto append = decode_append(frame.payload);
        if (!append) return malformed(*connection, frame);
        if (!holds(connection, append->shard, append->epoch)) {
          refuse(*connection, frame.request_id, "fenced",
                 fmt::format("shard {} epoch {} is not leased to this connection", append->shard, append->epoch));
          return false;
        }
        auto expected = log->last_lsn(append->shard) + 1;
        if (append->lsn != expected) {
          refuse(*connection, frame.request_id, "fenced",
                 fmt::format("shard {}: an append at LSN {}, but the log's next is {}", append->shard, append->lsn,
                             expected));
          return false;
        }
        for (;;) {
          auto lsn = log->append(append->shard, append->record);
          if (lsn) {
            appended_ = true;
            std::lock_guard lock(mu);
            arrivals[append->shard].emplace_back(*lsn, std::chrono::steady_clock::now());
            break;
          }
          if (lsn.error() == make_error_code(wal::errc::queue_full)) {
            // Back-pressure: this connection waits for the log to drain.
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            continue;
          }
          refuse(*connection, frame.request_id, "storage", fmt::format("the log failed: {}", lsn.error().message()));
          return false;
        }
        return true;
      }
      case MessageType::read: {
        auto read = decode_read(frame.payload);
        if (!read) return malformed(*connection, frame);
        if (!holds(connection, read->shard, read->epoch)) {
          refuse(*connection, frame.request_id, "fenced",
                 fmt::format("shard {} epoch {} is not leased to this connection", read->shard, read->epoch));
          return false;
        }
        RecordsChunk chunk{read->shard, {}};
        std::size_t chunk_bytes = 0;
        auto read_all = log->read(read->shard, read->first_lsn, UINT64_MAX,
                                  [&](wal::Lsn lsn, std::span<const std::byte> bytes) {
                                    chunk.records.emplace_back(lsn, std::vector<std::byte>(bytes.begin(), bytes.end()));
                                    chunk_bytes += bytes.size() + 16;
                                    if (chunk_bytes >= kRecordsChunkBytes) {
                                      connection->send(MessageType::records, frame.request_id, encode(chunk));
                                      chunk.records.clear();
                                      chunk_bytes = 0;
                                    }
                                  });
        if (!read_all) {
          refuse(*connection, frame.request_id, "storage",
                 fmt::format("cannot read shard {}: {}", read->shard, read_all.error().message()));
          return false;
        }
        if (!chunk.records.empty()) connection->send(MessageType::records, frame.request_id, encode(chunk));
        connection->send(MessageType::read_end, frame.request_id, encode(ReadEnd{read->shard}));
        return true;
      }
      case MessageType::store_part: {
        auto& part = connection->store_parts[frame.request_id];
        connection->store_parts_bytes += frame.payload.size();
        if (connection->store_parts_bytes > kStorePartsBytesMax) {
          refuse(*connection, frame.request_id, "bad_request",
                 fmt::format("more than {} bytes of store calls in pieces", kStorePartsBytesMax));
          return false;
        }
        part.insert(part.end(), frame.payload.begin(), frame.payload.end());
        return true;
      }
      case MessageType::store_call: {
        std::optional<protocol::StoreCall> call;
        if (auto parts = connection->store_parts.find(frame.request_id); parts != connection->store_parts.end()) {
          auto whole = std::move(parts->second);
          connection->store_parts_bytes -= whole.size();
          connection->store_parts.erase(parts);
          whole.insert(whole.end(), frame.payload.begin(), frame.payload.end());
          call = protocol::decode_store_call(whole);
        } else {
          call = protocol::decode_store_call(frame.payload);
        }
        if (!call) return malformed(*connection, frame);
        if (call->op != protocol::StoreOp::write && call->op != protocol::StoreOp::expire_finished) {
          // A read is a RocksDB lookup: answered here at once, not queued
          // behind a checkpoint's synced write. (A worker reads only what
          // writes it saw answered put there, so order is kept.)
          serve_store(connection, frame.request_id, *call);
          return true;
        }
        {
          std::lock_guard lock(store_mu);
          store_jobs.push_back(StoreJob{connection, frame.request_id, std::move(*call)});
        }
        store_cv.notify_one();
        return true;
      }
      case MessageType::ping:
        // Receiving it was the point; the answer tells the worker this
        // server is alive, not just its machine (a stopped or deposed
        // server's kernel still holds the connection open).
        pings.fetch_add(1, std::memory_order_relaxed);
        connection->send(MessageType::pong, frame.request_id, {});
        return true;
      case MessageType::announce: {
        auto announce = decode_announce(frame.payload);
        if (!announce) return malformed(*connection, frame);
        std::lock_guard lock(mu);
        connection->http = announce->http;
        return true;
      }
      case MessageType::limit: {
        auto limit = protocol::decode_limit(frame.payload);
        if (!limit) return malformed(*connection, frame);
        if (limit->name.empty() || !std::isfinite(limit->per_second) || limit->per_second < 0) {
          refuse(*connection, frame.request_id, "bad_request",
                 fmt::format("limit '{}': a limit needs a name, and per_second a finite number, 0 or more",
                             limit->name));
          return false;
        }
        bool changed = false;
        permits->set(limit->name, StepLimit{limit->concurrent, limit->per_second}, &changed);
        if (changed) {
          say(fmt::format("limit '{}' set by connection {} ({}) to {} at once, {} per second, unlike before: the "
                          "workers disagree, and the last one wins",
                          limit->name, connection->id, connection->worker, limit->concurrent, limit->per_second));
        }
        return true;
      }
      case MessageType::permit_ask: {
        auto ask = protocol::decode_permit_ask(frame.payload);
        if (!ask) return malformed(*connection, frame);
        permits->ask(connection->id, frame.request_id, ask->name, ask->held,
                     [weak = std::weak_ptr<Connection>(connection)](std::uint64_t id) {
                       if (auto alive = weak.lock()) alive->send(MessageType::permit_grant, id, {});
                     });
        return true;
      }
      case MessageType::permit_release:
        if (!frame.payload.empty()) return malformed(*connection, frame);
        permits->release(connection->id, frame.request_id);
        return true;
      case MessageType::release: {
        auto release = decode_release(frame.payload);
        if (!release) return malformed(*connection, frame);
        std::vector<Grant> grants;
        {
          std::lock_guard lock(mu);
          if (release->shard < shards && leases[release->shard].holder == connection &&
              leases[release->shard].epoch == release->epoch) {
            leases[release->shard].holder.reset();
            grants = grant_locked();
          }
        }
        deliver(grants);
        return true;
      }
      default:
        refuse(*connection, frame.request_id, "bad_request",
               fmt::format("a {} message is not one a worker sends", message_type_name(type)));
        return false;
    }
  }

  bool malformed(Connection& connection, const Frame& frame) {
    refuse(connection, frame.request_id, "bad_request",
           fmt::format("a {} message that does not decode", message_type_name(static_cast<MessageType>(frame.type))));
    return false;
  }

  bool holds(const std::shared_ptr<Connection>& connection, std::uint32_t shard, std::uint64_t epoch) {
    std::lock_guard lock(mu);
    return shard < shards && leases[shard].holder == connection && leases[shard].epoch == epoch;
  }

  struct Grant {
    std::shared_ptr<Connection> connection;
    std::uint32_t shard = 0;
    std::uint64_t epoch = 0;
  };

  // Hands free shards to waiting connections, oldest request first. The
  // leases are sent by deliver(), outside the lock (the log's durable hook
  // takes it while holding the log's hook lock).
  std::vector<Grant> grant_locked() {
    std::vector<Grant> grants;
    const bool reclaiming = std::chrono::steady_clock::now() < reclaim_until;
    auto grant = [&](Waiting& waiter, std::uint32_t shard) {
      reclaimable[shard] = false;
      auto& lease = leases[shard];
      lease.holder = waiter.connection;
      lease.epoch = ++next_epoch;
      waiter.wanted--;
      grants.push_back({waiter.connection, shard, lease.epoch});
    };
    for (auto it = waiting.begin(); it != waiting.end();) {
      // The shards it names first; others only once it has all of those.
      std::erase_if(it->specific, [&](std::uint32_t shard) {
        if (leases[shard].holder) return false;
        grant(*it, shard);
        return true;
      });
      for (std::uint32_t shard = 0; shard < shards && it->wanted > 0 && it->specific.empty(); ++shard) {
        if (!leases[shard].holder && !(reclaiming && reclaimable[shard])) grant(*it, shard);
      }
      it = it->wanted == 0 && it->specific.empty() ? waiting.erase(it) : std::next(it);
    }
    return grants;
  }

  // The reclaim grace is over: the shards nobody reclaimed go to whoever waits.
  void grant_after_grace() {
    std::vector<Grant> grants;
    {
      std::lock_guard lock(mu);
      if (!stopping) grants = grant_locked();
    }
    deliver(grants);
    permits->resume();
  }

  // Sends the leases. A shard's records appended by its previous holder are
  // made durable first, so the new holder's read sees all of them.
  void deliver(const std::vector<Grant>& grants) {
    if (!grants.empty()) {
      // A store write of the previous holder that passed its fence check
      // ends before its successor hears of the lease (and reads the store).
      std::lock_guard fence(store_service->fence_mu());
    }
    for (const auto& grant : grants) {
      auto last = log->last_lsn(grant.shard);
      if (auto durable = log->wait_durable(grant.shard, last); !durable) {
        refuse(*grant.connection, 0, "storage", fmt::format("the log failed: {}", durable.error().message()));
        continue;
      }
      say(fmt::format("connection {} ({}): shard {} leased, epoch {}", grant.connection->id, grant.connection->worker,
                      grant.shard, grant.epoch));
      grant.connection->send(MessageType::lease, 0, encode(Lease{grant.shard, grant.epoch, last}));
    }
  }

  // The connection is gone: its leases go to whoever waits, and its
  // permits back.
  void drop(const std::shared_ptr<Connection>& connection) {
    permits->drop(connection->id);
    std::vector<Grant> grants;
    std::map<std::uint64_t, Connection::Relay> relayed;
    {
      std::lock_guard lock(mu);
      relayed.swap(connection->relayed);
      for (auto& lease : leases) {
        if (lease.holder == connection) lease.holder.reset();
      }
      waiting.remove_if([&](const Waiting& w) { return w.connection == connection; });
      if (!stopping) grants = grant_locked();
    }
    deliver(grants);
    // Calls passed on to it will get no answer from it: their callers hear
    // so, and ask its successor.
    for (const auto& [relay, call] : relayed) {
      if (auto caller = call.caller.lock()) {
        caller->send(MessageType::forward_reply, call.call_id,
                     encode(ForwardReply{ReplyPart::lost,
                                         bytes_of(fmt::format("the worker holding the shard ({}) went before it "
                                                              "answered",
                                                              connection->worker))}));
      }
    }
    {
      std::lock_guard lock(connection->mu);
      connection->closing = true;
      connection->wake.notify_one();
    }
    if (connection->writer.joinable()) connection->writer.join();
    ::shutdown(connection->fd, SHUT_RDWR);
    say(fmt::format("connection {} ({}) closed", connection->id, connection->worker));
  }

  std::string metrics() {
    auto stats = log->stats();
    std::string text;
    auto metric = [&](const char* name, const char* type, const char* help, auto value) {
      append_metric(text, name, type, help, value);
    };
    metric("fusee_records_written_total", "counter", "Records made durable by the server's log.",
           stats.records_written);
    metric("fusee_flushes_total", "counter", "Log batches written, each one durable write.", stats.batches_written);
    metric("fusee_records_per_flush", "gauge", "Records per durable write, on average since the server started.",
           records_per_flush(stats.records_written, stats.batches_written));
    metric("fusee_log_failed", "gauge", "1 when the log failed (restart the server).", log->poison() ? 1 : 0);
    metric("fusee_shards", "gauge", "Shards of the directory.", shards);
    metric("fusee_staged_bytes", "gauge", "Bytes appended to the log and not yet in a durable write.",
           stats.staged_bytes);
    metric("fusee_wal_segments", "gauge", "Live log segments.", stats.segments_live);
    {
      auto store_stats = store_service->stats();
      metric("fusee_checkpoints_total", "counter", "Checkpoints workers wrote to the run store.",
             store_stats.checkpoints);
      metric("fusee_segments_retired_total", "counter", "Log segments retired after checkpoints.",
             store_stats.segments_retired);
      metric("fusee_run_store_bytes", "gauge", "The run store's size (RocksDB's estimate).", store->size_bytes());
    }
    append_seconds_histogram(text, "fusee_flush_duration_seconds", "Durable writes of the log by how long they took.",
                             wal::kFlushLatencyBoundsUs, stats.flush_latency_counts, stats.flush_latency_sum_us);
    append_seconds_histogram(text, "fusee_append_duration_seconds",
                             "Appends from their arrival to their durable position going back.",
                             wal::kFlushLatencyBoundsUs, append_latency_now(), append_latency_sum_us.load());
    if (replica) http::append_replica_metrics(text, replica());  // not under mu: the replica's locks are its own
    std::lock_guard lock(mu);
    std::size_t held = 0;
    text += "# HELP fusee_shard_lease Shards and their holders (1: leased).\n# TYPE fusee_shard_lease gauge\n";
    for (std::uint32_t shard = 0; shard < shards; ++shard) {
      const auto& lease = leases[shard];
      if (lease.holder) ++held;
      text += fmt::format("fusee_shard_lease{{shard=\"{}\",worker=\"{}\",epoch=\"{}\"}} {}\n", shard,
                          lease.holder ? lease.holder->worker : "", lease.epoch, lease.holder ? 1 : 0);
    }
    metric("fusee_shards_leased", "gauge", "Shards a worker holds.", held);
    http::append_limit_metrics(text, permits->stats());
    metric("fusee_workers_waiting", "gauge", "Connections waiting for leases (standbys).", waiting.size());
    return text;
  }

  // The append latency histogram's counts as they are now.
  std::array<std::uint64_t, wal::kFlushLatencyBoundsUs.size() + 1> append_latency_now() const {
    std::array<std::uint64_t, wal::kFlushLatencyBoundsUs.size() + 1> counts{};
    for (std::size_t i = 0; i < counts.size(); ++i) counts[i] = append_latency_counts[i].load();
    return counts;
  }

  // The server's figures as JSON, for the console's engine page (GET
  // /v1/server on the HTTP front): the shards and their holders, the log,
  // checkpoints and the run store.
  std::string stats_json() {
    auto stats = log->stats();
    auto store_stats = store_service->stats();
    auto histogram = [](std::span<const std::uint64_t> counts, std::uint64_t sum_us) {
      return http::latency_histogram_json(wal::kFlushLatencyBoundsUs, counts, sum_us);
    };
    boost::json::object out{
        {"server", true},
        {"shards", shards},
        {"records_written", stats.records_written},
        {"flushes", stats.batches_written},
        {"records_per_flush", records_per_flush(stats.records_written, stats.batches_written)},
        {"staged_bytes", stats.staged_bytes},
        {"wal_segments", stats.segments_live},
        {"checkpoints", store_stats.checkpoints},
        {"segments_retired", store_stats.segments_retired},
        {"run_store_bytes", store->size_bytes()},
        {"log_error", log->poison() ? boost::json::value(log->poison().message()) : boost::json::value(nullptr)},
        {"flush_latency", histogram(stats.flush_latency_counts, stats.flush_latency_sum_us)},
        {"append_latency", histogram(append_latency_now(), append_latency_sum_us.load())}};
    boost::json::array holders;
    std::lock_guard lock(mu);
    for (std::uint32_t shard = 0; shard < shards; ++shard) {
      const auto& lease = leases[shard];
      boost::json::object entry{{"shard", shard}, {"epoch", lease.epoch}};
      entry["worker"] = lease.holder ? boost::json::value(lease.holder->worker) : boost::json::value(nullptr);
      entry["http"] = lease.holder && !lease.holder->http.empty() ? boost::json::value(lease.holder->http)
                                                                   : boost::json::value(nullptr);
      holders.push_back(std::move(entry));
    }
    out["holders"] = std::move(holders);
    out["workers_waiting"] = waiting.size();
    return boost::json::serialize(out);
  }

  void store_loop() {
    std::unique_lock lock(store_mu);
    for (;;) {
      store_cv.wait(lock, [&] { return store_stopping || !store_jobs.empty(); });
      if (store_jobs.empty()) return;
      auto job = std::move(store_jobs.front());
      store_jobs.pop_front();
      lock.unlock();
      serve_store(job.connection, job.request_id, job.call);
      lock.lock();
    }
  }

  void serve_store(const std::shared_ptr<Connection>& connection, std::uint64_t request_id,
                   const protocol::StoreCall& call) {
    auto reply = store_service->serve(
        call, [&](std::uint32_t shard, std::uint64_t epoch) { return holds(connection, shard, epoch); },
        [&](const std::vector<std::vector<std::byte>>& rows) {
          connection->send(MessageType::store_rows, request_id, protocol::encode_rows(rows));
        });
    if (!reply.error.empty()) {
      say(fmt::format("connection {} ({}): store {}: {}: {}", connection->id, connection->worker,
                      protocol::store_op_name(call.op), reply.error, reply.message));
    }
    connection->send(MessageType::store_reply, request_id, protocol::encode(reply));
  }

  // Asks each holder of `shards` to checkpoint them; the holders asked, by
  // shard.
  std::vector<std::shared_ptr<Connection>> ask_checkpoints(const std::vector<std::uint32_t>& wanted) {
    std::vector<std::shared_ptr<Connection>> holders(shards);
    std::map<std::shared_ptr<Connection>, CheckpointSoon> asks;
    {
      std::lock_guard lock(mu);
      for (auto shard : wanted) {
        if (shard >= shards || !leases[shard].holder) continue;
        holders[shard] = leases[shard].holder;
        asks[holders[shard]].shards.push_back(shard);
      }
    }
    for (const auto& [connection, ask] : asks) connection->send(MessageType::checkpoint_soon, 0, encode(ask));
    return holders;
  }

  // The log rolled to a new segment: the shards keeping the oldest one
  // checkpoint, so it can retire.
  void on_roll(std::uint64_t retires_at) {
    if (retires_at != 0) (void)ask_checkpoints(store_service->lagging(retires_at));
  }

  // At stop: every held shard checkpoints once more, so the next start (or
  // the next worker) reads little of the log. Waits at most `wait`.
  void checkpoint_before_stop(std::chrono::milliseconds wait) {
    std::vector<std::uint32_t> all(shards);
    std::vector<std::uint64_t> before(shards);
    for (std::uint32_t shard = 0; shard < shards; ++shard) {
      all[shard] = shard;
      before[shard] = store_service->checkpoints_of(shard);
    }
    auto holders = ask_checkpoints(all);
    auto give_up = std::chrono::steady_clock::now() + wait;
    for (std::uint32_t shard = 0; shard < shards; ++shard) {
      if (!holders[shard]) continue;
      while (store_service->checkpoints_of(shard) == before[shard] && !holders[shard]->finished &&
             std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (store_service->checkpoints_of(shard) == before[shard]) {
        say(fmt::format("shard {}: no checkpoint from its worker before the stop; the next start reads its log", shard));
      }
    }
  }

  void on_durable(wal::ShardId shard, wal::Lsn lsn) {
    std::shared_ptr<Connection> holder;
    // A replica's log holds the run store's records too, in a shard after
    // the workers' (hosting/replicated_run_store.hpp).
    if (shard >= shards) return;
    {
      std::lock_guard lock(mu);
      holder = leases[shard].holder;
      auto now = std::chrono::steady_clock::now();
      auto& arrived = arrivals[shard];
      while (!arrived.empty() && arrived.front().first <= lsn) {
        auto us = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(now - arrived.front().second).count());
        std::size_t bucket = 0;
        while (bucket < wal::kFlushLatencyBoundsUs.size() && us > wal::kFlushLatencyBoundsUs[bucket]) ++bucket;
        append_latency_counts[bucket].fetch_add(1, std::memory_order_relaxed);
        append_latency_sum_us.fetch_add(us, std::memory_order_relaxed);
        arrived.pop_front();
      }
    }
    if (holder) holder->send(MessageType::durable, 0, encode(Durable{shard, lsn}));
  }
};

thread_local bool LogService::Impl::appended_ = false;

std::unique_ptr<LogService> LogService::open(io::FileSystem& fs, LogServiceOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->fs = &fs;
  if (!options.log) options.log = [](const std::string& line) { fmt::print(stderr, "fusee server: {}\n", line); };
  wal::LogOptions log_options;
  log_options.segment_bytes = options.segment_bytes;
  log_options.direct_io = options.direct_io;
  log_options.warn = options.log;
  auto opened = engine::open_data_dir(fs, options.dir, options.shards, std::move(log_options), false);
  impl->lock = std::move(opened.lock);
  impl->shards = opened.shards;
  impl->store = std::move(opened.store);
  impl->log = std::move(opened.log);
  // Epochs grow across restarts too: a lease of an earlier server life never
  // matches one of this life.
  impl->next_epoch = static_cast<std::uint64_t>(
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count())
                     << 10;
  return start(std::move(impl), std::move(options), std::move(opened.bases.keep_from));
}

std::unique_ptr<LogService> LogService::open_over(LogServiceOptions options, LogServiceOver over) {
  auto impl = std::make_unique<Impl>();
  if (!options.log) options.log = [](const std::string& line) { fmt::print(stderr, "fusee server: {}\n", line); };
  impl->shards = over.shards;
  impl->store = std::move(over.store);
  impl->log = std::move(over.log);
  impl->owns_log = false;
  impl->next_epoch = over.epoch_floor;
  impl->replica = std::move(over.replica);
  impl->cluster = std::move(over.cluster);
  return start(std::move(impl), std::move(options), std::move(over.keep_from));
}

std::unique_ptr<LogService> LogService::start(std::unique_ptr<Impl> impl, LogServiceOptions options,
                                              std::vector<std::uint64_t> keep_from) {
  impl->options = options;
  impl->store_service = std::make_unique<StoreService>(*impl->store, *impl->log, std::move(keep_from), options.log);
  impl->leases.resize(impl->shards);
  impl->arrivals.resize(impl->shards);
  impl->reclaimable.resize(impl->shards);
  bool any_records = false;
  for (std::uint32_t shard = 0; shard < impl->shards; ++shard) {
    impl->reclaimable[shard] = impl->log->last_lsn(shard) > 0;
    any_records = any_records || impl->reclaimable[shard];
  }
  // After a restart, workers reconnecting declare the permits they hold
  // during the reclaim grace; new ones are granted after it.
  impl->permits = std::make_unique<PermitBroker>([] { return std::chrono::system_clock::now(); }, true, any_records);
  if (any_records) impl->reclaim_until = std::chrono::steady_clock::now() + options.reclaim_grace;
  // What may throw comes first: a refusal leaves no thread running and no
  // hook on the log (a replica's view goes on to stop its replica).
  impl->listen_fd = listen_on(parse_address(options.listen, "listen address"), options.listen, impl->endpoint);
  if (!options.http_listen.empty()) try {
    FrontDirectory directory;
    directory.shard_count = impl->shards;
    directory.http_of = [raw = impl.get()](std::uint32_t shard) -> std::optional<std::string> {
      std::lock_guard lock(raw->mu);
      if (shard >= raw->leases.size() || !raw->leases[shard].holder || raw->leases[shard].holder->http.empty()) {
        return std::nullopt;
      }
      return raw->leases[shard].holder->http;
    };
    directory.metrics = [raw = impl.get()] { return raw->metrics(); };
    directory.stats = [raw = impl.get()] { return raw->stats_json(); };
    directory.cluster = impl->cluster;
    if (options.token.empty() && !http::is_loopback_listen(options.http_listen)) {
      throw Error(errc::invalid_argument,
                  fmt::format("the HTTP front on {} would serve anyone who reaches it: give it a token, or listen on "
                              "loopback",
                              options.http_listen));
    }
    http::HttpServerOptions served;
    served.allowed_hosts = options.http_allowed_hosts;
    impl->http = std::make_unique<HttpServer>(make_front_router(std::move(directory), options.token),
                                              options.http_listen, std::move(served));
  } catch (...) {
    ::close(impl->listen_fd);
    if (options.listen.starts_with("unix:")) ::unlink(options.listen.substr(5).c_str());
    throw;
  }
  impl->log->set_durable_hook([raw = impl.get()](wal::ShardId shard, wal::Lsn lsn) { raw->on_durable(shard, lsn); });
  impl->log->set_roll_hook([raw = impl.get()](std::uint64_t retires_at) { raw->on_roll(retires_at); });
  impl->store_thread = std::thread([raw = impl.get()] { raw->store_loop(); });
  if (any_records) {
    // At the grace's end, the shards nobody reclaimed go to whoever waits.
    impl->reclaim_timer = std::thread([raw = impl.get()] {
      {
        std::unique_lock lock(raw->reclaim_mu);
        if (raw->reclaim_cv.wait_until(lock, raw->reclaim_until, [raw] { return raw->reclaim_stopping; })) return;
      }
      raw->grant_after_grace();
    });
  }
  impl->acceptor = std::thread([raw = impl.get()] { raw->accept_loop(); });
  return std::unique_ptr<LogService>(new LogService(std::move(impl)));
}

LogService::LogService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LogService::~LogService() { stop(); }

std::string LogService::endpoint() const { return impl_->endpoint; }
std::string LogService::http_endpoint() const { return impl_->http ? impl_->http->endpoint() : std::string(); }
std::uint32_t LogService::shard_count() const { return impl_->shards; }

LogServiceStats LogService::stats() const {
  auto store = impl_->store_service->stats();
  auto log = impl_->log->stats();
  return LogServiceStats{store.checkpoints,     store.segments_retired, log.segments_live,
                         log.records_written,   log.batches_written,    impl_->pings.load()};
}

void LogService::stop() {
  auto& impl = *impl_;
  if (impl.stop_begun.exchange(true)) return;
  {
    std::lock_guard lock(impl.reclaim_mu);
    impl.reclaim_stopping = true;
  }
  impl.reclaim_cv.notify_all();
  if (impl.reclaim_timer.joinable()) impl.reclaim_timer.join();
  if (impl.http) impl.http->stop();
  ::shutdown(impl.listen_fd, SHUT_RDWR);
  if (impl.acceptor.joinable()) impl.acceptor.join();
  // The workers checkpoint while they still hold their leases; then the
  // connections close.
  // (None when a replica's view ended: its log takes no more.)
  if (impl.options.stop_checkpoint_wait.count() > 0) impl.checkpoint_before_stop(impl.options.stop_checkpoint_wait);
  impl.stopping = true;
  // The permits the closing connections give back go to nobody.
  impl.permits->stop();
  ::close(impl.listen_fd);
  if (impl.options.listen.starts_with("unix:")) ::unlink(impl.options.listen.substr(5).c_str());
  std::list<std::shared_ptr<Connection>> connections;
  {
    std::lock_guard lock(impl.mu);
    connections = impl.connections;
  }
  for (auto& connection : connections) ::shutdown(connection->fd, SHUT_RDWR);
  for (auto& connection : connections) {
    if (connection->reader.joinable()) connection->reader.join();
    ::close(connection->fd);
  }
  {
    std::lock_guard lock(impl.mu);
    impl.connections.clear();
    for (auto& lease : impl.leases) lease.holder.reset();
  }
  {
    std::lock_guard lock(impl.store_mu);
    impl.store_stopping = true;
  }
  impl.store_cv.notify_all();
  if (impl.store_thread.joinable()) impl.store_thread.join();
  if (impl.log && impl.owns_log) (void)impl.log->close();
}

}  // namespace fusee::server
