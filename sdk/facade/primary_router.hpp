// Calls on a backup reach the primary (docs/replication.md, "Calls on a
// backup"). A backup's application runs no engine: its Engine sends each
// call for a run to the engine of the replica it knows as primary, as a
// split worker sends a call for a shard another worker holds
// (remote/remote_calls.hpp, with the same bodies), over that replica's
// listening port (replica/replica_wire.hpp, frames 6 and 7).
//
// PrimaryRouter is the backup's side: a ShardRouter that holds no shard and
// forwards every call to the primary ReplicaHost last heard of. A call sent
// while no primary is known, or that the primary says it cannot take yet
// (its engine opening), is "no holder": RemoteCalls sends it again, within
// the call's patience. A call whose connection closes before its answer,
// or whose primary is deposed meanwhile (the primary known changes, or its
// engine answers {"unknown"}: it stepped down before the outcome was known,
// Engine::Impl::serve_forwarded), is "lost": sent
// again only when it is safe to repeat (its ids make it so), otherwise the
// caller is told it may or may not have taken effect.
//
// ServeEveryShard is the primary's side: the router a view's engine serves
// the forwarded calls through (it holds every shard; it forwards nothing).
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "remote/shard_router.hpp"
#include "replication/replica_core.hpp"

namespace fusee::facade {

class PrimaryRouter final : public remote::ShardRouter {
 public:
  // `addresses`: every replica's HOST:PORT, by id (Config::replicas).
  // `without_primary_max`: how long calls out wait while no primary is
  // known before they are lost (this replica cut off: its link to the last
  // primary may be as dead as its view of it; two leases).
  PrimaryRouter(std::vector<std::string> addresses, std::chrono::milliseconds without_primary_max);
  ~PrimaryRouter() override;  // stop()
  PrimaryRouter(const PrimaryRouter&) = delete;
  PrimaryRouter& operator=(const PrimaryRouter&) = delete;

  // The primary this replica knows of (kNoReplica: none). From any thread.
  // Calls out to another replica are lost: a deposed primary's answer is
  // not awaited (it may never come from a stopped machine).
  void primary_is(replication::ReplicaId primary);
  // Every call out fails (`failed`), and so does every later one. Idempotent.
  void stop();

  bool leased(wal::ShardId) const override { return false; }
  bool holds(wal::ShardId) const override { return false; }
  void set_running(wal::ShardId) override {}
  void release(wal::ShardId) override {}
  void forward(wal::ShardId shard, std::vector<std::byte> body, OnReply on_reply) override;
  // A backup serves no calls and is leased nothing.
  void set_handlers(std::function<void(Call)>, std::function<void(wal::ShardId)>) override {}

 private:
  // The io thread's.
  struct Link;
  void open_link();
  void pump(const std::shared_ptr<Link>& link);
  void read(const std::shared_ptr<Link>& link);
  // The link closes; its calls are told `part` (no_holder for those never
  // sent, whatever the part).
  void fail(std::shared_ptr<Link> link, Part part, const std::string& why);
  void drop_link(Part part, const std::string& why);

  std::vector<std::string> addresses_;
  std::chrono::milliseconds without_primary_max_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  std::mutex mu_;
  bool stopping_ = false;  // under mu_: nothing more is posted
  // The io thread's.
  bool stopped_ = false;
  replication::ReplicaId primary_ = replication::kNoReplica;
  std::shared_ptr<Link> link_;  // to primary_, once a call went to it
  boost::asio::steady_timer no_primary_{io_};  // runs while primary_ is kNoReplica
  std::uint64_t next_request_ = 1;
};

// A view's engine's router: every shard is its own; it forwards nothing.
class ServeEveryShard final : public remote::ShardRouter {
 public:
  bool leased(wal::ShardId) const override { return true; }
  bool holds(wal::ShardId) const override { return true; }
  void set_running(wal::ShardId) override {}
  void release(wal::ShardId) override {}
  void forward(wal::ShardId, std::vector<std::byte>, OnReply on_reply) override;
  void set_handlers(std::function<void(Call)>, std::function<void(wal::ShardId)>) override {}
};

}  // namespace fusee::facade
