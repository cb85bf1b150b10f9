// A replica's directory: the batches of the replicated log it holds, durably,
// as the replica core (replication/replica_core.hpp) asks -- cut the log after
// a sequence, append batches, make it all durable -- and what recovery finds
// there at start (docs/replication.md, "The replica process"):
//
//   <dir>/replica/cluster   the cluster's name, written once: absent, the
//                           directory is not a replica's (lost, or new), and
//                           the replica never votes until rebuilt
//   <dir>/replica/suspect   present while recovery found damage not yet
//                           repaired (durable before the damaged tail is cut)
//   <dir>/replica/lock      held while a process writes the directory
//   <dir>/replica/start     where the log starts once segments retired
//                           (replica_segments.hpp, LogStart)
//   <dir>/wal/              the batches, as the shared log's segments
//                           (replica/replica_segments.hpp): byte-identical on
//                           every replica up to where each ends
//
// The chain must run to the end of the last segment file: it ends cleanly
// there, or at fewer zero bytes than a batch header (an append that did not
// land). Anything else past its last whole batch is damage -- a batch that
// fails its checksum or is cut short, zeros where a batch should be (a
// sector can read back as zeros), a whole batch that does not follow
// (nothing writes one: a cut is durable before anything past it). Damage
// makes the replica suspect, so the price of this strictness is paid only
// after a power loss that tears a write in flight, or lands a later one
// without an earlier one.
//
// One thread writes (the replica's disk thread: apply, sync, finish); read()
// may be called from another thread meanwhile (the replica's loop, sending a
// backup batches its core no longer holds in memory).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <system_error>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "replica/replica_segments.hpp"
#include "replica/store_errc.hpp"
#include "replication/replica_core.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::replica {


struct StoreRecovery {
  replication::RecoveredLog log;
  std::string damage;  // where the chain ended damaged, for the replica's log
};

class ReplicaStore {
 public:
  // Makes `dir` a replica of `cluster`, empty and durable, its segments of
  // `segment_bytes` (the same on every replica of a cluster: the files are
  // byte-identical only then). `rebuild`: the operator's remedy for a
  // replica whose directory was lost -- it starts suspect, and counts in
  // seals only once it holds a primary's whole log. Refuses a directory that
  // already belongs to a cluster.
  static Result<void> initialize(io::FileSystem& fs, const std::string& dir, const std::string& cluster,
                                 bool rebuild, std::uint64_t segment_bytes = kSegmentBytesDefault);

  // Opens `dir` for one writer (refused while another process holds it) and
  // recovers it. A directory of another cluster is refused; one that is no
  // cluster's comes back `wiped`. Damage marks it suspect, durably, before
  // the damaged tail is cut off. `segment_bytes` serves only when the first
  // segment itself is lost and is made again.
  // The recovered log holds the newest `held_bytes_max` of payloads; older
  // batches come elided (read()).
  static Result<std::unique_ptr<ReplicaStore>> open(io::FileSystem& fs, const std::string& dir,
                                                    const std::string& cluster, StoreRecovery& recovered,
                                                    std::uint64_t segment_bytes = kSegmentBytesDefault,
                                                    std::uint64_t held_bytes_max = UINT64_MAX);

  // Issues one write of the core's: the cut, then the batches, not yet durable.
  Result<void> apply(const replication::DiskWrite& write);
  // Makes every write applied so far durable.
  Result<void> sync();
  // After the sync that made `write` durable: a repair forgets the damage.
  Result<void> finish(const replication::DiskWrite& write);

  // Reads batch `seq` back from its segment: the replica core releases the
  // payloads of older durable batches (ReplicaOptions::held_bytes_max), and
  // a backup catching up is sent them from here. Only for a batch the core
  // knows durable -- no write in flight cuts it -- so what is read is what
  // was synced; a batch that reads back otherwise (its checksum, sequence,
  // the chain's CRC before it, or its own CRC not the one the chain
  // recorded: a bad sector, a stale page) is StoreErrc::unreadable_batch;
  // one retired is StoreErrc::retired_batch.
  Result<replication::Entry> read(replication::Seq seq);

  // Retires every segment whose batches all come before `below` (never the
  // one the chain ends in): the start is recorded durably, then the files go,
  // oldest first. The writing thread's, and only for batches no cut will
  // reach (committed ones: a cut within the retired batches is a bug).
  // Returns the last batch retired: the log holds those after it.
  Result<replication::Seq> retire(replication::Seq below);
  // Discards the whole log and starts it after `anchor`, as the replica it
  // copies holds it (the same segment, sequence, chain CRC): a suspect
  // replica that lost batches its primary retired (ReplicaCore). The start
  // is durable first; a crash before the new segment is leaves the start
  // segment missing, which recovery takes for damage (it is suspect anyway).
  Result<void> restart_after(const replication::LogAnchor& anchor);
  // Where the log starts (any thread): the driver fills a LogAnchor from it.
  LogStart start() const;

  // The writing thread's: it alone changes the chain.
  replication::Seq end() const { return points_.front().seq + points_.size() - 1; }
  // The last batch retired (0: none); the log holds those after it.
  replication::Seq retired_through() const { return points_.front().seq; }
  // The largest payload a batch may carry.
  std::uint64_t payload_bytes_max() const { return replica::payload_bytes_max(points_.front().capacity); }
  // The size of the segment the log ends in (what init gave the cluster).
  std::uint64_t segment_bytes() const { return points_.back().capacity; }

 private:
  ReplicaStore(io::FileSystem& fs, std::string dir, std::string cluster);
  Result<io::File*> segment_file(std::uint64_t number);
  // Truncates the chain to batch `keep_through` and removes the segments
  // past it, durably.
  Result<void> cut(replication::Seq keep_through);

  io::FileSystem& fs_;
  std::string dir_;
  std::string cluster_;
  std::unique_ptr<io::FileSystem::Lock> lock_;
  bool writable_ = false;  // false while wiped
  // points_ and reading_ change under mu_, which read() takes only to find
  // its batch (its file read runs outside it, so a slow read never holds up
  // a write); the writing thread reads points_ without it.
  mutable std::mutex mu_;
  // The view of the batch before the log's start (the rest of the start is
  // points_.front()'s); under mu_.
  replication::View start_view_ = 0;
  // points_[k]: the chain after batch retired_through() + k (points_[0]:
  // the log's start)
  std::vector<ChainPoint> points_;
  // Segments open for reading, a few (backups catching up at different
  // places); cut closes them all: a segment removed and made again must not
  // be read through the old file.
  std::map<std::uint64_t, std::shared_ptr<io::File>> reading_;
  std::map<std::uint64_t, std::unique_ptr<io::File>> files_;  // open segments, by number
  std::set<std::uint64_t> unsynced_;  // segments written since the last sync
};

// What a replica's directory holds, read without changing a byte (`fusee
// replica inspect`): recovery's view of it, before recovery acts.
struct StoreInspection {
  std::string cluster;       // empty: no cluster's (lost, or new)
  bool suspect_marked = false;
  std::string suspect_note;  // what the marker says (the damage, or "rebuilt")
  ReadChain chain;
};
Result<StoreInspection> inspect_store(io::FileSystem& fs, const std::string& dir);

}  // namespace fusee::replica
