#include "hosting/view_host.hpp"

#include <fmt/format.h>

#include "engine/meta.hpp"
#include "fusee/error.hpp"
#include "hosting/replicated_run_store.hpp"
#include "replica/call_replies.hpp"
#include "replica/store_transfer.hpp"
#include "wal/errc.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::hosting {

ViewHost::ViewHost(ViewHostOptions options)
    : dir_(options.node.dir), warn_(std::move(options.warn)), service_(std::move(options.service)) {
  replica::ReplicaNodeOptions node_options = std::move(options.node);
  node_options.engine.configure = [this](wal::LogOptions& log_options) { return configure(log_options); };
  node_options.engine.lead = [this](replication::View view, std::shared_ptr<wal::Log> log, replication::Seq tail) {
    lead(++leads_, view, std::move(log), tail);
  };
  node_options.engine.stepped_down = [this](replication::View) {
    // Nothing reaches the view's service from here on (its log stepped
    // down); it closes on the host's thread. Its run-store writes still
    // waiting have unknown outcomes.
    applier_->lead_ended(leads_);
    post([this, close = service_.ended()] {
      if (close) close();
      // A service opened while the view was ending (its open ran on this
      // thread before this work) belongs to the ended view too.
      service_.close();
      closed();
    });
  };
  // A replica being rebuilt fetches the run store: only a primary's (its
  // log's start is where the rebuilt one's will be, and its store has
  // applied past it), off the loop (it reads files). Other calls go to the
  // service's hook.
  node_options.engine.call = [this, call = std::move(node_options.engine.call)](
                                 std::uint32_t shard, std::vector<std::byte> body,
                                 replica::ReplicaEngineHooks::CallReply reply) {
    if (shard != replica::kStoreTransferShard) {
      if (call) return call(shard, std::move(body), std::move(reply));
      return reply(replica::CallPart::not_here, replica::bytes_of("this replica answers no calls"));
    }
    if (!service_.serving()) {
      reply(replica::CallPart::not_here,
            replica::bytes_of(fmt::format("replica {} is not the primary now, or its service is opening: its run "
                                          "store is not sent",
                                          self_)));
      return;
    }
    auto send = [this, body = std::move(body), reply] { reply(replica::CallPart::last, sender_->answer(body)); };
    if (!transfers_.try_post(1, std::move(send))) {
      reply(replica::CallPart::not_here, replica::bytes_of("the primary is busy: too many transfer reads wait"));
    }
  };
  self_ = node_options.self;

  if (options.file_system) {
    fs_ = options.file_system;
  } else {
    own_fs_ = std::make_unique<io::PosixFileSystem>();
    fs_ = own_fs_.get();
  }
  // A directory `fusee replica init` never made is refused before anything
  // is written in it.
  auto replica = engine::is_replica_dir(*fs_, dir_);
  if (!replica || !*replica) {
    throw Error(errc::invalid_argument,
                fmt::format("replicated mode: {} is not a replica's directory (make it one with `fusee replica init "
                            "--dir {} --cluster {}`)",
                            dir_, dir_, node_options.cluster));
  }
  claimed_ = engine::claim_data_dir(*fs_, dir_, options.shards, options.file_system != nullptr,
                                    engine::DirOwner::replicated);
  shards_ = claimed_.shards;
  store_ = std::move(claimed_.store);
  // The run store's records travel in the shard after the service's.
  applier_ = std::make_shared<StoreApplier>(store_, engine::replica_store_shard(shards_), [this](const std::string& why) {
    if (warn_) {
      warn_(fmt::format("replicated mode: {}; this replica's run store no longer follows the log, and the replica "
                        "stops",
                        why));
    }
    node_->stop();
  });
  node_options.engine.committed = [applier = applier_.get()](replication::Seq seq, replication::View view,
                                                              std::string_view body) {
    return applier->committed(seq, view, body);
  };
  node_options.engine.committed_after = applier_->feed_after();
  sender_ = std::make_unique<StoreSender>(*fs_, store_, node_options.cluster);
  auto node = replica::ReplicaNode::open(*fs_, std::move(node_options));
  if (!node) {
    throw Error(errc::storage, fmt::format("replicated mode: cannot open the replica in {}: {}", dir_,
                                           node.error() == std::errc::operation_would_block
                                               ? "another process runs it (it holds replica/lock)"
                                               : node.error().message()));
  }
  node_ = std::move(*node);
  host_thread_ = std::thread([this] { run_host(); });
  node_thread_ = std::thread([this] {
    if (auto served = node_->run(); !served && warn_) {
      warn_(fmt::format("replica: stopped: {} (this replica serves nothing until it is opened again)",
                        served.error().message()));
    }
  });
}

ViewHost::~ViewHost() { stop(); }

void ViewHost::stop() {
  if (node_thread_.joinable()) {
    node_->stop();  // its log steps down: stepped_down posts the service's closing
    node_thread_.join();
  }
  transfers_.stop();
  // What waits on the store's applying (an opening, a service's writes) is
  // let go: the replica feeds it no more.
  if (applier_) applier_->stop();
  if (host_thread_.joinable()) {
    post([this] {
      service_.close();
      closed();
    });
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    host_thread_.join();
  }
  // The replica's directory is free for the next host: its lock, its
  // opening threads (joined here, while what they wait on is alive), the
  // engine side's lock and store.
  node_.reset();
  applier_.reset();
  // After the host's thread (its retire checks ask the sender): a copy it
  // holds keeps the store's files from deletion, and the store open.
  sender_.reset();
  store_.reset();
  claimed_.lock.reset();
}

replica::NodeStatsSnapshot ViewHost::node_stats() const {
  return node_ ? node_->stats() : replica::NodeStatsSnapshot{};
}

StoreApplierStats ViewHost::applier_stats() const { return applier_ ? applier_->stats() : StoreApplierStats{}; }

Result<void> ViewHost::configure(wal::LogOptions& options) {
  // On the log's opening thread: the last view's service must have closed
  // (an engine's last checkpoint written) before this view's bases are read.
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_ || stopping_; });
  if (stopping_) return make_error_code(wal::errc::closed);
  opening_since_ = std::chrono::steady_clock::now();
  engine::ShardBases bases;
  try {
    bases = engine::read_checkpoints(*store_, shards_, dir_);
  } catch (const std::exception& error) {
    if (warn_) warn_(fmt::format("replicated mode: {}", error.what()));
    return std::make_error_code(std::errc::io_error);
  }
  engine::set_log_base(dir_, shards_, bases, options);
  options.shard_count = engine::replica_log_shards(shards_);  // the run store's records: StoreApplier
  // The run store's shard: its records before the last one applied may
  // have been retired (the log retires below what the store applied).
  auto applied = store_->replica_applied();
  if (!applied) return applied.error();
  options.base.shard_lsn_floors.resize(options.shard_count, 0);
  options.base.shard_lsn_floors[engine::replica_store_shard(shards_)] = applied->lsn;
  return ok();
}

void ViewHost::lead(std::uint64_t lead, replication::View view, std::shared_ptr<wal::Log> log,
                    replication::Seq tail) {
  // On the replica's loop thread: the service opens on the host's.
  {
    std::lock_guard lock(mu_);
    busy_ = true;
  }
  post([this, lead, view, tail, log = std::move(log)]() mutable {
    // The run store must hold every checkpoint the log committed before
    // the service reads it: an engine that loaded a run its store parks
    // later would diverge from it. The lead ended first: nothing opens
    // (its stepped_down closes what there is); applying stopped: the
    // replica is stopping.
    if (!applier_->wait_done(tail, lead)) return;
    std::string error;
    try {
      ViewOpening opening;
      opening.lead = lead;
      opening.view = view;
      opening.shards = shards_;
      // The checkpoints as applied through the tail (the log opened over
      // those read before: earlier ones, so it holds what these need).
      opening.bases = engine::read_checkpoints(*store_, shards_, dir_);
      opening.store = std::make_shared<ReplicatedRunStore>(store_, applier_, log, lead, view,
                                                           engine::replica_store_shard(shards_));
      opening.log = std::move(log);
      service_.open(std::move(opening));
      last_open_us_ = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                     std::chrono::steady_clock::now() - opening_since_)
                                                     .count());
      return;
    } catch (const std::exception& failed) {
      error = failed.what();
    }
    // A primary that cannot serve must not hold the view: the replica
    // stops (its lease lapses, another replica leads).
    if (warn_) warn_(fmt::format("replicated mode: this view's service did not open: {}; the replica stops", error));
    node_->stop();
  });
}

void ViewHost::post(std::function<void()> work) {
  {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(work));
  }
  cv_.notify_all();
}

Result<replication::Seq> ViewHost::retire_allowed() {
  // Where the store stands, and the checkpoints in it, read before the
  // sync: the sync makes both durable. The log must keep every batch the
  // store has not wholly applied (the one it stands in included), and
  // every batch a checkpoint's recovery reads.
  const auto applied = FUSEE_TRY(store_->replica_applied());
  // A store written before it kept the run-store shard's last LSN: a log
  // retired below it would have no floor for that shard at its next open
  // (configure), so nothing retires until an apply writes one.
  if (applied.seq > 0 && applied.lsn == 0) return replication::Seq{0};
  // Nor past the store a replica being rebuilt fetched from here: its log
  // restarts at this log's start, which must not pass what it fetched.
  replication::Seq allowed = std::min(applied.seq, sender_->hold_below());
  for (std::uint32_t shard = 0; shard < shards_; ++shard) {
    auto checkpoint = FUSEE_TRY(store_->checkpoint(shard));
    allowed = std::min<replication::Seq>(allowed, checkpoint ? checkpoint->keep_from_sequence : 0);
  }
  if (allowed <= retire_allowed_) return allowed;  // nothing new: no sync
  FUSEE_TRY_VOID(store_->sync());
  return allowed;
}

void ViewHost::run_host() {
  auto next_retire = std::chrono::steady_clock::now();
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, next_retire, [&] { return stopping_ || !posted_.empty(); });
      if (stopping_ && posted_.empty()) return;
      if (posted_.empty()) {
        // Once a retire interval: the replica may retire what this
        // replica's run store no longer needs (the core also waits for
        // every replica to hold it, docs/replication.md).
        lock.unlock();
        next_retire = std::chrono::steady_clock::now() + kRetireInterval;
        sender_->expire_idle();
        auto allowed = retire_allowed();
        if (allowed) {
          if (*allowed > retire_allowed_) node_->allow_retire(*allowed);
          retire_allowed_ = std::max(retire_allowed_, *allowed);
        } else if (warn_) {
          warn_(fmt::format("replicated mode: cannot tell what the log may retire: {}", allowed.error().message()));
        }
        continue;
      }
      work = std::move(posted_.front());
      posted_.pop_front();
    }
    try {
      work();
    } catch (const std::exception& error) {
      // Nothing thrown here may end the process; the next view's service
      // is the next one's to open.
      if (warn_) warn_(fmt::format("replicated mode: {}", error.what()));
    }
  }
}

void ViewHost::closed() {
  // The view's service closed: the next view's log may read the store.
  {
    std::lock_guard lock(mu_);
    busy_ = false;
  }
  cv_.notify_all();
}

}  // namespace fusee::hosting
