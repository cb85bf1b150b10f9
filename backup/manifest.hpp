// The objects a backup writes besides the log's and the run store's bytes:
// the target's identity (which directory writes it), a manifest per upload,
// naming the chunks of segment bytes it added and every batch they
// complete, with when each was published, and a snapshot's description
// (the run store's files at a point of the log). A restore reads the newest
// snapshot before its moment, then the manifests from where the snapshot
// needs the log (docs/backup.md).
// JSON, so that an operator can read them; pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wal/log.hpp"

namespace fusee::backup {

inline constexpr std::uint32_t kManifestFormat = 1;
inline constexpr const char* kIdentityName = "identity";
inline constexpr const char* kManifestPrefix = "manifest-";
inline constexpr const char* kChunkPrefix = "chunk-";
inline constexpr const char* kSnapshotPrefix = "snapshot-";
// A table file of the run store, uploaded once and named by snapshots from
// then on; and a snapshot's other files (RocksDB's MANIFEST, CURRENT,
// OPTIONS, log), uploaded with each.
inline constexpr const char* kStoreTablePrefix = "store-";
inline constexpr const char* kSnapshotFilePrefix = "snapfile-";

struct Identity {
  std::string directory;  // the data directory's backup id
  std::uint32_t shards = 0;
};

// Bytes [offset, offset + bytes) of segment file `segment`, and the blob
// pack (blob_pack.hpp) of the large records its batches reference (empty:
// they reference none).
struct ChunkRef {
  std::string name;
  std::uint64_t segment = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::string blob_pack;
  // CRC-32C of the object's bytes: damage on the target is refused naming
  // the object, never taken for a torn tail (none in older manifests).
  std::optional<std::uint32_t> crc32c;
};

// One published batch: where it lies and when it was published (every
// acknowledgement of its records came at or after at_ms), as the log lists it.
using BatchRef = wal::PublishedBatch;

struct Manifest {
  std::string directory;
  std::vector<ChunkRef> chunks;
  std::vector<BatchRef> batches;  // in sequence order, contiguous
};

// One file of the run store in a snapshot: the object that holds its bytes.
struct SnapshotFile {
  std::string name;    // in <dir>/runs
  std::string object;  // on the target
  std::uint64_t bytes = 0;
  std::optional<std::uint32_t> crc32c;  // of its bytes (none in older snapshots)
};

// The run store as it was once every checkpoint in it was durable: a
// restore to a moment at or after covers_at_ms starts from these files and
// replays the log from from_sequence's segment, instead of the whole log.
struct Snapshot {
  std::string directory;
  // Every checkpoint in the store lies at or before this batch, published
  // by covers_at_ms: a restore that keeps it may start here.
  std::uint64_t covers_sequence = 0;
  std::int64_t covers_at_ms = 0;
  // The oldest batch the store's checkpoints need (their lowest
  // keep_from_sequence, at most covers_sequence).
  std::uint64_t from_sequence = 0;
  std::vector<SnapshotFile> files;
};

std::string identity_json(const Identity& identity);
std::optional<Identity> parse_identity(std::span<const std::byte> bytes);
std::string manifest_json(const Manifest& manifest);
// Nothing when it does not parse or is not a manifest of this format.
std::optional<Manifest> parse_manifest(std::span<const std::byte> bytes);

std::string snapshot_json(const Snapshot& snapshot);
std::optional<Snapshot> parse_snapshot(std::span<const std::byte> bytes);

// Names sort as their numbers do.
std::string manifest_name(std::uint64_t last_sequence);
std::string chunk_name(std::uint64_t segment, std::uint64_t offset);
std::string snapshot_name(std::uint64_t covers_sequence);
// A table file's object: the store's identity, the file's number and size
// name it (RocksDB never reuses a table file's number in one store, nor
// rewrites one; a store made anew has another identity).
std::string store_table_name(const std::string& store_id, std::uint64_t file_number, std::uint64_t bytes);
std::string snapshot_file_name(std::uint64_t covers_sequence, const std::string& file);
// The number a name of `prefix` ends with ("manifest-000…42" is 42).
std::optional<std::uint64_t> number_of_name(const std::string& name, const char* prefix);

}  // namespace fusee::backup
