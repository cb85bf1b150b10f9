#include "bench/log_bench_replicated.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <thread>

#include "bench/bench_json.hpp"
#include "bench/figures.hpp"
#include "replica/local_cluster.hpp"
#include "replica/local_etcd.hpp"

namespace fusee::bench {

namespace {

using Clock = std::chrono::steady_clock;
using replication::ReplicaId;
using std::chrono::milliseconds;

constexpr std::uint32_t kReplicas = 3;
constexpr std::uint32_t kLeaseTtlS = 1;
constexpr std::uint32_t kManyAppenders = 64;
constexpr milliseconds kRecoverWithin{30000};
constexpr double kWarmupSeconds = 0.3;

double us_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

std::string record(std::size_t bytes, std::uint64_t appender, std::uint64_t counter) {
  std::string text = fmt::format("{}:{}:", appender, counter);
  text.resize(std::max(bytes, text.size()), 'r');
  return text;
}

struct Load {
  std::vector<double> latencies_us;
  std::uint64_t published = 0;
  std::uint64_t unknown = 0;
};

// `appenders` clients, each appending and waiting for publication, timed
// over `seconds` after an untimed warm-up.
Load run_load(const std::vector<std::string>& addresses, std::uint32_t appenders, std::size_t record_bytes,
              double seconds, double& window_seconds) {
  std::vector<Load> loads(appenders);
  std::latch started(appenders);
  std::atomic<bool> go{false};
  Clock::time_point measure_start;
  Clock::time_point measure_end;
  std::vector<std::thread> threads;
  for (std::uint32_t a = 0; a < appenders; ++a) {
    threads.emplace_back([&, a] {
      replica::ReplicaClient client(addresses);
      started.count_down();
      while (!go.load()) std::this_thread::yield();
      for (std::uint64_t n = 0;; ++n) {
        const auto at = Clock::now();
        if (at >= measure_end) return;
        const auto outcome = client.append(record(record_bytes, a, n), milliseconds(5000));
        const auto done = Clock::now();
        if (at < measure_start) continue;
        if (outcome.status == replica::AppendStatus::published) {
          loads[a].latencies_us.push_back(us_between(at, done));
          ++loads[a].published;
        } else {
          ++loads[a].unknown;
        }
      }
    });
  }
  started.wait();
  measure_start = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kWarmupSeconds));
  measure_end = measure_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go = true;
  for (std::thread& thread : threads) thread.join();
  window_seconds = std::chrono::duration<double>(Clock::now() - measure_start).count();
  Load total;
  for (Load& load : loads) {
    total.latencies_us.insert(total.latencies_us.end(), load.latencies_us.begin(), load.latencies_us.end());
    total.published += load.published;
    total.unknown += load.unknown;
  }
  return total;
}

// The shared disk's floor: `writers` threads at once, each writing 4 KiB
// and fdatasyncing its own file in a loop, as the three replicas do.
Result<LatencySummary> concurrent_flush(io::FileSystem& fs, const std::string& dir, std::uint32_t writers,
                                        double seconds) {
  std::vector<std::unique_ptr<io::File>> files;
  for (std::uint32_t w = 0; w < writers; ++w) {
    files.push_back(FUSEE_TRY(fs.open(io::join_path(dir, "flush-" + std::to_string(w)), {.write = true, .create = true})));
  }
  std::vector<std::vector<double>> samples(writers);
  std::vector<std::error_code> errors(writers);
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (std::uint32_t w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      std::vector<std::byte> block(4096, std::byte{0x5a});
      for (std::uint64_t n = 0; Clock::now() < end; ++n) {
        block[0] = static_cast<std::byte>(n);
        const auto at = Clock::now();
        auto written = files[w]->write_at((n % 256) * block.size(), block, io::WriteFlags::none);
        auto synced = written ? files[w]->sync_data() : Result<void>(written.error());
        if (!synced) {
          errors[w] = synced.error();
          return;
        }
        samples[w].push_back(us_between(at, Clock::now()));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<double> all;
  for (std::uint32_t w = 0; w < writers; ++w) {
    if (errors[w]) return errors[w];
    all.insert(all.end(), samples[w].begin(), samples[w].end());
  }
  return summarize_latencies(std::move(all));
}

}  // namespace

Result<ReplicatedResult> run_replicated_case(io::FileSystem& fs, const std::string& scratch_path,
                                             const ReplicatedCaseConfig& config) {
  ReplicatedResult result;
  result.lease_ttl_ms = kLeaseTtlS * 1000;
  if (config.fusee.empty() || ::access(config.fusee.c_str(), X_OK) != 0) {
    result.skipped = "no fusee binary at '" + config.fusee + "' (--fusee)";
    return result;
  }
  const std::string dir = io::join_path(scratch_path, "replicated");
  FUSEE_TRY_VOID(fs.create_dir(dir));
  result.shared_flush = FUSEE_TRY(concurrent_flush(fs, dir, kReplicas, std::max(1.0, config.seconds)));
  replica::LocalEtcd etcd(dir);
  if (!etcd.ready()) {
    result.skipped = etcd.problem();
    return result;
  }
  std::vector<std::string> command = {config.fusee, "replica", "run", "--quiet"};
  if (config.disk_thread) command.push_back("--disk-thread");
  replica::LocalCluster cluster({.dir = dir,
                                 .cluster = "bench",
                                 .replicas = kReplicas,
                                 .etcd_port = etcd.client_port(),
                                 .lease_ttl_s = kLeaseTtlS,
                                 .command = command});
  FUSEE_TRY_VOID(cluster.initialize(fs));
  for (ReplicaId id = 0; id < kReplicas; ++id) cluster.start(id);
  replica::ReplicaClient watcher(cluster.addresses());
  auto healthy = [&] {
    return replica::wait_for(kRecoverWithin, [&] { return replica::cluster_health(watcher, kReplicas).has_value(); });
  };
  if (!healthy()) {
    result.skipped = "the replicas elected no primary within 30 s (see " + dir + "/replica-*.log)";
    return result;
  }

  for (std::uint32_t round = 0; round < config.rounds; ++round) {
    ReplicatedResult::Round r;
    double window = 0;
    Load one = run_load(cluster.addresses(), 1, config.record_bytes, config.seconds, window);
    r.one = summarize_latencies(std::move(one.latencies_us));
    r.one_per_s = one.published / window;
    Load many = run_load(cluster.addresses(), kManyAppenders, config.record_bytes, config.seconds, window);
    r.many = summarize_latencies(std::move(many.latencies_us));
    r.many_per_s = many.published / window;
    if (one.unknown + many.unknown > 0) {
      fmt::print(stderr, "log_bench: replicated round {}: {} appends with an unknown outcome and no fault injected\n",
                 round, one.unknown + many.unknown);
    }
    result.rounds.push_back(r);
  }

  // Figures from fewer replicas than asked for would flatter them (fewer
  // writers on the one disk): none, rather.
  if (auto gone = cluster.exited()) {
    result.rounds.clear();
    result.skipped = fmt::format("replica {} exited during the rounds (see {}/replica-{}.log)", *gone, dir, *gone);
    return result;
  }

  // Failover: one appender's load; each kill, the first publication by
  // another replica.
  std::mutex mutex;
  Clock::time_point last_at{};
  ReplicaId last_by = replication::kNoReplica;
  std::atomic<bool> appending{true};
  std::thread appender([&] {
    replica::ReplicaClient client(cluster.addresses());
    for (std::uint64_t n = 0; appending.load(); ++n) {
      const auto outcome = client.append(record(config.record_bytes, 0, n), milliseconds(2000), milliseconds(300));
      if (outcome.status != replica::AppendStatus::published) continue;
      std::lock_guard lock(mutex);
      last_at = Clock::now();
      last_by = outcome.primary;
    }
  });
  for (std::uint32_t kill = 0; kill < config.kills; ++kill) {
    std::optional<replica::ClusterHealth> health;
    if (!replica::wait_for(kRecoverWithin, [&] { return (health = replica::cluster_health(watcher, kReplicas)).has_value(); })) {
      fmt::print(stderr, "log_bench: replicated: no healthy cluster within {} s before kill {}:\n",
                 kRecoverWithin.count() / 1000, kill + 1);
      for (ReplicaId id = 0; id < kReplicas; ++id) {
        auto s = watcher.status(id, milliseconds(1000));
        fmt::print(stderr, "  replica {}: {}\n", id,
                   s ? fmt::format("{}, promised {}, lead {}, log {}, durable {}, commit {}{}",
                                   replication::role_name(s->role), s->promised, s->lead, s->log_end, s->durable_end,
                                   s->commit, s->suspect ? ", suspect" : "")
                     : std::string("no answer"));
      }
      break;
    }
    const ReplicaId victim = health->primary;
    const auto killed_at = Clock::now();
    cluster.kill_and_reap(victim, SIGKILL);
    const bool recovered = replica::wait_for(kRecoverWithin, [&] {
      std::lock_guard lock(mutex);
      return last_at > killed_at && last_by != victim;
    });
    if (recovered) {
      std::lock_guard lock(mutex);
      result.failovers_ms.push_back(us_between(killed_at, last_at) / 1000);
    }
    cluster.start(victim);
  }
  appending = false;
  appender.join();
  return result;
}

void print_replicated(const ReplicatedResult& result, const ReplicatedCaseConfig& config) {
  fmt::print("\nreplicated: 3 `fusee replica` processes and etcd on loopback, one disk; each client waits for a "
             "quorum's durable copy\n");
  if (!result.skipped.empty()) {
    fmt::print("  skipped: {}\n", result.skipped);
    return;
  }
  std::vector<double> one_p50, one_p99, many_rate, many_p50;
  for (const auto& r : result.rounds) {
    one_p50.push_back(r.one.p50_us);
    one_p99.push_back(r.one.p99_us);
    many_rate.push_back(r.many_per_s);
    many_p50.push_back(r.many.p50_us);
  }
  const Spread p50 = spread_of(one_p50), p99 = spread_of(one_p99), rate = spread_of(many_rate);
  fmt::print("{:<26} {:>10} {:>10} {:>10}   {}\n", "figure (median of rounds)", "replicated", "local", "ratio",
             "spread over rounds (min..max)");
  fmt::print("{:<26} {:>10.1f} {:>10.1f} {:>10}   {:.1f}..{:.1f}\n", "1 appender p50 us", p50.median,
             config.local_1_p50_us, format_ratio(ratio(p50.median, config.local_1_p50_us)), p50.min, p50.max);
  fmt::print("{:<26} {:>10.1f} {:>10.1f} {:>10}   {:.1f}..{:.1f}\n", "1 appender p99 us", p99.median,
             config.local_1_p99_us, format_ratio(ratio(p99.median, config.local_1_p99_us)), p99.min, p99.max);
  fmt::print("{:<26} {:>10.0f} {:>10.0f} {:>10}   {:.0f}..{:.0f}\n", "64 appenders records/s", rate.median,
             config.local_64_records_per_s, format_ratio(ratio(rate.median, config.local_64_records_per_s)), rate.min,
             rate.max);
  fmt::print("{:<26} {:>10.1f}\n", "raw fdatasync p50 us", config.raw_p50_us);
  fmt::print("{:<26} {:>10.1f}   (3 writers at once, as the replicas share this disk; p99 {:.1f})\n",
             "shared fdatasync p50 us", result.shared_flush.p50_us, result.shared_flush.p99_us);
  auto failovers = result.failovers_ms;
  std::sort(failovers.begin(), failovers.end());
  const double f50 = failovers.empty() ? std::nan("") : failovers[failovers.size() / 2];
  const double fmax = failovers.empty() ? std::nan("") : failovers.back();
  fmt::print("failover (SIGKILL of the primary to a new primary's first publication): p50 {:.0f} ms, max {:.0f} ms "
             "over {} of {} kills; lease TTL {} ms (p50/TTL {})\n",
             f50, fmax, failovers.size(), config.kills, result.lease_ttl_ms,
             format_ratio(ratio(f50, result.lease_ttl_ms)));
  fmt::print("aims: 1 appender p50 <= 1.5x local: {}; 64 appenders >= 0.7x local: {}; failover p50 <= 2x TTL: {}\n",
             ratio(p50.median, config.local_1_p50_us) <= 1.5 ? "met" : "missed",
             ratio(rate.median, config.local_64_records_per_s) >= 0.7 ? "met" : "missed",
             ratio(f50, result.lease_ttl_ms) <= 2 ? "met" : "missed");
}

void print_replicated_json(const ReplicatedResult& result, const ReplicatedCaseConfig& config) {
  if (!result.skipped.empty()) {
    JsonLine("log_bench").field("case", "replicated").field("skipped", result.skipped).print();
    return;
  }
  for (std::size_t i = 0; i < result.rounds.size(); ++i) {
    const auto& r = result.rounds[i];
    JsonLine("log_bench")
        .field("case", "replicated_1_appender")
        .field("round", i)
        .field("p50_us", round_to_ns(r.one.p50_us))
        .field("p99_us", round_to_ns(r.one.p99_us))
        .field("records_per_s", round_to_digits(r.one_per_s, 1))
        .field("samples", r.one.samples)
        .field("local_p50_us", round_to_ns(config.local_1_p50_us))
        .field("local_p99_us", round_to_ns(config.local_1_p99_us))
        .field("raw_fdatasync_p50_us", round_to_ns(config.raw_p50_us))
        .field("shared_fdatasync_p50_us", round_to_ns(result.shared_flush.p50_us))
        .field("disk_thread", config.disk_thread)
        .field("p50_over_local", round_to_digits(ratio(r.one.p50_us, config.local_1_p50_us), 3))
        .print();
    JsonLine("log_bench")
        .field("case", "replicated_64_appenders")
        .field("round", i)
        .field("records_per_s", round_to_digits(r.many_per_s, 1))
        .field("p50_us", round_to_ns(r.many.p50_us))
        .field("p99_us", round_to_ns(r.many.p99_us))
        .field("local_records_per_s", round_to_digits(config.local_64_records_per_s, 1))
        .field("rate_over_local", round_to_digits(ratio(r.many_per_s, config.local_64_records_per_s), 3))
        .field("disk_thread", config.disk_thread)
        .print();
  }
  auto failovers = result.failovers_ms;
  std::sort(failovers.begin(), failovers.end());
  JsonLine("log_bench")
      .field("case", "replicated_failover")
      .field("kills", failovers.size())
      .field("p50_ms", failovers.empty() ? std::nan("") : round_to_digits(failovers[failovers.size() / 2], 1))
      .field("max_ms", failovers.empty() ? std::nan("") : round_to_digits(failovers.back(), 1))
      .field("lease_ttl_ms", result.lease_ttl_ms)
      .print();
}

}  // namespace fusee::bench
