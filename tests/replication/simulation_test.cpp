// The replication simulator's seeds (tests/replication/simulator.hpp). make
// test runs a few hundred; make test-long (FUSEE_CRASH_WHOLE=1) many
// thousands. FUSEE_SIM_SEED=N replays one seed exactly; FUSEE_SIM_SEEDS=K
// runs K seeds from FUSEE_SIM_FIRST_SEED (default 1).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "replication/replica_core.hpp"
#include "tests/replication/simulator.hpp"

namespace fusee::testing::replication_sim {
namespace {

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return std::strtoull(text, nullptr, 10);
}

bool whole() {
  const char* text = std::getenv("FUSEE_CRASH_WHOLE");
  return text != nullptr && std::string(text) == "1";
}

void run_seeds(std::uint32_t replicas, std::uint64_t default_seeds) {
  std::uint64_t first = env_number("FUSEE_SIM_FIRST_SEED", 1);
  std::uint64_t count = env_number("FUSEE_SIM_SEEDS", whole() ? default_seeds * 20 : default_seeds);
  if (const std::uint64_t one = env_number("FUSEE_SIM_SEED", 0); one != 0) {
    first = one;
    count = 1;
  }
  SimReport totals;
  std::uint64_t failed = 0;
  for (std::uint64_t seed = first; seed < first + count; ++seed) {
    SimOptions options;
    options.seed = seed;
    options.replicas = replicas;
    const SimReport report = run_simulation(options);
    if (!report.ok) {
      ++failed;
      FAIL_CHECK(report.failure);
      if (failed == 3) break;  // the first failures say enough
      continue;
    }
    // Every run must have done what it is there for.
    CHECK_MESSAGE(report.acknowledged > 0, "seed ", seed, ": nothing acknowledged");
    totals += report;
  }
  MESSAGE(fmt::format("{} replicas, seeds {}..{}: {}", replicas, first, first + count - 1, totals.summary()));
  if (count >= 20) {
    // Over many seeds every fault must have happened, or the run proves less
    // than it claims.
    CHECK(totals.crashes > 0);
    CHECK(totals.damages > 0);
    CHECK(totals.disk_losses > 0);
    CHECK(totals.partitions > 0);
    CHECK(totals.outages > 0);
    CHECK(totals.retired > 0);
    CHECK(totals.restarts > 0);
    CHECK(totals.pauses > 0);
    CHECK(totals.stale_primaries > 0);
    CHECK(totals.views > count);
    CHECK(totals.read_back > 0);
  }
}

// The checks can fail: with each rule of the protocol disabled, the
// simulator finds an acknowledged batch lost (or logs that disagree) within
// a few hundred seeds, and says which seed.
std::string first_violation(replication::Weakening weakening, std::uint32_t replicas, std::uint64_t seeds) {
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    SimOptions options;
    options.seed = seed;
    options.replicas = replicas;
    options.weakening = weakening;
    const SimReport report = run_simulation(options);
    if (!report.ok && report.failure.find(" after healing") == std::string::npos &&
        report.failure.find("not repaired") == std::string::npos) {
      return report.failure.substr(0, report.failure.find('\n'));
    }
  }
  return "";
}

TEST_SUITE("unit") {
  TEST_CASE("replication simulator: a seed replays exactly") {
    SimOptions options;
    options.seed = 7;
    const SimReport first = run_simulation(options);
    const SimReport second = run_simulation(options);
    CHECK(first.ok);
    CHECK(first.summary() == second.summary());
    CHECK(first.events == second.events);
  }

  TEST_CASE("replication simulator: a primary cut from its backups, not from etcd, is replaced meanwhile") {
    // It keeps renewing its lease until it steps down for want of a quorum;
    // then it must neither keep the lease nor win the next view alone: the
    // two that can talk elect one of them and publish during the cut.
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
      SimOptions options;
      options.seed = seed;
      options.isolate_primary_ms = 1000;
      options.fault_ms = 1500;
      const SimReport report = run_simulation(options);
      CHECK_MESSAGE(report.ok, report.failure);
      CHECK_MESSAGE(report.acknowledged_while_isolated > 0, "seed ", seed, ": ", report.summary());
    }
  }

  TEST_CASE("replication simulator: disks slower than the lease cost no view change") {
    // Every write of every replica takes 40 ms for a second, longer than a
    // primary's 30-tick lease: a backup's durable acknowledgement comes that
    // late, and the primary must not take the silence for a dead quorum.
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
      SimOptions options;
      options.seed = seed;
      options.slow_disks_ms = 1000;
      options.fault_ms = 1500;
      const SimReport report = run_simulation(options);
      CHECK_MESSAGE(report.ok, report.failure);
      CHECK_MESSAGE(report.views == 1, "seed ", seed, ": ", report.summary());
      CHECK_MESSAGE(report.acknowledged_while_slow > 0, "seed ", seed, ": ", report.summary());
    }
  }

  TEST_CASE("replication simulator: a power loss everywhere, and the operator accepting it") {
    // Every replica's writes in flight are torn at once. Where that leaves
    // too few replicas vouching, no view can start until the operator
    // accepts the loss; the torn batches were never acknowledged by the
    // replicas that lost them, so nothing published is lost either way.
    std::uint64_t accepted = 0;
    std::uint64_t suspects = 0;
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
      SimOptions options;
      options.seed = seed;
      options.power_loss_at_ms = 500;
      options.proposal_gap_us_max = 1500;  // writes in flight when the power goes
      const SimReport report = run_simulation(options);
      CHECK_MESSAGE(report.ok, report.failure);
      accepted += report.loss_accepted ? 1 : 0;
      suspects += report.suspect_after_power_loss;
    }
    MESSAGE(accepted, " of 10 power losses left too few replicas vouching; ", suspects, " replicas suspect in all");
    CHECK(accepted > 0);
  }

  TEST_CASE("replication simulator: each rule disabled, the checks find the loss") {
    using replication::Weakening;
    struct Case {
      Weakening weakening;
      const char* name;
    };
    for (const Case& c : {Case{Weakening::publish_alone, "publish_alone"},
                          Case{Weakening::suspect_vouches, "suspect_vouches"},
                          Case{Weakening::longest_log, "longest_log"},
                          Case{Weakening::wiped_votes, "wiped_votes"}}) {
      const std::string violation = first_violation(c.weakening, 3, 300);
      const std::string line = fmt::format("{}: {}", c.name, violation.empty() ? "none found" : violation);
      MESSAGE(line);
      CHECK_MESSAGE(!violation.empty(), line);
    }
  }

  TEST_CASE("replication simulator: 3 replicas, every fault, invariants after every event") { run_seeds(3, 200); }
  TEST_CASE("replication simulator: 5 replicas, every fault, invariants after every event") { run_seeds(5, 30); }
}

}  // namespace
}  // namespace fusee::testing::replication_sim
