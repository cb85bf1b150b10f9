// PrimaryLog: the shared log (wal::Log) as a replica's log while it is the
// primary (docs/replication.md, "The replica appends through the shared
// log"). Clients' records are appended to it; it seals them into batches of
// sections, once per turn of the replica's loop, and hands each body to the
// core as a proposal at the sequence the log gave it; the core's
// publications come back as publish_through, and the log's durable hook
// says which records a quorum holds. The log writes nothing: the replica's
// store writes each batch as every replica derives it.
//
// Each view the replica leads gets a log of its own, opened over the
// replica's directory once the core serves and its disk is idle (the log's
// recovery reads the replica's files, so its LSNs go on from the last
// batch any primary sealed), and closed when the core stops serving that
// view: its records not yet published are then of unknown outcome.
//
// An engine may append to the log instead of clients (hooks.configure):
// its records are sealed on the loop too, which the log's staged wake asks
// for, and the engine holds the log (shared_log) until it shuts down.
//
// Loop thread only -- but for the opening, which reads the replica's whole
// log and so runs on a thread of its own while the loop goes on
// heartbeating. Nothing writes the replica's files meanwhile: a primary
// writes only what it proposes, and nothing is proposed before its log is
// open; an opening whose view ended first is thrown away unread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "base/result.hpp"
#include "replica/replica_store.hpp"
#include "replication/replica_core.hpp"
#include "wal/io/file_system.hpp"
#include "wal/log.hpp"

namespace fusee::replica {

struct PrimaryLogHooks {
  // A sealed batch's body, proposed to the core at `seq`: false when the
  // core did not take it there (it no longer serves, or its log is not the
  // one this log follows).
  std::function<bool(replication::Seq seq, std::string body)> propose;
  // Shard 0's records through `lsn` are a quorum's, durably (the log's
  // durable hook, on the loop thread, from publish_through).
  std::function<void(wal::Lsn lsn)> published;
  // Runs a function on the loop thread (the end of an opening).
  std::function<void(std::function<void()>)> post;
  // An opening ended, on the loop thread: the log serves its view, or the
  // error (the replica's files are not the log its core holds).
  std::function<void(Result<void>)> opened;
  std::function<void(const std::string&)> warn;
  // Set when an engine appends to the log (docs/replication.md, "The engine
  // on a primary's log"): fills the log's shard count and recovery bases
  // from the engine's run store, on the opening's thread, before the log
  // opens (no engine may be writing that store meanwhile). The log then
  // takes no client's record (it would read as a journal record), and its
  // durable hook is the engine's.
  std::function<Result<void>(wal::LogOptions&)> configure;
  // With configure: the view's log is open and has published every batch it
  // recovered, so an engine over it may open (its recovery reads only what
  // the log holds durable) -- and, after that, the view ended and the log
  // stepped down. On the loop thread; each must only post. `tail`: the last
  // batch the log recovered.
  std::function<void(replication::View, std::shared_ptr<wal::Log>, replication::Seq tail)> lead;
  std::function<void(replication::View)> stepped_down;
  // An engine's records became sealable: have the loop call seal() soon.
  // From the engine's threads; it must only post. Called once until the
  // next seal().
  std::function<void()> staged;
};

class PrimaryLog {
 public:
  PrimaryLog(io::FileSystem& fs, std::string dir, ReplicaStore& store, PrimaryLogHooks hooks);
  ~PrimaryLog();  // waits for the openings under way
  PrimaryLog(const PrimaryLog&) = delete;
  PrimaryLog& operator=(const PrimaryLog&) = delete;

  // Opens the log as the primary of `view` over the replica's `log_end`
  // batches, a quorum's through `published`, unless it is open or opening
  // for that view already. Any other view's log is closed first.
  void open(replication::View view, replication::Seq log_end, replication::Seq published);
  // The view it is open or opening for (0: none).
  replication::View view() const { return view_; }
  bool serving() const { return log_ != nullptr; }

  // The open log, shared with the engine that appends to it (null when not
  // serving). Closing steps it down: the engine's appends fail from then on.
  std::shared_ptr<wal::Log> shared_log() const { return log_; }
  // Every batch the log recovered at its open is published.
  bool tail_published() const;

  // Stages one record of shard 0 (serving() only, with no engine): its LSN. Fails with
  // errc::record_too_large when no batch of the replica's takes it,
  // errc::queue_full when the log holds too much unpublished.
  Result<wal::Lsn> append(std::span<const std::byte> record);
  // Seals what is staged, each batch proposed before this returns. False
  // when the core refused one: the log can no longer serve (close it).
  [[nodiscard]] bool seal();
  // The core published through `seq`: the log's waiters hear of it.
  void publish_through(replication::Seq seq);
  // The batch this log sealed with `lsn` in it and proposed, not yet
  // published (0 when none did: the record was never proposed).
  replication::Seq batch_of(wal::Lsn lsn) const;

  // Stops serving: the log publishes nothing more; an opening is dropped.
  void close();

 private:
  class Sink;
  void adopt(std::uint64_t opening, Result<std::unique_ptr<wal::Log>> log, replication::Seq log_end);
  void lead_once_published();

  io::FileSystem& fs_;
  std::string dir_;
  ReplicaStore& store_;
  PrimaryLogHooks hooks_;
  std::size_t batch_bytes_max_;  // what a batch of the replica's segments takes
  std::shared_ptr<Sink> sink_;  // outlives this when an engine holds the log: detached at destruction
  std::shared_ptr<wal::Log> log_;
  replication::Seq published_ = 0;  // the core's publication, as far as this log heard of it
  bool led_ = false;                // hooks.lead was called for the open log
  std::atomic<bool> seal_wanted_{false};  // staged() was told since the last seal()
  replication::View view_ = 0;
  std::uint64_t opening_ = 0;  // counts openings: a late one's result is dropped
  // Each opening's thread, joined once it has posted its result (it ends
  // then), or at destruction: never waited for while it reads.
  std::map<std::uint64_t, std::thread> openers_;
  bool refused_ = false;  // seal(): the core refused a batch
  // Proposed, unpublished: last LSN -> first LSN, sequence.
  std::map<wal::Lsn, std::pair<wal::Lsn, replication::Seq>> batches_;
};

}  // namespace fusee::replica
