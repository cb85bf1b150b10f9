// ReplicaCore: one replica of the replicated log as a pure state machine, the
// rule of spec/FuseeReplicated.tla in code (docs/replication.md). It does no
// I/O and reads no clock: its inputs are messages, ticks, disk completions
// and coordinator answers, its outputs (replication/replica_messages.hpp)
// are sends, disk writes and coordinator calls. A real replica runs it on
// one thread over sockets, the log and etcd; tests/replication/ runs 3-5 of
// them in a seeded simulator over a fault file system, a lossy network and a
// simulated etcd, checking the spec's invariants after every event.
//
// The protocol, in the spec's steps:
//  1. Campaign: a backup that has not heard from a primary for its election
//     timeout asks the coordinator for the next view; the coordinator grants
//     it only once the last primary's lease has expired.
//  2. Seal: the candidate asks every replica to promise its view. A replica
//     that promises cuts its log by the view history, refuses batches of
//     earlier views from then on, and answers with its end once its log is
//     durable. A replica whose directory is not the cluster's (wiped) never
//     answers.
//  3. Choose the end: over the answers of a quorum of replicas that are not
//     suspect (its own answer among all it uses), the candidate takes the log
//     whose last batch has the highest view, then the longest, provided it
//     reaches every `acked` any of them reports; it copies the batches it
//     lacks from that replica, cutting its own divergent tail.
//  4. Publish the start: the coordinator makes the view normal with its start
//     (the chosen end + 1).
//  5. Serve: the primary appends, ships batches to the backups (which check
//     that their log continues at the batch before and acknowledge once
//     durable) and publishes, in order, each batch a quorum holds durably in
//     its view, itself included.
//  6. Repair: a suspect replica (its recovery cut its log at a damaged batch)
//     or a rebuilt one counts again once it holds a primary's whole log.
//
// Safety rests on the coordinator's compare-and-swap and on quorums, never on
// timing: a deposed primary that still runs cannot publish, because a quorum
// promised the later view and refuses its batches.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "replication/core_log.hpp"
#include "replication/replica_messages.hpp"

namespace fusee::replication {

enum class Role { booting, wiped, backup, candidate, primary };
const char* role_name(Role role);

// Each one disables one rule of the protocol, so that the simulator's own
// test can show its checks catch the loss that rule prevents (as
// spec/FuseeReplicatedWeak.tla does for TLC). Never set outside that test.
enum class Weakening {
  none,
  publish_alone,        // publish a batch the primary alone holds
  suspect_vouches,      // a suspect answer counts toward the quorum
  longest_log,          // choose the longest log, whatever its last view, uncut by the history
  wiped_votes,          // a wiped replica comes back as an empty log, and votes
};

struct ReplicaOptions {
  ReplicaId self = 0;
  std::uint32_t replica_count = 3;
  // Timings in ticks (a real replica ticks every millisecond or so).
  std::uint32_t heartbeat_ticks = 5;     // a primary's empty appends, retransmits, keepalives
  std::uint32_t election_ticks = 50;     // silence from a primary before campaigning
  std::uint32_t candidacy_ticks = 100;   // a candidacy that has not become normal gives up
  std::uint32_t lease_ticks = 30;        // a primary not heard by a quorum this long steps down; a candidate
                                         // whose keepalives fail this long gives up
  std::uint32_t entries_per_append_max = 32;
  std::uint64_t append_bytes_max = 8u << 20;  // batches' bytes in one append or fetch reply (one at least)
  // Payload bytes of durable batches kept in memory, the newest: a backup
  // that keeps up is sent them from memory. Older ones are released, and a
  // backup further behind (or a candidate's fetch) is sent batches the
  // driver reads back from the disk (Entry::elided). Batches not yet durable
  // are always held.
  std::uint64_t held_bytes_max = 64u << 20;
  // The cap on what a lagging replica holds back. A primary retires only
  // what every replica holds -- but a minority of replicas whose logs lag
  // its commit by more than this many payload bytes (down, say, or far
  // behind) are not waited for: the others retire without them, and such a
  // replica, when it returns, restarts its log at the primary's start (an
  // application's replica is then rebuilt: docs/replication.md). 0: no
  // cap, every replica is waited for.
  std::uint64_t retire_lag_bytes_max = 0;
  // Drawn at random at each start: tells messages sent to an earlier life of
  // this replica from those sent to this one (AppendRequest::to_incarnation).
  std::uint64_t incarnation = 0;
  Weakening weakening = Weakening::none;
};

// What the replica's disk held at start, as its recovery found it. Every
// entry must be durable (recovery syncs what it keeps): the core may
// acknowledge them at once.
struct RecoveredLog {
  // The valid chain, from the first batch its segments did not retire to
  // its end; the oldest may come elided (recovery holds the newest
  // held_bytes_max of payloads, not the whole log).
  std::vector<Entry> entries;
  bool suspect = false;        // the chain ended at a damaged batch
  bool wiped = false;          // the directory is not this cluster's (lost, or new)
  // The last batch its segments retired (0: none) and its view: the chain
  // starts after it.
  Seq retired_through = 0;
  View retired_view = 0;
};

class ReplicaCore {
 public:
  // Starts booting: the first output is a coordinator read, and the core
  // takes nothing from other replicas until it is answered.
  ReplicaCore(ReplicaOptions options, RecoveredLog recovered, Output& out);

  void tick(Output& out);
  void receive(const Message& message, Output& out);
  // A disk write completed (they complete in the order issued). Returns false
  // when it failed: the replica must stop (fail-stop; its disk is suspect).
  // `retired_through`: the last batch the disk has retired by now (whole
  // segments: at or below what the core asked); the core forgets those.
  [[nodiscard]] bool disk_done(std::uint64_t write_id, bool succeeded, Output& out, Seq retired_through = 0);

  // The driver no longer needs the batches below `below` (the run store
  // applied them and the engine's checkpoints cover them). The core retires
  // them once every replica holds them and they are published: the primary
  // says so in its appends (AppendRequest::retire_below), and its own
  // disk writes ask for it (DiskWrite::retire_below), a heartbeat at a time.
  // Never its last batch. Monotonic: a lower value is ignored.
  void allow_retire(Seq below) { retire_allowed_ = std::max(retire_allowed_, below); }
  void coordinator_answer(const CoordinatorAnswer& answer, Output& out);

  // The primary appends a batch; its sequence, or nullopt when this replica
  // is not a serving primary -- or, given `expected`, when the batch would
  // take another sequence (the log that sealed it is not this primary's).
  std::optional<Seq> propose(std::string payload, Output& out, std::optional<Seq> expected = std::nullopt);

  // `fusee replica rebuild`: a wiped replica's directory was made the
  // cluster's again (empty); it may now take a primary's log. It counts in
  // seals only once it holds a primary's whole log.
  void rebuilt();

  // The operator's last resort (`fusee replica accept-loss`, to come): a
  // suspect replica vouches again for the log it recovered, once a durable
  // repair write says so. After a power loss that tore a majority's tails at
  // once, no quorum vouches and no view can start; the torn batches were in
  // flight, never acknowledged by the replica that lost them, so accepting
  // loses nothing published -- unless a synced batch also rotted, which is
  // what suspicion guards against and what the operator now accepts.
  void accept_loss(Output& out);

  // --- Inspection (the simulator's invariants, status pages).
  Role role() const { return role_; }
  View promised() const { return promised_; }
  View lead() const { return lead_; }  // the view it is candidate or primary of
  // The primary of the view it promised, as far as it knows: itself while it
  // serves, the replica whose appends it takes as a backup, kNoReplica
  // otherwise (a view it has heard no primary of yet, or a primary it has
  // not heard for a lease: cut off, it would grant a pre-vote now, and its
  // callers should not wait on a link that may be as dead as that primary).
  // For telling a caller where to go, never for deciding anything.
  ReplicaId known_primary() const {
    if (role_ == Role::primary) return options_.self;
    if (role_ != Role::backup || heard_primary_.first != promised_) return kNoReplica;
    return ticks_ - primary_heard_at_ < options_.lease_ticks ? heard_primary_.second : kNoReplica;
  }
  Seq commit() const { return commit_; }
  // The highest sequence its batches say was published (each carries the
  // commit its primary knew): a quorum held those in some view, and every
  // later view keeps them.
  Seq acked_seen() const { return acked_seen_; }
  // The batches it holds that it knows were published, through this one: a
  // primary's commit, a backup's from its primary's appends (what their
  // log and its own agree on, up to the commit the primary sent), or what
  // its batches' `acked` say. A replica applying committed batches (the run
  // store, part 2) applies those it also holds durably.
  Seq known_committed() const { return std::min<Seq>(std::max(known_committed_, acked_seen_), log_.end()); }
  bool suspect() const { return suspect_; }
  // Its batches, from the first not retired; those before held_from()
  // without their payloads (elided: on the disk only).
  const CoreLog& log() const { return log_; }
  Seq held_from() const { return held_from_; }
  Seq durable_end() const { return durable_end_; }
  // No write in flight: what its log holds is on the disk.
  bool disk_idle() const { return writes_.empty(); }
  const ViewStarts& starts() const { return starts_; }
  // A primary's view of a backup: the batch it holds through (durably, in
  // this view) and the next one to send it. Its lag is log().size() - match.
  Seq match_of(ReplicaId replica) const { return match_[replica]; }
  Seq next_of(ReplicaId replica) const { return next_[replica]; }
  // Its log cut by the view history it knows.
  Seq surviving_end() const;
  // What it may retire below now, and what its primary said every replica
  // holds (for status pages and the simulator's checks).
  Seq retire_target() const;
  Seq retire_known() const { return retire_known_; }

 private:
  struct PendingAck {
    ReplicaId to;
    View view;
    Seq match_end;
    std::uint64_t asked_at;  // the tick the append came
  };
  struct WriteInFlight {
    std::uint64_t id;
    Seq keep_through;
    Seq last_seq;
    bool repaired;
  };

  std::uint32_t quorum() const { return options_.replica_count / 2 + 1; }
  bool weakened(Weakening rule) const { return options_.weakening == rule; }

  // Disk.
  void write(Seq keep_through, std::vector<Entry> entries, Output& out, bool repaired = false,
             std::optional<LogAnchor> restart = std::nullopt, Seq retire_below = 0);
  // On a heartbeat: asks the disk to retire what retire_target() allows.
  void retire(Output& out);
  // The primary's: the batches every replica holds durably in this view, and
  // it has published.
  Seq held_by_all() const;
  void cut_to_history(Output& out);
  // Merges starts into the history this replica knows.
  void learn_starts(const ViewStarts& starts);
  void after_durable(Output& out);
  // Releases the payloads of the oldest durable batches past held_bytes_max.
  void release_payloads();
  std::uint64_t payload_bytes(Seq seq) const { return log_.payload_bytes(seq); }

  // Roles.
  void become_backup(View promised, Output& out);
  void probe(Output& out);
  void campaign(Output& out);
  void start_candidacy(const Register& reg, Output& out);
  void send_seals(Output& out);
  void try_choose(Output& out);
  void fetch_from_best(Output& out);
  void become_primary(Output& out);
  void send_append(ReplicaId to, Output& out);
  // The last of [first, last] that fits one message's byte budget.
  Seq last_to_send(Seq first, Seq last) const;
  void advance_commit(Output& out);
  void reset_election_timer();

  // Inputs.
  void on_seal_request(const Message& message, const SealRequest& request, Output& out);
  void on_seal_reply(const Message& message, const SealReply& reply, Output& out);
  void on_fetch_request(const Message& message, const FetchRequest& request, Output& out);
  void on_fetch_reply(const Message& message, const FetchReply& reply, Output& out);
  void on_append_request(const Message& message, const AppendRequest& request, Output& out);
  void on_append_reply(const Message& message, const AppendReply& reply, Output& out);
  void on_probe_request(const Message& message, Output& out);
  void on_probe_reply(const Message& message, const ProbeReply& reply, Output& out);
  void send(ReplicaId to, View view, MessageBody body, Output& out);
  SealReply seal_answer() const;
  std::uint64_t call(CoordinatorOp op, View view, Seq start, Output& out);

  ReplicaOptions options_;
  Role role_ = Role::booting;
  bool wiped_on_disk_ = false;
  bool suspect_ = false;

  // The log as this replica has written it (durable or in flight).
  CoreLog log_;
  // Batches from here on hold their payloads; earlier ones are elided.
  Seq held_from_ = 1;
  Seq durable_end_ = 0;
  std::deque<WriteInFlight> writes_;
  std::uint64_t next_write_id_ = 1;
  Seq acked_seen_ = 0;
  Seq known_committed_ = 0;  // known_committed()'s, learnt from publications and appends
  Seq retire_allowed_ = 0;   // allow_retire()'s
  Seq retire_known_ = 0;     // the highest retire_below a primary sent
  Seq retire_asked_ = 0;     // the last DiskWrite::retire_below
  std::pair<View, ReplicaId> heard_primary_{0, kNoReplica};  // the last append's view and sender

  ViewStarts starts_;
  mutable Seq surviving_known_ = 0;  // the first this many batches survive starts_ (a cache)
  View promised_ = 0;       // refuses batches and seals of earlier views
  View register_view_ = 0;  // the latest view it knows the coordinator holds
  View lead_ = 0;
  std::uint64_t ticks_ = 0;
  std::uint64_t heard_at_ = 0;          // the election timer's start
  std::uint64_t primary_heard_at_ = 0;  // the last tick a primary (or candidate) was heard

  // Coordinator calls awaiting an answer, by id.
  std::uint64_t next_call_id_ = 1;
  std::optional<std::uint64_t> read_call_;
  std::optional<std::uint64_t> campaign_call_;
  std::optional<std::uint64_t> start_call_;
  std::optional<std::uint64_t> keepalive_call_;
  std::uint64_t keepalive_sent_at_ = 0;
  std::uint64_t lease_confirmed_at_ = 0;  // when the last keepalive that succeeded was sent

  // Backup.
  std::optional<View> probe_view_;  // a pre-vote round for this view is open
  std::uint64_t probe_at_ = 0;
  std::map<ReplicaId, bool> probe_grants_;
  std::vector<PendingAck> pending_acks_;
  std::uint64_t alive_sent_at_ = 0;  // the last answer that only said it is alive
  std::optional<std::pair<ReplicaId, View>> pending_seal_;  // answer owed once the disk is idle
  bool repair_in_flight_ = false;  // a write that clears suspect once durable

  // Candidate.
  std::uint64_t candidacy_at_ = 0;
  std::map<ReplicaId, SealReply> seal_replies_;
  bool own_answer_pending_ = false;
  std::optional<ReplicaId> best_;
  Seq best_end_ = 0;
  Seq fetch_after_ = 0;       // its log matches the best one through here
  bool copy_complete_ = false;  // every batch through best_end_ is written (maybe in flight)
  bool chosen_ = false;         // ...and durable: the start may be published

  // Primary.
  Seq commit_ = 0;
  std::vector<Seq> match_;  // per replica: its durable match in this view
  // Per replica: it matched an append in this view, so match_ is what it
  // holds (until then match_ is 0 and says nothing: a replica restarting
  // may hold nearly the whole log).
  std::vector<bool> match_known_;
  Seq lead_from_ = 0;  // the log's end when this replica became primary
  std::vector<Seq> next_;   // per replica: the next batch to send it
  std::vector<std::uint64_t> heard_from_at_;  // per replica: its last answer's tick
  std::vector<std::uint64_t> incarnation_of_;  // per replica: as its last answer said
};

}  // namespace fusee::replication
