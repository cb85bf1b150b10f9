#include "backup/blob_pack.hpp"

#include <fmt/format.h>

#include "base/crc32c.hpp"
#include "wal/log_format.hpp"

namespace fusee::backup {

std::string blob_pack_name(std::uint64_t segment, std::uint64_t offset) {
  return fmt::format("{}{:010}-{:012}", kBlobPackPrefix, segment, offset);
}

std::vector<std::byte> encode_blob_pack(const std::vector<PackedBlob>& blobs) {
  std::size_t size = 8 + 4;
  for (const auto& blob : blobs) size += wal::kBlobRefBytes + blob.bytes.size();
  std::vector<std::byte> out(size);
  wal::store_u32(out.data(), kBlobPackMagic);
  wal::store_u32(out.data() + 4, static_cast<std::uint32_t>(blobs.size()));
  std::size_t at = 8;
  for (const auto& blob : blobs) {
    wal::encode_blob_ref(blob.ref, out.data() + at);
    at += wal::kBlobRefBytes;
    std::copy(blob.bytes.begin(), blob.bytes.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
    at += blob.bytes.size();
  }
  wal::store_u32(out.data() + at, crc32c(std::span(out).first(at)));
  return out;
}

std::optional<std::vector<PackedBlob>> decode_blob_pack(std::span<const std::byte> bytes, std::string* problem) {
  auto refuse = [&](std::string why) {
    if (problem) *problem = std::move(why);
    return std::nullopt;
  };
  if (bytes.size() < 12 || wal::load_u32(bytes.data()) != kBlobPackMagic) return refuse("not a blob pack");
  const auto body = bytes.first(bytes.size() - 4);
  if (crc32c(body) != wal::load_u32(bytes.data() + body.size())) return refuse("its checksum does not match");
  const auto count = wal::load_u32(bytes.data() + 4);
  std::vector<PackedBlob> blobs;
  std::size_t at = 8;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (body.size() - at < wal::kBlobRefBytes) return refuse(fmt::format("blob {} of {} is torn", i, count));
    PackedBlob blob;
    blob.ref = wal::decode_blob_ref(body.data() + at);
    at += wal::kBlobRefBytes;
    if (body.size() - at < blob.ref.length) return refuse(fmt::format("blob {} of {} is torn", i, count));
    auto record = body.subspan(at, blob.ref.length);
    at += blob.ref.length;
    auto kind = record.empty() ? std::uint8_t{0} : static_cast<std::uint8_t>(record.front());
    if (crc32c(record) != blob.ref.crc || kind != blob.ref.kind) {
      return refuse(fmt::format("blob {} (file {}, offset {}) does not match its reference", i, blob.ref.file_number,
                                blob.ref.offset));
    }
    blob.bytes.assign(record.begin(), record.end());
    blobs.push_back(std::move(blob));
  }
  if (at != body.size()) return refuse("bytes past its last blob");
  return blobs;
}

bool visit_batch_records(std::span<const std::byte> chunk, std::uint64_t chunk_offset, const BatchRef& batch,
                         const std::function<void(std::span<const std::byte>, bool)>& visit, std::string* problem) {
  auto fail = [&](const std::string& why) {
    if (problem) *problem = fmt::format("batch {} (segment {}, offset {}): {}", batch.sequence, batch.segment,
                                        batch.offset, why);
    return false;
  };
  if (batch.offset < chunk_offset || batch.offset + batch.bytes > chunk_offset + chunk.size()) {
    return fail("not in the chunk read for it");
  }
  auto bytes = chunk.subspan(batch.offset - chunk_offset, batch.bytes);
  auto header = wal::decode_batch_header(bytes);
  if (!header || header->sequence != batch.sequence || header->body_length > bytes.size() - wal::kBatchHeaderBytes) {
    return fail("its header does not decode");
  }
  std::vector<wal::SectionView> sections;
  if (auto error =
          wal::decode_body(bytes.subspan(wal::kBatchHeaderBytes, header->body_length), header->section_count, sections)) {
    return fail(error->message);
  }
  for (const auto& section : sections) {
    for (std::size_t r = 0; r < section.records.size(); ++r) visit(section.records[r], section.blob_refs[r]);
  }
  return true;
}

std::optional<std::vector<wal::BlobRef>> blob_refs_of_batches(std::span<const std::byte> chunk,
                                                              std::uint64_t chunk_offset,
                                                              const std::vector<BatchRef>& batches,
                                                              std::string* problem) {
  std::vector<wal::BlobRef> refs;
  bool sized = true;
  for (const auto& batch : batches) {
    bool decoded = visit_batch_records(
        chunk, chunk_offset, batch,
        [&](std::span<const std::byte> record, bool blob_ref) {
          if (!blob_ref) return;
          if (record.size() != wal::kBlobRefBytes) {
            sized = false;
            return;
          }
          refs.push_back(wal::decode_blob_ref(record.data()));
        },
        problem);
    if (!decoded) return std::nullopt;
    if (!sized) {
      if (problem) *problem = fmt::format("batch {}: a blob reference of the wrong size", batch.sequence);
      return std::nullopt;
    }
  }
  return refs;
}

}  // namespace fusee::backup
