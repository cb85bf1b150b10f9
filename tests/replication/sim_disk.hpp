// A replica's directory in the replication simulator, on the fault file
// system: a crash keeps, drops or tears whatever was not yet synced, so
// recovery below meets what a real disk can hold. The replicated log's own
// files (the shared log with the view in each batch header) come with the
// real replica; this format is the simulator's stand-in, kept as small as the
// rule needs (docs/replication.md, "The simulator"):
//
//   /replica/cluster   the cluster's id, written once: absent, the directory
//                      is not this cluster's (lost, or never initialised)
//   /replica/suspect   present while recovery found damage not yet repaired
//   /replica/log       one 512-byte slot per batch, slot i holding sequence
//                      i + 1: a torn write damages only its own slot
//
// A slot: magic u32 | crc u32 (CRC-32C of bytes [8, 40 + payload)) | seq u64 |
// view u64 | acked u64 | prev_crc u32 | payload_len u32 | payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "replication/replica_core.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::testing::replication_sim {

inline constexpr std::size_t kSlotBytes = 512;
inline constexpr std::size_t kSlotHeaderBytes = 40;
inline constexpr std::size_t kPayloadBytesMax = kSlotBytes - kSlotHeaderBytes;
inline constexpr const char* kReplicaDir = "/replica";
inline constexpr const char* kLogPath = "/replica/log";
inline constexpr const char* kClusterPath = "/replica/cluster";
inline constexpr const char* kSuspectPath = "/replica/suspect";

// The chain a log file's bytes hold: slots that check out and follow each
// other from sequence 1. It ends at the first slot past the end of the file
// or all zero, or a valid slot of another chain (a stale slot a crash left
// past a cut: never acknowledged in this chain), cleanly; or at a slot that
// fails its checksum (a torn or rotted write), with `damaged` set.
struct Chain {
  std::vector<replication::Entry> entries;
  std::vector<std::uint32_t> crcs;
  bool damaged = false;
  std::string damage;  // where, for messages
};
Chain read_chain(std::span<const std::byte> image);

// One slot's bytes, as SimDisk writes it.
std::vector<std::byte> encode_slot(const replication::Entry& entry, std::uint32_t prev_crc,
                                   std::uint32_t& crc_out);

struct Recovered {
  replication::RecoveredLog log;
  std::vector<std::uint32_t> crcs;
  std::string damage;
};

class SimDisk {
 public:
  // Makes the directory the cluster's, durably: a new replica, or the
  // operator's rebuild of a lost one (`suspect`: it counts in seals only once
  // it holds a primary's whole log).
  static Result<void> initialize(io::FileSystem& fs, bool suspect);
  // What the replica starts from. Damage marks the directory suspect
  // (durably, before anything changes) and cuts the file at the chain's end.
  static Result<Recovered> recover(io::FileSystem& fs);

  SimDisk(io::FileSystem& fs, std::vector<std::uint32_t> crcs);
  // Issues a write: the cut and the slots, not yet durable.
  Result<void> apply(const replication::DiskWrite& write);
  // Completes it: syncs the file (everything applied so far becomes durable)
  // and, for a repair, forgets the damage.
  Result<void> complete(const replication::DiskWrite& write);

 private:
  io::FileSystem& fs_;
  std::unique_ptr<io::File> file_;
  std::vector<std::uint32_t> crcs_;  // of the slots as written, by sequence - 1
};

}  // namespace fusee::testing::replication_sim
