#include "tests/support/log_workloads.hpp"

#include <doctest/doctest.h>

#include <random>
#include <set>
#include <thread>

#include "wal/errc.hpp"

namespace fusee::testing {

using wal::Lsn;
using wal::ShardId;
using Recovered = std::vector<std::vector<std::vector<std::byte>>>;

void Ledger::submitted(ShardId shard, Lsn lsn, std::span<const std::byte> bytes) {
  std::lock_guard lock(mu_);
  auto& records = submitted_[shard];
  REQUIRE(lsn == records.size() + 1);  // the log hands out LSNs densely
  records.emplace_back(bytes.begin(), bytes.end());
}

void Ledger::acked(ShardId shard, Lsn lsn) {
  std::lock_guard lock(mu_);
  acked_[shard] = std::max(acked_[shard], lsn);
}

void Ledger::group(ShardId shard, Lsn first, Lsn end) {
  std::lock_guard lock(mu_);
  groups_.push_back({shard, first, end});
}

std::vector<Ledger::Group> Ledger::groups() const {
  std::lock_guard lock(mu_);
  return groups_;
}

namespace {
// Whether a shard that kept `kept` records cut the group.
bool cuts(const Ledger::Group& group, std::size_t kept) { return kept >= group.first && kept + 1 < group.end; }
}  // namespace

void Ledger::rebase(const Recovered& recovered) {
  std::lock_guard lock(mu_);
  for (ShardId shard = 0; shard < submitted_.size(); ++shard) {
    submitted_[shard] = recovered[shard];
    acked_[shard] = recovered[shard].size();
  }
  // A reopen inside a workload is a recovery too: no group may be cut.
  // Groups lost whole are forgotten (their LSNs are handed out again).
  std::vector<Group> kept;
  for (const auto& group : groups_) {
    auto count = recovered[group.shard].size();
    CHECK_MESSAGE(!cuts(group, count), "a reopen kept " << count << " records of shard " << group.shard
                                                        << ", cutting the group [" << group.first << ", "
                                                        << group.end << ")");
    if (count + 1 >= group.end) kept.push_back(group);
  }
  groups_ = std::move(kept);
}

std::vector<std::vector<std::byte>> Ledger::submitted_records(ShardId shard) const {
  std::lock_guard lock(mu_);
  return submitted_[shard];
}

Lsn Ledger::acked_lsn(ShardId shard) const {
  std::lock_guard lock(mu_);
  return acked_[shard];
}

std::uint64_t Ledger::acked_total() const {
  std::lock_guard lock(mu_);
  std::uint64_t total = 0;
  for (auto lsn : acked_) total += lsn;
  return total;
}

std::vector<std::byte> test_record(ShardId shard, Lsn lsn, std::size_t size_bytes) {
  std::vector<std::byte> out(size_bytes);
  std::uint64_t state = (std::uint64_t(shard) << 40) ^ (lsn * 0x9E3779B97F4A7C15ull) ^ size_bytes;
  for (auto& byte : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    byte = std::byte(state >> 56);
  }
  return out;
}

Recovered read_everything(wal::Log& log) {
  Recovered out(log.shard_count());
  for (ShardId shard = 0; shard < log.shard_count(); ++shard) {
    auto& records = out[shard];
    auto result = log.read(shard, 1, ~Lsn{0}, [&](Lsn lsn, std::span<const std::byte> bytes) {
      CHECK(lsn == records.size() + 1);
      records.emplace_back(bytes.begin(), bytes.end());
    });
    // A read fails only on a frozen file system (the caller checks).
    if (!result) CHECK(result.error() == std::errc::io_error);
  }
  return out;
}

std::unique_ptr<wal::Log> WorkloadContext::open() {
  auto log = wal::Log::open(fs, options);
  if (!log) return nullptr;
  // The log's preparer thread writes in the background, so the file system
  // may freeze (the crash point) between the open and this read: then the
  // open counts as failed, and the ledger keeps what the last life acked.
  if (fs.crashed()) return nullptr;
  auto recovered = read_everything(**log);
  if (fs.crashed()) return nullptr;
  ledger.rebase(recovered);
  return std::move(*log);
}

bool WorkloadContext::append(wal::Log& log, ShardId shard, std::span<const std::byte> bytes, Lsn* lsn_out) {
  auto lsn = log.append(shard, bytes);
  if (!lsn) return false;
  ledger.submitted(shard, *lsn, bytes);
  if (lsn_out) *lsn_out = *lsn;
  return true;
}

bool WorkloadContext::wait(wal::Log& log, ShardId shard, Lsn lsn) {
  if (!log.wait_durable(shard, lsn)) return false;
  ledger.acked(shard, lsn);
  return true;
}

bool WorkloadContext::append_group(wal::Log& log, ShardId shard, std::span<const std::size_t> sizes, bool end) {
  log.begin_group(shard);
  auto first = log.last_lsn(shard) + 1;
  for (auto size : sizes) {
    auto lsn = log.last_lsn(shard) + 1;
    if (!append(log, shard, test_record(shard, lsn, size))) return false;
  }
  ledger.group(shard, first, log.last_lsn(shard) + 1);
  if (end) log.end_group(shard);
  return true;
}

bool WorkloadContext::append_and_wait(wal::Log& log, ShardId shard, std::span<const std::byte> bytes) {
  Lsn lsn = 0;
  return append(log, shard, bytes, &lsn) && wait(log, shard, lsn);
}

wal::LogOptions fault_log_options(std::uint32_t shard_count, std::uint64_t seed) {
  wal::LogOptions options;
  options.dir = "/data";
  options.shard_count = shard_count;
  options.random = [n = seed]() mutable { return ++n; };
  options.warn = [](const std::string&) {};
  return options;
}

wal::LogOptions workload_options(const Workload& workload, std::uint64_t seed) {
  wal::LogOptions options;
  options.dir = "/data";
  options.shard_count = workload.shards;
  options.segment_bytes = workload.segment_bytes;
  options.direct_io = workload.direct_io;
  options.batch_bytes_max = workload.batch_bytes_max;
  options.payload_offload_bytes = workload.payload_offload_bytes;
  options.writer_mode = workload.writer_mode;
  options.inline_writes = workload.inline_writes;
  options.verify_writes = true;
  // Flushes in memory are fast; pin the choice so it never depends on timing.
  options.inline_flush_max_us = ~std::uint64_t{0};
  auto rng = std::make_shared<std::mt19937_64>(seed);
  options.random = [rng] { return (*rng)(); };
  options.warn = [](const std::string&) {};
  // A fake clock far slower than any disk keeps segment sizes (and so every
  // crash point) independent of how fast this machine happens to run.
  auto clock_us = std::make_shared<std::uint64_t>(0);
  options.now_us = [clock_us] { return *clock_us += 1'000'000; };
  return options;
}

namespace {

// Appends `count` records of `size` to shard, waiting for each.
void sequential(WorkloadContext& context, wal::Log& log, ShardId shard, int count, std::size_t size) {
  for (int i = 0; i < count; ++i) {
    auto lsn = log.last_lsn(shard) + 1;
    if (!context.append_and_wait(log, shard, test_record(shard, lsn, size))) return;
  }
}

// Appends `count` records to each shard without waiting, then waits for all.
void pipelined(WorkloadContext& context, wal::Log& log, int count, std::size_t size) {
  for (int i = 0; i < count; ++i) {
    for (ShardId shard = 0; shard < log.shard_count(); ++shard) {
      auto lsn = log.last_lsn(shard) + 1;
      if (!context.append(log, shard, test_record(shard, lsn, size))) return;
    }
  }
  for (ShardId shard = 0; shard < log.shard_count(); ++shard)
    if (!context.wait(log, shard, log.last_lsn(shard))) return;
}

std::vector<Workload> base_workloads() {
  std::vector<Workload> list;
  list.push_back({"create an empty log", 1, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) { c.open(); }});
  list.push_back({"one append", 1, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (log) sequential(c, *log, 0, 1, 100);
                  }});
  list.push_back({"three sequential appends", 2, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (!log) return;
                    sequential(c, *log, 0, 2, 300);
                    sequential(c, *log, 1, 1, 300);
                  }});
  list.push_back({"a group commit of 64", 8, wal::kSegmentBytesMin * 2, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (log) pipelined(c, *log, 8, 64);
                  }});
  list.push_back({"appends across a segment roll", 1, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (log) sequential(c, *log, 0, 7, 3000);
                  }});
  list.push_back({"pipelined appends across rolls", 2, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (log) pipelined(c, *log, 10, 1500);
                  }});
  list.push_back({"a backlog cut into several batches", 4, wal::kSegmentBytesMin * 4, true, 2 * wal::kBlockBytes,
                  {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (log) pipelined(c, *log, 6, 1000);
                  }});
  list.push_back({"concurrent shards", 4, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (!log) return;
                    std::vector<std::thread> threads;
                    for (ShardId shard = 0; shard < 4; ++shard)
                      threads.emplace_back([&, shard] { sequential(c, *log, shard, 3, 500); });
                    for (auto& thread : threads) thread.join();
                  }});
  list.push_back({"a clean close, then reopen and append", 2, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    {
                      auto log = c.open();
                      if (!log) return;
                      sequential(c, *log, 0, 2, 200);
                      if (!log->close()) return;
                    }
                    auto log = c.open();
                    if (log) sequential(c, *log, 1, 2, 200);
                  }});
  list.push_back({"a restart without close, then append", 1, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    {
                      auto log = c.open();
                      if (!log) return;
                      sequential(c, *log, 0, 3, 2500);
                    }
                    auto log = c.open();
                    if (log) sequential(c, *log, 0, 3, 2500);
                  }});
  list.push_back({"a record larger than a segment", 1, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (!log) return;
                    sequential(c, *log, 0, 1, 100);
                    sequential(c, *log, 0, 1, 20000);
                    sequential(c, *log, 0, 1, 100);
                  }});
  list.push_back({"sixteen shards, one record each", 16, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (log) pipelined(c, *log, 1, 150);
                  }});
  Workload blob_then_reference{"a blob then its reference", 1, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                                [](WorkloadContext& c) {
                                  auto log = c.open();
                                  if (!log) return;
                                  sequential(c, *log, 0, 1, 100);
                                  sequential(c, *log, 0, 1, 5000);
                                  sequential(c, *log, 0, 1, 100);
                                }};
  blob_then_reference.payload_offload_bytes = 1024;
  list.push_back(blob_then_reference);
  Workload mixed{"large and small records from several shards", 3, wal::kSegmentBytesMin, true, wal::kBatchBytesMax,
                 {},
                 [](WorkloadContext& c) {
                   auto log = c.open();
                   if (!log) return;
                   for (int i = 0; i < 3; ++i) {
                     for (ShardId shard = 0; shard < 3; ++shard) {
                       auto lsn = log->last_lsn(shard) + 1;
                       auto size = (i + shard) % 3 == 0 ? 3000 : 150;
                       if (!c.append(*log, shard, test_record(shard, lsn, size))) return;
                     }
                   }
                   for (ShardId shard = 0; shard < 3; ++shard)
                     if (!c.wait(*log, shard, log->last_lsn(shard))) return;
                 }};
  mixed.payload_offload_bytes = 1024;
  list.push_back(mixed);
  // Atomic groups (a run started ahead of the disk): batches of two blocks,
  // so groups meet the batch limit and must lead the next batch whole, among
  // other shards' plain records and across segment rolls.
  list.push_back({"atomic groups among other shards' records", 3, wal::kSegmentBytesMin, true, 2 * wal::kBlockBytes,
                  {},
                  [](WorkloadContext& c) {
                    auto log = c.open();
                    if (!log) return;
                    std::thread plain([&] { sequential(c, *log, 2, 6, 1500); });
                    const std::size_t sizes[] = {900, 1700, 400, 2100};
                    for (int round = 0; round < 3; ++round) {
                      for (ShardId shard = 0; shard < 2; ++shard)
                        if (!c.append_group(*log, shard, std::span(sizes).first(2 + (round + shard) % 3))) break;
                      for (ShardId shard = 0; shard < 2; ++shard)
                        if (!c.wait(*log, shard, log->last_lsn(shard))) break;
                    }
                    plain.join();
                  }});
  Workload group_blob{"a group holding a blob reference", 2, wal::kSegmentBytesMin, true, wal::kBatchBytesMax, {},
                      [](WorkloadContext& c) {
                        auto log = c.open();
                        if (!log) return;
                        const std::size_t sizes[] = {100, 5000, 100};
                        if (!c.append_group(*log, 0, sizes)) return;
                        sequential(c, *log, 1, 2, 100);
                        if (!c.wait(*log, 0, log->last_lsn(0))) return;
                        if (!c.append_group(*log, 0, sizes)) return;
                        c.wait(*log, 0, log->last_lsn(0));
                      }};
  group_blob.payload_offload_bytes = 1024;
  list.push_back(group_blob);
  list.push_back({"a group left open at a clean close is not written", 2, wal::kSegmentBytesMin, true,
                  wal::kBatchBytesMax, {},
                  [](WorkloadContext& c) {
                    {
                      auto log = c.open();
                      if (!log) return;
                      sequential(c, *log, 0, 1, 200);
                      const std::size_t sizes[] = {300, 300};
                      if (!c.append_group(*log, 0, sizes, /*end=*/false)) return;
                      sequential(c, *log, 1, 2, 200);
                      if (!log->close()) return;
                    }
                    auto log = c.open();
                    if (!log) return;
                    // The open group's records never reached the disk.
                    CHECK(log->last_lsn(0) == 1);
                    const std::size_t sizes[] = {300, 300};
                    if (!c.append_group(*log, 0, sizes)) return;
                    c.wait(*log, 0, log->last_lsn(0));
                  }});
  return list;
}

}  // namespace

std::vector<Workload> log_workloads() {
  std::vector<Workload> list;
  for (auto workload : base_workloads()) {
    list.push_back(workload);
    workload.name += " (buffered + fdatasync)";
    workload.direct_io = false;
    list.push_back(workload);
  }
  // The same scripts with every batch written by the io_uring owner (through
  // the fault-injecting write queue) or by the log threads, no inline writes.
  for (auto workload : base_workloads()) {
    static const std::set<std::string> chosen = {"one append", "three sequential appends", "a group commit of 64",
                                                 "appends across a segment roll", "pipelined appends across rolls",
                                                 "concurrent shards", "a blob then its reference"};
    if (!chosen.count(workload.name)) continue;
    auto owner = workload;
    owner.name += " (owner thread, no inline writes)";
    owner.writer_mode = wal::LogWriterMode::owner;
    owner.inline_writes = false;
    list.push_back(owner);
    auto threads = workload;
    threads.name += " (log threads, no inline writes)";
    threads.writer_mode = wal::LogWriterMode::threads;
    threads.inline_writes = false;
    list.push_back(threads);
  }
  // File systems that refuse O_DIRECT, at open (tmpfs) or at the first write.
  for (auto workload : base_workloads()) {
    if (workload.name != "three sequential appends" && workload.name != "appends across a segment roll") continue;
    auto at_write = workload;
    at_write.name += " (O_DIRECT refused at write)";
    at_write.fs_options.refuse_direct_write = true;
    list.push_back(at_write);
    auto at_open = workload;
    at_open.name += " (O_DIRECT refused at open)";
    at_open.fs_options.refuse_direct_open = true;
    list.push_back(at_open);
  }
  return list;
}

namespace {

std::string describe_shard_mismatch(ShardId shard, std::size_t recovered, Lsn acked, std::size_t submitted) {
  return "shard " + std::to_string(shard) + ": recovered " + std::to_string(recovered) + " records, acknowledged " +
         std::to_string(acked) + ", submitted " + std::to_string(submitted);
}

}  // namespace

Recovered check_recovery(FaultFileSystem& image, const Ledger& ledger, const wal::LogOptions& options,
                         const std::string& context) {
  INFO(context);
  Recovered first;
  for (int round = 0; round < 3; ++round) {
    wal::RecoveryPlan plan;
    auto log = wal::Log::open(image, options, &plan);
    if (!log) {
      FAIL_CHECK("P6: the log did not reopen after a crash (round " << round << "): " << log.error().message()
                                                                    << "; " << plan.refusal);
      return first;
    }
    auto recovered = read_everything(**log);
    log->reset();
    if (round == 0) {
      for (ShardId shard = 0; shard < ledger.shard_count(); ++shard) {
        auto submitted = ledger.submitted_records(shard);
        auto acked = ledger.acked_lsn(shard);
        const auto& got = recovered[shard];
        if (got.size() < acked || got.size() > submitted.size()) {
          FAIL_CHECK("P1/P4: " << describe_shard_mismatch(shard, got.size(), acked, submitted.size()));
          continue;
        }
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (got[i] != submitted[i]) {
            FAIL_CHECK("P4: shard " << shard << " LSN " << i + 1 << " differs from what was submitted");
            break;
          }
        }
      }
      for (const auto& group : ledger.groups())
        if (cuts(group, recovered[group.shard].size()))
          FAIL_CHECK("atomic group: shard " << group.shard << " kept " << recovered[group.shard].size()
                                            << " records, inside the group [" << group.first << ", " << group.end
                                            << ")");
      first = std::move(recovered);
    } else if (recovered != first) {
      FAIL_CHECK("P3: reopening (round " << round << ") returned different records");
    }
  }
  return first;
}

std::uint64_t check_crash_during_recovery(const FaultFileSystem& image, const Recovered& expected,
                                          const wal::LogOptions& options, const std::string& context) {
  std::uint64_t states = 0;
  for (std::uint64_t crash_at = 0;; ++crash_at) {
    auto attempt = image.clone();
    attempt->set_crash_after_ops(crash_at);
    {
      auto log = wal::Log::open(*attempt, options);
    }
    if (!attempt->crashed()) break;  // recovery finished before this point
    for (auto outcome : {CrashOutcome::drop_all(), CrashOutcome::keep_all(CrashOutcome::Names::keep),
                         CrashOutcome::tear(crash_at)}) {
      auto again = attempt->crash_image(outcome);
      INFO(context << "; crash during recovery after " << crash_at << " ops, " << outcome.describe());
      auto log = wal::Log::open(*again, options);
      ++states;
      if (!log) {
        FAIL_CHECK("P6: no reopen after a crash during recovery: " << log.error().message());
        continue;
      }
      if (read_everything(**log) != expected) FAIL_CHECK("P3: a crash during recovery changed what recovers");
    }
  }
  return states;
}

}  // namespace fusee::testing
