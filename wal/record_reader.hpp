// Reading a shard's records back out of the chain's segments, given where
// its sections live. Shared by Log::read (the live log's index) and by the
// offline readers of a data directory (`fusee inspect`, `fusee reshard`),
// which have only a recovery plan and must not open the log for writing.
// Large records are resolved from the blob area, so callers always see a
// record's own bytes. Not thread-safe on its own; opens files read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"

namespace fusee::wal {

using RecordVisitor = std::function<void(Lsn, std::span<const std::byte>)>;

// Visits shard's records with LSN in [first, last] from `sections` (sorted
// by LSN, all of that shard, the first possibly starting before `first`).
// `salts` maps segment number to its salt.
Result<void> read_sections(io::FileSystem& fs, const std::string& wal_dir,
                           std::span<const SectionLocation> sections,
                           const std::map<std::uint64_t, std::uint64_t>& salts, ShardId shard, Lsn first, Lsn last,
                           const RecordVisitor& visit);

// The same over a recovery plan that did not refuse: shard's records from
// `first` to the end of the chain.
Result<void> read_planned(io::FileSystem& fs, const RecoveryPlan& plan, ShardId shard, Lsn first,
                          const RecordVisitor& visit);

}  // namespace fusee::wal
