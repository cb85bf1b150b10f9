// A replica's directory: the batches of the replicated log it holds, durably,
// as the replica core (replication/replica_core.hpp) asks -- cut the log after
// a sequence, append batches, make it all durable -- and what recovery finds
// there at start (docs/replication.md, "The replica process"):
//
//   <dir>/replica/cluster   the cluster's name, written once: absent, the
//                           directory is not a replica's (lost, or new), and
//                           the replica never votes until rebuilt
//   <dir>/replica/suspect   present while recovery found damage not yet
//                           repaired (durable before the damaged tail is cut)
//   <dir>/replica/log       the batches, one record each, chained by CRC
//   <dir>/replica/lock      held while a process writes the directory
//
// A record: magic u32 | crc u32 (CRC-32C of bytes [8, 40 + length)) | seq u64 |
// view u64 | acked u64 | prev_crc u32 | length u32 | payload. The chain must
// run to the end of the file: it ends cleanly there, or at fewer zero bytes
// than a header (an append that did not land). Anything else past its last
// whole record is damage -- a record that fails its checksum or is cut
// short, zeros where a record should be (a sector can read back as zeros),
// a whole record that does not follow (nothing writes one: a cut is durable
// before anything past it). Damage makes the replica suspect, so the price
// of this strictness is paid only after a power loss that tears a write in
// flight, or lands a later one without an earlier one.
//
// Not thread-safe: the replica's disk thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <system_error>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "replication/replica_core.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::replica {

// Why a directory was refused (besides the file system's own errors).
enum class StoreErrc {
  foreign_cluster = 1,  // it is a replica of another cluster
  already_initialized,  // init or rebuild of a directory that is a cluster's
  payload_too_large,    // a batch over kRecordPayloadBytesMax
};
const std::error_category& store_category();
inline std::error_code make_error_code(StoreErrc e) { return {static_cast<int>(e), store_category()}; }

inline constexpr std::size_t kRecordHeaderBytes = 40;
// A batch's payload; the protocol's frame bounds it too.
inline constexpr std::uint32_t kRecordPayloadBytesMax = 16u << 20;

struct StoreRecovery {
  replication::RecoveredLog log;
  std::string damage;  // where the chain ended damaged, for the replica's log
};

class ReplicaStore {
 public:
  // Makes `dir` a replica of `cluster`, empty and durable. `rebuild`: the
  // operator's remedy for a replica whose directory was lost -- it starts
  // suspect, and counts in seals only once it holds a primary's whole log.
  // Refuses a directory that already belongs to a cluster.
  static Result<void> initialize(io::FileSystem& fs, const std::string& dir, const std::string& cluster,
                                 bool rebuild);

  // Opens `dir` for one writer (refused while another process holds it) and
  // recovers it. A directory of another cluster is refused; one that is no
  // cluster's comes back `wiped`. Damage marks it suspect, durably, before
  // the damaged tail is cut off.
  static Result<std::unique_ptr<ReplicaStore>> open(io::FileSystem& fs, const std::string& dir,
                                                    const std::string& cluster, StoreRecovery& recovered);

  // Issues one write of the core's: the cut, then the records, not yet durable.
  Result<void> apply(const replication::DiskWrite& write);
  // Makes every write applied so far durable.
  Result<void> sync();
  // After the sync that made `write` durable: a repair forgets the damage.
  Result<void> finish(const replication::DiskWrite& write);

  replication::Seq end() const { return ends_.size(); }

 private:
  ReplicaStore(io::FileSystem& fs, std::string dir);

  io::FileSystem& fs_;
  std::string dir_;
  std::unique_ptr<io::FileSystem::Lock> lock_;
  std::unique_ptr<io::File> file_;
  std::vector<std::uint64_t> ends_;   // per batch: the offset just past its record
  std::vector<std::uint32_t> crcs_;   // per batch: its record's crc
};

// The batches a log file's bytes hold, for recovery and for `fusee inspect`-
// style checks in tests.
struct ReadChain {
  std::vector<replication::Entry> entries;
  std::vector<std::uint64_t> ends;
  std::vector<std::uint32_t> crcs;
  bool damaged = false;
  std::string damage;
};
ReadChain read_chain(std::span<const std::byte> image);

// What a replica's directory holds, read without changing a byte (`fusee
// replica inspect`): recovery's view of it, before recovery acts.
struct StoreInspection {
  std::string cluster;       // empty: no cluster's (lost, or new)
  bool suspect_marked = false;
  std::string suspect_note;  // what the marker says (the damage, or "rebuilt")
  std::uint64_t file_bytes = 0;
  ReadChain chain;
};
Result<StoreInspection> inspect_store(io::FileSystem& fs, const std::string& dir);

// One record's bytes, appended to `out`; returns its crc.
std::uint32_t encode_record(const replication::Entry& entry, std::uint32_t prev_crc, std::vector<std::byte>& out);

}  // namespace fusee::replica

template <>
struct std::is_error_code_enum<fusee::replica::StoreErrc> : std::true_type {};
