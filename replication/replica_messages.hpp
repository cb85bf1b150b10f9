// What a replica core takes in and gives out (replication/replica_core.hpp):
// the messages replicas send each other, the writes it asks of its disk, the
// calls it makes to the coordinator (etcd) and their answers. Plain data: the
// core does no I/O, so a real replica (threads, sockets, the log, etcd's
// gateway) and the simulator (tests/replication/) drive the same code.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "replication/view_history.hpp"

namespace fusee::replication {

using ReplicaId = std::uint32_t;
inline constexpr ReplicaId kNoReplica = std::numeric_limits<ReplicaId>::max();

// One batch of the replicated log. `acked` is the primary's published
// sequence when it appended the batch (the log's own header field of that
// name): a replica whose tail is damaged still knows from its surviving
// batches how far the cluster had published. `payload` is the batch's bytes.
struct Entry {
  Seq seq = 0;
  View view = 0;
  Seq acked = 0;
  std::string payload;
  // The core no longer holds the payload (ReplicaOptions::held_bytes_max):
  // in its log, and in the sends it outputs, whose driver reads the payload
  // back from the replica's disk (the batch is durable there) before the
  // message leaves. Never on the wire.
  bool elided = false;
  std::uint64_t elided_bytes = 0;  // the payload's size, when elided
  friend bool operator==(const Entry&, const Entry&) = default;
};

// The coordinator's register: the current view, its primary, whether the
// view is normal (its start published) or still recovering, and the history.
struct Register {
  View view = 0;
  ReplicaId primary = kNoReplica;
  bool normal = true;
  ViewStarts starts;
};

// --- Messages between replicas. Each travels in a Message with the view it
// belongs to; any may be lost, delayed, duplicated or reordered.

// A candidate asks a replica to promise its view and say what it holds.
struct SealRequest {
  ViewStarts starts;  // the history as the candidate read it when it won
};
// The answer, once the replica's log (cut by the history) is durable.
struct SealReply {
  Seq end = 0;          // its last batch
  View last_view = 0;   // that batch's view (0: empty log)
  Seq acked_seen = 0;   // the highest `acked` of its batches
  bool suspect = false; // its recovery cut the log at a damaged batch
};
// Where a log starts once its oldest segments retired: the batch before its
// first, as the disk records it. The core knows its sequence and view; its
// driver fills in what only the disk knows -- the chain's CRC after it and
// the segment the next batch lies in -- so that a replica starting its log
// there holds the same bytes as the one it copies.
struct LogAnchor {
  Seq seq = 0;                // the last batch retired
  View view = 0;              // its view
  std::uint64_t segment = 0;  // the segment batch seq + 1 lies in (the driver's)
  std::uint32_t crc = 0;      // the chain's CRC after batch seq (the driver's)
  friend bool operator==(const LogAnchor&, const LogAnchor&) = default;
};

// A candidate asks the replica with the best log for the batches after
// `after_seq` (which must be the replica's batch of view `after_view`) up to
// `up_to`, the end that replica answered.
struct FetchRequest {
  Seq after_seq = 0;
  View after_view = 0;
  Seq up_to = 0;
};
struct FetchReply {
  bool match = false;  // false: its batch at after_seq differs; retry below `hint`
  Seq hint = 0;
  std::vector<Entry> entries;
  // Set when after_seq lies below its log's start: the entries follow the
  // anchor, and the candidate starts its log there (what comes before is
  // published, and nobody holds it any more).
  std::optional<LogAnchor> anchor;
};
// The primary ships batches (none: a heartbeat) following <<prev_seq,
// prev_view>>, with its published sequence and where its log ends.
struct AppendRequest {
  Seq prev_seq = 0;
  View prev_view = 0;
  std::vector<Entry> entries;
  Seq commit = 0;
  Seq primary_end = 0;
  ViewStarts starts;  // the starts of views up to the primary's
  // The receiver's incarnation as the primary last heard it: an append that
  // echoes the current one was sent after the receiver's latest start, so
  // its primary_end covers everything the receiver acknowledged before
  // (only such an append may repair a suspect replica).
  std::uint64_t to_incarnation = 0;
  // Every replica holds the batches below this one durably, and they are
  // published: a replica may retire them once its own driver is done with
  // them (ReplicaCore::allow_retire).
  Seq retire_below = 0;
  // Set when prev_seq is the primary's last retired batch: a suspect replica
  // that cannot continue there starts its log after it (the batches before
  // are published, and the primary has no more of them to send).
  std::optional<LogAnchor> anchor;
};
// A backup's answer, sent once what it holds is durable. ok: it holds the
// primary's log through match_end. Not ok: its log does not continue at
// prev_seq (retry from hint + 1), or it promised a later view (`promised`).
struct AppendReply {
  bool ok = false;
  Seq match_end = 0;
  Seq hint = 0;
  View promised = 0;
  std::uint64_t incarnation = 0;  // the replier's (ReplicaOptions::incarnation)
};
// Before campaigning, a replica asks whether the others have lost their
// primary too (Raft's pre-vote): a replica cut off alone never campaigns, so
// it cannot hold etcd's lease against a majority that could serve.
struct ProbeRequest {};
struct ProbeReply {
  bool granted = false;  // it has not heard from a primary for a lease
};

using MessageBody = std::variant<SealRequest, SealReply, FetchRequest, FetchReply, AppendRequest, AppendReply,
                                 ProbeRequest, ProbeReply>;

struct Message {
  ReplicaId from = kNoReplica;
  ReplicaId to = kNoReplica;
  View view = 0;
  MessageBody body;
};

// --- The disk. One write: cut the log after `keep_through`, append
// `entries`, and make all of it durable. Writes complete in the order issued
// (the log's publication order); a failed one stops the replica.
struct DiskWrite {
  std::uint64_t id = 0;
  Seq keep_through = 0;
  std::vector<Entry> entries;
  // Once durable, the replica is repaired: its disk forgets that recovery
  // found damage (until then a restart finds it suspect again).
  bool repaired = false;
  // Before anything else: the log is discarded and starts after the anchor
  // (keep_through is its sequence).
  std::optional<LogAnchor> restart;
  // After the batches: the segments holding only batches below this one
  // retire (0: none).
  Seq retire_below = 0;
};

// --- The coordinator (etcd). Each call is a linearizable transaction:
//   read:          the register.
//   campaign:      if the register's view is `view - 1` and its primary's
//                  lease has expired (or the caller is that primary): view
//                  `view`, primary the caller, recovering; the caller holds
//                  the lease.
//   publish_start: if the register is `view`, recovering, with the caller
//                  as primary: normal, starts[view] = `start`. Also
//                  succeeds when it is already normal with that same start
//                  (a retry whose first answer was lost after it applied).
//   keepalive:     if the register's view is `view` with the caller as
//                  primary: the lease is renewed.
//   resign:        the caller's lease is revoked (it stepped down), so
//                  others need not wait for it to expire. Not answered.
// Each answer carries the register as the transaction found or left it.
// The driver answers every call but resign, within a bounded time: one that
// etcd did not answer in time comes back with reached = false.
enum class CoordinatorOp { read, campaign, publish_start, keepalive, resign };
struct CoordinatorCall {
  std::uint64_t id = 0;
  CoordinatorOp op = CoordinatorOp::read;
  View view = 0;
  Seq start = 0;
};
struct CoordinatorAnswer {
  std::uint64_t id = 0;
  bool reached = false;    // false: the coordinator did not answer (timeout, outage)
  bool succeeded = false;  // the compare held
  Register reg;
};

// Everything one input made the core want done.
struct Output {
  // An append or fetch reply may carry elided batches (Entry::elided): the
  // driver fills them in from its disk before anything of this output's
  // writes is applied (a later write may cut them) -- fill_elided().
  std::vector<Message> sends;
  std::vector<DiskWrite> writes;
  std::vector<CoordinatorCall> calls;
  // Set when the primary's published sequence advanced: every batch of its
  // log up to here is held by a quorum and may be acknowledged.
  std::optional<Seq> published_through;
};

// The batches of `message` whose payload the core left to its driver.
std::vector<Entry*> elided_entries(Message& message);

}  // namespace fusee::replication
