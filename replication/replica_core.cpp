#include "replication/replica_core.hpp"

#include <algorithm>
#include <utility>

#include "base/assert.hpp"

namespace fusee::replication {

const char* role_name(Role role) {
  switch (role) {
    case Role::booting: return "booting";
    case Role::wiped: return "wiped";
    case Role::backup: return "backup";
    case Role::candidate: return "candidate";
    case Role::primary: return "primary";
  }
  return "?";
}

ReplicaCore::ReplicaCore(ReplicaOptions options, RecoveredLog recovered, Output& out)
    : options_(options) {
  FUSEE_ASSERT(options_.self < options_.replica_count, "replica id out of range");
  wiped_on_disk_ = recovered.wiped;
  suspect_ = recovered.suspect;
  // The log starts after the batches its segments retired: published ones.
  FUSEE_ASSERT(recovered.entries.empty() || recovered.entries.front().seq == recovered.retired_through + 1,
               "a recovered log starts after its retired batches");
  log_.start_after(recovered.retired_through, recovered.retired_view);
  held_from_ = log_.retired_through() + 1;
  known_committed_ = log_.retired_through();
  for (Entry& entry : recovered.entries) {
    acked_seen_ = std::max(acked_seen_, entry.acked);
    if (entry.elided) {
      FUSEE_ASSERT(held_from_ == entry.seq, "recovery releases the oldest payloads only");
      ++held_from_;
    }
    const std::uint64_t bytes = entry.elided ? entry.elided_bytes : entry.payload.size();
    log_.push(std::move(entry), bytes);
  }
  durable_end_ = log_.end();
  release_payloads();
  match_.assign(options_.replica_count, 0);
  match_known_.assign(options_.replica_count, false);
  next_.assign(options_.replica_count, 1);
  heard_from_at_.assign(options_.replica_count, 0);
  incarnation_of_.assign(options_.replica_count, 0);
  // Nothing is taken before the coordinator says which view is current: the
  // promise is volatile, and a restarted replica must not take batches of a
  // view it may have refused before it stopped.
  read_call_ = call(CoordinatorOp::read, 0, 0, out);
}

Seq ReplicaCore::surviving_end() const {
  // Called for every append and durable write: scanning the whole log each
  // time made a long log's appends cost in proportion to its length.
  // Retired batches are published: every history keeps them.
  surviving_known_ = std::clamp<Seq>(surviving_known_, log_.retired_through(), log_.end());
  surviving_known_ =
      surviving_length(log_.end(), [&](std::uint64_t i) { return log_.at(i + 1).view; }, starts_, surviving_known_);
  return surviving_known_;
}

void ReplicaCore::learn_starts(const ViewStarts& starts) {
  const std::size_t before = starts_.size();
  merge_starts(starts_, starts);
  if (starts_.size() != before) surviving_known_ = 0;  // a new view's start may cut batches known to survive
}

std::uint64_t ReplicaCore::call(CoordinatorOp op, View view, Seq start, Output& out) {
  const std::uint64_t id = next_call_id_++;
  out.calls.push_back({id, op, view, start});
  return id;
}

void ReplicaCore::send(ReplicaId to, View view, MessageBody body, Output& out) {
  out.sends.push_back({options_.self, to, view, std::move(body)});
}

void ReplicaCore::reset_election_timer() { heard_at_ = ticks_; }

// --- Disk ------------------------------------------------------------------

void ReplicaCore::write(Seq keep_through, std::vector<Entry> entries, Output& out, bool repaired,
                        std::optional<LogAnchor> restart, Seq retire_below) {
  if (restart) {
    log_.clear();
    log_.start_after(restart->seq, restart->view);
    keep_through = restart->seq;
    held_from_ = restart->seq + 1;
  } else {
    FUSEE_ASSERT(keep_through <= log_.end(), "a write cuts past the log's end");
    log_.cut(keep_through);
    held_from_ = std::min(held_from_, keep_through + 1);
  }
  durable_end_ = std::min(durable_end_, keep_through);
  surviving_known_ = std::min(surviving_known_, keep_through);
  for (const Entry& entry : entries) {
    FUSEE_ASSERT(entry.seq == log_.end() + 1, "a write leaves a gap");
    FUSEE_ASSERT(!entry.elided, "a batch written holds its payload");
    acked_seen_ = std::max(acked_seen_, entry.acked);
    log_.push(entry, entry.payload.size());
  }
  const std::uint64_t id = next_write_id_++;
  writes_.push_back({id, keep_through, log_.end(), repaired});
  out.writes.push_back({id, keep_through, std::move(entries), repaired, restart, retire_below});
}

void ReplicaCore::cut_to_history(Output& out) {
  if (weakened(Weakening::longest_log)) return;
  const Seq end = surviving_end();
  if (end < log_.end()) write(end, {}, out);
}

bool ReplicaCore::disk_done(std::uint64_t write_id, bool succeeded, Output& out, Seq retired_through) {
  FUSEE_ASSERT(!writes_.empty() && writes_.front().id == write_id, "disk writes complete in order");
  if (!succeeded) return false;
  const WriteInFlight done = writes_.front();
  writes_.pop_front();
  // Durable now: the log through the write's end, except what a later write
  // still in flight cuts (its batches there are not durable yet).
  Seq durable = done.last_seq;
  for (const WriteInFlight& later : writes_) durable = std::min(durable, later.keep_through);
  durable_end_ = std::max(durable_end_, durable);
  // What its disk retired it no longer holds: a backup behind is sent the
  // log from after it.
  if (retired_through > log_.retired_through()) {
    log_.retire_through(std::min(retired_through, log_.end()));
    held_from_ = std::max(held_from_, log_.retired_through() + 1);
  }
  release_payloads();
  if (done.repaired) {
    // Issued once it held a primary's whole log: every batch it ever
    // acknowledged and lost to damage is back, or was never published.
    suspect_ = false;
    repair_in_flight_ = false;
  }
  after_durable(out);
  return true;
}

void ReplicaCore::release_payloads() {
  // Oldest first, and durable ones only: the disk holds those, and no write
  // in flight cuts them, so the driver can read them back.
  while (held_from_ <= durable_end_ &&
         log_.bytes_through(durable_end_) - log_.bytes_through(held_from_ - 1) > options_.held_bytes_max) {
    Entry& entry = log_.at(held_from_);
    entry.elided_bytes = entry.payload.size();
    std::string().swap(entry.payload);
    entry.elided = true;
    ++held_from_;
  }
}

void ReplicaCore::after_durable(Output& out) {
  // Acknowledgements owed, in the view they were asked in only: once a
  // replica promised a later view, an acknowledgement to the earlier primary
  // could help it publish a batch the later view's candidate did not see.
  std::erase_if(pending_acks_, [&](const PendingAck& ack) {
    if (ack.view != promised_ || role_ != Role::backup) return true;
    if (ack.match_end > durable_end_) return false;
    send(ack.to, ack.view, AppendReply{true, ack.match_end, 0, promised_, options_.incarnation}, out);
    return true;
  });
  if (pending_seal_ && disk_idle()) {
    if (pending_seal_->second != promised_ || role_ != Role::backup) {
      pending_seal_.reset();
    } else if (surviving_end() < log_.end() && !weakened(Weakening::longest_log)) {
      cut_to_history(out);  // a start learnt since: answer once the cut is durable
    } else {
      send(pending_seal_->first, pending_seal_->second, seal_answer(), out);
      pending_seal_.reset();
    }
  }
  if (role_ == Role::candidate && own_answer_pending_ && disk_idle()) {
    if (surviving_end() < log_.end() && !weakened(Weakening::longest_log)) {
      cut_to_history(out);
    } else {
      own_answer_pending_ = false;
      seal_replies_[options_.self] = seal_answer();
      try_choose(out);
    }
  }
  if (role_ == Role::candidate && copy_complete_ && !chosen_ && disk_idle() && durable_end_ == log_.end()) {
    FUSEE_ASSERT(log_.end() == best_end_, "the copy ends at the chosen end");
    chosen_ = true;
    start_call_ = call(CoordinatorOp::publish_start, lead_, log_.end() + 1, out);
  }
  if (role_ == Role::primary) advance_commit(out);
}

SealReply ReplicaCore::seal_answer() const {
  // (What it retired was published: it counts as seen published.)
  return SealReply{log_.end(), log_.view_at(log_.end()), std::max(acked_seen_, log_.retired_through()), suspect_};
}

// --- Roles -----------------------------------------------------------------

void ReplicaCore::become_backup(View promised, Output& out) {
  if (role_ == Role::primary || role_ == Role::candidate) {
    // Let the lease go: a majority need not wait for it to expire.
    call(CoordinatorOp::resign, lead_, 0, out);
  }
  role_ = Role::backup;
  promised_ = std::max(promised_, promised);
  register_view_ = std::max(register_view_, promised_);
  lead_ = 0;
  commit_ = 0;
  chosen_ = false;
  copy_complete_ = false;
  best_.reset();
  own_answer_pending_ = false;
  seal_replies_.clear();
  reset_election_timer();
}

void ReplicaCore::campaign(Output& out) {
  campaign_call_ = call(CoordinatorOp::campaign, register_view_ + 1, 0, out);
}

void ReplicaCore::start_candidacy(const Register& reg, Output& out) {
  role_ = Role::candidate;
  lead_ = reg.view;
  promised_ = lead_;
  register_view_ = lead_;
  learn_starts(reg.starts);
  candidacy_at_ = ticks_;
  lease_confirmed_at_ = ticks_;
  seal_replies_.clear();
  best_.reset();
  chosen_ = false;
  copy_complete_ = false;
  pending_acks_.clear();
  pending_seal_.reset();
  own_answer_pending_ = true;
  probe_view_.reset();
  // Answers to calls of an earlier candidacy or view are not this one's.
  start_call_.reset();
  keepalive_call_.reset();
  cut_to_history(out);
  send_seals(out);
  after_durable(out);  // records its own answer at once when the disk is idle
}

void ReplicaCore::send_seals(Output& out) {
  for (ReplicaId r = 0; r < options_.replica_count; ++r) {
    if (r == options_.self || seal_replies_.contains(r)) continue;
    send(r, lead_, SealRequest{starts_}, out);
  }
}

void ReplicaCore::try_choose(Output& out) {
  if (best_ || !seal_replies_.contains(options_.self)) return;
  std::uint32_t vouching = 0;
  Seq acked_max = 0;
  ReplicaId best = options_.self;
  for (const auto& [from, reply] : seal_replies_) {
    if (!reply.suspect || weakened(Weakening::suspect_vouches)) ++vouching;
    acked_max = std::max(acked_max, reply.acked_seen);
    const SealReply& held = seal_replies_.at(best);
    const bool better = weakened(Weakening::longest_log)
                            ? reply.end > held.end
                            : reply.last_view > held.last_view || (reply.last_view == held.last_view && reply.end > held.end);
    if (better) {
      best = from;
    }
  }
  // Suspect answers do not count: a replica whose recovery cut its log at a
  // damaged batch cannot say what it held past the damage (docs/spec.md,
  // FuseeReplicatedDamagedVotes).
  if (vouching < quorum()) return;
  // Never an end below a sequence any of them saw published; more answers
  // may bring a longer log.
  if (seal_replies_.at(best).end < acked_max) return;
  best_ = best;
  best_end_ = seal_replies_.at(best).end;
  if (best == options_.self) {
    copy_complete_ = true;
    after_durable(out);
    return;
  }
  fetch_after_ = std::min<Seq>(log_.end(), best_end_);
  fetch_from_best(out);
}

void ReplicaCore::fetch_from_best(Output& out) {
  const View after_view = fetch_after_ == 0 ? 0 : log_.view_at(fetch_after_);
  send(*best_, lead_, FetchRequest{fetch_after_, after_view, best_end_}, out);
}

void ReplicaCore::become_primary(Output& out) {
  role_ = Role::primary;
  commit_ = 0;
  std::fill(match_.begin(), match_.end(), 0);
  std::fill(match_known_.begin(), match_known_.end(), false);
  lead_from_ = log_.end();
  std::fill(next_.begin(), next_.end(), log_.end() + 1);
  std::fill(heard_from_at_.begin(), heard_from_at_.end(), ticks_);
  lease_confirmed_at_ = ticks_;
  // Its log is the one chosen over a quorum that vouches: a suspect
  // candidate that won holds the cluster's whole log, so it is repaired.
  if (suspect_ && !repair_in_flight_) {
    repair_in_flight_ = true;
    write(log_.end(), {}, out, true);
  }
  for (ReplicaId r = 0; r < options_.replica_count; ++r) {
    if (r != options_.self) send_append(r, out);
  }
  advance_commit(out);
}

Seq ReplicaCore::last_to_send(Seq first, Seq last) const {
  // Within the message's byte budget, one batch at least: a message that
  // grew past what a peer takes would be refused every time it is resent.
  std::uint64_t bytes = 0;
  for (Seq seq = first; seq <= last; ++seq) {
    bytes += payload_bytes(seq);
    if (seq > first && bytes > options_.append_bytes_max) return seq - 1;
  }
  return last;
}

void ReplicaCore::send_append(ReplicaId to, Output& out) {
  const Seq next = std::clamp<Seq>(next_[to], log_.retired_through() + 1, log_.end() + 1);
  AppendRequest request;
  request.prev_seq = next - 1;
  request.prev_view = log_.view_at(request.prev_seq);
  const Seq last = last_to_send(next, std::min<Seq>(log_.end(), next - 1 + options_.entries_per_append_max));
  for (Seq seq = next; seq <= last; ++seq) request.entries.push_back(log_.at(seq));
  request.commit = commit_;
  request.primary_end = log_.end();
  request.starts = starts_through(starts_, lead_);
  request.to_incarnation = incarnation_of_[to];
  request.retire_below = held_by_all() + 1;
  if (request.prev_seq > 0 && request.prev_seq == log_.retired_through()) {
    request.anchor = LogAnchor{request.prev_seq, log_.view_at(request.prev_seq)};
  }
  next_[to] = last + 1;
  send(to, lead_, std::move(request), out);
}

void ReplicaCore::advance_commit(Output& out) {
  const Seq before = commit_;
  while (commit_ < durable_end_) {
    std::uint32_t holders = 1;  // itself: durable through durable_end_
    for (ReplicaId r = 0; r < options_.replica_count; ++r) {
      if (r != options_.self && match_[r] >= commit_ + 1) ++holders;
    }
    if (holders < (weakened(Weakening::publish_alone) ? 1 : quorum())) break;
    ++commit_;
  }
  if (commit_ != before) out.published_through = commit_;
  known_committed_ = std::max(known_committed_, commit_);
}

std::optional<Seq> ReplicaCore::propose(std::string payload, Output& out, std::optional<Seq> expected) {
  if (role_ != Role::primary) return std::nullopt;
  if (expected && *expected != log_.end() + 1) return std::nullopt;
  Entry entry{log_.end() + 1, lead_, commit_, std::move(payload)};
  const Seq seq = entry.seq;
  std::vector<Entry> entries;
  entries.push_back(std::move(entry));
  write(log_.end(), std::move(entries), out);
  for (ReplicaId r = 0; r < options_.replica_count; ++r) {
    if (r != options_.self && next_[r] == seq) send_append(r, out);
  }
  return seq;
}

void ReplicaCore::rebuilt() {
  FUSEE_ASSERT(role_ == Role::wiped || role_ == Role::booting, "only a wiped replica is rebuilt");
  wiped_on_disk_ = false;
  suspect_ = true;
  log_.clear();
  retire_asked_ = 0;
  held_from_ = 1;
  surviving_known_ = 0;
  durable_end_ = 0;
  acked_seen_ = 0;
  known_committed_ = 0;
  if (role_ == Role::wiped) {
    role_ = Role::backup;
    reset_election_timer();
  }
}

void ReplicaCore::accept_loss(Output& out) {
  if (!suspect_ || repair_in_flight_ || role_ == Role::wiped || role_ == Role::booting) return;
  repair_in_flight_ = true;
  write(log_.end(), {}, out, true);
}

// --- Inputs ----------------------------------------------------------------

void ReplicaCore::tick(Output& out) {
  ++ticks_;
  const bool beat = ticks_ % options_.heartbeat_ticks == 0;
  if (beat) retire(out);
  switch (role_) {
    case Role::booting:
    case Role::wiped:
      return;
    case Role::backup:
      if (!campaign_call_ && ticks_ - heard_at_ >= options_.election_ticks) {
        reset_election_timer();
        probe(out);
      }
      // An acknowledgement that waits for the disk says nothing until the
      // disk is done, and a primary that hears nothing from a quorum for its
      // lease steps down: a slow disk (an fdatasync of seconds under load)
      // would look like a dead backup and cost a view change. While the
      // oldest has waited a heartbeat or more, once a heartbeat, an answer
      // that only says this replica is here (it matches nothing: publication
      // still waits for the durable one). A disk that keeps up sends none.
      if (!pending_acks_.empty() && ticks_ - pending_acks_.front().asked_at >= options_.heartbeat_ticks &&
          ticks_ - alive_sent_at_ >= options_.heartbeat_ticks) {
        const PendingAck& oldest = pending_acks_.front();
        if (oldest.view == promised_) {
          alive_sent_at_ = ticks_;
          send(oldest.to, oldest.view, AppendReply{true, 0, 0, promised_, options_.incarnation}, out);
        }
      }
      return;
    case Role::candidate:
      if (ticks_ - candidacy_at_ >= options_.candidacy_ticks ||
          ticks_ - lease_confirmed_at_ >= options_.lease_ticks) {
        become_backup(promised_, out);
        return;
      }
      if (beat) {
        if (!best_) send_seals(out);
        if (best_ && !copy_complete_) fetch_from_best(out);
        if (chosen_ && !start_call_) start_call_ = call(CoordinatorOp::publish_start, lead_, log_.end() + 1, out);
        if (!keepalive_call_) {
          keepalive_sent_at_ = ticks_;
          keepalive_call_ = call(CoordinatorOp::keepalive, lead_, 0, out);
        }
      }
      return;
    case Role::primary: {
      // A primary that has not heard from a quorum steps down so that
      // another can be elected: it could not publish anyway. One that cannot
      // reach the coordinator goes on serving while a quorum hears it (its
      // backups grant no pre-vote, so nobody campaigns, and the seal fences
      // it the moment a later view starts): an etcd outage stops no append.
      // It steps down when the coordinator answers that its lease or view is
      // gone (coordinator_answer).
      std::uint32_t heard = 1;
      for (ReplicaId r = 0; r < options_.replica_count; ++r) {
        if (r != options_.self && ticks_ - heard_from_at_[r] < options_.lease_ticks) ++heard;
      }
      if (heard < quorum()) {
        become_backup(promised_, out);
        return;
      }
      if (beat) {
        for (ReplicaId r = 0; r < options_.replica_count; ++r) {
          if (r == options_.self) continue;
          // Retransmit from what the backup confirmed: a lost append leaves
          // a gap the next one's prefix check would refuse anyway.
          next_[r] = std::min(next_[r], match_[r] + 1);
          send_append(r, out);
        }
        if (!keepalive_call_) {
          keepalive_sent_at_ = ticks_;
          keepalive_call_ = call(CoordinatorOp::keepalive, lead_, 0, out);
        }
      }
      return;
    }
  }
}

void ReplicaCore::receive(const Message& message, Output& out) {
  if (role_ == Role::booting || role_ == Role::wiped) return;
  std::visit(
      [&](const auto& body) {
        using Body = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<Body, SealRequest>) on_seal_request(message, body, out);
        else if constexpr (std::is_same_v<Body, SealReply>) on_seal_reply(message, body, out);
        else if constexpr (std::is_same_v<Body, FetchRequest>) on_fetch_request(message, body, out);
        else if constexpr (std::is_same_v<Body, FetchReply>) on_fetch_reply(message, body, out);
        else if constexpr (std::is_same_v<Body, AppendRequest>) on_append_request(message, body, out);
        else if constexpr (std::is_same_v<Body, AppendReply>) on_append_reply(message, body, out);
        else if constexpr (std::is_same_v<Body, ProbeRequest>) on_probe_request(message, out);
        else on_probe_reply(message, body, out);
      },
      message.body);
}

void ReplicaCore::on_seal_request(const Message& message, const SealRequest& request, Output& out) {
  if (message.view < promised_) return;
  if (message.view == promised_ && role_ != Role::backup) return;  // its own view
  learn_starts(starts_through(request.starts, message.view));
  if (message.view > promised_ || role_ != Role::backup) become_backup(message.view, out);
  register_view_ = std::max(register_view_, message.view);
  reset_election_timer();  // a candidate is at work: do not campaign against it
  primary_heard_at_ = ticks_;
  cut_to_history(out);
  pending_seal_ = {message.from, message.view};
  after_durable(out);  // answers at once when the disk is idle
}

void ReplicaCore::on_seal_reply(const Message& message, const SealReply& reply, Output& out) {
  if (role_ != Role::candidate || message.view != lead_ || best_) return;
  seal_replies_[message.from] = reply;
  try_choose(out);
}

void ReplicaCore::on_fetch_request(const Message& message, const FetchRequest& request, Output& out) {
  if (message.view != promised_ || role_ != Role::backup) return;
  const Seq end = std::min<Seq>(log_.end(), durable_end_);
  if (request.after_seq < log_.retired_through()) {
    // Batches it retired: published, and nobody holds them any more. The
    // candidate starts its log after them (FetchReply::anchor).
    FetchReply reply{true, 0, {}, LogAnchor{log_.retired_through(), log_.view_at(log_.retired_through())}};
    const Seq first = log_.retired_through() + 1;
    const Seq last = last_to_send(first, std::min({end, request.up_to, first - 1 + options_.entries_per_append_max}));
    for (Seq seq = first; seq <= last; ++seq) reply.entries.push_back(log_.at(seq));
    send(message.from, message.view, std::move(reply), out);
    return;
  }
  // (A retired batch is published: the same in every log, so only later
  // ones are compared.)
  if (request.after_seq > end ||
      (request.after_seq > log_.retired_through() && log_.at(request.after_seq).view != request.after_view)) {
    const Seq hint = request.after_seq == 0 ? 0 : std::min(request.after_seq - 1, end);
    send(message.from, message.view, FetchReply{false, hint, {}}, out);
    return;
  }
  FetchReply reply{true, 0, {}};
  const Seq last = last_to_send(request.after_seq + 1,
                                std::min({end, request.up_to, request.after_seq + options_.entries_per_append_max}));
  for (Seq seq = request.after_seq + 1; seq <= last; ++seq) reply.entries.push_back(log_.at(seq));
  send(message.from, message.view, std::move(reply), out);
}

void ReplicaCore::on_fetch_reply(const Message& message, const FetchReply& reply, Output& out) {
  if (role_ != Role::candidate || message.view != lead_ || !best_ || message.from != *best_ || copy_complete_) {
    return;
  }
  if (!reply.match) {
    // Never below its own start: a batch it retired is published, so the
    // best log holds it too (a lower hint answers an earlier request, or a
    // duplicate of one).
    if (fetch_after_ <= log_.retired_through()) return;
    fetch_after_ = std::max(log_.retired_through(), std::min(reply.hint, fetch_after_ - 1));
    fetch_from_best(out);
    return;
  }
  if (reply.anchor) {
    // Its log starts after what the best one retired: published batches.
    if (reply.entries.empty() || reply.entries.front().seq != reply.anchor->seq + 1 ||
        reply.anchor->seq <= fetch_after_ || reply.anchor->seq >= best_end_ || reply.anchor->segment < 1) {
      return;  // an answer to an earlier request, or none to take
    }
    if (log_.holds(reply.anchor->seq) && log_.at(reply.anchor->seq).view == reply.anchor->view) {
      // It holds that published batch: its log goes on from there, its own
      // batches before it kept (never a restart that forgets batches it may
      // have acknowledged).
      fetch_after_ = reply.anchor->seq;
      fetch_from_best(out);
      return;
    }
    fetch_after_ = reply.entries.back().seq;
    write(reply.anchor->seq, reply.entries, out, false, *reply.anchor);
    if (fetch_after_ < best_end_) {
      fetch_from_best(out);
      return;
    }
  } else if (!reply.entries.empty()) {
    if (reply.entries.front().seq != fetch_after_ + 1) return;  // an answer to an earlier request
    fetch_after_ = reply.entries.back().seq;
    write(reply.entries.front().seq - 1, reply.entries, out);
    if (fetch_after_ < best_end_) {
      fetch_from_best(out);
      return;
    }
  } else if (fetch_after_ < best_end_) {
    return;  // it no longer has what it answered; the candidacy times out
  }
  // Through the chosen end: cut what this replica held past it.
  if (log_.end() > best_end_) write(best_end_, {}, out);
  copy_complete_ = true;
  after_durable(out);
}

void ReplicaCore::on_append_request(const Message& message, const AppendRequest& request, Output& out) {
  if (message.view < promised_) {
    send(message.from, message.view, AppendReply{false, 0, 0, promised_, options_.incarnation}, out);
    return;
  }
  if (message.view == promised_ && role_ != Role::backup) return;  // its own view: never from another
  // A primary sends only after its view's start is published, so its view
  // is one this replica may join without asking the coordinator; the
  // starts it carries are all that exist up to its view.
  if (message.view > promised_) become_backup(message.view, out);
  register_view_ = std::max(register_view_, message.view);
  reset_election_timer();
  primary_heard_at_ = ticks_;
  heard_primary_ = {message.view, message.from};
  learn_starts(starts_through(request.starts, message.view));
  retire_known_ = std::max(retire_known_, request.retire_below);
  Seq end = surviving_end();
  // A replica that cannot continue where the primary's log starts starts
  // its log after the primary's start: what comes before is published, and
  // no replica will ever send it. A suspect one lost batches the primary
  // retired, or holds others there (its repair still waits for the whole of
  // the primary's log from there); a sound one was down or behind past the
  // lag cap (ReplicaOptions::retire_lag_bytes_max) while the others retired
  // -- what it holds there is published and retired, or of a view the
  // primary's log superseded, as a cut would find.
  if (request.anchor && request.anchor->seq == request.prev_seq &&
      request.anchor->view == request.prev_view && request.anchor->segment >= 1 &&
      request.prev_seq > log_.retired_through() &&
      (request.prev_seq > end || log_.at(request.prev_seq).view != request.prev_view)) {
    write(request.prev_seq, {}, out, false, *request.anchor);
    end = surviving_end();
  }
  if (request.prev_seq > end ||
      (request.prev_seq > log_.retired_through() && log_.at(request.prev_seq).view != request.prev_view)) {
    const Seq hint = request.prev_seq == 0 ? 0 : std::min(request.prev_seq - 1, end);
    send(message.from, message.view, AppendReply{false, 0, hint, promised_, options_.incarnation}, out);
    return;
  }
  // The chain: a batch of the same sequence and view is the same batch, with
  // the same batches before it, so only the first that differs matters.
  std::size_t first_new = request.entries.size();
  for (std::size_t i = 0; i < request.entries.size(); ++i) {
    const Seq seq = request.prev_seq + 1 + i;
    if (seq <= log_.retired_through()) continue;  // published: the same batch
    if (seq > end || log_.at(seq).view != request.entries[i].view) {
      first_new = i;
      break;
    }
  }
  const Seq through = request.prev_seq + request.entries.size();
  // Its log is the primary's through `through` once this write is made;
  // the primary's is published through its commit.
  known_committed_ = std::max(known_committed_, std::min(request.commit, through));
  if (first_new < request.entries.size()) {
    write(request.prev_seq + first_new,
          std::vector<Entry>(request.entries.begin() + static_cast<std::ptrdiff_t>(first_new), request.entries.end()),
          out);
  } else {
    // Nothing new. Cut what the history cuts, and a batch of an earlier view
    // past the primary's end (its log has no such batch; later ones are its
    // own view's).
    Seq keep = end;
    if (through == request.primary_end && keep > through && through >= log_.retired_through() &&
        log_.at(through + 1).view < message.view) {
      keep = through;
    }
    if (keep < log_.end()) write(keep, {}, out);
  }
  pending_acks_.push_back({message.from, message.view, through, ticks_});
  // Only an append sent to this life repairs: one sent before this replica
  // restarted may predate batches it acknowledged and then lost.
  if (suspect_ && !repair_in_flight_ && through == request.primary_end &&
      request.to_incarnation == options_.incarnation) {
    repair_in_flight_ = true;
    write(log_.end(), {}, out, true);
  }
  after_durable(out);
}

void ReplicaCore::on_append_reply(const Message& message, const AppendReply& reply, Output& out) {
  if (reply.promised > promised_) {
    // A quorum may have moved on: this primary (or candidate) of an earlier
    // view stops, refusing what it refused.
    if (role_ == Role::primary || role_ == Role::candidate) become_backup(reply.promised, out);
    return;
  }
  if (role_ != Role::primary || message.view != lead_) return;
  const ReplicaId from = message.from;
  heard_from_at_[from] = ticks_;
  incarnation_of_[from] = reply.incarnation;
  if (reply.ok) {
    // Only a match says what it holds: an "alive" answer (a slow disk:
    // match 0) and a refusal leave a replica restarting unknown.
    if (reply.match_end > 0) match_known_[from] = true;
    match_[from] = std::max(match_[from], reply.match_end);
    next_[from] = std::max(next_[from], match_[from] + 1);
    advance_commit(out);
    if (next_[from] <= log_.end()) send_append(from, out);
    return;
  }
  // Its log does not continue where this primary thought. Below what it
  // acknowledged only if it lost batches since (damage found at a restart):
  // it no longer counts toward them.
  match_[from] = std::min(match_[from], reply.hint);
  next_[from] = std::min(next_[from] - 1, reply.hint) + 1;
  send_append(from, out);
}

void ReplicaCore::probe(Output& out) {
  probe_view_ = register_view_ + 1;
  probe_at_ = ticks_;
  probe_grants_.clear();
  probe_grants_[options_.self] = true;
  for (ReplicaId r = 0; r < options_.replica_count; ++r) {
    if (r != options_.self) send(r, *probe_view_, ProbeRequest{}, out);
  }
}

void ReplicaCore::on_probe_request(const Message& message, Output& out) {
  // Granted by a backup that has not heard from a primary or candidate for a
  // lease (a primary steps down after as long without a quorum), for a view
  // past the one it promised. A primary or candidate is one: it refuses.
  const bool granted = role_ == Role::backup && message.view > promised_ &&
                       ticks_ - primary_heard_at_ >= options_.lease_ticks;
  send(message.from, message.view, ProbeReply{granted}, out);
}

void ReplicaCore::on_probe_reply(const Message& message, const ProbeReply& reply, Output& out) {
  if (role_ != Role::backup || !probe_view_ || message.view != *probe_view_ || campaign_call_) return;
  if (ticks_ - probe_at_ >= options_.election_ticks) {  // a round left open too long
    probe_view_.reset();
    return;
  }
  probe_grants_[message.from] = reply.granted;
  std::uint32_t granted = 0;
  for (const auto& [from, yes] : probe_grants_) granted += yes ? 1 : 0;
  if (granted < quorum()) return;
  probe_view_.reset();
  campaign(out);
}

void ReplicaCore::coordinator_answer(const CoordinatorAnswer& answer, Output& out) {
  if (answer.reached) {
    register_view_ = std::max(register_view_, answer.reg.view);
    learn_starts(answer.reg.starts);
  }
  if (read_call_ && answer.id == *read_call_) {
    read_call_.reset();
    if (!answer.reached) {
      read_call_ = call(CoordinatorOp::read, 0, 0, out);
      return;
    }
    promised_ = std::max(promised_, answer.reg.view);
    if (role_ == Role::booting) {
      role_ = wiped_on_disk_ && !weakened(Weakening::wiped_votes) ? Role::wiped : Role::backup;
      reset_election_timer();
    }
    return;
  }
  if (campaign_call_ && answer.id == *campaign_call_) {
    campaign_call_.reset();
    if (role_ != Role::backup) return;
    if (answer.reached && answer.succeeded && answer.reg.view > promised_) {
      start_candidacy(answer.reg, out);
    } else {
      reset_election_timer();
    }
    return;
  }
  if (start_call_ && answer.id == *start_call_) {
    start_call_.reset();
    if (role_ != Role::candidate || !chosen_) return;
    if (!answer.reached) return;  // tried again at the next beat
    if (answer.succeeded) {
      become_primary(out);
    } else {
      become_backup(answer.reg.view, out);
    }
    return;
  }
  if (keepalive_call_ && answer.id == *keepalive_call_) {
    keepalive_call_.reset();
    if (role_ != Role::candidate && role_ != Role::primary) return;
    if (!answer.reached) return;
    if (answer.succeeded && answer.reg.view == lead_) {
      lease_confirmed_at_ = keepalive_sent_at_;
    } else {
      become_backup(answer.reg.view, out);
    }
  }
}

}  // namespace fusee::replication
