#include "demo/replicated_order_demo.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "demo/demo_process.hpp"
#include "demo/order_ledger.hpp"
#include "demo/order_workflow.hpp"
#include "replica/local_etcd.hpp"
#include "replica/replica_store.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {
namespace {

using std::chrono::milliseconds;

// A failover takes about a second (the replicas' lease); anything near this
// means the cluster lost its way.
constexpr milliseconds kPrimaryWaitLimit{30'000};

// One replica: its process (started again after each SIGKILL) and what it
// reported.
struct Replica {
  std::uint32_t id = 0;
  std::string dir;
  std::optional<Child> child;
  std::optional<LineReader> reader;
  bool open = false;  // its report pipe has not ended
};

class ReplicatedDemo {
 public:
  ReplicatedDemo(const OrderDemoOptions& options, std::uint64_t seed, OrderLedger& ledger, std::string etcd,
                 std::vector<std::string> addresses, std::vector<std::string>& failures)
      : options_(options),
        seed_(seed),
        ledger_(ledger),
        etcd_(std::move(etcd)),
        addresses_(std::move(addresses)),
        failures_(failures) {
    for (std::uint32_t id = 0; id < kDemoReplicas; ++id) {
      replicas_[id].id = id;
      replicas_[id].dir = fmt::format("{}/replica-{}", options.dir, id);
    }
  }

  const std::string& dir_of(std::uint32_t id) const { return replicas_[id].dir; }
  Replica& replica(std::uint32_t id) { return replicas_[id]; }

  // Starts replica `id`'s process, which opens its engine and reports its
  // role until it is handed a life.
  bool start(std::uint32_t id, int life, bool patched) {
    Replica& replica = replicas_[id];
    OrderDemoOptions child_options = options_;
    child_options.dir = replica.dir;
    replica.child = spawn_child(child_options, seed_, 0, false, "", false, patched,
                                {"--replicated", "--replica-id", std::to_string(id), "--etcd", etcd_, "--replicas",
                                 fmt::format("{}", fmt::join(addresses_, ","))});
    if (!replica.child) return false;
    replica.reader.emplace(ledger_, life, "");
    replica.open = true;
    return true;
  }

  // Reads what every replica wrote, waiting up to `wait_ms` for the first.
  void read_all(int wait_ms) {
    std::array<pollfd, kDemoReplicas> fds{};
    std::array<Replica*, kDemoReplicas> by_fd{};
    nfds_t count = 0;
    for (auto& replica : replicas_) {
      if (!replica.open) continue;
      fds[count] = {replica.child->report_fd, POLLIN, 0};
      by_fd[count++] = &replica;
    }
    if (count == 0) return;
    if (::poll(fds.data(), count, wait_ms) <= 0) return;
    for (nfds_t i = 0; i < count; ++i) {
      if (fds[i].revents == 0) continue;
      Replica& replica = *by_fd[i];
      if (replica.reader->read_from(fds[i].fd)) continue;
      replica.open = false;
      // The driver's end is the life's to judge; any other replica ends
      // only by the parent's SIGKILL (an abort in its engine would show
      // here and nowhere else).
      if (replica.id == driver_) continue;
      ::close(replica.child->report_fd);
      if (replica.child->state_fd >= 0) ::close(replica.child->state_fd);
      failures_.push_back(fmt::format("replica {}'s process ended by itself ({}; its warnings: {}.log)", replica.id,
                                      describe_status(wait_for_exit(replica.child->pid)), replica.dir));
      replica.child.reset();
    }
  }

  // The replica whose process may end by itself (the final driver), or
  // whose end the life judges.
  void set_driver(std::uint32_t id) { driver_ = id; }

  void set_life(int life) { set_life_except(kDemoReplicas, life); }
  void set_life_except(std::uint32_t id, int life) {
    for (auto& replica : replicas_) {
      if (replica.reader && replica.id != id) replica.reader->set_life(life);
    }
  }

  // A replica whose latest report says it leads, if one does.
  std::optional<std::uint32_t> primary() const { return primary_other_than(kDemoReplicas); }
  std::optional<std::uint32_t> primary_other_than(std::uint32_t id) const {
    for (const auto& replica : replicas_) {
      if (replica.id != id && replica.open && replica.reader && replica.reader->role() == "primary") return replica.id;
    }
    return std::nullopt;
  }

  // SIGKILLs replica `id`'s process and reads the last of what it wrote.
  // False when its last line was cut short.
  bool kill(std::uint32_t id) {
    Replica& replica = replicas_[id];
    if (!replica.child) return true;
    ledger_.killed(replica.child->pid, steady_us());
    ::kill(replica.child->pid, SIGKILL);
    while (replica.reader->read_from(replica.child->report_fd)) {
    }
    ::close(replica.child->report_fd);
    if (replica.child->state_fd >= 0) ::close(replica.child->state_fd);
    (void)wait_for_exit(replica.child->pid);
    const bool whole = !replica.reader->has_partial();
    replica.child.reset();
    replica.open = false;
    return whole;
  }

  // Waits until `done` holds, reading every replica meanwhile; false after
  // kPrimaryWaitLimit.
  template <typename Done>
  bool wait_for(Done done) {
    const auto give_up = Clock::now() + kPrimaryWaitLimit;
    while (!done()) {
      if (Clock::now() > give_up) return false;
      if (std::none_of(replicas_.begin(), replicas_.end(), [](const Replica& r) { return r.open; })) return false;
      read_all(20);
    }
    return true;
  }

 private:
  const OrderDemoOptions& options_;
  const std::uint64_t seed_;
  OrderLedger& ledger_;
  const std::string etcd_;
  const std::vector<std::string> addresses_;
  std::vector<std::string>& failures_;
  std::uint32_t driver_ = kDemoReplicas;
  std::array<Replica, kDemoReplicas> replicas_;
};

}  // namespace

int run_replicated_order_demo(const OrderDemoOptions& options) {
  if (!prepare_dir(options.dir)) return 2;
  std::signal(SIGPIPE, SIG_IGN);
  const auto seed = options.seed != 0 ? options.seed : static_cast<std::uint64_t>(system_ms());
  std::mt19937_64 random(seed);
  if (!options.quiet) {
    fmt::print("fusee demo: {} orders through the `order` workflow in {}; replicated mode: {} replicas and an etcd, "
               "the primary SIGKILLed {} times, each time started again as a backup (seed {})\n",
               options.orders, options.dir, kDemoReplicas, options.kills, seed);
  }
  std::error_code made_etcd_dir;
  std::filesystem::create_directories(options.dir + "/etcd", made_etcd_dir);
  replica::LocalEtcd etcd(options.dir + "/etcd");
  if (!etcd.ready()) {
    fmt::print(stderr, "fusee demo --replicated: cannot start etcd ({}); Debian's etcd-server provides it "
                       "(scripts/install-deps installs it)\n",
               etcd.problem());
    return 2;
  }
  std::vector<std::string> addresses;
  for (std::uint32_t id = 0; id < kDemoReplicas; ++id) {
    addresses.push_back(fmt::format("127.0.0.1:{}", replica::free_loopback_port()));
  }
  OrderLedger ledger(seed, options.orders, kApprovalTimeout);
  std::vector<std::string> failures;
  ReplicatedDemo cluster(options, seed, ledger, fmt::format("127.0.0.1:{}", etcd.client_port()), addresses, failures);
  io::PosixFileSystem fs;
  for (std::uint32_t id = 0; id < kDemoReplicas; ++id) {
    // What `fusee replica init` does.
    if (auto made = replica::ReplicaStore::initialize(fs, cluster.dir_of(id), std::string(kDemoCluster), false,
                                                      kReplicaSegmentBytes);
        !made) {
      fmt::print(stderr, "fusee demo: cannot make {}: {}\n", cluster.dir_of(id), made.error().message());
      return 2;
    }
  }
  // The second half of the lives runs the patched code: before the kill
  // that ends the last unpatched life, each backup is restarted with it in
  // turn (a rolling deploy), and every replica started from then on has it.
  const int patch_life = std::max(1, (options.kills + 1) / 2);
  ledger.set_patched_from(patch_life);
  for (std::uint32_t id = 0; id < kDemoReplicas; ++id) {
    if (!cluster.start(id, 0, patch_life == 0)) {
      fmt::print(stderr, "fusee demo: cannot start replica {}: {}\n", id, std::strerror(errno));
      return 2;
    }
  }
  const auto started = Clock::now();
  const auto lives = static_cast<std::uint64_t>(options.kills) + 1;
  auto allow_for = [&](int life) {
    return static_cast<std::uint32_t>(
        (static_cast<std::uint64_t>(options.orders) * (static_cast<std::uint64_t>(life) + 1) + lives - 1) / lives);
  };
  int kills = 0;
  int backup_kills = 0;
  int deposed = 0;                 // drivers SIGSTOPped until another replica led
  int replaced_by_themselves = 0;  // drivers another replica replaced before their kill
  std::vector<std::int64_t> failover_ms;
  for (int life = 0; life <= options.kills && failures.empty(); ++life) {
    cluster.set_life(life);
    const bool final = life == options.kills;
    if (!cluster.wait_for([&] { return cluster.primary().has_value(); })) {
      failures.push_back(fmt::format("life {}: no replica became primary within {} s (each one's warnings: "
                                     "<dir>/replica-N.log)",
                                     life,
                                     kPrimaryWaitLimit.count() / 1000));
      break;
    }
    const std::uint32_t driver = *cluster.primary();
    cluster.set_driver(driver);
    Replica& leader = cluster.replica(driver);
    send_state(*leader.child, ledger.child_state() + fmt::format("{}{}\n", kAllowStatePrefix, allow_for(life)) +
                                  (final ? std::string(kFinalStateLine) + "\n" : ""));
    // A life is the driver's engine's. The others run nothing while it
    // leads; whatever they report (once one of them leads, a step the
    // driver ran may run again) is the next life's: the ledger must not take
    // two runs of a step across a failover for two in one life, and a
    // replica reports its new role a moment after it starts to lead.
    cluster.set_life_except(driver, life + 1);
    const auto life_started = Clock::now();
    const auto kill = final ? KillPlan{kFinalLifeLimit} : pick_kill(random, options.orders / lives);
    const auto deadline = life_started + kill.after;
    leader.reader->watch(kill.after_kind);
    // Every other life a backup is SIGKILLed too, early in the life (before
    // the primary's kill), and started again at once: the primary goes on
    // with the other one.
    std::optional<std::uint32_t> backup_to_kill;
    if (!final && life % 2 == 1) {
      backup_to_kill = (driver + 1 + std::uniform_int_distribution<std::uint32_t>(0, 1)(random)) % kDemoReplicas;
    }
    const auto backup_kill_at =
        life_started + std::min<milliseconds>(kill.after / 2, milliseconds(std::uniform_int_distribution<int>(5, 100)(random)));
    bool deposed_by_itself = false;
    while (leader.open && (kill.after_kind.empty() || leader.reader->watched_lines() < kill.after_count)) {
      if (!final && cluster.primary_other_than(driver)) {
        // Another replica leads (the driver's lease lapsed: a slow
        // machine): the life ends here. (The final driver hands the lead
        // over itself, when it closes its engine for the last check.) Its
        // steps in flight may still run (a deposed primary's step may run
        // twice, the at-least-once contract, docs/replication.md); the
        // packing queue's bound is a primary's, so its packs count as ended.
        ledger.killed(leader.child->pid, steady_us());
        deposed_by_itself = true;
        break;
      }
      if (backup_to_kill && Clock::now() >= backup_kill_at) {
        const std::uint32_t id = *std::exchange(backup_to_kill, std::nullopt);
        if (!cluster.kill(id)) failures.push_back(fmt::format("replica {}'s last line arrived cut short", id));
        if (!cluster.start(id, life + 1, life >= patch_life)) {
          failures.push_back(fmt::format("replica {} did not start", id));
        }
        ++backup_kills;
      }
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      cluster.read_all(static_cast<int>(std::min<long long>(left, 20)));
    }
    const auto ran_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - life_started).count();
    if (deposed_by_itself) ++replaced_by_themselves;
    auto counts = ledger.life_counts(life);
    auto acknowledged = fmt::format("{} starts, {} step runs, {} chunks, {} signals, {} results", counts.starts,
                                    counts.steps, counts.chunks, counts.signals, counts.results);
    if (!final) {
      if (!leader.open) {
        failures.push_back(fmt::format("life {}: the primary's process ended by itself before its SIGKILL", life));
        break;
      }
      // Once, in the first life of the patch, the primary hangs: SIGSTOPped
      // until another leads (its lease lapsed), then SIGKILLed. What the
      // others report from the SIGSTOP on is the next life's (the frozen
      // driver reports nothing more).
      const bool hung = life == patch_life && !deposed_by_itself;
      if (hung) {
        cluster.read_all(0);
        const auto stopped_at = Clock::now();
        ::kill(leader.child->pid, SIGSTOP);
        // Frozen, it runs nothing from here: its steps (packs) end now.
        ledger.killed(leader.child->pid, steady_us());
        if (cluster.wait_for([&] { return cluster.primary_other_than(driver).has_value(); })) {
          failover_ms.push_back(std::chrono::duration_cast<milliseconds>(Clock::now() - stopped_at).count());
        } else {
          failures.push_back(fmt::format("life {}: no other replica led while the primary was SIGSTOPped", life));
        }
        ++deposed;
      }
      // (Its own reports of its role ended when it became the driver.)
      const bool leading = !hung && !deposed_by_itself;
      if (leading && leader.reader->dropped() > 0) {
        // Refused unavailable while it led all along: a primary that
        // refuses its own application's calls, not a failover.
        failures.push_back(fmt::format("life {}: the primary refused {} of its driver's calls as unavailable, with no "
                                       "other replica leading (the last: {})",
                                       life, leader.reader->dropped(), leader.reader->last_dropped()));
      }
      if (life + 1 == patch_life && leading) {
        // The rolling deploy: each backup restarted with the patch, back in
        // the cluster before the next. (Not when another leads already: it
        // would be taken for a backup.)
        for (std::uint32_t id = 0; id < kDemoReplicas; ++id) {
          if (id == driver) continue;
          if (!cluster.kill(id)) failures.push_back(fmt::format("replica {}'s last line arrived cut short", id));
          if (!cluster.start(id, life + 1, true)) failures.push_back(fmt::format("replica {} did not start", id));
          if (!cluster.wait_for([&] { return cluster.replica(id).reader->role() == "backup"; })) {
            failures.push_back(fmt::format("life {}: replica {}, restarted with the patch, did not become a backup",
                                           life, id));
          }
        }
      }
      if (!cluster.kill(driver)) failures.push_back(fmt::format("life {}: the primary's last line arrived cut short", life));
      cluster.set_driver(kDemoReplicas);
      const auto killed_at = Clock::now();
      ++kills;
      // What the others wrote before the kill is still this life's.
      cluster.read_all(0);
      cluster.set_life(life + 1);
      // The killed machine comes back once another leads (a replica back
      // at once would often win the next view itself).
      if (!cluster.wait_for([&] { return cluster.primary().has_value(); })) {
        failures.push_back(fmt::format("life {}: no replica became primary within {} s of the primary's SIGKILL "
                                       "(each one's warnings: <dir>/replica-N.log)",
                                       life + 1, kPrimaryWaitLimit.count() / 1000));
      }
      if (leading) failover_ms.push_back(std::chrono::duration_cast<milliseconds>(Clock::now() - killed_at).count());
      if (!cluster.start(driver, life + 1, life + 1 >= patch_life)) {
        failures.push_back(fmt::format("replica {} did not start again", driver));
      }
      if (!options.quiet) {
        auto when = fmt::format("after {} ms", ran_ms);
        if (!kill.after_kind.empty() && leader.reader && leader.reader->watched_lines() >= kill.after_count)
          when += fmt::format(", right behind new `{}` line {}", kill.after_kind.substr(0, kill.after_kind.size() - 1),
                              kill.after_count);
        fmt::print("life {}: SIGKILL of the primary (replica {}{}) {}; {}{}\n", life, driver,
                   leading ? "" : ", no longer leading", when, acknowledged,
                   life + 1 == patch_life && leading ? "; the backups were restarted with the patch first"
                   : hung                 ? "; SIGSTOPped first, until another led"
                   : deposed_by_itself    ? "; another had taken over before"
                                          : "");
      }
      continue;
    }
    if (leader.open) {
      failures.push_back(fmt::format("the final driver had not finished after {} s (a run that never ends?)",
                                     kFinalLifeLimit.count() / 1000));
      for (const auto& line : ledger.unfinished(10)) failures.push_back("  unfinished: " + line);
      cluster.kill(driver);
    } else {
      const int status = wait_for_exit(leader.child->pid);
      ::close(leader.child->report_fd);
      leader.child.reset();
      if (leader.reader->has_partial()) failures.push_back("the final driver's last line arrived cut short");
      if (final_life_ended_well(status, ledger, "driver", failures) && !options.quiet) {
        fmt::print("life {} (final): every order finished in {} ms; {}; then its engine closed (a failover), opened "
                   "again as a backup, and re-read every stream, result and run through the new primary\n",
                   life, ran_ms, acknowledged);
      }
    }
  }
  // The others: what is left in their pipes still counts.
  for (std::uint32_t id = 0; id < kDemoReplicas; ++id) {
    if (!cluster.replica(id).child) continue;
    if (!cluster.kill(id)) failures.push_back(fmt::format("replica {}'s last line arrived cut short", id));
  }
  if (!failover_ms.empty()) {
    std::sort(failover_ms.begin(), failover_ms.end());
    fmt::print("replicas: the primary SIGKILLed {} times ({} of them SIGSTOPped first until another led, {} replaced "
               "before by themselves), a backup {} times; from the primary's SIGKILL or SIGSTOP to the next one's "
               "report of its role: p50 {} ms, max {} ms over {}\n",
               kills, deposed, replaced_by_themselves, backup_kills, failover_ms[failover_ms.size() / 2],
               failover_ms.back(), failover_ms.size());
  }
  return print_outcome(ledger, std::move(failures), kills, patch_life, started, seed);
}

}  // namespace fusee::cli
