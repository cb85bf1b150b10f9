// The objects a backup writes besides the log's bytes: the target's identity
// (which directory writes it) and a manifest per upload, naming the chunks
// of segment bytes it added and every batch they complete, with when each
// was published. A restore reads the manifests in order (docs/backup.md).
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
};

// One published batch: where it lies and when it was published (every
// acknowledgement of its records came at or after at_ms), as the log lists it.
using BatchRef = wal::PublishedBatch;

struct Manifest {
  std::string directory;
  std::vector<ChunkRef> chunks;
  std::vector<BatchRef> batches;  // in sequence order, contiguous
};

std::string identity_json(const Identity& identity);
std::optional<Identity> parse_identity(std::span<const std::byte> bytes);
std::string manifest_json(const Manifest& manifest);
// Nothing when it does not parse or is not a manifest of this format.
std::optional<Manifest> parse_manifest(std::span<const std::byte> bytes);

// Names sort as their numbers do.
std::string manifest_name(std::uint64_t last_sequence);
std::string chunk_name(std::uint64_t segment, std::uint64_t offset);

}  // namespace fusee::backup
