#include "wal/log_format.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "base/assert.hpp"
#include "base/crc32c.hpp"
#include "wal/limits.hpp"

namespace fusee::wal {

void store_u32(std::byte* at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>(value >> (8 * i));
}
void store_u64(std::byte* at, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::byte>(value >> (8 * i));
}
std::uint32_t load_u32(const std::byte* at) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= std::uint32_t(std::to_integer<std::uint8_t>(at[i])) << (8 * i);
  return value;
}
std::uint64_t load_u64(const std::byte* at) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= std::uint64_t(std::to_integer<std::uint8_t>(at[i])) << (8 * i);
  return value;
}

std::size_t encode_varint(std::uint64_t value, std::byte* out) {
  std::size_t length = 0;
  while (value >= 0x80) {
    out[length++] = static_cast<std::byte>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out[length++] = static_cast<std::byte>(value);
  return length;
}

std::size_t varint_length(std::uint64_t value) {
  std::size_t length = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++length;
  }
  return length;
}

std::optional<DecodedVarint> decode_varint(std::span<const std::byte> in) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < in.size() && i < kVarintBytesMax; ++i) {
    auto byte = std::to_integer<std::uint64_t>(in[i]);
    if (i == kVarintBytesMax - 1 && byte > 1) return std::nullopt;  // beyond 64 bits
    value |= (byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) {
      // Canonical form only: no redundant trailing zero groups, so one value
      // has exactly one encoding and a flipped bit cannot go unnoticed here.
      if (i > 0 && byte == 0) return std::nullopt;
      return DecodedVarint{value, i + 1};
    }
  }
  return std::nullopt;
}

void encode_segment_header(const SegmentHeader& header, std::span<std::byte> block) {
  FUSEE_ASSERT(block.size() >= kSegmentHeaderBytes, "segment header block too small");
  std::memset(block.data(), 0, kSegmentHeaderBytes);
  namespace off = segment_header_offset;
  std::memcpy(block.data() + off::magic, kSegmentMagic.data(), kSegmentMagic.size());
  store_u32(block.data() + off::format_version, header.replicated ? kFormatVersionReplicated : kFormatVersion);
  store_u64(block.data() + off::segment_number, header.segment_number);
  store_u64(block.data() + off::salt, header.salt);
  store_u64(block.data() + off::first_sequence, header.first_sequence);
  store_u64(block.data() + off::segment_bytes, header.segment_bytes);
  store_u32(block.data() + off::prev_crc, header.prev_crc);
  auto crc = crc32c(block.first(kSegmentHeaderUsedBytes));
  store_u32(block.data() + off::header_crc, crc);
}

DecodedSegmentHeader decode_segment_header(std::span<const std::byte> block) {
  DecodedSegmentHeader decoded{SegmentHeaderStatus::damaged, {}};
  if (block.size() >= kSegmentHeaderBytes &&
      std::all_of(block.begin(), block.begin() + kSegmentHeaderBytes,
                  [](std::byte b) { return b == std::byte{0}; })) {
    decoded.status = SegmentHeaderStatus::zeroed;
    return decoded;
  }
  if (block.size() < kSegmentHeaderBytes) return decoded;
  namespace off = segment_header_offset;
  if (std::memcmp(block.data() + off::magic, kSegmentMagic.data(), kSegmentMagic.size()) != 0)
    return decoded;
  const std::uint32_t version = load_u32(block.data() + off::format_version);
  if (version != kFormatVersion && version != kFormatVersionReplicated) return decoded;
  std::array<std::byte, kSegmentHeaderUsedBytes> copy;
  std::memcpy(copy.data(), block.data(), copy.size());
  store_u32(copy.data() + off::header_crc, 0);
  if (crc32c(copy) != load_u32(block.data() + off::header_crc)) return decoded;
  // The rest of the block is written as zeros; anything else is damage.
  if (!std::all_of(block.begin() + kSegmentHeaderUsedBytes, block.begin() + kSegmentHeaderBytes,
                   [](std::byte b) { return b == std::byte{0}; }))
    return decoded;
  decoded.header.segment_number = load_u64(block.data() + off::segment_number);
  decoded.header.salt = load_u64(block.data() + off::salt);
  decoded.header.first_sequence = load_u64(block.data() + off::first_sequence);
  decoded.header.segment_bytes = load_u64(block.data() + off::segment_bytes);
  decoded.header.prev_crc = load_u32(block.data() + off::prev_crc);
  decoded.header.replicated = version == kFormatVersionReplicated;
  decoded.status = SegmentHeaderStatus::valid;
  return decoded;
}

void encode_batch_header(const BatchHeader& header, std::span<std::byte> out) {
  FUSEE_ASSERT(out.size() >= kBatchHeaderBytes, "batch header buffer too small");
  FUSEE_ASSERT(header.total_length % kBlockBytes == 0, "batch must fill whole blocks");
  FUSEE_ASSERT(header.body_length + kBatchHeaderBytes <= header.total_length,
               "batch body exceeds its length");
  namespace off = batch_header_offset;
  std::memset(out.data(), 0, kBatchHeaderBytes);
  store_u32(out.data() + off::magic, kBatchMagic);
  store_u32(out.data() + off::crc, header.crc);
  store_u32(out.data() + off::total_length, header.total_length);
  store_u32(out.data() + off::body_length, header.body_length);
  store_u64(out.data() + off::sequence, header.sequence);
  store_u32(out.data() + off::prev_crc, header.prev_crc);
  store_u32(out.data() + off::flags, header.flags);
  store_u64(out.data() + off::acked, header.acked);
  store_u64(out.data() + off::life, header.life);
  store_u32(out.data() + off::section_count, header.section_count);
  FUSEE_ASSERT(((header.flags & kBatchFlagView) != 0) == (header.view != 0), "a view with its flag, and only then");
  store_u64(out.data() + off::view, header.view);
}

std::optional<BatchHeader> decode_batch_header(std::span<const std::byte> in) {
  if (in.size() < kBatchHeaderBytes) return std::nullopt;
  namespace off = batch_header_offset;
  if (load_u32(in.data() + off::magic) != kBatchMagic) return std::nullopt;
  BatchHeader header;
  header.crc = load_u32(in.data() + off::crc);
  header.total_length = load_u32(in.data() + off::total_length);
  header.body_length = load_u32(in.data() + off::body_length);
  header.sequence = load_u64(in.data() + off::sequence);
  header.prev_crc = load_u32(in.data() + off::prev_crc);
  header.flags = load_u32(in.data() + off::flags);
  header.acked = load_u64(in.data() + off::acked);
  header.life = load_u64(in.data() + off::life);
  header.section_count = load_u32(in.data() + off::section_count);
  if (header.flags & kBatchFlagView) {
    header.view = load_u64(in.data() + off::view);
    if (header.view == 0) return std::nullopt;  // views start at 1
  }
  if (header.total_length == 0 || header.total_length % kBlockBytes != 0) return std::nullopt;
  if (header.total_length > kBatchBytesMax) return std::nullopt;
  if (std::uint64_t(header.body_length) + kBatchHeaderBytes > header.total_length) return std::nullopt;
  if ((header.flags & ~kBatchFlagsKnown) != 0) return std::nullopt;
  if (header.sequence == 0) return std::nullopt;
  if (header.acked >= header.sequence) return std::nullopt;  // acks only what came before
  return header;
}

std::uint32_t batch_crc(std::uint64_t salt, std::span<const std::byte> batch,
                        std::uint32_t body_length) {
  FUSEE_ASSERT(batch.size() >= kBatchHeaderBytes + body_length, "batch shorter than its body");
  std::array<std::byte, 8> salt_bytes;
  store_u64(salt_bytes.data(), salt);
  auto crc = crc32c(salt_bytes);
  return crc32c_extend(crc, batch.subspan(8, kBatchHeaderBytes - 8 + body_length));
}

std::uint32_t seal_batch(std::uint64_t salt, std::span<std::byte> batch, std::uint32_t body_length) {
  auto crc = batch_crc(salt, batch, body_length);
  store_u32(batch.data() + batch_header_offset::crc, crc);
  return crc;
}

void encode_section_header(const SectionHeader& header, std::byte* out) {
  namespace off = section_header_offset;
  store_u32(out + off::shard, header.shard);
  store_u32(out + off::record_count, header.record_count);
  store_u64(out + off::first_lsn, header.first_lsn);
  store_u32(out + off::records_bytes, header.records_bytes);
  store_u32(out + off::reserved, 0);
}

SectionHeader decode_section_header(const std::byte* in) {
  namespace off = section_header_offset;
  SectionHeader header;
  header.shard = load_u32(in + off::shard);
  header.record_count = load_u32(in + off::record_count);
  header.first_lsn = load_u64(in + off::first_lsn);
  header.records_bytes = load_u32(in + off::records_bytes);
  return header;
}

std::optional<DecodeError> decode_body(std::span<const std::byte> body, std::uint32_t section_count,
                                       std::vector<SectionView>& sections_out) {
  sections_out.clear();
  std::size_t at = 0;
  for (std::uint32_t s = 0; s < section_count; ++s) {
    if (body.size() - at < kSectionHeaderBytes)
      return DecodeError{fmt::format("section {} header runs past the body", s)};
    SectionView section;
    section.header = decode_section_header(body.data() + at);
    if (load_u32(body.data() + at + section_header_offset::reserved) != 0)
      return DecodeError{fmt::format("section {} has non-zero reserved bytes", s)};
    at += kSectionHeaderBytes;
    if (section.header.record_count == 0)
      return DecodeError{fmt::format("section {} has no records", s)};
    if (section.header.first_lsn == 0)
      return DecodeError{fmt::format("section {} starts at LSN 0", s)};
    if (body.size() - at < section.header.records_bytes)
      return DecodeError{fmt::format("section {} records run past the body", s)};
    auto records = body.subspan(at, section.header.records_bytes);
    std::size_t record_at = 0;
    section.records.reserve(section.header.record_count);
    section.blob_refs.reserve(section.header.record_count);
    for (std::uint32_t r = 0; r < section.header.record_count; ++r) {
      auto prefix = decode_varint(records.subspan(record_at));
      if (!prefix) return DecodeError{fmt::format("section {} record {} has a bad length", s, r)};
      record_at += prefix->length;
      auto stored_bytes = prefix->value >> 1;
      bool blob_ref = (prefix->value & 1) != 0;
      if (stored_bytes > kRecordBytesMax || stored_bytes > records.size() - record_at)
        return DecodeError{fmt::format("section {} record {} runs past the section", s, r)};
      if (blob_ref && stored_bytes != kBlobRefBytes)
        return DecodeError{fmt::format("section {} record {} is a blob reference of {} bytes, not {}", s, r,
                                       stored_bytes, kBlobRefBytes)};
      section.records.push_back(records.subspan(record_at, stored_bytes));
      section.blob_refs.push_back(blob_ref);
      record_at += stored_bytes;
    }
    if (record_at != records.size())
      return DecodeError{fmt::format("section {} has {} bytes after its last record", s,
                                     records.size() - record_at)};
    at += section.header.records_bytes;
    sections_out.push_back(std::move(section));
  }
  if (at != body.size())
    return DecodeError{fmt::format("{} bytes after the last section", body.size() - at)};
  return std::nullopt;
}

std::optional<DecodeError> decode_body_sections(std::span<const std::byte> body, std::vector<SectionView>& sections_out) {
  std::uint32_t count = 0;
  for (std::uint64_t offset = 0; offset < body.size(); ++count) {
    if (body.size() - offset < kSectionHeaderBytes) return DecodeError{"a section header cut short"};
    offset += kSectionHeaderBytes + decode_section_header(body.data() + offset).records_bytes;
  }
  return decode_body(body, count, sections_out);
}

}  // namespace fusee::wal
