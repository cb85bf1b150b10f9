#include "replica/replica_node.hpp"

#include <boost/asio.hpp>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "protocol/address.hpp"
#include "protocol/frame.hpp"
#include "replica/call_replies.hpp"
#include "replica/merge_sends.hpp"
#include "replica/frame_writer.hpp"
#include "replica/node_stats.hpp"
#include "replica/primary_log.hpp"
#include "replica/replica_segments.hpp"
#include "replica/replica_store.hpp"
#include "replica/replica_wire.hpp"
#include "wal/errc.hpp"

namespace fusee::replica {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace replication;

namespace {

// Messages queued for a peer that is not taking them are dropped past this:
// the protocol retransmits what matters, and a dead peer must not grow the
// queue without bound.
constexpr std::size_t kPeerQueueBytesMax = 64u << 20;
constexpr std::chrono::milliseconds kReconnectDelay{50};
// Appends taken while the primary's log opens, appended once it is open;
// past this, the client is told to try again.
constexpr std::size_t kEarlyBytesMax = 16u << 20;
static_assert(kAppendBytesMax + 64 <= payload_bytes_max(kSegmentBytesDefault),
              "a batch of one largest append fits a replica's segment");
// Appends merged into one message stay within the core's own budget for one
// (ReplicaOptions::append_bytes_max), far below what a frame may carry.
constexpr std::uint64_t kMergedAppendBytesMax = 8u << 20;
// A client that sends and does not read its replies is cut off here: two
// of the largest frames (a forwarded call's answer may be one).
constexpr std::size_t kClientQueueBytesMax = 2 * protocol::kFrameBytesMax;

}  // namespace

struct ReplicaNode::Impl {
  // An accepted connection: a peer sending messages, or a client.
  struct Connection : std::enable_shared_from_this<Connection> {
    Connection(Impl& impl, tcp::socket socket) : impl(impl), socket(std::move(socket)), writer(this->socket) {}
    void read() {
      auto self = shared_from_this();
      socket.async_read_some(asio::buffer(buffer), [this, self](boost::system::error_code error, std::size_t n) {
        if (error || closed) return close();
        decoder.feed(std::span(buffer.data(), n));
        while (auto frame = decoder.next()) {
          impl.on_frame(*this, *frame);
          if (closed) return;
        }
        if (!decoder.error().empty()) return close();
        read();
      });
    }
    void send(std::vector<std::byte> frame) {
      if (closed) return;
      if (!writer.push(std::move(frame), kClientQueueBytesMax)) {
        impl.say("a connection that does not read its replies: closing it");
        close();
        return;
      }
      writer.pump(shared_from_this(), [this](boost::system::error_code) { close(); });
    }
    void close() {
      if (closed) return;
      closed = true;
      boost::system::error_code ignored;
      socket.close(ignored);
      impl.connections.erase(this);
    }
    Impl& impl;
    tcp::socket socket;
    FrameWriter writer;
    protocol::FrameDecoder decoder = frame_decoder();
    std::array<std::byte, 64 * 1024> buffer{};
    bool closed = false;
  };

  // This replica's connection to one peer: it only sends on it.
  struct PeerLink {
    PeerLink(Impl& impl, ReplicaId id, tcp::endpoint endpoint)
        : impl(impl), id(id), endpoint(endpoint), socket(impl.io), writer(socket), retry(impl.io) {}
    void send(std::vector<std::byte> frame) {
      if (!writer.push(std::move(frame), kPeerQueueBytesMax)) {
        // A peer that takes nothing (stopped, or far behind): what waits
        // for it is stale by now, and the protocol resends what matters.
        // Start over on a new connection rather than keep the oldest.
        impl.say("the link to replica " + std::to_string(id) + " is " + std::to_string(kPeerQueueBytesMax >> 20) +
                 " MiB behind: resetting it");
        reset();
        return;
      }
      if (!connected) return connect();
      writer.pump(nullptr, [this](boost::system::error_code) { reset(); });
    }
    void connect() {
      if (connecting || waiting || impl.stopping) return;
      connecting = true;
      socket.async_connect(endpoint, [this](boost::system::error_code error) {
        connecting = false;
        if (impl.stopping) return;
        if (error) return reset();
        socket.set_option(tcp::no_delay(true));
        connected = true;
        writer.pump(nullptr, [this](boost::system::error_code) { reset(); });
      });
    }
    // What was queued is dropped (the protocol tolerates loss); the next
    // message reconnects, after a pause so a dead peer costs little.
    void reset() {
      boost::system::error_code ignored;
      socket.close(ignored);
      connected = false;
      writer.clear();
      if (impl.stopping || waiting) return;
      waiting = true;
      retry.expires_after(kReconnectDelay);
      retry.async_wait([this](boost::system::error_code error) {
        waiting = false;
        if (!error && !writer.empty()) connect();  // async_connect reopens the closed socket
      });
    }
    Impl& impl;
    ReplicaId id;
    tcp::endpoint endpoint;
    tcp::socket socket;
    FrameWriter writer;
    asio::steady_timer retry;
    bool connected = false;
    bool connecting = false;
    bool waiting = false;
  };

  // A client's append waiting for the log: its record's publication, or
  // (early) the log's opening.
  struct PendingAppend {
    std::weak_ptr<Connection> client;
    std::uint64_t request_id = 0;
  };
  struct EarlyAppend {
    std::string record;
    PendingAppend waiter;
  };

  Impl(io::FileSystem& fs, ReplicaNodeOptions opts) : fs(fs), options(std::move(opts)), acceptor(io), ticker(io) {}

  // --- The loop thread.

  // What the core asked for, carried out once the handlers that are ready
  // have run: appends proposed by many clients in one turn of the loop go to
  // each backup as one message, and its acknowledgements come back as one.
  void handle(Output& out) {
    deferred.sends.insert(deferred.sends.end(), std::make_move_iterator(out.sends.begin()),
                          std::make_move_iterator(out.sends.end()));
    deferred.writes.insert(deferred.writes.end(), std::make_move_iterator(out.writes.begin()),
                           std::make_move_iterator(out.writes.end()));
    deferred.calls.insert(deferred.calls.end(), out.calls.begin(), out.calls.end());
    if (out.published_through) {
      deferred.published_through = std::max(deferred.published_through.value_or(0), *out.published_through);
    }
    out = Output{};
    if (flush_posted) return;
    flush_posted = true;
    asio::post(io, [this] { flush_turn(); });
  }

  // The turn handle() posted: what the core asked for, carried out.
  void flush_turn() {
    if (stopping) return;
    // What the core published first: a batch the seal below finds refused
    // (the core no longer serves) closes the log, and what a quorum holds
    // must have been published to its clients before.
    if (deferred.published_through) primary_log->publish_through(*deferred.published_through);
    seal();  // the turn's records, proposed: their outputs join the deferred ones
    flush_posted = false;
    Output now = std::move(deferred);
    deferred = Output{};
    if (auto filled = fill_elided(now.sends); !filled) {
      stop_on_disk_error("a durable batch could not be read back", filled.error());
      return;
    }
    merge_sends(now.sends, kMergedAppendBytesMax);
    carry_out(now);
  }

  // An engine's records were staged: seal them on this turn, rather than
  // post a turn that posts the flush (one wake-up fewer a step), unless a
  // flush is posted already (it seals them).
  void engine_staged() {
    if (stopping || flush_posted) return;
    flush_posted = true;
    flush_turn();
  }

  // The batches the core sends without their payload (it released them:
  // ReplicaOptions::held_bytes_max) are read back from the segments -- before
  // this turn's writes go to the disk, since a later one may cut them.
  // A message the disk has retired batches of since the core last heard
  // (the disk retires as it takes the write, the core learns it when the
  // write completes) is dropped, as the network might: it is sent again,
  // from the new start, at the next heartbeat.
  Result<void> fill_elided(std::vector<Message>& sends) {
    std::erase_if(sends, [&](Message& message) { return !replica::fill_anchor(message, store->start()); });
    for (auto it = sends.begin(); it != sends.end();) {
      bool retired = false;
      for (Entry* entry : replication::elided_entries(*it)) {
        auto read = store->read(entry->seq);
        if (!read && read.error() == make_error_code(StoreErrc::retired_batch)) {
          retired = true;
          break;
        }
        if (!read) return read.error();
        if (read->view != entry->view || read->acked != entry->acked) return make_error_code(StoreErrc::unreadable_batch);
        *entry = std::move(*read);
        ++batches_read_back;
      }
      it = retired ? sends.erase(it) : std::next(it);
    }
    return ok();
  }

  // A log that restarts at another replica's start (its disk lost what the
  // others retired) must not leave the run store behind: the store must
  // have been given every batch through the anchor, or it would need
  // batches no replica holds. Otherwise the replica stops, to be rebuilt
  // with a run store fetched from the primary (`fusee replica rebuild`).
  bool restart_allowed(const std::vector<DiskWrite>& writes) {
    if (!committed_feed) return true;
    for (const DiskWrite& write : writes) {
      if (write.restart && write.restart->seq > committed_feed->fed()) {
        failure = make_error_code(StoreErrc::store_behind_log);
        say("the log must restart after batch " + std::to_string(write.restart->seq) +
            ", where the primary's starts (it retired what came before), but the run store was given batches "
            "through " + std::to_string(committed_feed->fed()) +
            " only: stopping; stop the process and run `fusee replica rebuild` on this directory");
        shut_down();
        return false;
      }
    }
    return true;
  }

  // Fail-stop: a disk that loses a write or a batch is suspect, and the
  // replica stops rather than vouch for it.
  void stop_on_disk_error(const std::string& what, std::error_code error) {
    failure = error;
    say(what + " (" + error.message() + "): stopping");
    shut_down();
  }

  void carry_out(Output& out) {
    if (!restart_allowed(out.writes)) return;
    for (Message& message : out.sends) {
      if (message.to >= peers.size() || !peers[message.to]) continue;
      const auto bytes = encode_message(message);
      peers[message.to]->send(frame_of(FrameType::peer_message, 0, bytes));
    }
    if (!out.writes.empty() && options.disk_thread) {
      std::lock_guard lock(disk_mutex);
      for (DiskWrite& write : out.writes) disk_queue.push_back(std::move(write));
      disk_wake.notify_one();
    }
    if (!out.calls.empty()) {
      std::lock_guard lock(etcd_mutex);
      for (const CoordinatorCall& call : out.calls) etcd_queue.push_back(call);
      etcd_wake.notify_one();
    }
    if (out.published_through) {
      stats.published(*out.published_through);
      publish(*out.published_through);
    }
    if (!out.writes.empty() && !options.disk_thread) {
      // On this thread, after the sends above have gone out: a primary's
      // flush overlaps its backups' receipt, and whatever arrives meanwhile
      // waits in the sockets to be written as the next group.
      const auto written = write_group(out.writes);
      std::vector<std::uint64_t> ids;
      for (const DiskWrite& write : out.writes) ids.push_back(write.id);
      if (!written) disk_error = written.error();
      on_disk_done(ids, written.has_value());
      if (stopping) return;
    }
    follow_role();
    feed_committed();
    stats.turn(*core, options.self, options.addresses.size(), batches_read_back);
    if (options.engine.primary_known && core->known_primary() != last_known_primary) {
      last_known_primary = core->known_primary();
      options.engine.primary_known(last_known_primary);
    }
    if (core->suspect() != last_suspect) {
      last_suspect = core->suspect();
      say(last_suspect ? "suspect" : "repaired: it holds a primary's whole log, durably, and vouches again");
    }
    if (core->role() != last_role || core->lead() != last_lead) {
      last_role = core->role();
      last_lead = core->lead();
      say("role " + std::string(role_name(last_role)) + ", view " + std::to_string(core->promised()) +
          (last_role == Role::primary ? ", serving from batch " + std::to_string(core->log().end() + 1) : ""));
    }
  }

  // The records appended this turn, sealed by the primary's log into
  // batches (one, unless they outgrow it) and proposed: one record, one
  // message to each backup and one acknowledgement serve them all.
  void seal() {
    if (primary_log->seal()) return;
    say("the core refused a batch of its primary's log: closing the log");
    stop_serving();
  }

  // The primary's log follows the core: it opens when the core serves a
  // view with its disk idle (so the log reads what the core holds), and
  // closes when the core stops serving that view.
  // The engine's committed batches (its run store's records), a budget a
  // turn: the rest on a turn of its own, after what else is ready.
  void feed_committed() {
    if (!committed_feed || stopping) return;
    auto more = committed_feed->feed(*core, *store, kFeedBytesPerTurn);
    if (!more && more.error() == make_error_code(StoreErrc::store_behind_log)) {
      stop_on_disk_error("the run store has applied through batch " + std::to_string(committed_feed->fed()) +
                             " but the log starts after batch " + std::to_string(core->log().retired_through()) +
                             "; stop the process and run `fusee replica rebuild` on this directory",
                         more.error());
      return;
    }
    if (!more) {
      stop_on_disk_error("a committed batch could not be read back", more.error());
      return;
    }
    if (*more > 0 && !feed_posted) {
      feed_posted = true;
      asio::post(io, [this] {
        feed_posted = false;
        feed_committed();
      });
    }
  }

  void follow_role() {
    const bool primary = core->role() == Role::primary;
    if (primary_log->view() != 0 && (!primary || core->lead() != primary_log->view())) stop_serving();
    if (!primary && !early.empty()) stop_serving();
    if (primary && primary_log->view() == 0 && core->disk_idle() && core->durable_end() == core->log().end()) {
      // What its batches say was published, or what it has published since:
      // a new primary's commit starts again from 0, and the log would hold
      // every batch before it as in flight.
      const Seq published = std::max(core->commit(), std::min<Seq>(core->acked_seen(), core->log().end()));
      primary_log->open(core->lead(), core->log().end(), published);
    }
  }

  void on_log_opened(Result<void> opened) {
    if (!opened) {
      stop_on_disk_error("the primary's log could not be opened over the replica's", opened.error());
      return;
    }
    if (core->role() != Role::primary || core->lead() != primary_log->view()) {
      stop_serving();
      return;
    }
    primary_log->publish_through(core->commit());
    std::vector<EarlyAppend> taken = std::exchange(early, {});
    early_bytes = 0;
    for (EarlyAppend& append : taken) append_record(std::as_bytes(std::span(append.record)), append.waiter);
    Output none;
    handle(none);  // a flush seals them
  }

  // Stages a client's record in the primary's log; its reply waits for
  // the record's publication.
  void append_record(std::span<const std::byte> record, const PendingAppend& waiter) {
    auto lsn = primary_log->append(record);
    if (lsn) {
      pending.emplace(*lsn, waiter);
      return;
    }
    if (lsn.error() == make_error_code(wal::errc::record_too_large)) {
      // No batch of this replica's segments takes it: the client never will.
      if (auto client = waiter.client.lock()) client->close();
      return;
    }
    // Nothing was appended (the log holds too much unpublished, or closed):
    // the client may try again.
    reply_append(waiter, {AppendStatus::not_primary, 0, kNoReplica, 0});
  }

  void on_published(wal::Lsn through) {
    while (!pending.empty() && pending.begin()->first <= through) {
      auto node = pending.extract(pending.begin());
      reply_append(node.mapped(), {AppendStatus::published, primary_log->batch_of(node.key()), options.self, node.key()});
    }
  }

  void publish(Seq through) {
    primary_log->publish_through(through);
    seal();  // what waited for batches in flight to be published
  }

  // The core stopped serving the view the pending appends were made in.
  // One whose batch was proposed may survive or not, and nothing here can
  // tell: unknown (with the batch, and no LSN: a later primary may give
  // its LSN to another record). One never proposed (staged, or in a batch
  // the core refused), like the early ones, was appended nowhere.
  void stop_serving() {
    for (auto& [lsn, waiter] : pending) {
      const Seq batch = primary_log->batch_of(lsn);
      reply_append(waiter, {batch == 0 ? AppendStatus::not_primary : AppendStatus::unknown, batch, kNoReplica, 0});
    }
    pending.clear();
    for (const EarlyAppend& append : early) reply_append(append.waiter, {AppendStatus::not_primary, 0, kNoReplica, 0});
    early.clear();
    early_bytes = 0;
    stats.stopped_serving();
    primary_log->close();
  }

  void reply_append(const PendingAppend& append, const AppendReply& reply) {
    if (auto client = append.client.lock()) {
      client->send(frame_of(FrameType::append_reply, append.request_id, encode_append_reply(reply)));
    }
  }

  void on_frame(Connection& from, const protocol::Frame& frame) {
    Output out;
    switch (static_cast<FrameType>(frame.type)) {
      case FrameType::peer_message: {
        auto message = decode_message(frame.payload);
        if (!message || message->to != options.self || message->from >= options.addresses.size() ||
            message->from == options.self) {
          say("a peer message that does not decode or is not for this replica; closing its connection");
          from.close();
          return;
        }
        core->receive(*message, out);
        break;
      }
      case FrameType::append: {
        if (frame.payload.size() > kAppendBytesMax) {
          from.close();
          return;
        }
        if (core->role() != Role::primary || options.engine.configure) {
          // An engine's replica takes no client's record: it would read as a journal record.
          from.send(frame_of(FrameType::append_reply, frame.request_id,
                             encode_append_reply({AppendStatus::not_primary, 0, kNoReplica, 0})));
          return;
        }
        // Staged in the primary's log, sealed when the turn's flush runs;
        // while the log opens, kept until it is open.
        const PendingAppend waiter{from.weak_from_this(), frame.request_id};
        if (primary_log->serving()) {
          append_record(frame.payload, waiter);
        } else if (early_bytes + frame.payload.size() <= kEarlyBytesMax) {
          early.push_back({std::string(reinterpret_cast<const char*>(frame.payload.data()), frame.payload.size()), waiter});
          early_bytes += frame.payload.size();
        } else {
          reply_append(waiter, {AppendStatus::not_primary, 0, kNoReplica, 0});
          return;
        }
        break;
      }
      case FrameType::call: {
        auto call = decode_call(frame.payload);
        if (!call) {
          say("a forwarded call that does not decode; closing its connection");
          from.close();
          return;
        }
        // Sent from whatever thread answers, through the loop.
        auto reply = call_reply(call_replies, frame.request_id, [client = from.weak_from_this()](std::vector<std::byte> out) {
          if (auto connection = client.lock()) connection->send(std::move(out));
        });
        if (!options.engine.call) {
          reply(CallPart::not_here, bytes_of("replica " + std::to_string(options.self) + " runs no engine"));
          return;
        }
        try {
          options.engine.call(call->shard, std::move(call->body), reply);
        } catch (const std::exception& error) {
          // Nothing a caller sends may stop the loop.
          say(std::string("a forwarded call failed: ") + error.what());
          reply(CallPart::not_here, bytes_of("the replica could not take the call"));
        }
        return;
      }
      case FrameType::status: {
        auto status = status_of(*core, options.self, options.addresses.size(), batches_read_back);
        status.segment_bytes = store->segment_bytes();
        status.lag_us = stats.lag_us(status);
        from.send(frame_of(FrameType::status_reply, frame.request_id, encode_status(status)));
        return;
      }
      default:
        say("a frame of unknown type " + std::to_string(frame.type) + "; closing its connection");
        from.close();
        return;
    }
    handle(out);
  }

  void accept() {
    acceptor.async_accept([this](boost::system::error_code error, tcp::socket socket) {
      if (stopping) return;
      if (!error) {
        socket.set_option(tcp::no_delay(true), error);
        auto connection = std::make_shared<Connection>(*this, std::move(socket));
        connections[connection.get()] = connection;
        connection->read();
      }
      accept();
    });
  }

  void tick() {
    ticker.expires_after(options.tick);
    ticker.async_wait([this](boost::system::error_code error) {
      if (error || stopping) return;
      Output out;
      core->tick(out);
      handle(out);
      tick();
    });
  }

  void on_disk_done(const std::vector<std::uint64_t>& ids, bool succeeded) {
    for (std::uint64_t id : ids) {
      Output out;
      if (!core->disk_done(id, succeeded, out, store->start().first_seq - 1)) {
        stop_on_disk_error("a disk write failed", disk_error);
        return;
      }
      handle(out);
    }
  }

  void shut_down() {
    if (stopping) return;
    stopping = true;
    {
      std::lock_guard lock(call_replies->mu);
      call_replies->io = nullptr;  // the connections close below: later replies go nowhere
    }
    primary_log->close();  // nothing more is published: the clients' connections close below
    boost::system::error_code ignored;
    acceptor.close(ignored);
    ticker.cancel();
    for (auto& [raw, connection] : std::map(connections)) connection->close();
    for (auto& peer : peers) {
      if (peer) {
        peer->socket.close(ignored);
        peer->retry.cancel();
      }
    }
    {
      std::lock_guard lock(disk_mutex);
      disk_stop = true;
      disk_wake.notify_one();
    }
    {
      std::lock_guard lock(etcd_mutex);
      etcd_stop = true;
      etcd_wake.notify_one();
    }
    io.stop();
  }

  // Writes in order, then one sync for all of them.
  Result<void> write_group(const std::vector<DiskWrite>& group) {
    for (const DiskWrite& write : group) FUSEE_TRY_VOID(store->apply(write));
    FUSEE_TRY_VOID(store->sync());
    for (const DiskWrite& write : group) FUSEE_TRY_VOID(store->finish(write));
    return ok();
  }

  // --- The disk thread (ReplicaNodeOptions::disk_thread): each group of
  // waiting writes, one sync.
  void disk_loop() {
    for (;;) {
      std::vector<DiskWrite> group;
      {
        std::unique_lock lock(disk_mutex);
        disk_wake.wait(lock, [&] { return disk_stop || !disk_queue.empty(); });
        if (disk_stop) return;
        group.assign(std::make_move_iterator(disk_queue.begin()), std::make_move_iterator(disk_queue.end()));
        disk_queue.clear();
      }
      Result<void> result = write_group(group);
      std::vector<std::uint64_t> ids;
      for (const DiskWrite& write : group) ids.push_back(write.id);
      if (!result) disk_error = result.error();
      asio::post(io, [this, ids, ok = result.has_value()] { on_disk_done(ids, ok); });
      if (!result) return;  // fail-stop: nothing more is written
    }
  }

  // --- The etcd thread.
  void etcd_loop() {
    EtcdCoordinator coordinator(options.etcd);
    for (;;) {
      CoordinatorCall call;
      {
        std::unique_lock lock(etcd_mutex);
        etcd_wake.wait(lock, [&] { return etcd_stop || !etcd_queue.empty(); });
        if (etcd_stop) break;
        call = etcd_queue.front();
        etcd_queue.pop_front();
      }
      if (call.op == CoordinatorOp::resign) {
        coordinator.resign();
        continue;
      }
      CoordinatorAnswer answer = coordinator.run(options.self, call);
      if (!answer.reached && coordinator.last_error() != last_etcd_error) {
        last_etcd_error = coordinator.last_error();
        asio::post(io, [this, why = last_etcd_error] { say("etcd: " + why); });
      }
      asio::post(io, [this, answer] {
        if (stopping) return;
        Output out;
        core->coordinator_answer(answer, out);
        handle(out);
      });
    }
    // A replica that stops gives its lease up, so the next need not wait.
    coordinator.resign();
  }

  void say(const std::string& line) {
    if (options.log) options.log("replica " + std::to_string(options.self) + ": " + line);
  }

  io::FileSystem& fs;
  ReplicaNodeOptions options;
  asio::io_context io;
  // Where the engine's replies to forwarded calls are posted, from any
  // thread, until the replica stops (call_replies.hpp).
  std::shared_ptr<CallReplies> call_replies = std::make_shared<CallReplies>(&io);
  tcp::acceptor acceptor;
  asio::steady_timer ticker;
  std::unique_ptr<ReplicaStore> store;
  StoreRecovery recovered;
  std::unique_ptr<ReplicaCore> core;
  std::vector<std::unique_ptr<PeerLink>> peers;
  std::map<Connection*, std::shared_ptr<Connection>> connections;
  std::unique_ptr<PrimaryLog> primary_log;  // while primary: the log clients append to
  static constexpr std::uint64_t kFeedBytesPerTurn = 8u << 20;
  std::unique_ptr<CommittedFeed> committed_feed;  // with an engine's committed hook
  bool feed_posted = false;
  NodeStats stats;
  replication::ReplicaId last_known_primary = replication::kNoReplica;
  std::map<wal::Lsn, PendingAppend> pending;  // by their record's LSN
  std::vector<EarlyAppend> early;             // taken while the primary's log opens
  std::size_t early_bytes = 0;
  Role last_role = Role::booting;
  View last_lead = 0;
  bool last_suspect = false;
  bool stopping = false;
  std::error_code failure;
  std::uint64_t batches_read_back = 0;  // fill_elided's, for the status
  Output deferred;  // handle()'s, until its flush runs
  bool flush_posted = false;

  std::mutex disk_mutex;
  std::condition_variable disk_wake;
  std::deque<DiskWrite> disk_queue;
  bool disk_stop = false;
  std::error_code disk_error;  // written by the disk thread before it posts

  std::mutex etcd_mutex;
  std::condition_variable etcd_wake;
  std::deque<CoordinatorCall> etcd_queue;
  bool etcd_stop = false;
  std::string last_etcd_error;  // the etcd thread's
};

ReplicaNode::ReplicaNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ReplicaNode::~ReplicaNode() { stop(); }

Result<std::unique_ptr<ReplicaNode>> ReplicaNode::open(io::FileSystem& fs, ReplicaNodeOptions options) {
  if (options.self >= options.addresses.size() || options.addresses.size() < 3 || options.addresses.size() % 2 == 0) {
    return std::make_error_code(std::errc::invalid_argument);
  }
  options.etcd.cluster = options.cluster;
  auto impl = std::make_unique<Impl>(fs, std::move(options));
  Impl& m = *impl;
  m.store = FUSEE_TRY(ReplicaStore::open(fs, m.options.dir, m.options.cluster, m.recovered, kSegmentBytesDefault,
                                         m.options.held_bytes_max));
  PrimaryLogHooks hooks;
  hooks.propose = [&m](Seq seq, std::string body) {
    Output out;
    const bool taken = m.core->propose(std::move(body), out, seq).has_value();
    if (taken) m.stats.proposed(seq);
    m.handle(out);
    return taken;
  };
  hooks.published = [&m](wal::Lsn lsn) { m.on_published(lsn); };
  hooks.post = [&m](std::function<void()> run) {
    asio::post(m.io, [&m, run = std::move(run)] {
      if (!m.stopping) run();
    });
  };
  hooks.opened = [&m](Result<void> opened) { m.on_log_opened(std::move(opened)); };
  hooks.warn = [&m](const std::string& line) { m.say(line); };
  hooks.configure = m.options.engine.configure;
  hooks.lead = m.options.engine.lead;
  hooks.stepped_down = m.options.engine.stepped_down;
  if (m.options.engine.configure) {
    // An engine's records: sealed on the loop's next flush turn.
    hooks.staged = [&m] { asio::post(m.io, [&m] { m.engine_staged(); }); };
  }
  m.primary_log = std::make_unique<PrimaryLog>(fs, m.options.dir, *m.store, std::move(hooks));
  if (m.options.engine.committed) {
    m.committed_feed = std::make_unique<CommittedFeed>(m.options.engine.committed, m.options.engine.committed_after);
  }
  std::vector<tcp::endpoint> endpoints;
  for (const std::string& text : m.options.addresses) {
    endpoints.push_back(protocol::parse_address(text, "replica address", false).tcp);  // throws on a bad one
  }
  boost::system::error_code error;
  m.acceptor.open(endpoints[m.options.self].protocol(), error);
  if (!error) m.acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) m.acceptor.bind(endpoints[m.options.self], error);
  if (!error) m.acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) return std::error_code(error.value(), std::system_category());
  m.peers.resize(m.options.addresses.size());
  for (ReplicaId id = 0; id < m.options.addresses.size(); ++id) {
    if (id != m.options.self) m.peers[id] = std::make_unique<Impl::PeerLink>(m, id, endpoints[id]);
  }
  return std::unique_ptr<ReplicaNode>(new ReplicaNode(std::move(impl)));
}

Result<void> ReplicaNode::run() {
  Impl& m = *impl_;
  ReplicaOptions core_options;
  core_options.self = m.options.self;
  core_options.replica_count = static_cast<std::uint32_t>(m.options.addresses.size());
  core_options.heartbeat_ticks = m.options.heartbeat_ticks;
  core_options.election_ticks = m.options.election_ticks;
  core_options.candidacy_ticks = m.options.candidacy_ticks;
  core_options.lease_ticks = m.options.lease_ticks;
  core_options.held_bytes_max = m.options.held_bytes_max;
  core_options.retire_lag_bytes_max = m.options.retire_lag_bytes_max;
  std::random_device entropy;
  core_options.incarnation = (std::uint64_t(entropy()) << 32) | entropy();
  const std::size_t recovered_batches = m.recovered.log.entries.size();
  const bool wiped = m.recovered.log.wiped;
  const bool suspect = m.recovered.log.suspect;
  Output out;
  m.core = std::make_unique<ReplicaCore>(core_options, std::move(m.recovered.log), out);
  m.say("recovered " + std::to_string(recovered_batches) + " batches" + (wiped ? " (not this cluster's: wiped)" : "") +
        (suspect ? " (suspect" + (m.recovered.damage.empty() ? "" : ": " + m.recovered.damage) + ")" : ""));
  std::thread disk;
  if (m.options.disk_thread) disk = std::thread([&m] { m.disk_loop(); });
  std::thread etcd([&m] { m.etcd_loop(); });
  asio::post(m.io, [&m, out]() mutable { m.handle(out); });  // the core's first calls
  m.accept();
  m.tick();
  m.io.run();
  m.shut_down();
  if (disk.joinable()) disk.join();
  etcd.join();
  if (m.failure) return m.failure;
  return ok();
}

NodeStatsSnapshot ReplicaNode::stats() const { return impl_->stats.snapshot(); }

void ReplicaNode::allow_retire(replication::Seq below) {
  asio::post(impl_->io, [m = impl_.get(), below] {
    if (m->core) m->core->allow_retire(below);
  });
}

void ReplicaNode::stop() {
  asio::post(impl_->io, [m = impl_.get()] { m->shut_down(); });
}

}  // namespace fusee::replica
