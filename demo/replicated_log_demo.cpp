#include "demo/replicated_log_demo.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "replica/local_cluster.hpp"
#include "replica/local_etcd.hpp"
#include "replica/replica_client.hpp"
#include "replica/replica_segments.hpp"
#include "replica/replica_store.hpp"
#include "replica/replica_wire.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/recovery.hpp"

extern char** environ;

namespace fusee::cli {

namespace {

using Clock = std::chrono::steady_clock;
using replication::ReplicaId;
using replication::Role;
using replication::Seq;
using replica::AppendStatus;
using replica::ClusterHealth;
using replica::wait_for;
using std::chrono::milliseconds;

constexpr const char* kCluster = "log-demo";
constexpr std::uint32_t kLeaseTtlS = 1;
constexpr milliseconds kLease{kLeaseTtlS * 1000};
constexpr milliseconds kRecoverWithin{30000};  // a cluster that takes longer has failed the demo

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// A published append: its batch's sequence and what it said.
struct Published {
  Seq seq = 0;
  std::string payload;
  bool operator==(const Published&) const = default;
};

// Every append a replica published, by its record's LSN, and when the
// latest was.
class Ledger {
 public:
  void published(wal::Lsn lsn, Seq seq, const std::string& payload, ReplicaId by) {
    std::lock_guard lock(mutex_);
    auto [at, inserted] = appends_.emplace(lsn, Published{seq, payload});
    if (!inserted && at->second != Published{seq, payload}) {
      conflicts_.push_back(fmt::format("LSN {} published twice: '{}' in batch {} and '{}' in batch {}", lsn,
                                       at->second.payload, at->second.seq, payload, seq));
    }
    last_at_ = Clock::now();
    last_by_ = by;
    ++publications_;
  }
  void unknown() { unknowns_.fetch_add(1); }
  // The first publication after `since` by a replica other than `not_by`.
  std::optional<Clock::time_point> published_since(Clock::time_point since, ReplicaId not_by = replication::kNoReplica) {
    std::lock_guard lock(mutex_);
    if (publications_ == 0 || last_at_ <= since || last_by_ == not_by) return std::nullopt;
    return last_at_;
  }
  std::uint64_t publications() {
    std::lock_guard lock(mutex_);
    return publications_;
  }
  std::map<wal::Lsn, Published> appends() {
    std::lock_guard lock(mutex_);
    return appends_;
  }
  std::vector<std::string> conflicts() {
    std::lock_guard lock(mutex_);
    return conflicts_;
  }
  std::uint64_t unknowns() const { return unknowns_.load(); }

 private:
  std::mutex mutex_;
  std::map<wal::Lsn, Published> appends_;
  std::vector<std::string> conflicts_;
  Clock::time_point last_at_{};
  ReplicaId last_by_ = replication::kNoReplica;
  std::uint64_t publications_ = 0;
  std::atomic<std::uint64_t> unknowns_{0};
};

}  // namespace

int run_replicated_log_demo(const ReplicatedLogDemoOptions& options) {
  const ReplicaId kReplicas = options.replicas;
  std::signal(SIGPIPE, SIG_IGN);
  const std::uint64_t seed = options.seed != 0 ? options.seed : static_cast<std::uint64_t>(::time(nullptr));
  std::mt19937_64 random(seed);
  io::PosixFileSystem fs;
  if (auto removed = io::remove_tree(fs, options.dir); !removed) {
    fmt::print(stderr, "fusee log-demo: cannot clear {}: {}\n", options.dir, removed.error().message());
    return 2;
  }
  if (auto made = fs.create_dir(options.dir); !made) {
    fmt::print(stderr, "fusee log-demo: cannot create {}: {}\n", options.dir, made.error().message());
    return 2;
  }
  fmt::print("fusee log-demo --replicated: {} replicas and etcd in {}; {} appenders; {} primary and {} backup "
             "SIGKILLs, a SIGSTOP of the primary and of etcd, a wiped replica (seed {})\n",
             kReplicas, options.dir, options.appenders, options.primary_kills, options.backup_kills, seed);
  replica::LocalEtcd etcd(options.dir);
  if (!etcd.ready()) {
    fmt::print(stderr, "fusee log-demo: {}\n", etcd.problem());
    return 2;
  }
  replica::LocalCluster cluster({.dir = options.dir,
                                  .cluster = kCluster,
                                  .replicas = kReplicas,
                                  .etcd_port = etcd.client_port(),
                                  .lease_ttl_s = kLeaseTtlS,
                                  // No payload held in memory: every batch a
                                  // backup catches up on after a kill is read
                                  // back from the sender's segments.
                                  .held_mib = 0,
                                  .command = {"/proc/self/exe", "replica", "run"}});
  if (auto made = cluster.initialize(fs); !made) {
    fmt::print(stderr, "fusee log-demo: the replicas' directories: {}\n", made.error().message());
    return 2;
  }
  for (ReplicaId id = 0; id < kReplicas; ++id) cluster.start(id);

  int violations = 0;
  auto violation = [&](const std::string& what) {
    fmt::print(stderr, "VIOLATION: {}\n", what);
    ++violations;
  };
  auto say = [&](const std::string& line) {
    if (!options.quiet) fmt::print("{}\n", line);
  };

  Ledger ledger;
  std::atomic<bool> appending{true};
  std::vector<std::thread> appenders;
  for (std::uint32_t t = 0; t < options.appenders; ++t) {
    appenders.emplace_back([&, t] {
      replica::ReplicaClient client(cluster.addresses());
      for (std::uint64_t n = 0; appending.load(); ++n) {
        const std::string payload = fmt::format("append {} of appender {}: {:0>48}", n, t, n * 7919 % 1000003);
        const auto outcome = client.append(payload, milliseconds(3000), milliseconds(500));
        if (outcome.status == AppendStatus::published) {
          ledger.published(outcome.lsn, outcome.seq, payload, outcome.primary);
        } else {
          ledger.unknown();
        }
      }
    });
  }

  replica::ReplicaClient watcher(cluster.addresses());
  auto wait_healthy = [&](const char* after) -> std::optional<ClusterHealth> {
    std::optional<ClusterHealth> health;
    if (!wait_for(kRecoverWithin, [&] { return (health = replica::cluster_health(watcher, kReplicas)).has_value(); })) {
      violation(fmt::format("the cluster did not come back to one primary and two backups within {} s after {}",
                            kRecoverWithin.count() / 1000, after));
    }
    return health;
  };
  auto wait_published = [&](Clock::time_point since, ReplicaId not_by, const char* what) -> std::optional<double> {
    std::optional<Clock::time_point> at;
    if (!wait_for(kRecoverWithin, [&] { return (at = ledger.published_since(since, not_by)).has_value(); })) {
      violation(fmt::format("nothing published within {} s after {}", kRecoverWithin.count() / 1000, what));
      return std::nullopt;
    }
    return ms_between(since, *at);
  };

  // --- SIGKILLs: the primary, and now and then a backup; each restarted.
  std::vector<bool> kills;
  kills.insert(kills.end(), options.primary_kills, true);
  kills.insert(kills.end(), options.backup_kills, false);
  std::shuffle(kills.begin(), kills.end(), random);
  std::vector<double> failovers_ms;
  const auto started = Clock::now();
  for (std::size_t k = 0; k < kills.size() && violations == 0; ++k) {
    auto health = wait_healthy("a restart");
    if (!health) break;
    if (auto gone = cluster.exited()) violation(fmt::format("replica {} exited on its own", *gone));
    const ReplicaId victim =
        kills[k] ? health->primary
                 : static_cast<ReplicaId>((health->primary + 1 + random() % (kReplicas - 1)) % kReplicas);
    const auto killed_at = Clock::now();
    cluster.kill_and_reap(victim, SIGKILL);
    auto took = wait_published(killed_at, kills[k] ? victim : replication::kNoReplica, "a SIGKILL");
    if (took && kills[k]) failovers_ms.push_back(*took);
    say(fmt::format("kill {}: SIGKILL of the {} (replica {}); {} {:.0f} ms later; {} appends published so far", k + 1,
                    kills[k] ? "primary" : "backup", victim, kills[k] ? "a new primary published" : "published",
                    took.value_or(-1), ledger.publications()));
    std::this_thread::sleep_for(milliseconds(random() % 300));
    cluster.start(victim);
  }

  // --- The primary stopped past its lease, then resumed: an append it took
  // meanwhile must not be published by it.
  if (auto health = violations == 0 ? wait_healthy("the kills") : std::nullopt) {
    const ReplicaId stopped = health->primary;
    const auto stopped_at = Clock::now();
    cluster.signal(stopped, SIGSTOP);
    std::optional<replica::AppendOutcome> probe;
    std::thread prober([&] {
      replica::ReplicaClient client(cluster.addresses());
      probe = client.append_to(stopped, "sent to a stopped primary", milliseconds(20000));
    });
    auto took = wait_published(stopped_at, stopped, "the primary's SIGSTOP");
    std::this_thread::sleep_for(2 * kLease);
    cluster.signal(stopped, SIGCONT);
    prober.join();
    if (probe && probe->status == AppendStatus::published) {
      violation(fmt::format("replica {}, stopped past its lease and resumed, published an append it took meanwhile",
                            stopped));
    }
    say(fmt::format("SIGSTOP of the primary (replica {}): a new primary published {:.0f} ms later; resumed after "
                    "{:.0f} ms, its append came back {}",
                    stopped, took.value_or(-1), ms_between(stopped_at, Clock::now()),
                    probe ? append_status_name(probe->status) : "?"));
  }

  // --- etcd stopped for three leases: appends go on, and the primary keeps
  // its view once etcd is back (it takes its expired lease back).
  if (auto health = violations == 0 ? wait_healthy("the primary's SIGSTOP") : std::nullopt) {
    const auto paused_at = Clock::now();
    const auto before = ledger.publications();
    etcd.pause();
    std::this_thread::sleep_for(3 * kLease);
    const auto during = ledger.publications() - before;
    etcd.resume();
    const double paused_ms = ms_between(paused_at, Clock::now());
    if (during == 0) violation("no append was published while etcd was stopped");
    std::this_thread::sleep_for(2 * kLease);
    auto after = wait_healthy("etcd's SIGSTOP");
    if (after && (after->primary != health->primary ||
                  after->statuses[after->primary]->lead != health->statuses[health->primary]->lead)) {
      violation(fmt::format("the primary changed across etcd's SIGSTOP (replica {} to {}) though none failed",
                            health->primary, after->primary));
    }
    say(fmt::format("SIGSTOP of etcd for {:.0f} ms: {} appends published meanwhile, and replica {} is still primary",
                    paused_ms, during, health->primary));
  }

  // --- A backup's directory lost: it comes back wiped and takes no part
  // until the operator rebuilds it; then it catches up and is repaired.
  if (auto health = violations == 0 ? wait_healthy("etcd's SIGSTOP") : std::nullopt) {
    const ReplicaId lost = (health->primary + 1) % kReplicas;
    cluster.kill_and_reap(lost, SIGKILL);
    // The disk is replaced: the directory is there (a mount point), empty.
    (void)io::remove_tree(fs, cluster.replica_dir(lost));
    (void)fs.create_dir(cluster.replica_dir(lost));
    cluster.start(lost);
    const auto wiped_at = Clock::now();
    if (!wait_for(milliseconds(5000), [&] {
          auto s = watcher.status(lost, milliseconds(300));
          return s && s->role == Role::wiped;
        })) {
      violation(fmt::format("replica {}, its directory lost, did not come back wiped", lost));
    }
    wait_published(wiped_at, replication::kNoReplica, "a replica's directory was lost");
    cluster.kill_and_reap(lost, SIGKILL);
    if (auto made = replica::ReplicaStore::initialize(fs, cluster.replica_dir(lost), kCluster, true); !made) {
      violation(fmt::format("rebuild of {}: {}", cluster.replica_dir(lost), made.error().message()));
    }
    cluster.start(lost);
    const auto rebuilt_at = Clock::now();
    if (!wait_for(kRecoverWithin, [&] {
          // Repaired: it vouches again, and holds batches a primary published.
          auto now = replica::cluster_health(watcher, kReplicas);
          if (!now || now->primary == lost) return false;
          const auto& s = *now->statuses[lost];
          return !s.suspect && s.durable_end > 0 && now->statuses[now->primary]->commit > 0;
        })) {
      violation(fmt::format("replica {}, rebuilt, was not repaired within {} s", lost, kRecoverWithin.count() / 1000));
    }
    say(fmt::format("replica {}'s directory lost: it came back wiped; rebuilt, it was repaired in {:.0f} ms", lost,
                    ms_between(rebuilt_at, Clock::now())));
  }

  // --- The end: appends stop, the replicas converge and stop, and every
  // directory is read offline.
  appending = false;
  for (std::thread& appender : appenders) appender.join();
  std::optional<ClusterHealth> final_health;
  if (violations == 0) {
    if (!wait_for(kRecoverWithin, [&] {
          final_health = replica::cluster_health(watcher, kReplicas);
          if (!final_health) return false;
          const auto& p = *final_health->statuses[final_health->primary];
          return std::all_of(final_health->statuses.begin(), final_health->statuses.end(), [&](const auto& s) {
            return s->durable_end == p.log_end && !s->suspect && p.commit == p.log_end;
          });
        })) {
      violation("the replicas did not converge on one log after appends stopped");
    }
  }
  for (ReplicaId id = 0; id < kReplicas; ++id) cluster.kill_and_reap(id, SIGTERM);

  const auto published = ledger.appends();
  for (const std::string& conflict : ledger.conflicts()) violation(conflict);
  // Read-only: recovery would write (a suspect marker, a cut), and what is
  // checked is what the replicas left.
  std::vector<std::vector<replication::Entry>> logs;
  for (ReplicaId id = 0; id < kReplicas; ++id) {
    auto inspection = replica::inspect_store(fs, cluster.replica_dir(id));
    if (!inspection) {
      violation(fmt::format("replica {}'s directory cannot be read: {}", id, inspection.error().message()));
      logs.emplace_back();
      continue;
    }
    if (inspection->cluster != kCluster) violation(fmt::format("replica {}'s directory is no longer the cluster's", id));
    if (inspection->suspect_marked) violation(fmt::format("replica {} is still suspect", id));
    if (inspection->chain.damaged) violation(fmt::format("replica {}'s log is damaged: {}", id, inspection->chain.damage));
    logs.push_back(std::move(inspection->chain.entries));
  }
  std::uint64_t lost = 0;
  for (ReplicaId id = 0; id < kReplicas; ++id) {
    for (const auto& [lsn, append] : published) {
      // Batch seq's records of shard 0 end at its last LSN.
      const std::string* body = append.seq >= 1 && append.seq <= logs[id].size() ? &logs[id][append.seq - 1].payload : nullptr;
      const auto batch = body != nullptr ? replica::records_in_body(*body, 0) : std::nullopt;
      const wal::Lsn last = body != nullptr ? replica::last_lsn_in_body(*body, 0) : 0;
      const bool holds = batch && lsn <= last && last - lsn < batch->size() &&
                         (*batch)[batch->size() - 1 - (last - lsn)] == append.payload;
      if (!holds && lost++ < 5) {
        violation(fmt::format("replica {} lacks published append '{}' (batch {}, LSN {})", id, append.payload,
                              append.seq, lsn));
      }
    }
    if (logs[id] != logs[0]) violation(fmt::format("replica {}'s log differs from replica 0's", id));
  }
  // The replicas' files are the shared log's segments, the same bytes on
  // every replica, and the log's own recovery (what `fusee inspect` runs)
  // reads each of them whole.
  std::uint64_t segments = 0;
  for (ReplicaId id = 0; id < kReplicas; ++id) {
    const std::string wal_dir = replica::wal_dir_of(cluster.replica_dir(id));
    auto plan = wal::plan_recovery(fs, wal_dir, 1, {}, false, /*replica_files=*/true);
    if (!plan || plan->refused || plan->last_sequence != logs[id].size() || !plan->tail.empty()) {
      violation(fmt::format("the shared log's recovery does not read replica {}'s segments as its log: {}", id,
                            !plan ? plan.error().message() : plan->refused ? plan->refusal : plan->tail));
    }
    if (plan) segments = std::max<std::uint64_t>(segments, plan->segments.size());
    if (id == 0) continue;
    auto names = fs.list(wal_dir);
    auto first_names = fs.list(replica::wal_dir_of(cluster.replica_dir(0)));
    if (!names || !first_names || *names != *first_names) {
      violation(fmt::format("replica {} holds other segment files than replica 0", id));
      continue;
    }
    for (const std::string& name : *names) {
      auto bytes = io::read_file(fs, io::join_path(wal_dir, name));
      auto first = io::read_file(fs, io::join_path(replica::wal_dir_of(cluster.replica_dir(0)), name));
      if (!bytes || !first || *bytes != *first) violation(fmt::format("replica {}'s {} differs from replica 0's", id, name));
    }
  }
  std::sort(failovers_ms.begin(), failovers_ms.end());
  const double p50 = failovers_ms.empty() ? 0 : failovers_ms[failovers_ms.size() / 2];
  const double max = failovers_ms.empty() ? 0 : failovers_ms.back();
  fmt::print("fusee log-demo --replicated: {} appends published, {} with an unknown outcome, {} lost; {} kills; "
             "failover (SIGKILL of the primary to the next publication) p50 {:.0f} ms, max {:.0f} ms over {} with a "
             "{} s lease; {} batches in {} segment(s), byte-identical on every replica; {} violations, {:.1f} s\n",
             published.size(), ledger.unknowns(), lost, kills.size(), p50, max, failovers_ms.size(), kLeaseTtlS,
             logs.empty() ? 0 : logs[0].size(), segments, violations, std::chrono::duration<double>(Clock::now() - started).count());
  fmt::print("{{\"bench\":\"log_demo_replicated\",\"case\":\"failover\",\"kills\":{},\"p50_ms\":{:.1f},"
             "\"max_ms\":{:.1f},\"lease_ttl_ms\":{}}}\n",
             failovers_ms.size(), p50, max, kLease.count());
  return violations == 0 ? 0 : 1;
}

}  // namespace fusee::cli
