// The replica core's rules, each forced by hand in the interleaving that
// would lose an acknowledged batch if the rule were missing (the simulator,
// simulation_test.cpp, finds such interleavings by chance; these pin them).
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include "replication/replica_core.hpp"

namespace fusee::replication {
namespace {

Entry entry(Seq seq, View view, std::string payload = "x") { return {seq, view, 0, std::move(payload)}; }

template <typename Body>
std::vector<std::pair<Message, Body>> sent(const Output& out) {
  std::vector<std::pair<Message, Body>> found;
  for (const Message& message : out.sends) {
    if (const auto* body = std::get_if<Body>(&message.body)) found.emplace_back(message, *body);
  }
  return found;
}

std::optional<CoordinatorCall> call_of(const Output& out, CoordinatorOp op) {
  for (const CoordinatorCall& call : out.calls) {
    if (call.op == op) return call;
  }
  return std::nullopt;
}

struct Harness {
  std::unique_ptr<ReplicaCore> core;
  Output boot;
  ReplicaId self_;

  Harness(ReplicaId self, RecoveredLog recovered, Register reg, std::uint64_t incarnation = 0,
          ReplicaOptions options = {})
      : self_(self) {
    options.self = self;
    options.replica_count = 3;
    options.incarnation = incarnation;
    core = std::make_unique<ReplicaCore>(options, std::move(recovered), boot);
    const auto read = call_of(boot, CoordinatorOp::read);
    REQUIRE(read);
    Output out;
    core->coordinator_answer({read->id, true, true, std::move(reg)}, out);
  }

  Output receive(ReplicaId from, View view, MessageBody body) {
    Output out;
    core->receive({from, self_, view, std::move(body)}, out);
    return out;
  }
};

Register normal_view(View view, ReplicaId primary, ViewStarts starts) { return {view, primary, true, std::move(starts)}; }

AppendRequest append(Seq prev_seq, View prev_view, std::vector<Entry> entries, Seq primary_end, ViewStarts starts,
                     std::uint64_t to_incarnation = 0) {
  AppendRequest request;
  request.to_incarnation = to_incarnation;
  request.prev_seq = prev_seq;
  request.prev_view = prev_view;
  request.entries = std::move(entries);
  request.primary_end = primary_end;
  request.starts = std::move(starts);
  return request;
}

// Ticks replica 0 until its election timer runs out and it probes, the
// others granting (they have not heard from a primary either); the campaign
// call that follows, if it comes within `ticks`.
std::optional<CoordinatorCall> campaign_after_probes(ReplicaCore& core, int ticks) {
  std::optional<CoordinatorCall> campaign;
  for (int i = 0; i < ticks && !campaign; ++i) {
    Output tick;
    core.tick(tick);
    for (const auto& [message, probe] : sent<ProbeRequest>(tick)) {
      Output granted;
      core.receive({message.to, 0, message.view, ProbeReply{true}}, granted);
      if (!campaign) campaign = call_of(granted, CoordinatorOp::campaign);
    }
  }
  return campaign;
}

// A candidate of view 1 (replica 0, empty log unless given) that has sent
// its seals.
std::unique_ptr<ReplicaCore> candidate(Output& out, RecoveredLog recovered = {}) {
  ReplicaOptions options;
  options.self = 0;
  options.replica_count = 3;
  Output boot;
  auto core = std::make_unique<ReplicaCore>(options, std::move(recovered), boot);
  core->coordinator_answer({call_of(boot, CoordinatorOp::read)->id, true, true, Register{}}, out);
  const auto campaign = campaign_after_probes(*core, 1000);
  REQUIRE(campaign);
  CHECK(campaign->view == 1);
  core->coordinator_answer({campaign->id, true, true, Register{1, 0, false, {}}}, out);
  REQUIRE(core->role() == Role::candidate);
  return core;
}

// Replica 0 as the primary of view 2 over a log that retired through 5 and
// holds 6 to 8 (view 1), replica 1 having answered its seal; nothing heard
// yet from replica 2. Its appends' payloads are 100 bytes each.
std::unique_ptr<ReplicaCore> primary_over_retired_log(ReplicaOptions options) {
  options.self = 0;
  options.replica_count = 3;
  RecoveredLog recovered;
  for (Seq seq = 6; seq <= 8; ++seq) recovered.entries.push_back(entry(seq, 1, std::string(100, 'p')));
  recovered.retired_through = 5;
  recovered.retired_view = 1;
  Output boot;
  auto core = std::make_unique<ReplicaCore>(options, std::move(recovered), boot);
  Output out;
  core->coordinator_answer({call_of(boot, CoordinatorOp::read)->id, true, true, normal_view(1, 1, {})}, out);
  const auto campaign = campaign_after_probes(*core, 1000);
  REQUIRE(campaign);
  REQUIRE(campaign->view == 2);
  Output campaigned;
  core->coordinator_answer({campaign->id, true, true, Register{2, 0, false, {}}}, campaigned);
  REQUIRE(core->role() == Role::candidate);
  Output sealed;
  core->receive({1, 0, 2, SealReply{8, 1, 0, false}}, sealed);
  const auto start = call_of(sealed, CoordinatorOp::publish_start);
  REQUIRE(start);
  Output led;
  core->coordinator_answer({start->id, true, true, Register{2, 0, true, {}}}, led);
  REQUIRE(core->role() == Role::primary);
  return core;
}

TEST_SUITE("unit") {
  TEST_CASE("replica core: a replica not heard from in this view holds retirement back, whatever the log retired "
            "before, until this view's own bytes pass the cap") {
    // The demo's failure under load: replica 2 restarting (its log ending
    // before this one's end) was taken as behind the start, skipped, and the
    // logs retired past it -- its run store then had to be rebuilt.
    ReplicaOptions options;
    options.retire_lag_bytes_max = 250;
    auto core = primary_over_retired_log(options);
    core->allow_retire(100);
    const auto heard = [&](ReplicaId from, bool ok, Seq end) {
      Output out;
      core->receive({from, 0, 2, AppendReply{ok, ok ? end : 0, ok ? 0 : end, 2, 0}}, out);
    };
    // A batch of this view (100 bytes), durable here and on replica 1.
    const auto propose = [&] {
      Output out;
      const auto seq = core->propose(std::string(100, 'n'), out);
      REQUIRE(seq.has_value());
      for (const DiskWrite& write : out.writes) {
        Output done;
        REQUIRE(core->disk_done(write.id, true, done));
      }
      heard(1, true, *seq);
      return *seq;
    };
    heard(1, true, 8);
    CHECK(core->known_committed() == 8);
    // Replica 2 answers, but says nothing of what it holds: alive (its disk
    // is slow), then a refusal (its log does not continue at 8).
    {
      Output out;
      core->receive({2, 0, 2, AppendReply{true, 0, 0, 2, 0}}, out);
    }
    heard(2, false, 7);
    CHECK(core->retire_target() <= 6);  // nothing past what retired before
    propose();
    propose();
    CHECK(core->known_committed() == 10);
    CHECK(core->retire_target() <= 6);  // 200 bytes of this view: within the cap
    propose();
    CHECK(core->retire_target() == 11);  // 300: past it, replica 2 is not waited for

    // Heard from, replica 2 holds through 7: waited for.
    auto heard_core = primary_over_retired_log(options);
    heard_core->allow_retire(100);
    core = std::move(heard_core);
    heard(1, true, 8);
    heard(2, true, 7);
    propose();  // it lags by 200 bytes: within the cap
    CHECK(core->retire_target() == 8);
    // Its log ends below this one's start (it lost batches): it can only be
    // rebuilt, and is not waited for (never the log's last batch).
    heard(2, false, 3);
    CHECK(core->retire_target() == 9);
  }

  TEST_CASE("replica core: payloads past held_bytes_max are released and sent elided, budgeted by their sizes") {
    // Four durable batches of 100 bytes, 150 held: the newest alone keeps
    // its payload.
    std::vector<Entry> held;
    for (Seq seq = 1; seq <= 4; ++seq) held.push_back(entry(seq, 1, std::string(100, 'a' + seq)));
    ReplicaOptions options;
    options.held_bytes_max = 150;
    options.append_bytes_max = 250;
    Harness replica(1, {held, false, false}, normal_view(2, 0, {{1, 1}, {2, 5}}), 0, options);
    REQUIRE(replica.core->role() == Role::backup);
    CHECK(replica.core->held_from() == 4);
    for (Seq seq = 1; seq <= 3; ++seq) {
      CHECK(replica.core->log().at(seq).elided);
      CHECK(replica.core->log().at(seq).payload.empty());
    }
    CHECK(replica.core->log().at(4) == held[3]);
    // A fetch: the reply names the released batches for the driver to read
    // back, and its byte budget counts their real sizes (two of 100 fit in
    // 250, a third does not), not the empty strings held.
    const auto replies = sent<FetchReply>(replica.receive(0, 2, FetchRequest{0, 0, 4}));
    REQUIRE(replies.size() == 1);
    const FetchReply& reply = replies[0].second;
    CHECK(reply.match);
    REQUIRE(reply.entries.size() == 2);
    for (Seq seq = 1; seq <= 2; ++seq) {
      const Entry& sent_entry = reply.entries[seq - 1];
      CHECK(sent_entry.seq == seq);
      CHECK(sent_entry.view == 1);
      CHECK(sent_entry.elided);
    }
    Message message{1, 0, 2, reply};
    CHECK(elided_entries(message).size() == 2);

    // Recovery may hand over the oldest batches elided, with their sizes:
    // the same window and the same budget.
    std::vector<Entry> recovered = held;
    for (Seq seq = 1; seq <= 2; ++seq) {
      recovered[seq - 1].payload.clear();
      recovered[seq - 1].elided = true;
      recovered[seq - 1].elided_bytes = 100;
    }
    Harness restarted(1, {recovered, false, false}, normal_view(2, 0, {{1, 1}, {2, 5}}), 0, options);
    CHECK(restarted.core->held_from() == 4);
    const auto again = sent<FetchReply>(restarted.receive(0, 2, FetchRequest{0, 0, 4}));
    REQUIRE(again.size() == 1);
    CHECK(again[0].second.entries.size() == 2);
  }

  TEST_CASE("replica core: an append sent before a restart does not repair a suspect replica") {
    // Before its restart the replica acknowledged batches 5 and 6; batch 5
    // rotted, so it restarts suspect with 1..4. An append the primary sent
    // before batch 6 existed (primary_end 5) arrives late: holding "the
    // primary's whole log" as of then would not bring batch 6 back.
    std::vector<Entry> held{entry(1, 1), entry(2, 1), entry(3, 1), entry(4, 1)};
    Harness replica(1, {held, true, false}, normal_view(1, 0, {{1, 1}}), 77);
    Output stale = replica.receive(0, 1, append(4, 1, {entry(5, 1)}, 5, {{1, 1}}, 12));
    REQUIRE(stale.writes.size() == 1);
    CHECK_FALSE(stale.writes[0].repaired);
    // Its answer tells the primary its new incarnation; an append that
    // echoes it (and so was sent after the restart) repairs.
    const auto replies = sent<AppendReply>(stale);
    Output done;
    REQUIRE(replica.core->disk_done(stale.writes[0].id, true, done));
    const auto acks = sent<AppendReply>(done);
    REQUIRE(acks.size() == 1);
    CHECK(acks[0].second.incarnation == 77);
    CHECK(replica.core->suspect());
    Output fresh = replica.receive(0, 1, append(5, 1, {entry(6, 1)}, 6, {{1, 1}}, 77));
    REQUIRE(fresh.writes.size() == 2);
    CHECK(fresh.writes[1].repaired);
    Output repaired;
    REQUIRE(replica.core->disk_done(fresh.writes[0].id, true, repaired));
    REQUIRE(replica.core->disk_done(fresh.writes[1].id, true, repaired));
    CHECK_FALSE(replica.core->suspect());
  }

  TEST_CASE("replica core: the operator's accept_loss makes a suspect replica vouch once it is durable") {
    Harness healthy(1, {{entry(1, 1)}, false, false}, normal_view(1, 0, {{1, 1}}));
    Output nothing;
    healthy.core->accept_loss(nothing);
    CHECK(nothing.writes.empty());

    Harness torn(2, {{entry(1, 1)}, true, false}, normal_view(1, 0, {{1, 1}}));
    Output out;
    torn.core->accept_loss(out);
    REQUIRE(out.writes.size() == 1);
    CHECK(out.writes[0].repaired);
    CHECK(out.writes[0].keep_through == 1);
    CHECK(torn.core->suspect());  // not until the disk forgets the damage
    Output done;
    REQUIRE(torn.core->disk_done(out.writes[0].id, true, done));
    CHECK_FALSE(torn.core->suspect());
    Output sealed = torn.receive(0, 2, SealRequest{{{1, 1}}});
    const auto answers = sent<SealReply>(sealed);
    REQUIRE(answers.size() == 1);
    CHECK_FALSE(answers[0].second.suspect);
  }

  TEST_CASE("replica core: a replica cut off alone never campaigns (pre-vote)") {
    Harness lonely(1, {}, normal_view(1, 0, {{1, 1}}));
    for (int i = 0; i < 2000; ++i) {
      Output out;
      lonely.core->tick(out);
      CHECK_FALSE(call_of(out, CoordinatorOp::campaign));
      // The others still hear their primary: they refuse.
      for (const auto& [message, probe] : sent<ProbeRequest>(out)) {
        Output refused;
        lonely.core->receive({message.to, 1, message.view, ProbeReply{false}}, refused);
        CHECK_FALSE(call_of(refused, CoordinatorOp::campaign));
      }
    }
    // And it refuses a probe itself while its primary is heard.
    Output heard = lonely.receive(0, 1, append(0, 0, {}, 0, {{1, 1}}));
    Output asked = lonely.receive(2, 2, ProbeRequest{});
    const auto answers = sent<ProbeReply>(asked);
    REQUIRE(answers.size() == 1);
    CHECK_FALSE(answers[0].second.granted);
  }

  TEST_CASE("replica core: a backup that has not heard its primary for a lease knows none") {
    // What it knows is where its application's calls go (PrimaryRouter):
    // cut off, they must stop waiting on a primary that may be gone.
    Harness backup(1, {}, normal_view(1, 0, {{1, 1}}));
    CHECK(backup.core->known_primary() == kNoReplica);  // none heard in this view yet
    (void)backup.receive(0, 1, append(0, 0, {}, 0, {{1, 1}}));
    CHECK(backup.core->known_primary() == 0);
    const std::uint32_t lease = ReplicaOptions{}.lease_ticks;
    for (std::uint32_t i = 0; i + 1 < lease; ++i) {
      Output out;
      backup.core->tick(out);
    }
    CHECK(backup.core->known_primary() == 0);  // heard within its lease
    Output out;
    backup.core->tick(out);
    CHECK(backup.core->known_primary() == kNoReplica);
    CHECK(backup.core->role() == Role::backup);
    // Heard again: known again.
    (void)backup.receive(0, 1, append(0, 0, {}, 0, {{1, 1}}));
    CHECK(backup.core->known_primary() == 0);
  }

  TEST_CASE("replica core: a keepalive answered after its candidacy ended does not end the next one") {
    Output out;
    auto core = candidate(out);  // view 1
    std::optional<CoordinatorCall> keepalive;
    for (int i = 0; i < 20 && !keepalive; ++i) {
      Output tick;
      core->tick(tick);
      keepalive = call_of(tick, CoordinatorOp::keepalive);
    }
    REQUIRE(keepalive);
    // The candidacy gives up (no seal answers), and the replica resigns its
    // lease and campaigns again, winning view 2.
    const auto campaign = campaign_after_probes(*core, 2000);
    REQUIRE(campaign);
    CHECK(campaign->view == 2);
    Output won;
    core->coordinator_answer({campaign->id, true, true, Register{2, 0, false, {}}}, won);
    REQUIRE(core->role() == Role::candidate);
    // The first candidacy's keepalive answer comes now: the register moved
    // on, but not past this candidacy.
    Output late;
    core->coordinator_answer({keepalive->id, true, false, Register{2, 0, false, {}}}, late);
    CHECK(core->role() == Role::candidate);
    CHECK(core->lead() == 2);
  }

  TEST_CASE("replica core: a seal is answered once the log is durable, and ends an earlier view's acknowledgements") {
    // The batch is in flight when the seal arrives. The answer names the
    // batch (it is in the log), so it waits until the batch is durable: an
    // answer must be what the replica can serve when the candidate copies
    // from it. The acknowledgement the earlier primary is owed is dropped,
    // as the spec's rule has it (a replica acknowledges only in the view it
    // promised); with the answer naming every batch the replica accepted,
    // that drop is defence in depth, and the simulator finds no loss
    // without it (docs/replication.md).
    Harness backup(1, {}, normal_view(1, 0, {{1, 1}}));
    Output first = backup.receive(0, 1, append(0, 0, {entry(1, 1)}, 1, {{1, 1}}));
    REQUIRE(first.writes.size() == 1);
    CHECK(sent<AppendReply>(first).empty());  // not durable yet

    Output seal = backup.receive(2, 2, SealRequest{{{1, 1}}});
    CHECK(sent<SealReply>(seal).empty());  // the disk is not idle
    CHECK(backup.core->promised() == 2);

    Output done;
    REQUIRE(backup.core->disk_done(first.writes[0].id, true, done));
    CHECK(sent<AppendReply>(done).empty());
    const auto replies = sent<SealReply>(done);
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].first.to == 2);
    CHECK(replies[0].second.end == 1);
    CHECK(replies[0].second.last_view == 1);
  }

  TEST_CASE("replica core: an acknowledgement is sent only once the batches are durable") {
    Harness backup(1, {}, normal_view(1, 0, {{1, 1}}));
    Output first = backup.receive(0, 1, append(0, 0, {entry(1, 1), entry(2, 1)}, 2, {{1, 1}}));
    REQUIRE(first.writes.size() == 1);
    CHECK(sent<AppendReply>(first).empty());
    // The same batches again (a duplicate) while the write is in flight: no
    // write, and still no acknowledgement.
    Output again = backup.receive(0, 1, append(0, 0, {entry(1, 1), entry(2, 1)}, 2, {{1, 1}}));
    CHECK(again.writes.empty());
    CHECK(sent<AppendReply>(again).empty());
    Output done;
    REQUIRE(backup.core->disk_done(first.writes[0].id, true, done));
    const auto acks = sent<AppendReply>(done);
    REQUIRE(acks.size() == 2);
    for (const auto& [message, ack] : acks) {
      CHECK(ack.ok);
      CHECK(ack.match_end == 2);
    }
  }

  TEST_CASE("replica core: a backup knows committed what its primary's appends say, never past what they match") {
    Harness backup(1, {}, normal_view(1, 0, {{1, 1}}));
    CHECK(backup.core->known_committed() == 0);
    // Three batches, the primary's commit at 2: the first two are known.
    auto first = append(0, 0, {entry(1, 1), entry(2, 1), entry(3, 1)}, 3, {{1, 1}});
    first.commit = 2;
    (void)backup.receive(0, 1, first);
    CHECK(backup.core->known_committed() == 2);
    // A heartbeat whose commit is past what the backup holds: known only
    // through what it holds and matched (the primary's end is 5).
    auto heartbeat = append(3, 1, {}, 5, {{1, 1}});
    heartbeat.commit = 5;
    (void)backup.receive(0, 1, heartbeat);
    CHECK(backup.core->known_committed() == 3);
    // An append that does not follow on teaches nothing.
    auto gap = append(4, 1, {entry(5, 1)}, 5, {{1, 1}});
    gap.commit = 5;
    (void)backup.receive(0, 1, gap);
    CHECK(backup.core->known_committed() == 3);
    // What a batch's `acked` says counts too: batch 5 says 4 was published.
    auto more = append(3, 1, {entry(4, 1), Entry{5, 1, 4, "y"}}, 5, {{1, 1}});
    (void)backup.receive(0, 1, more);
    CHECK(backup.core->known_committed() == 4);
  }

  TEST_CASE("replica core: a later view's commit says nothing of the batches a backup holds that it cut") {
    // Batches 4 and 5 of view 1 were never published; view 2 started at 4
    // with batches of its own, published through 5. A backup still holding
    // view 1's 4 and 5 when view 2's primary's heartbeat comes knows only
    // 1..3 committed: its 4 and 5 are not the published ones.
    Harness backup(1, {}, normal_view(1, 0, {{1, 1}}));
    auto old = append(0, 0, {entry(1, 1), entry(2, 1), entry(3, 1), entry(4, 1), entry(5, 1)}, 5, {{1, 1}});
    old.commit = 3;
    (void)backup.receive(0, 1, old);
    CHECK(backup.core->known_committed() == 3);
    auto later = append(5, 2, {}, 5, {{1, 1}, {2, 4}});
    later.commit = 5;
    const Output refused = backup.receive(2, 2, later);
    const auto replies = sent<AppendReply>(refused);
    REQUIRE(replies.size() == 1);
    CHECK_FALSE(replies[0].second.ok);
    CHECK(backup.core->known_committed() == 3);
  }

  TEST_CASE("replica core: a fetch reply keeps within the byte budget, with one batch at least") {
    // Five batches of 3 MiB and one of 10 MiB: a reply of them all would be
    // larger than a peer takes, at every resend.
    RecoveredLog recovered;
    for (Seq seq = 1; seq <= 5; ++seq) recovered.entries.push_back(entry(seq, 1, std::string(3u << 20, 'b')));
    recovered.entries.push_back(entry(6, 1, std::string(10u << 20, 'c')));
    Harness backup(1, std::move(recovered), normal_view(1, 0, {{1, 1}}));
    Output out = backup.receive(0, 1, FetchRequest{0, 0, 6});
    auto replies = sent<FetchReply>(out);
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].second.match);
    CHECK(replies[0].second.entries.size() == 2);  // 6 MiB; a third would pass 8 MiB
    out = backup.receive(0, 1, FetchRequest{5, 1, 6});
    replies = sent<FetchReply>(out);
    REQUIRE(replies.size() == 1);
    REQUIRE(replies[0].second.entries.size() == 1);  // alone over the budget, and still sent
    CHECK(replies[0].second.entries[0].seq == 6);
  }

  TEST_CASE("replica core: a backup refuses an earlier view's batches and names its promise") {
    Harness backup(1, {}, normal_view(2, 2, {{1, 1}, {2, 1}}));
    Output out = backup.receive(0, 1, append(0, 0, {entry(1, 1)}, 1, {{1, 1}}));
    CHECK(out.writes.empty());
    const auto replies = sent<AppendReply>(out);
    REQUIRE(replies.size() == 1);
    CHECK_FALSE(replies[0].second.ok);
    CHECK(replies[0].second.promised == 2);
  }

  TEST_CASE("replica core: a seal answer is the log cut by the view history") {
    // Batches 2 and 3 of view 1 were never part of the cluster's log once
    // view 2 started at 2: the answer must not offer them as an end.
    Harness backup(1, {{entry(1, 1), entry(2, 1), entry(3, 1)}, false, false}, Register{});
    Output seal = backup.receive(2, 3, SealRequest{{{1, 1}, {2, 2}}});
    REQUIRE(seal.writes.size() == 1);
    CHECK(seal.writes[0].keep_through == 1);
    CHECK(sent<SealReply>(seal).empty());
    Output done;
    REQUIRE(backup.core->disk_done(seal.writes[0].id, true, done));
    const auto replies = sent<SealReply>(done);
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].second.end == 1);
  }

  TEST_CASE("replica core: a wiped replica answers no seal and takes no batch until rebuilt and repaired") {
    RecoveredLog wiped;
    wiped.wiped = true;
    Harness replica(1, wiped, normal_view(1, 0, {{1, 1}}));
    CHECK(replica.core->role() == Role::wiped);
    CHECK(replica.receive(2, 2, SealRequest{}).sends.empty());
    CHECK(replica.receive(0, 1, append(0, 0, {entry(1, 1)}, 1, {{1, 1}})).writes.empty());

    replica.core->rebuilt();
    CHECK(replica.core->role() == Role::backup);
    CHECK(replica.core->suspect());
    Output out = replica.receive(0, 1, append(0, 0, {entry(1, 1)}, 1, {{1, 1}}));
    REQUIRE(out.writes.size() == 2);  // the batch, then the repair
    CHECK(out.writes[1].repaired);
    Output done;
    REQUIRE(replica.core->disk_done(out.writes[0].id, true, done));
    CHECK(replica.core->suspect());
    REQUIRE(replica.core->disk_done(out.writes[1].id, true, done));
    CHECK_FALSE(replica.core->suspect());
  }

  TEST_CASE("replica core: a suspect answer does not count toward the candidate's quorum") {
    Output out;
    auto core = candidate(out);
    CHECK(sent<SealRequest>(out).size() == 2);
    Output first;
    core->receive({1, 0, 1, SealReply{0, 0, 0, true}}, first);
    CHECK_FALSE(call_of(first, CoordinatorOp::publish_start));
    CHECK(sent<FetchRequest>(first).empty());
    Output second;
    core->receive({2, 0, 1, SealReply{0, 0, 0, false}}, second);
    const auto start = call_of(second, CoordinatorOp::publish_start);
    REQUIRE(start);
    CHECK(start->view == 1);
    CHECK(start->start == 1);
  }

  TEST_CASE("replica core: the candidate takes the highest view's log over a longer one, and never one below acked") {
    Output out;
    auto core = candidate(out);
    Output first;
    // Replica 1 says a batch through 3 was published; replica 2's log is
    // shorter but of a later view... and shorter than 3: wait for more.
    core->receive({2, 0, 1, SealReply{2, 2, 0, false}}, first);
    CHECK(sent<FetchRequest>(first).size() == 1);  // own (empty) and r2's: quorum, best r2
    const auto fetch = sent<FetchRequest>(first)[0];
    CHECK(fetch.first.to == 2);
    CHECK(fetch.second.up_to == 2);

    Output out2;
    auto other = candidate(out2);
    Output second;
    other->receive({1, 0, 1, SealReply{1, 1, 3, false}}, second);
    CHECK(sent<FetchRequest>(second).empty());  // best ends at 1, acked says 3: wait
    CHECK_FALSE(call_of(second, CoordinatorOp::publish_start));
  }

  TEST_CASE("replica core: a candidate's fetch never goes below its own start; an anchor it already holds is no restart") {
    // Its log retired through batch 5 (view 1) and holds 6 to 8.
    const auto retired_log = [] {
      RecoveredLog log;
      for (Seq seq = 6; seq <= 8; ++seq) log.entries.push_back(entry(seq, 1));
      log.retired_through = 5;
      log.retired_view = 1;
      return log;
    };
    const auto choose_r2 = [](ReplicaCore& core) {
      Output chosen;
      core.receive({2, 0, 1, SealReply{12, 1, 0, false}}, chosen);  // longer, the same last view: the best
      const auto fetch = sent<FetchRequest>(chosen);
      REQUIRE(fetch.size() == 1);
      CHECK(fetch[0].second.after_seq == 8);
    };
    Output out;
    auto core = candidate(out, retired_log());
    choose_r2(*core);
    // A "no match" far below its start (an answer to another request, or a
    // duplicate): it asks again from its start, which the best holds too.
    Output low;
    core->receive({2, 0, 1, FetchReply{false, 2, {}}}, low);
    auto again = sent<FetchRequest>(low);
    REQUIRE(again.size() == 1);
    CHECK(again[0].second.after_seq == 5);
    CHECK(again[0].second.after_view == 1);
    Output lower;
    core->receive({2, 0, 1, FetchReply{false, 1, {}}}, lower);
    CHECK(sent<FetchRequest>(lower).empty());  // at its start already: it waits out the candidacy
    CHECK(core->log().retired_through() == 5);

    // Told its log differs from the best's after 8, it asks from 5; the best,
    // which retired through 6, answers from its start -- batch 6 of view 1,
    // which this candidate holds: it goes on from there, keeping its log.
    const auto differ = [](ReplicaCore& core) {
      Output told;
      core.receive({2, 0, 1, FetchReply{false, 5, {}}}, told);
      REQUIRE(sent<FetchRequest>(told).size() == 1);
      CHECK(sent<FetchRequest>(told)[0].second.after_seq == 5);
    };
    // A candidate told its log differs after 8, answered from the best's start.
    const auto answered_from_start = [&](Output& out, std::unique_ptr<ReplicaCore>& core, LogAnchor anchor) {
      core = candidate(out, retired_log());
      choose_r2(*core);
      differ(*core);
      Output answered;
      core->receive({2, 0, 1, FetchReply{true, 0, {entry(7, anchor.view)}, anchor}}, answered);
      return answered;
    };
    Output out2;
    std::unique_ptr<ReplicaCore> holder;
    const Output anchored = answered_from_start(out2, holder, LogAnchor{6, 1, 3, 77});
    CHECK(anchored.writes.empty());
    const auto from_anchor = sent<FetchRequest>(anchored);
    REQUIRE(from_anchor.size() == 1);
    CHECK(from_anchor[0].second.after_seq == 6);
    CHECK(holder->log().retired_through() == 5);

    // An anchor at a batch it holds of another view: its log from there was
    // never published, and it starts its log at the anchor.
    Output out3;
    std::unique_ptr<ReplicaCore> diverged;
    const Output restarted = answered_from_start(out3, diverged, LogAnchor{6, 2, 3, 77});
    REQUIRE(restarted.writes.size() == 1);
    REQUIRE(restarted.writes[0].restart.has_value());
    CHECK(restarted.writes[0].restart->seq == 6);
    CHECK(diverged->log().retired_through() == 6);
    CHECK(diverged->log().end() == 7);
  }
}

}  // namespace
}  // namespace fusee::replication
