// The run store's transfer from the primary to a replica being rebuilt
// (docs/replication.md, "Rebuilding a replica's run store"). Once a
// replica's log has retired batches, a replica that lost them (its disk
// wiped, or damage below the primary's start) cannot be sent them any more,
// and its run store -- applied from those batches -- must come whole from a
// replica that applied them: the primary's, as of one moment, with the
// batch it had applied through. `fusee replica rebuild` fetches it, with
// the replica stopped, before its log restarts where the primary's starts.
//
// It travels as calls of the replica wire (frames 6 and 7) on a reserved
// shard, one request and one answer each, so the sender holds at most one
// chunk per caller in memory whatever the store's size:
//
//   open   cluster            -> manifest: session, the batch applied
//                                through, each file's name and size
//   read   session, file, offset, bytes (<= kChunkBytesMax)
//                             -> chunk: the bytes and their CRC-32C
//   close  session            -> closed (the sender's copy is let go)
//   any failure               -> error: why
//
// This side only moves named bytes; what the store is (RocksDB, its files,
// its applied batch) is the sender's (hosting/store_sender.hpp) and the
// command's (cli/), which open the store.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "replica/replica_wire.hpp"
#include "replication/replica_messages.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::replica {

// The forwarded call's shard that means "the run store's transfer": no
// engine has this many shards.
inline constexpr std::uint32_t kStoreTransferShard = 0xFFFFFFFFu;
inline constexpr std::uint32_t kChunkBytesMax = 1u << 20;
// A store of more files than this is no store this side takes.
inline constexpr std::uint32_t kTransferFilesMax = 1u << 16;

enum class TransferOp : std::uint8_t { open = 1, read = 2, close = 3 };

struct TransferRequest {
  TransferOp op = TransferOp::open;
  std::string cluster;       // open: the cluster the caller belongs to
  std::uint64_t session = 0;  // read, close
  std::string file;          // read
  std::uint64_t offset = 0;  // read
  std::uint32_t bytes = 0;   // read
};

struct TransferFile {
  std::string name;  // in the store's directory: "000012.sst", "CURRENT"
  std::uint64_t bytes = 0;
};

struct TransferManifest {
  std::string cluster;
  std::uint64_t session = 0;
  // The sender's store had applied every batch before this one when the
  // copy was taken (RunStore's ReplicaApplied::seq); the files hold at
  // least that.
  replication::Seq applied = 0;
  std::vector<TransferFile> files;
};

struct TransferChunk {
  std::uint64_t session = 0;
  std::string file;
  std::uint64_t offset = 0;
  std::uint32_t crc32c = 0;  // of data
  std::vector<std::byte> data;
};

// A transfer answer: exactly one of these.
struct TransferAnswer {
  std::optional<TransferManifest> manifest;
  std::optional<TransferChunk> chunk;
  bool closed = false;
  std::string error;  // the sender could not do it
};

std::vector<std::byte> encode_transfer_request(const TransferRequest& request);
std::optional<TransferRequest> decode_transfer_request(std::span<const std::byte> bytes);
std::vector<std::byte> encode_transfer_answer(const TransferAnswer& answer);
std::optional<TransferAnswer> decode_transfer_answer(std::span<const std::byte> bytes);

// A name a store's directory may hold: no path, nothing hidden, not empty.
bool plain_file_name(const std::string& name);

// One call to the sender and its answer, or nothing (no answer in time, or
// the connection lost); a replica that sends no store answers not_here,
// with why in the answer's body.
using TransferCall = std::function<std::optional<CallReply>(const TransferRequest& request)>;

struct FetchedStore {
  replication::Seq applied = 0;  // the manifest's
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
};

// Fetches the sender's store into `into_dir` (which must not exist; it is
// created), each file written, synced, and checked chunk by chunk (CRC-32C,
// the offset asked for, the length the manifest implies) and whole (its
// size), the directory synced. A manifest of another cluster, a file name
// with a path in it, a chunk damaged, short, long or of another file or
// offset: invalid_argument; no answer, one that does not decode, not_here
// or an error answer: protocol_error; `problem` says what either way. What
// was written stays for the caller to remove. The sender is trusted with
// the sizes (a store as large as it says is written).
Result<FetchedStore> fetch_store(io::FileSystem& fs, const TransferCall& call, const std::string& cluster,
                                 const std::string& into_dir, std::string* problem,
                                 const std::function<void(const std::string&)>& progress = {});

// The transfer over a replica's listening port: `call` for fetch_store.
TransferCall transfer_call_to(const std::vector<std::string>& addresses, replication::ReplicaId id,
                              std::chrono::milliseconds timeout);

// Puts the store fetched into <dir>/rebuild/runs in place of <dir>/runs:
// runs -> runs.old, rebuild/runs -> runs (each rename made durable), then
// runs.old and rebuild/ removed. A crash leaves either store in place, or
// none (an empty store: the replica then stops, asking for a rebuild); a
// rebuild run again removes runs.old and rebuild/ first.
inline constexpr const char* kRebuildDir = "rebuild";
inline constexpr const char* kOldStoreDir = "runs.old";
Result<void> install_fetched_store(io::FileSystem& fs, const std::string& dir);

}  // namespace fusee::replica
