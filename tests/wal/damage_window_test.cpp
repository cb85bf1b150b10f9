// The window in which damage to an acknowledged batch goes unseen. Recovery
// refuses when a valid batch past the chain's end carries an `acked` that
// reaches past it; a batch sealed while the damaged one was still in flight
// carries an older `acked`, so damage to one of the newest batches is cut
// off silently with everything after it (docs/durability.md). With
// kWritesInFlightMax writes in flight that is the newest two batches, or
// three when a roll marker is among them: this test pins both the rule and
// the bound on a pipelined workload that rolls.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/log_workloads.hpp"
#include "tests/support/result_checks.hpp"
#include "wal/limits.hpp"
#include "wal/log.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"
#include "wal/segment_file.hpp"

using namespace fusee;
using namespace fusee::wal;
using namespace fusee::testing;

TEST_SUITE("crash") {
TEST_CASE("damage to an acknowledged batch is refused unless it is among the newest kWritesInFlightMax, plus a roll marker") {
  FaultFileSystem fs;
  auto options = fault_log_options(4, 11);
  options.segment_bytes = kSegmentBytesMin;
  options.writer_mode = LogWriterMode::threads;
  options.inline_writes = false;  // two log threads: two writes in flight
  options.payload_offload_bytes = 0;
  {
    auto log = value_or_fail(Log::open(fs, options));
    std::vector<std::thread> appenders;
    for (ShardId shard = 0; shard < options.shard_count; ++shard) {
      appenders.emplace_back([&, shard] {
        for (int i = 0; i < 60; ++i) {
          auto lsn = log->append(shard, std::vector<std::byte>(700, std::byte(shard + 1)));
          REQUIRE(lsn);
          REQUIRE(log->wait_durable(shard, *lsn));
        }
      });
    }
    for (auto& appender : appenders) appender.join();
    REQUIRE(log->stats().segments_created >= 3);
    // No close: a close marker would carry the newest acked.
  }
  // Every batch was acknowledged, so a power loss keeps them all.
  auto image = fs.crash_image(CrashOutcome::drop_all());
  auto plan = value_or_fail(plan_recovery(*image, "/data/wal", options.shard_count, {}, /*list_batches=*/true));
  REQUIRE_FALSE(plan.refused);
  const auto& batches = plan.batches;
  REQUIRE(batches.size() > 20);

  std::size_t unseen = 0;
  std::size_t pipelined = 0;  // batches whose successor was sealed before they were published
  for (std::size_t k = 0; k + 1 < batches.size(); ++k)
    if (batches[k + 1].acked < batches[k].sequence) ++pipelined;
  // Everywhere in the chain, the first later batch that acknowledges batch k
  // comes at most kWritesInFlightMax batches after it, one more when a roll
  // marker is among them: the window is the same at every position, not
  // only at the end this test damages.
  std::size_t lag_max = 0;
  for (std::size_t k = 0; k < batches.size(); ++k) {
    std::size_t markers = 0;
    for (std::size_t j = k + 1; j < batches.size(); ++j) {
      if (batches[j].acked >= batches[k].sequence) {
        CHECK_MESSAGE(j - k <= kWritesInFlightMax + markers, "batch " << batches[k].sequence << " is first acknowledged by "
                                                                      << batches[j].sequence);
        lag_max = std::max(lag_max, j - k);
        break;
      }
      if (batches[j].flags & kBatchFlagRoll) ++markers;
    }
  }
  CHECK(lag_max >= 2);  // the log pipelined: some batch was acknowledged only two batches later
  // The newest batches, where the window lies, and enough before them.
  for (std::size_t k = batches.size() - std::min<std::size_t>(batches.size(), 16); k < batches.size(); ++k) {
    const auto& damaged = batches[k];
    CAPTURE(damaged.sequence);
    bool predicted = false;  // some later batch proves k was acknowledged
    std::size_t markers_after = 0;
    for (std::size_t j = k + 1; j < batches.size(); ++j) {
      predicted = predicted || batches[j].acked >= damaged.sequence;
      // Roll markers among the batches that could be sealed while k was in
      // flight: a roll writes its marker beside the writes in flight.
      if (j <= k + kWritesInFlightMax && (batches[j].flags & kBatchFlagRoll)) ++markers_after;
    }
    auto copy = image->clone();
    auto path = io::join_path("/data/wal", segment_file_name(damaged.segment));
    // One bit of the header's life field: covered by the checksum, so the
    // batch fails it as a torn write would.
    ok_or_fail(copy->corrupt_bit(path, (damaged.offset + batch_header_offset::life) * 8));
    auto damaged_plan = value_or_fail(plan_recovery(*copy, "/data/wal", options.shard_count));
    CHECK(damaged_plan.refused == predicted);
    if (!damaged_plan.refused) {
      ++unseen;
      // Cut off silently: the chain ends right before the damaged batch...
      CHECK(damaged_plan.last_sequence == damaged.sequence - 1);
      // ...which is one of the newest kWritesInFlightMax, or of three when a
      // roll marker came after it.
      auto newer = batches.size() - 1 - k;
      CHECK(newer < kWritesInFlightMax + markers_after);
    }
  }
  // The case proves something only if the workload pipelined.
  CHECK(pipelined > 0);
  CHECK(unseen >= 1);  // the newest batch: nothing after it can prove it
  MESSAGE("damage window: " << unseen << " of the newest 16 batches unseen, " << pipelined << " of "
                            << batches.size() << " batches pipelined, the longest lag " << lag_max << " batches");
}
}
