// log_bench's two cases under a sustained bulk load (1 MiB records, no blob
// offload, so each record rides in the log's own batches), chosen with
// --cases roll_grow,bulk_small:
//  - roll_grow: bulk appenders through rolls into segments that grow (64 MiB
//    doubling to 256 MiB while they fill faster than 100 MB/s), beside the
//    same load in a 1 GiB segment that never rolls within the window, in
//    alternating rounds: what a roll into a grown segment costs a durable
//    append, where the preparer may not keep up.
//  - bulk_small: the time a 16-byte append() call takes (staging only, not
//    durability) beside a pipelining bulk appender, against the same small
//    appender alone: whether sealing a large batch holds the log's lock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "bench/raw_flush.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::bench {

struct BulkCaseConfig {
  double seconds = 2.0;         // per round and kind, at least kBulkSecondsMin
  double warmup_seconds = 0.2;  // untimed, at the start of each run
};

// roll_grow's figures over its rounds (medians of the rounds).
struct RollGrowResult {
  struct Round {
    LatencySummary rolled;
    LatencySummary steady;
    double rolled_mb_per_s = 0;
    double steady_mb_per_s = 0;
    std::uint64_t rolls = 0;
    std::uint64_t rolls_late = 0;
    std::uint64_t rolls_unprepared = 0;
    std::uint64_t segment_bytes_max = 0;  // the largest segment rolled into
    std::uint64_t steady_rolls = 0;       // should be 0
  };
  std::vector<Round> rounds;
  double p99_us() const;
  double max_us() const;
  double p99_us_no_roll() const;
  double max_us_no_roll() const;
};

// bulk_small's figures: the small append() call's latency alone and beside
// the bulk appender, and one bulk batch's mean write time in that run.
struct BulkSmallResult {
  struct Round {
    LatencySummary alone;
    LatencySummary beside;
    double bulk_mb_per_s = 0;
    double batch_write_us = 0;  // mean durable write of the bulk run (LogStats)
  };
  std::vector<Round> rounds;
  double p99_us_alone() const;
  double p99_us_beside() const;
  double max_us_beside() const;
  double batch_write_us() const;
  // The bound: twice the p99 alone plus one batch's write time.
  double p99_bound_us() const { return 2 * p99_us_alone() + batch_write_us(); }
};

Result<RollGrowResult> run_roll_grow_case(io::FileSystem& fs, const std::string& scratch_path,
                                          const BulkCaseConfig& config);
Result<BulkSmallResult> run_bulk_small_case(io::FileSystem& fs, const std::string& scratch_path,
                                            const BulkCaseConfig& config);

// Tables for people, and one JSON line per measurement and aim.
void print_roll_grow(const RollGrowResult& result);
void print_bulk_small(const BulkSmallResult& result);
void print_roll_grow_json(const RollGrowResult& result);
void print_bulk_small_json(const BulkSmallResult& result);

}  // namespace fusee::bench
