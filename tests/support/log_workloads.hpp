// Scripted log workloads and the checker of RELIABILITY.md's promise (P1-P4,
// P6), shared by the crash-point enumeration and the I/O error loops.
//
// A workload runs against a FaultFileSystem that may freeze (crash) or fail
// at any operation; it keeps a ledger of what it submitted and what the log
// acknowledged, and simply stops when the log reports an error. The checker
// then reopens the resulting disk image and holds the log to the ledger.
// Not thread-safe except Ledger, which workloads' appender threads share.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "wal/log.hpp"

namespace fusee::testing {

// What a workload submitted and what was acknowledged, per shard.
class Ledger {
 public:
  explicit Ledger(std::uint32_t shards) : submitted_(shards), acked_(shards, 0) {}

  void submitted(wal::ShardId shard, wal::Lsn lsn, std::span<const std::byte> bytes);
  void acked(wal::ShardId shard, wal::Lsn lsn);
  // An atomic group (wal::Log::begin_group): LSNs [first, end) are kept
  // whole or not at all.
  void group(wal::ShardId shard, wal::Lsn first, wal::Lsn end);
  struct Group {
    wal::ShardId shard = 0;
    wal::Lsn first = 0;
    wal::Lsn end = 0;
  };
  std::vector<Group> groups() const;
  // After a reopen inside a workload: what the log recovered is the new base
  // (everything recovered is durable, the unrecovered tail was never acked).
  void rebase(const std::vector<std::vector<std::vector<std::byte>>>& recovered);

  std::uint32_t shard_count() const { return static_cast<std::uint32_t>(acked_.size()); }
  std::vector<std::vector<std::byte>> submitted_records(wal::ShardId shard) const;
  wal::Lsn acked_lsn(wal::ShardId shard) const;
  std::uint64_t acked_total() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::vector<std::vector<std::byte>>> submitted_;
  std::vector<wal::Lsn> acked_;
  std::vector<Group> groups_;
};

struct WorkloadContext {
  FaultFileSystem& fs;
  wal::LogOptions options;
  Ledger& ledger;

  // Opens the log; null (after rebasing nothing) when the file system failed.
  std::unique_ptr<wal::Log> open();
  // Appends one record and waits for it; false once the log fails.
  bool append_and_wait(wal::Log& log, wal::ShardId shard, std::span<const std::byte> bytes);
  // Appends without waiting; false once the log fails.
  bool append(wal::Log& log, wal::ShardId shard, std::span<const std::byte> bytes,
              wal::Lsn* lsn_out = nullptr);
  // Waits for shard's records up to lsn and acknowledges every one of them.
  bool wait(wal::Log& log, wal::ShardId shard, wal::Lsn lsn);
  // Appends `sizes.size()` records to shard as one atomic group, without
  // waiting, and notes the group in the ledger; false once the log fails.
  // With end false, the group is left open.
  bool append_group(wal::Log& log, wal::ShardId shard, std::span<const std::size_t> sizes, bool end = true);
};

struct Workload {
  std::string name;
  std::uint32_t shards = 1;
  std::uint64_t segment_bytes = wal::kSegmentBytesMin;
  bool direct_io = true;
  std::size_t batch_bytes_max = wal::kBatchBytesMax;
  FaultFileSystemOptions fs_options;
  std::function<void(WorkloadContext&)> run;
  std::size_t payload_offload_bytes = wal::kPayloadOffloadBytesDefault;
  wal::LogWriterMode writer_mode = wal::LogWriterMode::automatic;
  bool inline_writes = true;
};

// The scripted workloads (at least 20), each in its own words.
std::vector<Workload> log_workloads();

// Deterministic payload for a shard's nth record.
std::vector<std::byte> test_record(wal::ShardId shard, wal::Lsn lsn, std::size_t size_bytes);

// Options for a workload on a fault file system, salts from seed.
wal::LogOptions workload_options(const Workload& workload, std::uint64_t seed);

// Options for a log in /data on a fault file system, salts and life values
// counted up from seed, warnings silent; a case sets the rest.
wal::LogOptions fault_log_options(std::uint32_t shard_count, std::uint64_t seed);

// Every record of every shard, read back through the log.
std::vector<std::vector<std::vector<std::byte>>> read_everything(wal::Log& log);

// Opens the image and checks the promise against the ledger: it opens (P6),
// every acknowledged record is there byte for byte (P1), each shard holds a
// prefix of what was submitted (P2, P4) that cuts no atomic group, and two more reopens return exactly
// the same records (P3). Returns what was recovered. Reports failures
// through doctest with `context` (seed, crash point, outcome) attached.
std::vector<std::vector<std::vector<std::byte>>> check_recovery(FaultFileSystem& image, const Ledger& ledger,
                                                                const wal::LogOptions& options,
                                                                const std::string& context);

// Crashes again at every operation of a recovery of image and checks that
// each resulting image still recovers exactly `expected`. Returns the states
// checked.
std::uint64_t check_crash_during_recovery(const FaultFileSystem& image,
                                          const std::vector<std::vector<std::vector<std::byte>>>& expected,
                                          const wal::LogOptions& options, const std::string& context);

}  // namespace fusee::testing
