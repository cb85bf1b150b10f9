// A chunk's blob pack (docs/backup.md, "What is uploaded"): the records of
// the blob area (wal/blob_store.hpp) that the chunk's batches reference, in
// one object uploaded before any manifest names the chunk, so that a restore
// can put every large record back where its reference points.
//
//   [u32 magic "FBPK"][u32 count]
//   count x ([29-byte BlobRef as the log encodes it][the record's bytes])
//   [u32 CRC-32C of everything before]
//
// Pure functions, but for blob_refs_of_batches, which only decodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backup/manifest.hpp"
#include "wal/blob_store.hpp"

namespace fusee::backup {

inline constexpr const char* kBlobPackPrefix = "blobs-";
inline constexpr std::uint32_t kBlobPackMagic = 0x4B504246;  // "FBPK", little-endian

struct PackedBlob {
  wal::BlobRef ref;
  std::vector<std::byte> bytes;
};

// "blobs-<segment>-<offset>", the pack of chunk_name(segment, offset).
std::string blob_pack_name(std::uint64_t segment, std::uint64_t offset);

std::vector<std::byte> encode_blob_pack(const std::vector<PackedBlob>& blobs);
// Nothing, with `problem`, when the pack is torn, its checksum fails, or a
// blob does not match its reference's length and CRC.
std::optional<std::vector<PackedBlob>> decode_blob_pack(std::span<const std::byte> bytes, std::string* problem);

// Calls visit(record bytes as stored, whether they are a blob reference)
// for each record of `batch`, which lies in `chunk` (segment bytes from
// chunk_offset on). False, with `problem`, when the batch does not decode
// there.
bool visit_batch_records(std::span<const std::byte> chunk, std::uint64_t chunk_offset, const BatchRef& batch,
                         const std::function<void(std::span<const std::byte>, bool)>& visit, std::string* problem);

// The blob references in `batches` (each lying in `chunk`). Fails, with
// `problem`, when a batch does not decode there.
std::optional<std::vector<wal::BlobRef>> blob_refs_of_batches(std::span<const std::byte> chunk,
                                                              std::uint64_t chunk_offset,
                                                              const std::vector<BatchRef>& batches,
                                                              std::string* problem);

}  // namespace fusee::backup
