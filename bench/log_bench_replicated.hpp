// log_bench's replicated case (--cases replicated): the replicated log
// (docs/replication.md) on this machine -- three `fusee replica` processes
// and an etcd of the case's own, all on loopback and one disk -- beside the
// local log's figures from the same run:
//  - 1 appender: append to published (a quorum holds it durably), p50 and
//    p99, against the local log's append to durable;
//  - 64 appenders: published appends per second against the local log's;
//  - failover: the primary SIGKILLed under one appender's load, to the first
//    append a new primary publishes, p50 and max over the kills, beside the
//    lease's TTL.
// Each client waits for its append before the next, as log_bench's local
// appenders do. Rounds alternate nothing: the local figures come from the
// modes case of the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "bench/raw_flush.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::bench {

struct ReplicatedCaseConfig {
  std::string fusee;             // the `fusee` binary that runs each replica
  double seconds = 2.0;          // per round
  std::uint32_t rounds = 3;
  std::uint32_t kills = 20;
  std::size_t record_bytes = 128;
  bool disk_thread = false;  // each replica writes on a thread of its own (fusee replica run --disk-thread)
  // The local log's figures in this run, to set beside.
  double local_1_p50_us = 0;
  double local_1_p99_us = 0;
  double local_64_records_per_s = 0;
  double raw_p50_us = 0;  // buffered write + fdatasync: what each replica's disk write is
};

struct ReplicatedResult {
  struct Round {
    LatencySummary one;            // 1 appender, append to published
    double one_per_s = 0;
    double many_per_s = 0;         // 64 appenders
    LatencySummary many;
  };
  std::vector<Round> rounds;
  std::vector<double> failovers_ms;
  std::uint32_t lease_ttl_ms = 0;
  LatencySummary shared_flush;  // fdatasync from 3 writers at once on this disk
  std::string skipped;  // why the case did not run (no etcd, no fusee binary)
};

Result<ReplicatedResult> run_replicated_case(io::FileSystem& fs, const std::string& scratch_path,
                                             const ReplicatedCaseConfig& config);
void print_replicated(const ReplicatedResult& result, const ReplicatedCaseConfig& config);
void print_replicated_json(const ReplicatedResult& result, const ReplicatedCaseConfig& config);

}  // namespace fusee::bench
