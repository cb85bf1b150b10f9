// The simulator's disk (sim_disk.hpp): a crash without damage never makes a
// replica suspect, a torn or rotted slot always does, and the suspicion
// survives restarts until a repair is durable.
#include <doctest/doctest.h>

#include "tests/replication/sim_disk.hpp"
#include "tests/support/fault_file_system.hpp"
#include "tests/support/result_checks.hpp"

namespace fusee::testing::replication_sim {
namespace {

using replication::DiskWrite;
using replication::Entry;

Entry entry(replication::Seq seq, replication::View view) {
  return {seq, view, seq - 1, "batch-" + std::to_string(seq) + "-" + std::to_string(view)};
}

std::unique_ptr<FaultFileSystem> with_log(std::vector<Entry> entries) {
  auto fs = std::make_unique<FaultFileSystem>();
  ok_or_fail(SimDisk::initialize(*fs, false));
  SimDisk disk(*fs, {});
  DiskWrite write{1, 0, std::move(entries), false};
  ok_or_fail(disk.apply(write));
  ok_or_fail(disk.complete(write));
  return fs;
}

TEST_SUITE("unit") {
  TEST_CASE("sim disk: what is synced comes back, in order") {
    auto fs = with_log({entry(1, 1), entry(2, 1), entry(3, 2)});
    auto recovered = value_or_fail(SimDisk::recover(*fs->crash_image(CrashOutcome::drop_all())));
    CHECK_FALSE(recovered.log.suspect);
    CHECK_FALSE(recovered.log.wiped);
    CHECK(recovered.log.entries == std::vector<Entry>{entry(1, 1), entry(2, 1), entry(3, 2)});
  }

  TEST_CASE("sim disk: a crash that keeps or drops writes whole, around a cut, is never damage") {
    auto fs = with_log({entry(1, 1), entry(2, 1), entry(3, 1)});
    auto recovered = value_or_fail(SimDisk::recover(*fs));
    SimDisk disk(*fs, recovered.crcs);
    ok_or_fail(disk.apply({2, 1, {entry(2, 2), entry(3, 2)}, false}));
    REQUIRE(fs->pending_data_op_count() == 3);
    for (const CrashOutcome& outcome : all_crash_outcomes(fs->pending_data_op_count(), 8)) {
      if (outcome.data == CrashOutcome::Data::tear) continue;
      CAPTURE(outcome.describe());
      auto image = fs->crash_image(outcome);
      auto after = value_or_fail(SimDisk::recover(*image));
      CHECK_FALSE(after.log.suspect);
      const auto& got = after.log.entries;
      REQUIRE(got.size() >= 1);
      CHECK(got[0] == entry(1, 1));
      // Either chain, never a mix: batch 3 follows the batch 2 of its view.
      if (got.size() == 3) CHECK(got[1].view == got[2].view);
    }
  }

  TEST_CASE("sim disk: a rotted slot makes the replica suspect until a repair is durable") {
    auto fs = with_log({entry(1, 1), entry(2, 1)});
    ok_or_fail(fs->corrupt_bit(kLogPath, (kSlotBytes + 20) * 8));
    auto recovered = value_or_fail(SimDisk::recover(*fs));
    CHECK(recovered.log.suspect);
    CHECK(recovered.log.entries.size() == 1);
    // The damage is cut from the file, and remembered across a crash.
    auto again = value_or_fail(SimDisk::recover(*fs->crash_image(CrashOutcome::drop_all())));
    CHECK(again.log.suspect);
    CHECK(again.log.entries.size() == 1);

    SimDisk disk(*fs, recovered.crcs);
    DiskWrite repair{1, 1, {entry(2, 2)}, true};
    ok_or_fail(disk.apply(repair));
    // Not durable yet: a crash now leaves it suspect.
    auto early = value_or_fail(SimDisk::recover(*fs->crash_image(CrashOutcome::drop_all())));
    CHECK(early.log.suspect);
    ok_or_fail(disk.complete(repair));
    auto repaired = value_or_fail(SimDisk::recover(*fs->crash_image(CrashOutcome::drop_all())));
    CHECK_FALSE(repaired.log.suspect);
    CHECK(repaired.log.entries == std::vector<Entry>{entry(1, 1), entry(2, 2)});
  }

  TEST_CASE("sim disk: a torn write is found as damage") {
    bool found = false;
    for (std::uint64_t seed = 0; seed < 64 && !found; ++seed) {
      auto fs = with_log({entry(1, 1)});
      SimDisk disk(*fs, value_or_fail(SimDisk::recover(*fs)).crcs);
      ok_or_fail(disk.apply({1, 1, {entry(2, 1)}, false}));
      auto after = value_or_fail(SimDisk::recover(*fs->crash_image(CrashOutcome::tear(seed))));
      if (after.log.entries.size() == 2) continue;  // the slot survived whole
      found = found || after.log.suspect;
    }
    CHECK(found);
  }

  TEST_CASE("sim disk: a lost directory comes back wiped, not as an empty log") {
    FaultFileSystem fs;
    auto recovered = value_or_fail(SimDisk::recover(fs));
    CHECK(recovered.log.wiped);
  }
}

}  // namespace
}  // namespace fusee::testing::replication_sim
