#include "tests/replication/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "replica/replica_store.hpp"
#include "tests/support/fault_file_system.hpp"

namespace fusee::testing::replication_sim {

using replication::CoordinatorAnswer;
using replication::CoordinatorCall;
using replication::CoordinatorOp;
using replication::DiskWrite;
using replication::Entry;
using replication::Message;
using replication::Output;
using replication::Register;
using replication::ReplicaCore;
using replication::ReplicaId;
using replication::Role;
using replication::Seq;
using replication::View;

SimReport& SimReport::operator+=(const SimReport& other) {
  events += other.events;
  proposals += other.proposals;
  acknowledged += other.acknowledged;
  views += other.views;
  crashes += other.crashes;
  torn_crashes += other.torn_crashes;
  damages += other.damages;
  disk_losses += other.disk_losses;
  partitions += other.partitions;
  outages += other.outages;
  pauses += other.pauses;
  stale_primaries += other.stale_primaries;
  read_back += other.read_back;
  retired = std::max(retired, other.retired);
  restarts += other.restarts;
  return *this;
}

std::string SimReport::summary() const {
  return fmt::format(
      "{} events, {} proposals, {} acknowledged, {} views, {} crashes ({} torn), {} damaged, "
      "{} disks lost, {} partitions, {} etcd outages, {} pauses ({} primaries resumed deposed), "
      "{} batches read back, {} retired at most, {} logs restarted at a primary's start",
      events, proposals, acknowledged, views, crashes, torn_crashes, damages, disk_losses, partitions,
      outages, pauses, stale_primaries, read_back, retired, restarts);
}

namespace {

using Us = std::uint64_t;  // simulated microseconds

constexpr Us kTickUs = 1000;
constexpr Us kCoordinatorTimeoutUs = 5000;
// Longer than a replica's election timeout plus its candidacy, as etcd's
// (1.5-2 s at its floor) is against a real replica's: a lease a stepped-down
// primary leaves behind outlives its candidacy.
constexpr Us kLeaseTtlUs = 200'000;
constexpr Us kQuiesceUs = 500'000;

// Each replica's directory on its own fault file system, in the replica's
// own format (replica/replica_store.hpp): the simulator writes and recovers
// it with the code a replica process runs.
constexpr const char* kDir = "/r";
constexpr const char* kCluster = "sim";
constexpr const char* kSuspectPath = "/r/replica/suspect";
// Small segments, so that batches roll from one to the next every dozen or so.
constexpr std::uint64_t kSegmentBytes = replica::kSegmentBytesMin;

// Where batch `seq` lies in a replica's segment files, if the chain they
// hold reaches it.
struct BatchPlace {
  std::string path;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};
std::optional<BatchPlace> batch_place(io::FileSystem& fs, Seq seq) {
  auto chain = replica::read_chain(fs, kDir, kCluster);
  if (!chain || seq <= chain->retired_through() || seq > chain->retired_through() + chain->entries.size()) {
    return std::nullopt;
  }
  const replica::ChainPoint& before = chain->point_after(seq - 1);
  const replica::ChainPoint& after = chain->point_after(seq);
  BatchPlace place{replica::segment_path(kDir, before.segment), before.offset, 0};
  if (after.segment == before.segment) {
    place.bytes = after.offset - before.offset;
  } else {  // a rolling batch: the last of its file
    auto file = fs.open(place.path, {});
    auto size = file ? (*file)->size() : Result<std::uint64_t>(std::make_error_code(std::errc::io_error));
    if (!size) return std::nullopt;
    place.bytes = *size - before.offset;
  }
  return place;
}

bool chain_damaged(io::FileSystem& fs) {
  auto chain = replica::read_chain(fs, kDir, kCluster);
  return !chain || chain->damaged;
}

struct Violation : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Node {
  ReplicaId id = 0;
  replication::ReplicaOptions options;
  std::unique_ptr<FaultFileSystem> fs;
  std::unique_ptr<replica::ReplicaStore> disk;
  std::unique_ptr<ReplicaCore> core;
  bool up = false;
  std::uint64_t life = 0;  // events scheduled in an earlier life are dropped
  Us disk_free_at = 0;
  std::deque<DiskWrite> in_flight;
  bool wiped = false;           // directory lost, the operator has not rebuilt it
  Us paused_until = 0;          // SIGSTOPped: what reaches it waits until then
  bool damage_pending = false;  // damage injected, recovery has not found it yet
  View published_view = 0;      // the view of its last publication output
  Seq published_through = 0;
  // KnownCommitted checks each batch once: what its core knows committed
  // was checked through here, in this life (a cut below it would be seen
  // at the last one checked).
  Seq known_checked = 0;
  std::uint64_t known_checked_life = 0;
};

struct Published {
  Entry entry;
  View pview = 0;
};

struct Proposal {
  ReplicaId at = 0;
  View view = 0;
  Seq seq = 0;
};

class Simulation {
 public:
  explicit Simulation(const SimOptions& options) : options_(options), rng_(options.seed) {}

  SimReport run() {
    try {
      setup();
      const Us heal_at = options_.fault_ms * 1000;
      const Us stop_proposals_at = heal_at + options_.settle_ms * 1000;
      const Us end_at = stop_proposals_at + kQuiesceUs;
      schedule(heal_at, [this] { heal(); });
      schedule(stop_proposals_at, [this] { proposing_ = false; });
      while (!events_.empty() && events_.top().at <= end_at) {
        Event event = events_.top();
        events_.pop();
        now_ = event.at;
        event.action();
        ++report_.events;
        // Most events (ticks, heartbeats) change nothing the invariants
        // read: check when a write was issued or completed, or a role, view
        // or commit moved.
        const std::uint64_t state = fingerprint();
        if (state != checked_state_) {
          checked_state_ = state;
          check_invariants();
        }
      }
      check_final();
    } catch (const Violation& violation) {
      report_.ok = false;
      std::string trace;
      for (const std::string& line : trace_) trace += "  " + line + "\n";
      report_.failure = fmt::format(
          "seed {}: {} at {} us\n(replay: FUSEE_SIM_SEED={} build/tests/fusee_tests "
          "--test-case='*replication simulator*')\nlast events:\n{}state:\n{}",
          options_.seed, violation.what(), now_, options_.seed, trace, describe_state());
    }
    report_.views = coordinator_.view;
    return report_;
  }

 private:
  struct Event {
    Us at;
    std::uint64_t order;
    std::function<void()> action;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at != b.at ? a.at > b.at : a.order > b.order;
    }
  };

  // Only the generator's raw output, never a std:: distribution (their
  // results differ between standard libraries): a seed replays everywhere.
  std::uint64_t below(std::uint64_t bound) { return bound == 0 ? 0 : rng_() % bound; }
  bool chance(std::uint64_t one_in) { return below(one_in) == 0; }
  Us between(Us low, Us high) { return low + below(high - low + 1); }

  void schedule(Us at, std::function<void()> action) {
    events_.push({at, next_order_++, std::move(action)});
  }
  void note(std::string line) {
    if (trace_.size() == 80) trace_.pop_front();
    trace_.push_back(fmt::format("{:>8} {}", now_, line));
  }
  [[noreturn]] void fail(const std::string& what) { throw Violation(what); }

  std::uint32_t n() const { return options_.replicas; }
  bool faults_on() const { return now_ < options_.fault_ms * 1000; }

  std::string describe_state() const {
    std::string text = fmt::format("  etcd: view {} primary r{} {} starts", coordinator_.view,
                                   coordinator_.primary, coordinator_.normal ? "normal" : "recovering");
    for (const auto& [view, start] : coordinator_.starts) text += fmt::format(" {}:{}", view, start);
    text += "\n";
    for (const Node& node : nodes_) {
      if (!node.up) {
        text += fmt::format("  r{}: down{}\n", node.id, node.wiped ? ", wiped" : "");
        continue;
      }
      const ReplicaCore& core = *node.core;
      text += fmt::format("  r{}: {} lead {} promised {} log {} (last view {}) durable {} commit {}{}{}\n", node.id,
                          role_name(core.role()), core.lead(), core.promised(), core.log().end(),
                          core.log().empty() ? 0 : core.log().back().view, core.durable_end(), core.commit(),
                          core.suspect() ? " suspect" : "", node.wiped ? " wiped" : "");
      if (core.role() == Role::primary) {
        for (ReplicaId r = 0; r < n(); ++r) {
          if (r != node.id) text += fmt::format("    r{}: match {} next {}\n", r, core.match_of(r), core.next_of(r));
        }
      }
    }
    return text;
  }

  // --- Set-up --------------------------------------------------------------

  void setup() {
    cut_.assign(n(), std::vector<bool>(n(), false));
    etcd_cut_.assign(n(), false);
    nodes_.resize(n());
    // A third of the clusters cap what a lagging replica holds back: a
    // replica down or cut off a while is retired past, and restarts its log
    // at a primary's start when it returns.
    const std::uint64_t retire_lag_bytes_max = chance(3) ? between(200, 4000) : 0;
    for (ReplicaId id = 0; id < n(); ++id) {
      Node& node = nodes_[id];
      node.id = id;
      node.options.self = id;
      node.options.replica_count = n();
      node.options.heartbeat_ticks = 5;
      node.options.election_ticks = static_cast<std::uint32_t>(between(40, 80));
      node.options.candidacy_ticks = 100;
      node.options.lease_ticks = 30;
      node.options.entries_per_append_max = 16;
      node.options.weakening = options_.weakening;
      node.options.retire_lag_bytes_max = retire_lag_bytes_max;
      // A third of the replicas hold no released payload, a third a few
      // batches' worth: their sends to a backup behind, and their fetch
      // replies, are read back from the disk.
      switch (below(3)) {
        case 0: node.options.held_bytes_max = 0; break;
        case 1: node.options.held_bytes_max = between(100, 3000); break;
        default: break;
      }
      node.fs = std::make_unique<FaultFileSystem>();
      if (!replica::ReplicaStore::initialize(*node.fs, kDir, kCluster, false, kSegmentBytes)) {
        fail("cannot initialise a replica's directory");
      }
      start(node);
    }
    schedule(between(1000, 3000), [this] { propose(); });
    if (options_.isolate_primary_ms > 0) {
      schedule(300'000, [this] { isolate_primary(); });
    } else if (options_.slow_disks_ms > 0) {
      schedule(300'000, [this] {
        slow_until_ = now_ + options_.slow_disks_ms * 1000;
        note(fmt::format("every disk slow: {} us a write", options_.slow_disk_us));
      });
    } else if (options_.power_loss_at_ms > 0) {
      schedule(options_.power_loss_at_ms * 1000, [this] { power_loss(); });
    } else {
      schedule(between(30'000, 80'000), [this] { inject_fault(); });
    }
  }

  // --- A replica's life ----------------------------------------------------

  void start(Node& node) {
    node.disk.reset();
    replica::StoreRecovery recovered;
    // Recovery holds what the core will, so a restarted core starts with
    // the oldest batches elided.
    auto store =
        replica::ReplicaStore::open(*node.fs, kDir, kCluster, recovered, kSegmentBytes, node.options.held_bytes_max);
    if (!store) fail(fmt::format("r{} cannot recover its directory: {}", node.id, store.error().message()));
    if (!node.wiped && recovered.log.wiped) fail(fmt::format("r{}'s directory lost its cluster id", node.id));
    node.damage_pending = false;
    node.disk = std::move(*store);
    node.in_flight.clear();
    node.disk_free_at = now_;
    node.paused_until = 0;
    node.up = true;
    ++node.life;
    node.published_view = 0;
    node.published_through = 0;
    note(fmt::format("r{} starts: {} batches{}{}", node.id, recovered.log.entries.size(),
                     recovered.log.suspect ? ", suspect" : "", recovered.log.wiped ? ", wiped" : ""));
    Output out;
    node.options.incarnation = rng_();
    node.core = std::make_unique<ReplicaCore>(node.options, std::move(recovered.log), out);
    process(node, out);
    const std::uint64_t life = node.life;
    schedule(now_ + kTickUs, [this, &node, life] { tick(node, life); });
  }

  // A stopped process takes nothing in: its ticks, messages, completions
  // and answers wait, in their order, until it runs again. Its clock does not
  // move meanwhile (the worst case: a process that does not notice it was
  // stopped).
  bool paused(Node& node, std::function<void()> again) {
    if (node.paused_until <= now_) {
      if (node.paused_until != 0) {
        // Resumed: count the case the pause is for, a primary that runs on
        // in a view etcd has moved past.
        if (node.core->role() == Role::primary && node.core->lead() < coordinator_.view) ++report_.stale_primaries;
        node.paused_until = 0;
      }
      return false;
    }
    schedule(node.paused_until, std::move(again));
    return true;
  }

  void tick(Node& node, std::uint64_t life) {
    if (!node.up || node.life != life) return;
    if (paused(node, [this, &node, life] { tick(node, life); })) return;
    Output out;
    // Its driver is done with what is committed, most of the time some way
    // behind (a run store applying, an engine's checkpoint).
    if (chance(4)) node.core->allow_retire(node.core->known_committed() + 1 - std::min<Seq>(node.core->known_committed(), below(8)));
    node.core->tick(out);
    process(node, out);
    schedule(now_ + kTickUs, [this, &node, life] { tick(node, life); });
  }

  // Everything the core asked for.
  void process(Node& node, Output& out) {
    // Batches a core released are read back from its disk, before this
    // output's writes (which may cut them), as a replica process does.
    // An append anchored at the log's start takes what only the disk knows;
    // one whose batches the disk retired since the core last heard is
    // dropped, as a replica process drops it.
    std::erase_if(out.sends, [&](Message& message) { return !replica::fill_anchor(message, node.disk->start()); });
    std::erase_if(out.sends, [&](Message& message) {
      for (Entry* entry : replication::elided_entries(message)) {
        if (entry->seq <= node.disk->retired_through()) return true;
      }
      return false;
    });
    for (Message& message : out.sends) {
      for (Entry* entry : replication::elided_entries(message)) {
        // Only a durable batch is released: one no write in flight cuts.
        // (This simulator applies a write when it is issued, so a read of
        // one in flight would succeed here where a replica's disk thread
        // may not have written it yet.)
        bool durable = entry->seq <= node.core->durable_end();
        for (const DiskWrite& write : node.in_flight) durable = durable && entry->seq <= write.keep_through;
        if (!durable) fail(fmt::format("r{} sent batch {} elided before it was durable", node.id, entry->seq));
        auto read = node.disk->read(entry->seq);
        if (!read || read->view != entry->view || read->acked != entry->acked ||
            read->payload != payload_of(*entry)) {
          fail(fmt::format("r{}: durable batch {} does not read back{}", node.id, entry->seq,
                           read ? "" : ": " + read.error().message()));
        }
        *entry = std::move(*read);
        ++report_.read_back;
      }
    }
    for (Message& message : out.sends) send(std::move(message));
    for (DiskWrite& write : out.writes) {
      if (write.restart) ++report_.restarts;
      issue(node, std::move(write));
    }
    for (const CoordinatorCall& call : out.calls) coordinate(node, call);
    if (out.published_through) record_publication(node, *out.published_through);
  }

  void crash(Node& node, bool may_tear) {
    if (!node.up) return;
    if (!node.wiped) check_durable(node);
    ++report_.crashes;
    const std::size_t pending = node.fs->pending_data_op_count();
    CrashOutcome outcome;
    switch (below(may_tear ? 5 : 4)) {
      case 0: outcome = CrashOutcome::drop_all(); break;
      case 1: outcome = CrashOutcome::keep_all(); break;
      case 2: outcome = CrashOutcome::keep_first_k(below(pending + 1)); break;
      case 3: outcome = CrashOutcome::random_subset(rng_()); break;
      default: outcome = CrashOutcome::tear(rng_()); break;
    }
    outcome.names = chance(2) ? CrashOutcome::Names::revert : CrashOutcome::Names::keep;
    auto image = node.fs->crash_image(outcome);
    // A later write landed without an earlier one leaves a hole that
    // recovery reads as damage, as a torn write does: it counts as a
    // damaged replica, and where the premise allows no more of those the
    // crash drops what was in flight instead.
    if (chain_damaged(*image) && !node.damage_pending) {
      if (may_tear) {
        node.damage_pending = true;
        ++report_.torn_crashes;
      } else {
        outcome = CrashOutcome::drop_all(outcome.names);
        image = node.fs->crash_image(outcome);
      }
    }
    note(fmt::format("r{} crashes ({} as {}), {} writes in flight", node.id, role_name(node.core->role()),
                     outcome.describe(), node.in_flight.size()));
    node.disk.reset();
    node.core.reset();
    node.fs = std::move(image);
    node.up = false;
    ++node.life;
  }

  // What the core believes durable must be on the disk, whatever a crash
  // keeps.
  void check_durable(Node& node) {
    auto image = node.fs->crash_image(CrashOutcome::drop_all());
    auto read = replica::read_chain(*image, kDir, kCluster);
    if (!read) fail(fmt::format("r{}: its durable segments cannot be read", node.id));
    const replica::ReadChain& chain = *read;
    const ReplicaCore& core = *node.core;
    const Seq disk_end = chain.retired_through() + chain.entries.size();
    if (disk_end < core.durable_end()) {
      fail(fmt::format("r{} believes batches through {} durable, its disk holds {}", node.id,
                       core.durable_end(), disk_end));
    }
    // Compared where both hold them: the disk may have retired fewer (whole
    // segments only), the core fewer (its segments retire after it).
    for (Seq seq = std::max(chain.retired_through(), core.log().retired_through()) + 1; seq <= core.durable_end();
         ++seq) {
      if (!same(chain.entries[seq - chain.retired_through() - 1], core.log().at(seq))) {
        fail(fmt::format("r{}: durable batch {} differs on disk", node.id, seq));
      }
    }
  }

  // --- Disk ----------------------------------------------------------------

  void issue(Node& node, DiskWrite write) {
    ++disk_events_;
    if (!node.disk->apply(write)) fail(fmt::format("r{}: a write failed", node.id));
    Us done_at = std::max(node.disk_free_at, now_) + between(100, 1000);
    if (now_ < slow_until_) {
      // A slow fdatasync takes slow_disk_us and makes everything written
      // before it durable: writes complete together at the end of the one
      // under way when they were issued, as a real replica's group does.
      const Us slow = options_.slow_disk_us;
      done_at = std::max(node.disk_free_at, (now_ / slow + 1) * slow);
    }
    node.disk_free_at = done_at;
    node.in_flight.push_back(write);
    const std::uint64_t life = node.life;
    schedule(done_at, [this, &node, life] { complete_write(node, life); });
  }

  void complete_write(Node& node, std::uint64_t life) {
    if (!node.up || node.life != life) return;
    if (paused(node, [this, &node, life] { complete_write(node, life); })) return;
    const DiskWrite write = std::move(node.in_flight.front());
    node.in_flight.pop_front();
    if (!node.disk->sync() || !node.disk->finish(write)) fail(fmt::format("r{}: a sync failed", node.id));
    ++disk_events_;
    Output out;
    if (!node.core->disk_done(write.id, true, out, node.disk->start().first_seq - 1)) {
      fail("disk_done refused a completed write");
    }
    process(node, out);
  }

  // --- Network -------------------------------------------------------------

  void send(Message message) {
    if (cut_[message.from][message.to] || (faults_on() && chance(50))) return;
    const int copies = faults_on() && chance(50) ? 2 : 1;
    for (int copy = 0; copy < copies; ++copy) {
      // One in a hundred is held long (a retransmit after a stall): it may
      // reach a replica that restarted, or a later view, since it was sent.
      const Us delay = faults_on() && chance(100) ? between(5'000, 200'000) : between(100, 1500);
      schedule(now_ + delay, [this, message] { deliver(message); });
    }
  }

  void deliver(const Message& message) {
    Node& to = nodes_[message.to];
    if (!to.up) return;
    if (paused(to, [this, message] { deliver(message); })) return;
    Output out;
    to.core->receive(message, out);
    process(to, out);
  }

  // --- The coordinator (etcd) ----------------------------------------------

  void coordinate(Node& node, const CoordinatorCall& call) {
    const ReplicaId caller = node.id;
    const std::uint64_t life = node.life;
    // The transaction applies when it reaches etcd, whether or not the caller
    // still lives to hear the answer.
    schedule(now_ + between(50, 400), [this, caller, life, call] {
      CoordinatorAnswer answer;
      answer.id = call.id;
      Us answer_at = now_ + kCoordinatorTimeoutUs;
      if (!coordinator_down_ && !etcd_cut_[caller]) {
        apply(caller, call, answer);
        if (!(faults_on() && chance(50))) {  // else the answer is lost after the transaction
          answer.reached = true;
          answer_at = now_ + between(50, 400);
        }
      }
      if (!answer.reached) answer.succeeded = false;
      if (call.op == CoordinatorOp::resign) return;  // not answered
      schedule(answer_at, [this, caller, life, answer] { answer_call(caller, life, answer); });
    });
  }

  void answer_call(ReplicaId caller, std::uint64_t life, const CoordinatorAnswer& answer) {
    Node& node = nodes_[caller];
    if (!node.up || node.life != life) return;
    if (paused(node, [this, caller, life, answer] { answer_call(caller, life, answer); })) return;
    Output out;
    node.core->coordinator_answer(answer, out);
    process(node, out);
  }

  void apply(ReplicaId caller, const CoordinatorCall& call, CoordinatorAnswer& answer) {
    Register& reg = coordinator_;
    switch (call.op) {
      case CoordinatorOp::read:
        answer.succeeded = true;
        break;
      case CoordinatorOp::campaign: {
        const bool lease_free = reg.primary == replication::kNoReplica || lease_expires_at_ <= now_ ||
                                reg.primary == caller;
        if (reg.view + 1 == call.view && lease_free) {
          reg.view = call.view;
          reg.primary = caller;
          reg.normal = false;
          lease_expires_at_ = now_ + kLeaseTtlUs;
          answer.succeeded = true;
          note(fmt::format("etcd: r{} wins view {}", caller, call.view));
        }
        break;
      }
      case CoordinatorOp::publish_start: {
        const bool same = reg.view == call.view && reg.primary == caller;
        if (same && !reg.normal) {
          reg.normal = true;
          reg.starts[call.view] = call.start;
          answer.succeeded = true;
          note(fmt::format("etcd: view {} normal, starting at {}", call.view, call.start));
        } else if (same && reg.starts.contains(call.view) && reg.starts.at(call.view) == call.start) {
          answer.succeeded = true;  // a retry of one that applied
        }
        break;
      }
      case CoordinatorOp::keepalive:
        if (reg.view == call.view && reg.primary == caller) {
          lease_expires_at_ = now_ + kLeaseTtlUs;
          answer.succeeded = true;
        }
        break;
      case CoordinatorOp::resign:
        if (reg.primary == caller) lease_expires_at_ = std::min(lease_expires_at_, now_);
        break;
    }
    answer.reg = reg;
  }

  // --- Clients -------------------------------------------------------------

  void propose() {
    if (proposing_) {
      std::vector<ReplicaId> primaries;
      for (const Node& node : nodes_) {
        if (node.up && node.paused_until <= now_ && node.core->role() == Role::primary) primaries.push_back(node.id);
      }
      if (!primaries.empty()) {
        Node& node = nodes_[primaries[below(primaries.size())]];
        // A body of the shared log's, as a replica's store takes: one record.
        const std::string payload =
            replica::encode_records_body(0, 1, {fmt::format("s{}-p{}", options_.seed, ++report_.proposals)});
        Output out;
        const auto seq = node.core->propose(payload, out);
        if (seq) {
          proposals_[payload] = {node.id, node.core->lead(), *seq};
          ViewPayloads& of_view = payloads_[node.core->lead()];
          if (of_view.payloads.empty()) of_view.first = *seq;
          if (*seq != of_view.first + of_view.payloads.size()) fail("a primary's proposals skip a sequence");
          of_view.payloads.push_back(payload);
          if (now_ >= options_.fault_ms * 1000) proposed_after_heal_.insert(payload);
        }
        process(node, out);
      }
    }
    schedule(now_ + between(200, options_.proposal_gap_us_max), [this] { propose(); });
  }

  void record_publication(Node& node, Seq through) {
    const ReplicaCore& core = *node.core;
    if (node.published_view != core.lead()) {
      node.published_view = core.lead();
      node.published_through = 0;
    }
    publishers_[core.lead()].insert(node.id);
    if (publishers_[core.lead()].size() > 1) fail(fmt::format("two replicas published in view {}", core.lead()));
    for (Seq seq = std::max(node.published_through, core.log().retired_through()) + 1; seq <= through; ++seq) {
      Entry entry = core.log().at(seq);
      entry.payload = payload_of(entry);
      entry.elided = false;
      entry.elided_bytes = 0;
      auto [at, inserted] = published_.try_emplace(seq, Published{entry, core.lead()});
      if (!inserted && !same(at->second.entry, entry)) {
        fail(fmt::format("sequence {} published twice with different batches (views {} and {})", seq,
                         at->second.entry.view, entry.view));
      }
      auto proposal = proposals_.find(entry.payload);
      if (proposal != proposals_.end() && proposal->second.at == node.id &&
          proposal->second.view == core.lead() && acknowledged_.insert(entry.payload).second) {
        ++report_.acknowledged;
        if (isolated_ && node.id != *isolated_) ++report_.acknowledged_while_isolated;
        if (now_ < slow_until_) ++report_.acknowledged_while_slow;
      }
    }
    node.published_through = std::max(node.published_through, through);
  }

  // --- Faults --------------------------------------------------------------

  std::uint32_t faulty() {
    std::uint32_t count = 0;
    for (const Node& node : nodes_) {
      // Suspect in its core, or on its disk (marked, or damage a start has
      // not found yet), or lost.
      const auto marked = node.fs->exists(kSuspectPath);
      const bool suspect = (node.core && node.core->suspect()) || !marked || *marked;
      if (node.wiped || node.damage_pending || suspect) ++count;
    }
    return count;
  }
  bool may_damage() { return faulty() + 1 <= (n() - 1) / 2; }

  Node* pick_up(bool prefer_primary) {
    std::vector<Node*> up;
    for (Node& node : nodes_) {
      if (!node.up) continue;
      if (prefer_primary && node.core->role() == Role::primary) return &node;
      up.push_back(&node);
    }
    return up.empty() ? nullptr : up[below(up.size())];
  }

  void restart_later(Node& node, Us low, Us high) {
    const std::uint64_t life = node.life;
    schedule(now_ + between(low, high), [this, &node, life] {
      if (node.up || node.life != life) return;
      start(node);
    });
  }

  void inject_fault() {
    if (!faults_on()) return;
    switch (below(9)) {
      case 0:
      case 1:
      case 2: {  // a crash, the primary first half the time
        Node* node = pick_up(chance(2));
        if (node) {
          crash(*node, may_damage());
          restart_later(*node, 2'000, 60'000);
        }
        break;
      }
      case 3: {  // an acknowledged batch rots: found at the next start
        Node* node = pick_up(false);
        if (node && may_damage() && node->core->durable_end() > 0) {
          const Seq durable = node->core->durable_end();
          crash(*node, false);
          // Near the tail mostly; anywhere a third of the time, so that a
          // log is cut far below what others retired.
          const Seq victim = durable - below(chance(3) ? durable : std::min<Seq>(durable, 3));
          const auto at = batch_place(*node->fs, victim);
          auto image = at ? node->fs->contents(at->path) : Result<std::vector<std::byte>>(std::make_error_code(std::errc::io_error));
          // Half the time a bit flips in its header; else the batch's
          // bytes read back as zeros (the last batch's make a zeroed tail).
          bool rotted = false;
          if (at && image && chance(2)) {
            rotted = bool(node->fs->corrupt_bit(at->path, (at->offset + 8 + below(56)) * 8 + below(8)));
          } else if (at && image) {
            for (std::uint64_t byte = at->offset; byte < at->offset + at->bytes; ++byte) {
              for (int bit = 0; bit < 8; ++bit) {
                if ((std::to_integer<unsigned>((*image)[byte]) >> bit) & 1u) {
                  rotted = bool(node->fs->corrupt_bit(at->path, byte * 8 + static_cast<std::uint64_t>(bit)));
                }
              }
            }
          }
          if (rotted) {
            node->damage_pending = true;
            ++report_.damages;
            note(fmt::format("r{}: batch {} damaged on disk", node->id, victim));
          }
          restart_later(*node, 2'000, 30'000);
        }
        break;
      }
      case 4: {  // a disk lost: back empty, rebuilt by the operator later
        Node* node = pick_up(chance(2));
        if (node && may_damage()) {
          crash(*node, false);
          node->fs = std::make_unique<FaultFileSystem>();
          ++report_.disk_losses;
          note(fmt::format("r{} loses its disk", node->id));
          restart_later(*node, 2'000, 30'000);
          if (options_.weakening == replication::Weakening::wiped_votes) {
            // The rule disabled: the lost directory comes back as an empty
            // log of the cluster, which votes like any other.
            if (!replica::ReplicaStore::initialize(*node->fs, kDir, kCluster, false, kSegmentBytes)) {
              fail("cannot initialise a replica's directory");
            }
            break;
          }
          node->wiped = true;
          schedule(now_ + between(40'000, 120'000), [this, node] { rebuild(*node); });
        }
        break;
      }
      case 5:
      case 6: {  // links cut one way or both, for a while
        ++report_.partitions;
        const ReplicaId a = static_cast<ReplicaId>(below(n()));
        switch (below(4)) {
          case 0:  // a replica cut from etcd only
            etcd_cut_[a] = true;
            note(fmt::format("r{} cut from etcd", a));
            break;
          case 1:  // a replica cut from every other replica, both ways
            for (ReplicaId b = 0; b < n(); ++b) cut_[a][b] = cut_[b][a] = (a != b);
            note(fmt::format("r{} cut from the replicas", a));
            break;
          default: {  // one link, one way or both
            const ReplicaId b = static_cast<ReplicaId>((a + 1 + below(n() - 1)) % n());
            cut_[a][b] = true;
            if (chance(2)) cut_[b][a] = true;
            note(fmt::format("link r{} -> r{} cut{}", a, b, cut_[b][a] ? " both ways" : ""));
            break;
          }
        }
        schedule(now_ + between(10'000, 200'000), [this] { heal_links(); });
        break;
      }
      case 8: {  // SIGSTOP, the primary most often, past its lease; then SIGCONT
        Node* node = pick_up(!chance(4));
        if (node) {
          ++report_.pauses;
          node->paused_until = now_ + between(10'000, 400'000);
          note(fmt::format("r{} stopped until {}", node->id, node->paused_until));
        }
        break;
      }
      default:  // etcd down for a while
        ++report_.outages;
        coordinator_down_ = true;
        note("etcd down");
        schedule(now_ + between(10'000, 150'000), [this] {
          coordinator_down_ = false;
          note("etcd up");
        });
        break;
    }
    schedule(now_ + between(10'000, 60'000), [this] { inject_fault(); });
  }

  void isolate_primary() {
    Node* primary = pick_up(true);
    if (primary == nullptr || primary->core->role() != Role::primary) fail("no primary to isolate at 300 ms");
    isolated_ = primary->id;
    isolated_until_ = now_ + options_.isolate_primary_ms * 1000;
    for (ReplicaId b = 0; b < n(); ++b) cut_[*isolated_][b] = cut_[b][*isolated_] = (b != *isolated_);
    note(fmt::format("r{} (the primary) cut from the replicas, not from etcd", *isolated_));
    schedule(isolated_until_, [this] {
      heal_links();
      isolated_.reset();
    });
  }

  void power_loss() {
    note("power lost everywhere");
    for (Node& node : nodes_) {
      // Every write still in flight tears into garbage (the worst a tear
      // does: recovery reads it as damage). Only in-flight writes: none
      // of them was acknowledged by this replica.
      std::vector<Seq> in_flight;
      for (const DiskWrite& write : node.in_flight) {
        for (const Entry& entry : write.entries) in_flight.push_back(entry.seq);
      }
      crash(node, false);
      std::vector<BatchPlace> landed;  // the in-flight batches that reached the files
      for (Seq seq : in_flight) {
        if (auto at = batch_place(*node.fs, seq)) landed.push_back(*at);
      }
      for (const BatchPlace& at : landed) (void)node.fs->corrupt_bit(at.path, (at.offset + 8) * 8);
      restart_later(node, 5'000, 30'000);
    }
    schedule(now_ + 100'000, [this] {
      for (const Node& node : nodes_) report_.suspect_after_power_loss += node.up && node.core->suspect() ? 1 : 0;
    });
    schedule(now_ + 300'000, [this] {
      std::uint32_t vouching = 0;
      for (const Node& node : nodes_) vouching += node.up && !node.core->suspect() ? 1 : 0;
      if (vouching >= n() / 2 + 1) return;
      report_.loss_accepted = true;
      for (Node& node : nodes_) {
        if (!node.up || !node.core->suspect()) continue;
        note(fmt::format("the operator accepts the loss on r{}", node.id));
        Output out;
        node.core->accept_loss(out);
        process(node, out);
      }
    });
  }

  void heal_links() {
    for (auto& row : cut_) std::fill(row.begin(), row.end(), false);
    std::fill(etcd_cut_.begin(), etcd_cut_.end(), false);
    note("links healed");
  }

  void rebuild(Node& node) {
    if (!node.wiped) return;
    // The operator's `fusee replica init --rebuild`; a running replica then
    // reads the directory again (a process is restarted onto it).
    node.disk.reset();
    if (!replica::ReplicaStore::initialize(*node.fs, kDir, kCluster, true, kSegmentBytes)) fail("cannot rebuild a directory");
    if (node.up) {
      replica::StoreRecovery reread;
      auto store = replica::ReplicaStore::open(*node.fs, kDir, kCluster, reread, kSegmentBytes);
      if (!store || !reread.log.suspect || !reread.log.entries.empty()) fail("a rebuilt directory is not empty and suspect");
      node.disk = std::move(*store);
    }
    node.wiped = false;
    // (Booting: its read of etcd is not answered yet. Under the wiped_votes
    // weakening it came back as a backup and is left so.)
    if (node.up && (node.core->role() == Role::wiped || node.core->role() == Role::booting)) node.core->rebuilt();
    note(fmt::format("r{} rebuilt by the operator", node.id));
  }

  void heal() {
    heal_links();
    coordinator_down_ = false;
    for (Node& node : nodes_) {
      if (!node.up) start(node);
    }
    note("healed: no more faults");
  }

  // --- Invariants ----------------------------------------------------------

  // A batch's payload, the checks' copy when its core released it.
  const std::string& payload_of(const Entry& entry) {
    if (!entry.elided) return entry.payload;
    if (last_view_payloads_ == nullptr || last_view_ != entry.view) {
      auto at = payloads_.find(entry.view);
      last_view_payloads_ = at == payloads_.end() ? nullptr : &at->second;
      last_view_ = entry.view;
    }
    const ViewPayloads* of_view = last_view_payloads_;
    if (of_view == nullptr || entry.seq < of_view->first || entry.seq - of_view->first >= of_view->payloads.size()) {
      fail(fmt::format("batch {} of view {} was never proposed", entry.seq, entry.view));
    }
    return of_view->payloads[entry.seq - of_view->first];
  }
  bool same(const Entry& a, const Entry& b) {
    if (a.seq != b.seq || a.view != b.view || a.acked != b.acked) return false;
    // Both released: one payload in payloads_ stands for both (and each
    // replica's disk is checked against it: check_durable).
    if (a.elided && b.elided) return true;
    return payload_of(a) == payload_of(b);
  }

  std::uint64_t fingerprint() const {
    std::uint64_t hash = disk_events_;
    for (const Node& node : nodes_) {
      const auto mix = [&hash](std::uint64_t value) { hash = (hash ^ value) * 0x100000001b3ULL; };
      mix(node.up ? 1 : 0);
      mix(node.life);
      if (!node.up) continue;
      mix(static_cast<std::uint64_t>(node.core->role()));
      mix(node.core->lead());
      mix(node.core->promised());
      mix(node.core->commit());
      mix(node.core->log().end());
    }
    return hash;
  }

  void check_invariants() {
    // RetiredPublished: a replica retires only published batches, those
    // every replica held, and its disk no more than its core asked.
    for (const Node& node : nodes_) {
      if (!node.up) continue;
      const Seq retired = node.core->log().retired_through();
      if (retired > 0 && !published_.contains(retired)) {
        fail(fmt::format("RetiredPublished: r{} retired through batch {}, which was never published", node.id, retired));
      }
      report_.retired = std::max<std::uint64_t>(report_.retired, retired);
    }
    // AckedNeverLost.
    for (const Node& node : nodes_) {
      if (!node.up || node.core->role() != Role::primary) continue;
      const auto& log = node.core->log();
      for (const auto& [seq, published] : published_) {
        if (published.pview > node.core->lead()) continue;
        // (A batch it retired was published, the same everywhere.)
        if (seq > log.end() || (log.holds(seq) && !same(log.at(seq), published.entry))) {
          fail(fmt::format("AckedNeverLost: batch {} (view {}) published in view {} is not in r{}'s log as primary "
                           "of view {}",
                           seq, published.entry.view, published.pview, node.id, node.core->lead()));
        }
      }
    }
    // KnownCommitted: what a replica takes as committed -- a backup's word
    // from its primary, for the run store to apply -- is published, batch
    // for batch, and never cut.
    for (Node& node : nodes_) {
      if (!node.up) continue;
      const auto& log = node.core->log();
      const Seq known = node.core->known_committed();
      if (node.known_checked_life != node.life || known < node.known_checked) {
        node.known_checked_life = node.life;
        node.known_checked = 0;  // a new life, or a rebuilt directory
      }
      if (node.known_checked > 0) {
        const auto checked = published_.find(node.known_checked);
        if (log.end() < node.known_checked ||
            (log.holds(node.known_checked) && !same(log.at(node.known_checked), checked->second.entry))) {
          fail(fmt::format("KnownCommitted: r{} cut or replaced batch {}, which it knew was committed", node.id,
                           node.known_checked));
        }
      }
      for (Seq seq = std::max(node.known_checked, log.retired_through()) + 1; seq <= known; ++seq) {
        const auto published = published_.find(seq);
        if (published == published_.end() || !same(log.at(seq), published->second.entry)) {
          fail(fmt::format("KnownCommitted: r{} ({}) takes batch {} (view {}) as committed, which {}", node.id,
                           role_name(node.core->role()), seq, log.at(seq).view,
                           published == published_.end() ? "was never published" : "is not the published one"));
        }
      }
      node.known_checked = std::max(node.known_checked, known);
    }
    // LogMatching.
    for (ReplicaId a = 0; a < n(); ++a) {
      for (ReplicaId b = a + 1; b < n(); ++b) {
        if (!nodes_[a].up || !nodes_[b].up) continue;
        const auto& la = nodes_[a].core->log();
        const auto& lb = nodes_[b].core->log();
        // Over the batches both hold (retired ones were published).
        const Seq bottom = std::max(la.retired_through(), lb.retired_through());
        Seq top = std::min(la.end(), lb.end());
        while (top > bottom && la.at(top).view != lb.at(top).view) --top;
        for (Seq seq = bottom + 1; seq <= top; ++seq) {
          if (!same(la.at(seq), lb.at(seq))) {
            fail(fmt::format("LogMatching: r{} and r{} both hold batch {} of view {} but differ at {}", a, b, top,
                             la.at(top).view, seq));
          }
        }
      }
    }
    // AgreeBelowCommit, on logs cut by etcd's history.
    for (const Node& primary : nodes_) {
      if (!primary.up || primary.core->role() != Role::primary) continue;
      const auto& lp = primary.core->log();
      for (const Node& node : nodes_) {
        if (!node.up || node.id == primary.id || node.core->role() == Role::wiped ||
            node.core->role() == Role::booting || node.core->promised() != primary.core->lead()) {
          continue;
        }
        const auto& log = node.core->log();
        const Seq cut = replication::surviving_length(
            log.end(), [&](std::uint64_t i) { return log.at(i + 1).view; }, coordinator_.starts, log.retired_through());
        for (Seq seq = std::max(log.retired_through(), lp.retired_through()) + 1;
             seq <= std::min<Seq>(cut, primary.core->commit()); ++seq) {
          if (!same(log.at(seq), lp.at(seq))) {
            fail(fmt::format("AgreeBelowCommit: r{} differs from primary r{} at {} below its commit {}", node.id,
                             primary.id, seq, primary.core->commit()));
          }
        }
      }
    }
  }

  void check_final() {
    std::vector<const Node*> primaries;
    for (const Node& node : nodes_) {
      if (!node.up) fail(fmt::format("r{} is down after healing", node.id));
      if (node.core->role() == Role::primary) primaries.push_back(&node);
    }
    if (primaries.size() != 1) fail(fmt::format("{} primaries after healing", primaries.size()));
    const ReplicaCore& primary = *primaries.front()->core;
    if (primary.lead() != coordinator_.view || !coordinator_.normal) {
      fail(fmt::format("the primary serves view {}, etcd holds view {}{}", primary.lead(), coordinator_.view,
                       coordinator_.normal ? "" : " (recovering)"));
    }
    const auto& lp = primary.log();
    if (primary.commit() != lp.end()) {
      fail(fmt::format("the primary published {} of its {} batches after healing", primary.commit(), lp.end()));
    }
    bool progressed = false;
    for (const std::string& payload : proposed_after_heal_) progressed = progressed || acknowledged_.contains(payload);
    if (!progressed) fail("nothing proposed after healing was acknowledged");
    std::set<std::string> held;
    for (const Entry& entry : lp.entries()) held.insert(payload_of(entry));
    for (const auto& [seq, published] : published_) {
      if (seq <= lp.retired_through()) held.insert(payload_of(published.entry));  // retired: published
    }
    for (const std::string& payload : acknowledged_) {
      if (!held.contains(payload)) fail(fmt::format("acknowledged {} is not in the final log", payload));
    }
    for (Node& node : nodes_) {
      const ReplicaCore& core = *node.core;
      if (core.suspect() || core.role() == Role::wiped) fail(fmt::format("r{} is not repaired", node.id));
      bool matches = core.log().end() == lp.end();
      for (Seq seq = std::max(core.log().retired_through(), lp.retired_through()) + 1; matches && seq <= lp.end(); ++seq) {
        matches = same(core.log().at(seq), lp.at(seq));
      }
      if (!matches || core.durable_end() != lp.end()) {
        fail(fmt::format("r{} holds batches through {} ({} durable), the primary {}", node.id, core.log().end(),
                         core.durable_end(), lp.end()));
      }
      check_durable(node);
      auto image = node.fs->crash_image(CrashOutcome::drop_all());
      replica::StoreRecovery recovered;
      auto store = replica::ReplicaStore::open(*image, kDir, kCluster, recovered, kSegmentBytes);
      bool recovers = store && !recovered.log.suspect && !recovered.log.wiped && !recovered.log.entries.empty() &&
                      recovered.log.entries.back().seq == lp.end();
      for (std::size_t i = 0; recovers && i < recovered.log.entries.size(); ++i) {
        const Entry& entry = recovered.log.entries[i];
        recovers = entry.seq <= lp.retired_through() || same(entry, lp.at(entry.seq));
      }
      if (!recovers) {
        fail(fmt::format("r{}'s directory does not recover to the cluster's log", node.id));
      }
    }
    // Every replica's segments are byte-identical where two hold the same
    // one -- a log restarted at a primary's start included.
    const Node& first = *primaries.front();
    const auto segments_of = [](io::FileSystem& fs) {
      const replica::ReadChain chain = *replica::read_chain(fs, kDir, kCluster);
      std::map<std::uint64_t, std::vector<std::byte>> files;
      for (const std::uint64_t number : chain.segments) {
        if (number < chain.start.segment) continue;
        if (std::find(chain.leftover_segments.begin(), chain.leftover_segments.end(), number) !=
            chain.leftover_segments.end()) {
          continue;
        }
        files[number] = *io::read_file(fs, replica::segment_path(kDir, number));
      }
      return files;
    };
    const auto reference = segments_of(*first.fs);
    for (const Node& node : nodes_) {
      if (node.id == first.id) continue;
      for (const auto& [number, bytes] : segments_of(*node.fs)) {
        const auto other = reference.find(number);
        if (other != reference.end() && other->second != bytes) {
          fail(fmt::format("r{}'s segment {} differs from the primary's", node.id, number));
        }
      }
    }
  }

  SimOptions options_;
  std::mt19937_64 rng_;
  SimReport report_;
  Us now_ = 0;
  std::uint64_t next_order_ = 0;
  std::uint64_t disk_events_ = 0;
  std::uint64_t checked_state_ = 0;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::deque<std::string> trace_;

  std::vector<Node> nodes_;
  std::vector<std::vector<bool>> cut_;  // cut_[a][b]: a's messages to b are lost
  std::vector<bool> etcd_cut_;
  bool coordinator_down_ = false;
  Register coordinator_;
  Us lease_expires_at_ = 0;

  bool proposing_ = true;
  std::optional<ReplicaId> isolated_;
  Us isolated_until_ = 0;
  Us slow_until_ = 0;  // every write takes options_.slow_disk_us until then
  std::map<std::string, Proposal> proposals_;
  // Every batch's payload by its view and sequence (a view's primary
  // proposes each sequence once): the checks' copy of what a core released
  // (Entry::elided), so they compare whole batches whatever a core holds.
  // (The checks look payloads up millions of times: by view, then by the
  // sequence's place among the view's, which run on from its first.)
  struct ViewPayloads {
    Seq first = 0;
    std::vector<std::string> payloads;
  };
  std::map<View, ViewPayloads> payloads_;
  const ViewPayloads* last_view_payloads_ = nullptr;
  View last_view_ = 0;
  std::set<std::string> proposed_after_heal_;
  std::set<std::string> acknowledged_;
  std::map<Seq, Published> published_;
  std::map<View, std::set<ReplicaId>> publishers_;
};

}  // namespace

SimReport run_simulation(const SimOptions& options) { return Simulation(options).run(); }

}  // namespace fusee::testing::replication_sim
