#include "remote/remote_sink.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "protocol/address.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "protocol/wire.hpp"
#include "remote/shard_router.hpp"
#include "wal/errc.hpp"

namespace fusee::remote {

using engine::JournalSink;
using protocol::StoreCall;
using protocol::StoreReply;
using protocol::decode_rows;
using protocol::decode_store_reply;
using wal::Lsn;
using wal::ShardId;

namespace {

using protocol::MessageType;

// How long a worker keeps trying to reach a server that went away (it
// restarts, or it was killed and is being restarted) before it gives up and
// poisons the sink, as a failed flush poisons the local log.
constexpr auto kReconnectFor = std::chrono::seconds(60);
constexpr auto kReconnectPause = std::chrono::milliseconds(50);

// A store call's payload goes in frames of at most this (a write's batch
// can be larger than one frame may be).
constexpr std::size_t kStorePartBytes = 16u << 20;
// How long a waiting shard waits for the server's answer before it sleeps
// (write_inline), and how many waits sleep at once after one ran out.
constexpr auto kInlineWait = std::chrono::microseconds(250);
constexpr int kInlineSkips = 64;
// After the server restarted, a worker holding fewer than shards_max asks
// for more only this long after it reconnected: the workers that held the
// other shards take theirs back first.
constexpr auto kStandbyGrace = std::chrono::seconds(1);
// How long a worker reconnecting waits for the shards it held; another
// worker holding one by then took it while the server was away.
constexpr auto kReclaimFor = std::chrono::seconds(10);
// A server that says nothing (answers no ping) or takes nothing (its socket
// full) for this many lease TTLs is gone. More than one: the server reads a
// connection's frames on one thread and serves some calls there (a store
// read, an append held back while its log is full), so a live server may
// answer a ping late; a worker that left it would send the call again and
// wait as long again.
constexpr std::uint32_t kSilentTtls = 3;
// How long a worker waits for the server's welcome after the connect (a
// server answers a hello at once; a stopped one's kernel takes the connect).
constexpr auto kWelcomeWait = std::chrono::seconds(1);

class RemoteSink final : public JournalSink, public StoreChannel, public ShardRouter, public PermitChannel {
 public:
  // Throws fusee::Error (invalid_argument) for an address that is not one.
  explicit RemoteSink(RemoteOptions options) : options_(std::move(options)) {
    // "A,B,C": the servers of a replicated cluster, only the primary
    // listening (server/replicated_server.hpp).
    std::string_view list = options_.address;
    for (;;) {
      const auto comma = list.find(',');
      address_texts_.emplace_back(list.substr(0, comma));
      addresses_.push_back(protocol::parse_address(address_texts_.back(), "server address"));
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
    // Workers start at a server of their own: one that is stopped (its
    // kernel takes the connect, kWelcomeWait is lost on it) holds up only
    // some of them.
    next_address_ = std::random_device{}() % addresses_.size();
    heartbeat_ = std::thread([this] { heartbeat_loop(); });
  }
  ~RemoteSink() override {
    {
      // Answers to forwarded calls that come later go nowhere.
      std::lock_guard lock(gate_->mu);
      gate_->sink = nullptr;
    }
    stopping_ = true;
    {
      std::lock_guard lock(heartbeat_mu_);
      heartbeat_cv_.notify_all();
    }
    if (heartbeat_.joinable()) heartbeat_.join();
    {
      std::lock_guard lock(send_mu_);
      if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    }
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) ::close(fd_);
  }

  // Connects, says hello, takes every shard's lease. The first time it
  // learns the shard count; after a reconnect it checks the server kept
  // every acknowledged record and sends again what was not yet durable.
  Result<void> connect(std::string& problem) {
    // Each server in turn, from the one last connected to; after a failure
    // past the connect (a deposed primary that still listens, a server
    // stopping), from the next one.
    int fd = -1;
    std::string refusals;
    for (std::size_t tried = 0; tried < addresses_.size() && fd < 0; ++tried) {
      const std::size_t at = (next_address_ + tried) % addresses_.size();
      std::string refused;
      fd = protocol::connect_to(addresses_[at], address_texts_[at], refused);
      if (fd >= 0) {
        next_address_ = at;
      } else {
        refusals += (refusals.empty() ? "" : "; ") + refused;
      }
    }
    if (fd < 0) {
      problem = refusals;
      return std::make_error_code(std::errc::io_error);
    }
    problem.clear();
    auto connected = greet_and_lease(fd, problem);
    if (!connected) next_address_ = (next_address_ + 1) % addresses_.size();
    return connected;
  }

  std::size_t next_address() const { return next_address_; }
  void start_at(std::size_t address) { next_address_ = address % addresses_.size(); }

  Result<void> greet_and_lease(int fd, std::string& problem) {
    {
      std::lock_guard lock(send_mu_);
      fd_ = fd;
      greeted_ = false;  // no ping before the hello
      ++link_;           // answers to calls forwarded over the last connection go nowhere
    }
    decoder_ = protocol::FrameDecoder();
    if (!send_now(MessageType::hello, 0, protocol::encode(protocol::Hello{options_.token, options_.worker}))) {
      problem = "the server closed the connection";
      return std::make_error_code(std::errc::io_error);
    }
    // A server whose process is stopped still has its kernel take the
    // connection: a welcome that does not come in time moves on.
    heard();
    auto welcome = wait_frame({MessageType::welcome}, problem, std::chrono::steady_clock::now() + kWelcomeWait);
    if (!welcome) return std::make_error_code(std::errc::io_error);
    auto decoded = protocol::decode_welcome(welcome->payload);
    if (!decoded || decoded->shard_count == 0 || (shards_ != 0 && decoded->shard_count != shards_)) {
      problem = decoded ? fmt::format("the server has {} shards, not {}", decoded->shard_count, shards_)
                        : "a malformed welcome from the server";
      return make_error_code(wal::errc::corrupt);
    }
    lease_ttl_ms_ = decoded->lease_ttl_ms;
    {
      std::lock_guard lock(send_mu_);
      greeted_ = true;
      front_http_token_ = decoded->http_token;
    }
    {
      // The heartbeat's pace follows the server's TTL from now on.
      std::lock_guard lock(heartbeat_mu_);
      heartbeat_cv_.notify_all();
    }
    bool first = shards_ == 0;
    if (first) {
      shards_ = decoded->shard_count;
      epochs_.assign(shards_, 0);
      next_lsn_ = std::vector<std::atomic<Lsn>>(shards_);
      durable_ = std::vector<std::atomic<Lsn>>(shards_);
      unacked_.resize(shards_);
      held_ = std::vector<std::atomic<bool>>(shards_);
      running_ = std::vector<std::atomic<bool>>(shards_);
    }
    // Every shard; or at most N. After a reconnect (the server restarted
    // and every lease is free) a worker with at most N asks for the ones it
    // held, and for more only after kStandbyGrace (the heartbeat sends it).
    protocol::Acquire acquire{options_.shards_max, {}};
    // A worker that held every shard names them all: the server holds the
    // shards with records back for their holders for a grace after it
    // starts (a new view's server too), and a worker asking for "all"
    // would wait it out.
    const bool named = !first;
    if (named) {
      for (std::uint32_t shard = 0; shard < shards_; ++shard) {
        if (held_[shard]) acquire.shards.push_back(shard);
      }
      acquire.shards_max = static_cast<std::uint32_t>(acquire.shards.size());
    }
    const bool asks = !named || !acquire.shards.empty();
    if (asks && !send_now(MessageType::acquire, 0, protocol::encode(acquire))) {
      problem = "the server closed the connection";
      return std::make_error_code(std::errc::io_error);
    }
    const auto reclaim_until = named ? std::chrono::steady_clock::now() + kReclaimFor
                                     : std::chrono::steady_clock::time_point::max();
    // The first connect of a worker that wants every shard waits for those
    // others hold up to open_wait (0: as long as it takes, a standby).
    const auto open_until = first && options_.shards_max == 0 && options_.open_wait.count() > 0
                                ? std::chrono::steady_clock::now() + options_.open_wait
                                : std::chrono::steady_clock::time_point::max();
    std::vector<std::optional<protocol::Lease>> leases(shards_);
    std::uint32_t leased = 0;
    bool acquired = !asks;
    auto have_all = [&] {
      if (options_.shards_max == 0) return leased == shards_;
      if (!acquired) return false;
      for (auto shard : acquire.shards) {
        if (!leases[shard]) return false;
      }
      return true;
    };
    while (!have_all()) {
      auto frame = wait_frame({MessageType::lease, MessageType::acquired}, problem, std::min(reclaim_until, open_until));
      if (!frame && std::chrono::steady_clock::now() >= open_until) {
        std::vector<std::uint32_t> missing;
        for (std::uint32_t shard = 0; shard < shards_; ++shard) {
          if (!leases[shard]) missing.push_back(shard);
        }
        problem = fmt::format("another worker holds shard{} {} (waited {} ms for {}; Config::server_open_timeout, 0 "
                              "to wait as a standby does)",
                              missing.size() == 1 ? "" : "s", fmt::join(missing, ", "), options_.open_wait.count(),
                              missing.size() == 1 ? "it" : "them");
        return std::make_error_code(std::errc::timed_out);
      }
      if (!frame && std::chrono::steady_clock::now() >= reclaim_until) {
        problem = fmt::format("another worker took shards this one held while the server was away (waited {} s for "
                              "them): this engine was deposed; reopen it",
                              std::chrono::duration_cast<std::chrono::seconds>(kReclaimFor).count());
        return make_error_code(wal::errc::corrupt);
      }
      if (!frame) return std::make_error_code(std::errc::io_error);
      if (static_cast<MessageType>(frame->type) == MessageType::acquired) {
        acquired = true;
        continue;
      }
      auto lease = protocol::decode_lease(frame->payload);
      if (!lease || lease->shard >= shards_ || leases[lease->shard]) {
        problem = "a malformed lease from the server";
        return make_error_code(wal::errc::corrupt);
      }
      leases[lease->shard] = *lease;
      ++leased;
    }
    std::vector<ShardId> taken;  // leased now and not held before: the engine adopts them
    std::lock_guard lock(send_mu_);
    for (std::uint32_t shard = 0; shard < shards_; ++shard) {
      if (!leases[shard]) continue;
      const auto& lease = *leases[shard];
      if (first || !held_[shard]) {
        take_lease_locked(lease);
        if (!first) taken.push_back(shard);
        continue;
      }
      epochs_[shard] = lease.epoch;
      // The server's log must hold everything it acknowledged; what it had
      // not made durable when it went is sent again, at the same LSNs.
      if (lease.durable_lsn < durable_[shard].load()) {
        problem = fmt::format("the server lost acknowledged records: shard {} was durable to LSN {}, it now ends at {}",
                              shard, durable_[shard].load(), lease.durable_lsn);
        return make_error_code(wal::errc::corrupt);
      }
      if (lease.durable_lsn > next_lsn_[shard].load()) {
        // Another worker held the shard meanwhile and appended: this
        // engine's runs are stale. (The server would fence its appends.)
        problem = fmt::format("shard {}: another worker appended up to LSN {} while this one was away (it had {}): "
                              "this engine was deposed; reopen it",
                              shard, lease.durable_lsn, next_lsn_[shard].load());
        return make_error_code(wal::errc::corrupt);
      }
      auto& unacked = unacked_[shard];
      while (!unacked.empty() && unacked.front().first <= lease.durable_lsn) unacked.pop_front();
      if (!unacked.empty() && unacked.front().first != lease.durable_lsn + 1) {
        problem = fmt::format("shard {}: the server ends at LSN {}, past what this worker still holds", shard,
                              lease.durable_lsn);
        return make_error_code(wal::errc::corrupt);
      }
      if (unacked.empty() && next_lsn_[shard].load() > lease.durable_lsn) {
        problem = fmt::format("shard {}: the server ends at LSN {}, but this worker appended to {}", shard,
                              lease.durable_lsn, next_lsn_[shard].load());
        return make_error_code(wal::errc::corrupt);
      }
      raise_durable(shard, lease.durable_lsn);
      for (const auto& [lsn, record] : unacked) {
        if (!send_locked(MessageType::append, 0, protocol::encode(protocol::Append{shard, epochs_[shard], lsn, record}))) {
          problem = "the server closed the connection";
          return std::make_error_code(std::errc::io_error);
        }
      }
    }
    if (!http_.empty()) (void)send_locked(MessageType::announce, 0, protocol::encode(protocol::Announce{http_}));
    connected_ = true;
    for (auto shard : taken) lease_taken(shard);
    if (named && acquire.shards.size() < options_.shards_max) {
      // (Not under heartbeat_mu_, which is taken before send_mu_.)
      standby_at_ = (std::chrono::steady_clock::now() + kStandbyGrace).time_since_epoch().count();
      standby_want_ = options_.shards_max - static_cast<std::uint32_t>(acquire.shards.size());
      heartbeat_cv_.notify_all();  // to wait until then (a wake-up lost here costs one heartbeat at most)
    }
    return ok();
  }

  // --- ShardRouter ---
  bool leased(ShardId shard) const override { return shard < held_.size() && held_[shard].load(); }
  bool holds(ShardId shard) const override { return shard < running_.size() && running_[shard].load(); }
  void set_running(ShardId shard) override { running_[shard] = true; }
  void release(ShardId shard) override {
    std::lock_guard lock(send_mu_);
    if (!held_[shard]) return;
    held_[shard] = false;
    running_[shard] = false;
    if (connected_) (void)send_locked(MessageType::release, 0, protocol::encode(protocol::Release{shard, epochs_[shard]}));
    epochs_[shard] = 0;
  }
  void forward(ShardId shard, std::vector<std::byte> body, OnReply on_reply) override {
    std::uint64_t id = 0;
    std::optional<std::string> poisoned;
    {
      std::lock_guard lock(state_mu_);
      if (poison_) {
        poisoned = poison_text_;
      } else {
        id = ++next_request_;
        forwards_[id] = on_reply;
      }
    }
    if (poisoned) {
      on_reply(Part::failed, protocol::bytes_of(*poisoned));
      return;
    }
    bool sent = false;
    {
      std::lock_guard lock(send_mu_);
      sent = connected_ && send_locked(MessageType::forward, id, protocol::encode(protocol::Forward{shard, std::move(body)}));
    }
    if (!sent) {
      // A frame not sent whole is one the server never acted on.
      if (auto taken = take_forward(id)) (*taken)(Part::no_holder, protocol::bytes_of("not connected to the server now"));
    }
  }
  void set_handlers(std::function<void(Call)> on_call, std::function<void(ShardId)> on_lease) override {
    std::vector<Call> calls;
    std::vector<ShardId> leases;
    bool cleared = !on_call || !on_lease;
    {
      std::lock_guard lock(listener_mu_);
      on_call_ = std::move(on_call);
      on_lease_ = std::move(on_lease);
      calls.swap(early_calls_);
      leases.swap(early_leases_);
    }
    if (cleared) return;  // nothing more is handed over
    for (auto shard : leases) on_lease_(shard);
    for (auto& call : calls) on_call_(std::move(call));
  }

  void start_reading() { reader_ = std::thread([this] { read_loop(); }); }

  // --- PermitChannel ---
  void set_permit_handlers(std::function<void(std::uint64_t)> on_grant, std::function<void()> on_reconnect) override {
    std::lock_guard lock(listener_mu_);
    on_permit_ = std::move(on_grant);
    on_reconnect_ = std::move(on_reconnect);
  }
  void send_limit(const std::string& name, const StepLimit& limit) override {
    send_if_connected(MessageType::limit, 0, protocol::encode(protocol::Limit{name, limit.concurrent, limit.per_second}));
  }
  void send_permit_ask(std::uint64_t ask, const std::string& name, bool held) override {
    send_if_connected(MessageType::permit_ask, ask, protocol::encode(protocol::PermitAsk{name, held}));
  }
  void send_permit_release(std::uint64_t ask) override { send_if_connected(MessageType::permit_release, ask, {}); }

  // A shard this worker did not hold is leased to it: its appends start
  // after the shard's durable end. Under send_mu_.
  void take_lease_locked(const protocol::Lease& lease) {
    epochs_[lease.shard] = lease.epoch;
    next_lsn_[lease.shard] = lease.durable_lsn;
    durable_[lease.shard] = lease.durable_lsn;
    unacked_[lease.shard].clear();
    held_[lease.shard] = true;
  }
  // A shard leased after open: the engine recovers and runs it.
  void lease_taken(ShardId shard) {
    std::function<void(ShardId)> hook;
    {
      std::lock_guard lock(listener_mu_);
      if (!on_lease_) {
        early_leases_.push_back(shard);
        return;
      }
      hook = on_lease_;
    }
    hook(shard);
  }

  std::string front_http_token() const override {
    std::lock_guard lock(send_mu_);
    return front_http_token_;
  }

  void announce_http(const std::string& endpoint) override {
    std::lock_guard lock(send_mu_);
    http_ = endpoint;
    if (connected_) (void)send_locked(MessageType::announce, 0, protocol::encode(protocol::Announce{http_}));
  }
  std::uint32_t shard_count() const { return shards_; }

  Result<Lsn> append(ShardId shard, std::span<const std::byte> record) override {
    if (auto poisoned = poison()) return poisoned;
    std::lock_guard lock(send_mu_);
    auto lsn = next_lsn_[shard].load() + 1;
    // Kept until durable: a server that goes away before its flush gets it
    // again after the reconnect.
    unacked_[shard].emplace_back(lsn, std::vector<std::byte>(record.begin(), record.end()));
    next_lsn_[shard] = lsn;
    records_sent_++;
    if (connected_ &&
        !send_locked(MessageType::append, 0, protocol::encode(protocol::Append{shard, epochs_[shard], lsn, {record.begin(), record.end()}}))) {
      // The reader notices the broken connection and reconnects.
      connected_ = false;
      ::shutdown(fd_, SHUT_RDWR);
    }
    return lsn;
  }
  Lsn durable_lsn(ShardId shard) const override { return durable_[shard].load(); }
  bool durable_at_once() const override { return false; }
  void set_listener(Listener listener) override {
    std::lock_guard lock(listener_mu_);
    listener_ = std::move(listener);
  }
  std::error_code poison() const override {
    std::lock_guard lock(state_mu_);
    return poison_;
  }
  Result<void> drain() override {
    std::unique_lock lock(state_mu_);
    state_cv_.wait(lock, [&] {
      if (poison_) return true;
      for (std::uint32_t shard = 0; shard < shards_; ++shard) {
        if (durable_[shard].load() < next_lsn_[shard].load()) return false;
      }
      return true;
    });
    if (poison_) return poison_;
    return ok();
  }
  Result<void> close() override {
    FUSEE_TRY_VOID(drain());
    stopping_ = true;
    {
      std::lock_guard lock(send_mu_);
      for (std::uint32_t shard = 0; shard < shards_; ++shard) {
        if (!held_[shard]) continue;
        (void)send_locked(MessageType::release, 0, protocol::encode(protocol::Release{shard, epochs_[shard]}));
      }
      ::shutdown(fd_, SHUT_WR);
    }
    if (reader_.joinable()) reader_.join();
    // Calls forwarded to other workers get no answer now.
    std::map<std::uint64_t, OnReply> forwards;
    {
      std::lock_guard lock(state_mu_);
      forwards.swap(forwards_);
    }
    for (auto& [id, on_reply] : forwards) on_reply(Part::failed, protocol::bytes_of("the engine shut down"));
    return ok();
  }
  // A read the connection's loss cuts short goes on after the reconnect
  // from the record after the last one visited.
  Result<void> read(ShardId shard, Lsn first,
                    const std::function<void(Lsn, std::span<const std::byte>)>& visit) override {
    Lsn next = first;
    for (;;) {
      if (auto poisoned = poison()) return poisoned;
      const auto opened = open_request(reads_);
      const std::uint64_t request = opened.first;  // (lambdas below cannot capture a structured binding)
      const std::uint64_t generation = opened.second;
      bool lost = false;
      {
        std::lock_guard lock(send_mu_);  // epochs_ change at a reconnect
        lost = !connected_ ||
               !send_locked(MessageType::read, request, protocol::encode(protocol::Read{shard, epochs_[shard], next}));
      }
      while (!lost) {
        std::vector<protocol::RecordsChunk> chunks;
        bool done = false;
        {
          std::unique_lock lock(state_mu_);
          auto& pending = reads_[request];
          state_cv_.wait(lock, [&] { return poison_ || pending.done || pending.lost || !pending.chunks.empty(); });
          if (poison_) return poison_;
          lost = pending.lost;
          chunks.swap(pending.chunks);
          done = pending.done;
        }
        for (const auto& chunk : chunks) {
          for (const auto& [lsn, bytes] : chunk.records) {
            if (lsn < next) continue;
            visit(lsn, bytes);
            next = lsn + 1;
          }
        }
        if (done && !lost) {
          std::lock_guard lock(state_mu_);
          reads_.erase(request);
          return ok();
        }
      }
      await_reconnect(reads_, request, generation);
    }
  }
  // A shard with nothing to do but wait for its records waits for the
  // server's answer here, yielding the core, rather than sleep and be woken
  // by this sink's reading thread: the wake-up is a futex round trip that
  // costs a sequential step about as much again as the server's own work
  // (server_step_cost: the Unix-socket extra over local mode went from
  // about 75 to about 35 us). A server slower than kInlineWait (a slow
  // disk) would only burn the core, so after a wait that ran out the next
  // kInlineSkips waits sleep at once.
  bool write_inline() override {
    if (inline_skips_.load(std::memory_order_relaxed) > 0) {
      inline_skips_.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    auto seen = durable_events_.load(std::memory_order_acquire);
    auto until = std::chrono::steady_clock::now() + kInlineWait;
    while (std::chrono::steady_clock::now() < until) {
      if (durable_events_.load(std::memory_order_acquire) != seen) return true;
      std::this_thread::yield();
    }
    inline_skips_.store(kInlineSkips, std::memory_order_relaxed);
    return false;
  }
  void set_checkpoint_hook(std::function<void(ShardId)> hook) override {
    std::lock_guard lock(listener_mu_);
    checkpoint_hook_ = std::move(hook);
  }

  Result<StoreReply> store_call(StoreCall call, std::vector<std::vector<std::byte>>* rows) override {
    for (;;) {
      if (auto poisoned = poison()) return poisoned;
      const auto opened = open_request(calls_);
      const std::uint64_t request = opened.first;
      const std::uint64_t generation = opened.second;
      bool lost = false;
      {
        std::lock_guard lock(send_mu_);  // epochs_ change at a reconnect
        if (connected_) {
          for (auto& [shard, epoch] : call.epochs) epoch = shard < epochs_.size() ? epochs_[shard] : 0;
          auto payload = encode(call);
          std::span<const std::byte> left(payload);
          for (; !lost && left.size() > kStorePartBytes; left = left.subspan(kStorePartBytes)) {
            lost = !send_locked(MessageType::store_part, request, left.first(kStorePartBytes));
          }
          lost = lost || !send_locked(MessageType::store_call, request, left);
        } else {
          lost = true;
        }
      }
      if (!lost) {
        std::unique_lock lock(state_mu_);
        state_cv_.wait(lock, [&] {
          auto& pending = calls_[request];
          return poison_ || pending.reply || pending.lost;
        });
        auto& pending = calls_[request];
        if (pending.reply) {
          auto reply = std::move(*pending.reply);
          if (rows) {
            for (auto& row : pending.rows) rows->push_back(std::move(row));
          }
          calls_.erase(request);
          return reply;
        }
        if (poison_) {
          calls_.erase(request);
          return poison_;
        }
      }
      await_reconnect(calls_, request, generation);
    }
  }

  wal::LogStats stats() const override {
    wal::LogStats stats;
    stats.records_written = records_sent_.load();
    return stats;
  }

 private:
  struct PendingCall {
    std::vector<std::vector<std::byte>> rows;
    std::optional<StoreReply> reply;
    bool lost = false;  // the connection went during the call
  };
  struct PendingRead {
    std::vector<protocol::RecordsChunk> chunks;
    bool done = false;
    bool lost = false;  // the connection went during the read
  };

  // Pings the server at a quarter of its lease TTL, also while waiting for
  // leases, so a live worker never lapses; a hung process stops pinging and
  // its leases go to a standby.
  void heartbeat_loop() {
    std::unique_lock lock(heartbeat_mu_);
    while (!stopping_) {
      auto ttl = lease_ttl_ms_.load();
      auto every = std::chrono::milliseconds(ttl == 0 ? 1000 : std::max<std::uint32_t>(ttl / 4, 10));
      auto known = lease_ttl_ms_.load();
      auto wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(every);
      auto standby_at = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(standby_at_.load()));
      if (standby_want_.load() != 0) {
        wait = std::clamp<std::chrono::steady_clock::duration>(standby_at - std::chrono::steady_clock::now(),
                                                               std::chrono::steady_clock::duration::zero(), wait);
      }
      auto want_known = standby_want_.load();
      bool woken = heartbeat_cv_.wait_for(lock, wait, [&] {
        return stopping_.load() || lease_ttl_ms_.load() != known || standby_want_.load() != want_known;
      });
      if (stopping_) return;
      if (woken && standby_want_.load() != want_known) continue;  // wait until the new time
      std::lock_guard send_lock(send_mu_);
      if (fd_ >= 0 && greeted_) (void)send_locked(MessageType::ping, 0, {});
      // The server answers every ping: one that said nothing for
      // kSilentTtls lease TTLs is gone (a dead machine, a cut network, a
      // stopped or hung process), though the connection looks open. The
      // reader reconnects.
      const auto silent = std::chrono::steady_clock::now().time_since_epoch() -
                          std::chrono::steady_clock::duration(heard_ns_.load());
      if (fd_ >= 0 && greeted_ && ttl != 0 && silent > kSilentTtls * std::chrono::milliseconds(ttl)) {
        if (options_.warn) {
          options_.warn(fmt::format("nothing from the server for {} ms ({} of its lease TTLs): taking it for gone "
                                    "and reconnecting",
                                    std::chrono::duration_cast<std::chrono::milliseconds>(silent).count(),
                                    kSilentTtls));
        }
        connected_ = false;
        ::shutdown(fd_, SHUT_RDWR);
      }
      // Standing by again for more shards, after a reconnect's grace.
      if (auto want = standby_want_.load(); want != 0 && connected_ && std::chrono::steady_clock::now() >= standby_at) {
        if (send_locked(MessageType::acquire, 0, protocol::encode(protocol::Acquire{want, {}}))) standby_want_ = 0;
      }
    }
  }

  // Sent on the connection if there is one; otherwise (or if it breaks now)
  // the reader reconnects, and the reconnect hook sends the state again.
  void send_if_connected(MessageType type, std::uint64_t request, const std::vector<std::byte>& payload) {
    std::lock_guard lock(send_mu_);
    if (connected_ && !send_locked(type, request, payload)) {
      connected_ = false;
      ::shutdown(fd_, SHUT_RDWR);
    }
  }
  bool send_now(MessageType type, std::uint64_t request, const std::vector<std::byte>& payload) {
    std::lock_guard lock(send_mu_);
    return send_locked(type, request, payload);
  }
  // A new request, registered in `pending` (reads_ or calls_), and the
  // connection it goes out on.
  template <typename Pending>
  std::pair<std::uint64_t, std::uint64_t> open_request(std::map<std::uint64_t, Pending>& pending) {
    std::lock_guard lock(state_mu_);
    auto request = ++next_request_;
    pending[request];
    return {request, connections_};
  }
  // The request's connection went (or it was never sent): forgets it and
  // waits for the next connection, or the poison.
  template <typename Pending>
  void await_reconnect(std::map<std::uint64_t, Pending>& pending, std::uint64_t request, std::uint64_t generation) {
    std::unique_lock lock(state_mu_);
    pending.erase(request);
    state_cv_.wait(lock, [&] { return poison_ || connections_ != generation; });
  }

  bool send_locked(MessageType type, std::uint64_t request, std::span<const std::byte> payload) {
    frame_.clear();
    protocol::encode_frame(static_cast<std::uint8_t>(type), request, payload, frame_);
    const std::byte* data = frame_.data();
    std::size_t left = frame_.size();
    // A server that takes nothing for kSilentTtls lease TTLs (stopped,
    // hung, cut off: its socket's buffer full) is gone: the send gives up,
    // and the connection is shut down for the reader to reconnect. Without
    // the bound, the sender would wait under send_mu_ for ever, and with it
    // every thread that sends, the heartbeat among them.
    const auto ttl = lease_ttl_ms_.load();
    const auto give_up = std::chrono::steady_clock::now() +
                         (ttl == 0 ? std::chrono::milliseconds(kWelcomeWait)
                                   : kSilentTtls * std::chrono::milliseconds(ttl));
    while (left > 0) {
      auto sent = ::send(fd_, data, left, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
          pollfd writable{fd_, POLLOUT, 0};
          if (wait.count() > 0 && ::poll(&writable, 1, static_cast<int>(wait.count()) + 1) != 0) continue;
          if (options_.warn) {
            options_.warn(fmt::format("the server took nothing for {} of its lease TTLs: taking it for gone and "
                                      "reconnecting",
                                      kSilentTtls));
          }
          ::shutdown(fd_, SHUT_RDWR);
        }
        return false;
      }
      data += sent;
      left -= static_cast<std::size_t>(sent);
    }
    return true;
  }

  // While connecting (the reader is not running): the next frame, which
  // must be `expected` (an error frame says why not).
  std::optional<protocol::Frame> wait_frame(
      std::initializer_list<MessageType> expected, std::string& problem,
      std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) {
    std::vector<std::byte> buffer(1 << 16);
    for (;;) {
      if (auto frame = decoder_.next()) {
        auto type = static_cast<MessageType>(frame->type);
        if (std::find(expected.begin(), expected.end(), type) != expected.end()) return frame;
        if (type == MessageType::error) {
          auto error = protocol::decode_error(frame->payload);
          problem = error ? fmt::format("the server refused: {}: {}", error->code, error->message)
                          : "the server refused";
          return std::nullopt;
        }
        // Positions are learnt again from the leases; a checkpoint request
        // is only an optimisation.
        if (type == MessageType::durable || type == MessageType::checkpoint_soon || type == MessageType::pong) continue;
        // Calls for the shards leased so far are served at once.
        if (type == MessageType::forwarded || type == MessageType::forward_reply) {
          handle(*frame);
          continue;
        }
        problem = fmt::format("the server sent {} where {} was due", protocol::message_type_name(type),
                              protocol::message_type_name(*expected.begin()));
        return std::nullopt;
      }
      if (!decoder_.error().empty()) {
        problem = "a bad frame from the server: " + decoder_.error();
        return std::nullopt;
      }
      if (deadline != std::chrono::steady_clock::time_point::max()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd ready{fd_, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&ready, 1, static_cast<int>(left.count()) + 1) == 0) {
          problem = "nothing from the server in time";
          return std::nullopt;
        }
      }
      auto got = ::recv(fd_, buffer.data(), buffer.size(), 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        problem = "the server closed the connection";
        return std::nullopt;
      }
      heard();
      decoder_.feed(std::span(buffer.data(), static_cast<std::size_t>(got)));
    }
  }

  void read_loop() {
    std::vector<std::byte> buffer(1 << 16);
    for (;;) {
      while (auto frame = decoder_.next()) handle(*frame);
      if (!decoder_.error().empty()) {
        set_poison(make_error_code(wal::errc::corrupt), "a bad frame from the server: " + decoder_.error());
        return;
      }
      if (poison()) return;
      auto got = ::recv(fd_, buffer.data(), buffer.size(), 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        if (stopping_ || !reconnect()) return;
        continue;
      }
      heard();
      decoder_.feed(std::span(buffer.data(), static_cast<std::size_t>(got)));
    }
  }

  void heard() { heard_ns_ = std::chrono::steady_clock::now().time_since_epoch().count(); }

  // The server went away: try again for a while. Reads in progress fail;
  // appends are kept and sent after the reconnect.
  bool reconnect() {
    {
      std::lock_guard lock(send_mu_);
      connected_ = false;
      ::close(fd_);
      fd_ = -1;
    }
    std::map<std::uint64_t, OnReply> forwards;
    {
      std::lock_guard lock(state_mu_);
      for (auto& [id, pending] : reads_) pending.lost = true;
      for (auto& [id, pending] : calls_) pending.lost = true;
      forwards.swap(forwards_);
      state_cv_.notify_all();
    }
    for (auto& [id, on_reply] : forwards) on_reply(Part::lost, protocol::bytes_of("the connection to the server went"));
    auto give_up = std::chrono::steady_clock::now() + kReconnectFor;
    std::string problem;
    // The server that went is tried last: of a replicated cluster's, another
    // leads next (and a stopped one would hold the first try for
    // kWelcomeWait).
    next_address_ = (next_address_ + 1) % addresses_.size();
    while (!stopping_ && std::chrono::steady_clock::now() < give_up) {
      problem.clear();
      auto connected = connect(problem);
      if (connected) {
        // Positions may have moved on (records the server made durable but
        // had not told before it went).
        {
          std::lock_guard lock(state_mu_);
          ++connections_;
          state_cv_.notify_all();
        }
        for (std::uint32_t shard = 0; shard < shards_; ++shard) notify(shard);
        // The server forgot this worker's permits and asks with the old
        // connection: declare them again.
        std::function<void()> hook;
        {
          std::lock_guard lock(listener_mu_);
          hook = on_reconnect_;
        }
        if (hook) hook();
        return true;
      }
      if (connected.error() == make_error_code(wal::errc::corrupt)) break;  // not worth another try
      if (problem.starts_with("the server refused")) break;
      {
        std::lock_guard lock(send_mu_);
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
      }
      std::this_thread::sleep_for(kReconnectPause);
    }
    auto why = fmt::format("lost the server at {}: {}", options_.address, problem.empty() ? "stopped" : problem);
    if (options_.warn) options_.warn(why);
    set_poison(make_error_code(wal::errc::closed), why);
    return false;
  }

  void raise_durable(ShardId shard, Lsn lsn) {
    auto& position = durable_[shard];
    Lsn current = position.load();
    while (lsn > current && !position.compare_exchange_weak(current, lsn)) {
    }
  }

  void handle(const protocol::Frame& frame) {
    if (static_cast<MessageType>(frame.type) == MessageType::error && options_.warn) {
      auto error = protocol::decode_error(frame.payload);
      options_.warn(error ? fmt::format("the server refused: {}: {}", error->code, error->message)
                          : "the server refused");
    }
    switch (static_cast<MessageType>(frame.type)) {
      case MessageType::durable: {
        auto durable = protocol::decode_durable(frame.payload);
        if (!durable || durable->shard >= shards_) return;
        {
          std::lock_guard lock(send_mu_);
          raise_durable(durable->shard, durable->lsn);
          durable_events_.fetch_add(1, std::memory_order_release);
          auto& unacked = unacked_[durable->shard];
          while (!unacked.empty() && unacked.front().first <= durable->lsn) unacked.pop_front();
        }
        {
          std::lock_guard lock(state_mu_);
          state_cv_.notify_all();
        }
        notify(durable->shard);
        return;
      }
      case MessageType::records:
      case MessageType::read_end: {
        std::lock_guard lock(state_mu_);
        auto pending = reads_.find(frame.request_id);
        if (pending == reads_.end()) return;
        if (static_cast<MessageType>(frame.type) == MessageType::read_end) {
          pending->second.done = true;
        } else if (auto chunk = protocol::decode_records(frame.payload)) {
          pending->second.chunks.push_back(std::move(*chunk));
        }
        state_cv_.notify_all();
        return;
      }
      case MessageType::store_rows:
      case MessageType::store_reply: {
        std::lock_guard lock(state_mu_);
        auto pending = calls_.find(frame.request_id);
        if (pending == calls_.end()) return;
        if (static_cast<MessageType>(frame.type) == MessageType::store_rows) {
          if (auto rows = decode_rows(frame.payload)) {
            for (auto& row : *rows) pending->second.rows.push_back(std::move(row));
          }
        } else if (auto reply = decode_store_reply(frame.payload)) {
          pending->second.reply = std::move(*reply);
        } else {
          pending->second.reply = StoreReply{"bad_request", "a malformed store reply from the server", {}};
        }
        state_cv_.notify_all();
        return;
      }
      case MessageType::checkpoint_soon: {
        auto soon = protocol::decode_checkpoint_soon(frame.payload);
        if (!soon) return;
        std::function<void(ShardId)> hook;
        {
          std::lock_guard lock(listener_mu_);
          hook = checkpoint_hook_;
        }
        if (hook) {
          for (auto shard : soon->shards) {
            if (shard < shards_) hook(shard);
          }
        }
        return;
      }
      case MessageType::lease: {
        // A shard freed up (its holder went) and this standby takes it.
        auto lease = protocol::decode_lease(frame.payload);
        if (!lease || lease->shard >= shards_) return;
        {
          std::lock_guard lock(send_mu_);
          if (held_[lease->shard]) return;
          take_lease_locked(*lease);
        }
        lease_taken(lease->shard);
        return;
      }
      case MessageType::forwarded: {
        auto forward = protocol::decode_forward(frame.payload);
        if (!forward) return;
        Call call;
        call.shard = forward->shard;
        call.body = std::move(forward->body);
        call.reply = [gate = gate_, link = current_link(), relay = frame.request_id](bool last,
                                                                                       std::vector<std::byte> body) {
          std::lock_guard lock(gate->mu);
          if (gate->sink) gate->sink->send_reply(link, relay, last, body);
        };
        std::function<void(Call)> hook;
        {
          std::lock_guard lock(listener_mu_);
          if (!on_call_) {
            early_calls_.push_back(std::move(call));
            return;
          }
          hook = on_call_;
        }
        hook(std::move(call));
        return;
      }
      case MessageType::forward_reply: {
        auto reply = protocol::decode_forward_reply(frame.payload);
        if (!reply) return;
        OnReply on_reply;
        if (reply->part == protocol::ReplyPart::more) {
          std::lock_guard lock(state_mu_);
          auto found = forwards_.find(frame.request_id);
          if (found == forwards_.end()) return;
          on_reply = found->second;
        } else if (auto taken = take_forward(frame.request_id)) {
          on_reply = std::move(*taken);
        } else {
          return;
        }
        static constexpr Part kParts[] = {Part::more, Part::last, Part::no_holder, Part::lost};
        on_reply(kParts[static_cast<int>(reply->part)], std::move(reply->body));
        return;
      }
      case MessageType::permit_grant: {
        std::function<void(std::uint64_t)> hook;
        {
          std::lock_guard lock(listener_mu_);
          hook = on_permit_;
        }
        if (hook) hook(frame.request_id);
        return;
      }
      case MessageType::error: {
        auto error = protocol::decode_error(frame.payload);
        set_poison(make_error_code(wal::errc::closed),
                   error ? fmt::format("the server refused: {}: {}", error->code, error->message) : "refused");
        return;
      }
      default:
        return;
    }
  }

  std::optional<OnReply> take_forward(std::uint64_t id) {
    std::lock_guard lock(state_mu_);
    auto found = forwards_.find(id);
    if (found == forwards_.end()) return std::nullopt;
    auto on_reply = std::move(found->second);
    forwards_.erase(found);
    return on_reply;
  }
  std::uint64_t current_link() {
    std::lock_guard lock(send_mu_);
    return link_;
  }
  void send_reply(std::uint64_t link, std::uint64_t relay, bool last, const std::vector<std::byte>& body) {
    std::lock_guard lock(send_mu_);
    if (link != link_ || fd_ < 0) return;
    auto part = last ? protocol::ReplyPart::last : protocol::ReplyPart::more;
    (void)send_locked(MessageType::forward_reply, relay, protocol::encode(protocol::ForwardReply{part, body}));
  }

  void set_poison(std::error_code error, std::string why) {
    std::map<std::uint64_t, OnReply> forwards;
    {
      std::lock_guard lock(state_mu_);
      if (poison_) return;
      poison_ = error;
      poison_text_ = std::move(why);
      forwards.swap(forwards_);
      state_cv_.notify_all();
    }
    for (auto& [id, on_reply] : forwards) on_reply(Part::failed, protocol::bytes_of(poison_text_));
    for (std::uint32_t shard = 0; shard < shards_; ++shard) notify(shard);
  }
  void notify(ShardId shard) {
    Listener listener;
    {
      std::lock_guard lock(listener_mu_);
      listener = listener_;
    }
    if (listener) listener(shard);
  }

  RemoteOptions options_;
  // options_.address: each server's, parsed, and which to try first.
  std::vector<protocol::Address> addresses_;
  std::vector<std::string> address_texts_;
  std::size_t next_address_ = 0;  // the connecting thread's
  // When a byte last came from the server (steady clock ticks): the
  // heartbeat takes a server silent for the lease TTL for gone.
  std::atomic<std::int64_t> heard_ns_{0};
  std::atomic<std::uint32_t> lease_ttl_ms_{0};  // the server's, from its welcome
  // After a reconnect: how many more shards to ask for, and when.
  std::atomic<std::uint32_t> standby_want_{0};
  std::atomic<std::chrono::steady_clock::rep> standby_at_{0};
  bool greeted_ = false;                         // under send_mu_: the hello is answered
  std::thread heartbeat_;
  std::mutex heartbeat_mu_;
  std::condition_variable heartbeat_cv_;
  int fd_ = -1;  // under send_mu_ (and read by the reader)
  std::atomic<bool> stopping_{false};
  std::uint32_t shards_ = 0;
  std::vector<std::uint64_t> epochs_;       // under send_mu_
  std::vector<std::atomic<Lsn>> next_lsn_;  // the last LSN appended (under send_mu_)
  std::vector<std::atomic<Lsn>> durable_;
  // Per shard, records appended and not yet durable (under send_mu_).
  std::vector<std::deque<std::pair<Lsn, std::vector<std::byte>>>> unacked_;
  bool connected_ = false;  // under send_mu_
  std::string http_;        // under send_mu_: this engine's HTTP API, announced at each connect
  std::string front_http_token_;  // under send_mu_: the server's HTTP token, from its latest welcome
  std::atomic<std::uint64_t> records_sent_{0};
  std::atomic<std::uint64_t> durable_events_{0};  // durable frames handled
  std::atomic<int> inline_skips_{0};              // write_inline: waits left to sleep at once
  protocol::FrameDecoder decoder_;
  std::thread reader_;
  mutable std::mutex send_mu_;
  std::vector<std::byte> frame_;  // under send_mu_
  mutable std::mutex state_mu_;
  std::condition_variable state_cv_;
  std::error_code poison_;
  std::string poison_text_;
  std::uint64_t next_request_ = 0;
  std::uint64_t connections_ = 0;  // made so far (under state_mu_): a read waits for the next
  std::map<std::uint64_t, PendingRead> reads_;
  std::map<std::uint64_t, PendingCall> calls_;
  std::map<std::uint64_t, OnReply> forwards_;  // calls forwarded, awaiting their answer (under state_mu_)
  std::mutex listener_mu_;
  Listener listener_;
  std::function<void(Call)> on_call_;         // under listener_mu_
  std::function<void(ShardId)> on_lease_;     // under listener_mu_
  std::vector<Call> early_calls_;             // before the handlers were set (under listener_mu_)
  std::vector<ShardId> early_leases_;         // before the handlers were set (under listener_mu_)
  std::vector<std::atomic<bool>> held_;       // leased to this worker (changed under send_mu_)
  std::vector<std::atomic<bool>> running_;    // and running in the engine (ShardRouter::set_running)
  std::uint64_t link_ = 0;                    // connections made (under send_mu_): a reply names its own
  struct ReplyGate {
    explicit ReplyGate(RemoteSink* owner) : sink(owner) {}
    std::mutex mu;
    RemoteSink* sink = nullptr;  // null once the sink is gone
  };
  std::shared_ptr<ReplyGate> gate_ = std::make_shared<ReplyGate>(this);
  std::function<void(ShardId)> checkpoint_hook_;  // under listener_mu_
  std::function<void(std::uint64_t)> on_permit_;  // under listener_mu_: a permit_grant came
  std::function<void()> on_reconnect_;            // under listener_mu_: a new connection is up
};

}  // namespace

Result<RemoteConnection> connect_remote_sink(const RemoteOptions& options, std::uint32_t* shard_count,
                                             std::string* problem) {
  std::string why;
  auto sink = std::make_unique<RemoteSink>(options);
  // A server that is restarting is waited for, as a reconnect would.
  auto give_up = std::chrono::steady_clock::now() + kReconnectFor;
  for (;;) {
    auto connected = sink->connect(why);
    if (connected) break;
    if (connected.error() == make_error_code(wal::errc::corrupt) || connected.error() == std::errc::timed_out ||
        std::chrono::steady_clock::now() >= give_up ||
        why.starts_with("the server refused")) {
      if (problem) *problem = why;
      return connected.error();
    }
    // From the server after the one that failed: a stopped one (its kernel
    // takes the connect) must not hold every try up.
    const std::size_t next = sink->next_address();
    sink = std::make_unique<RemoteSink>(options);
    sink->start_at(next);
    std::this_thread::sleep_for(kReconnectPause);
  }
  sink->start_reading();
  if (shard_count) *shard_count = sink->shard_count();
  RemoteConnection connection;
  connection.store = sink.get();
  connection.router = sink.get();
  connection.permits = sink.get();
  connection.sink = std::move(sink);
  return connection;
}

}  // namespace fusee::remote
