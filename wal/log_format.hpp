// The shared log's on-disk format: every constant, header layout and codec.
// Pure functions, no I/O. docs/log-format.md describes the same bytes with a
// worked hex dump; keep the two in step and bump kFormatVersion on any change.
//
// A segment file:  [segment header block][batch][batch]...[roll marker?]
// A batch:         [batch header 64 B][section]...[zero padding to 4 KiB]
// A section:       [section header 24 B][record]...
// A record:        [varint (length << 1 | blob_ref)][bytes]  (a blob reference's bytes
//                   say where a large record's bytes are; see wal/blob_store.hpp)
// All integers are little-endian.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace fusee::wal {

using ShardId = std::uint32_t;
using Lsn = std::uint64_t;  // per-shard log sequence number; the first record is 1

inline constexpr std::uint32_t kFormatVersion = 1;
// The segments of a replicated log (docs/replication.md): the same format,
// with every batch carrying the view of the primary that sealed it. A
// version of its own, so that a reader that knows only local logs refuses
// such a segment rather than take its batches for torn ones.
inline constexpr std::uint32_t kFormatVersionReplicated = 2;
// Batches occupy whole blocks so an O_DIRECT write never shares a block with
// the next batch: a torn write can only damage its own batch.
inline constexpr std::size_t kBlockBytes = 4096;
inline constexpr std::size_t kSegmentHeaderBytes = kBlockBytes;
inline constexpr std::size_t kSegmentHeaderUsedBytes = 64;
inline constexpr std::size_t kBatchHeaderBytes = 64;
inline constexpr std::size_t kSectionHeaderBytes = 24;
inline constexpr std::size_t kVarintBytesMax = 10;

// A blob reference's stored bytes (its layout: wal/blob_store.hpp).
inline constexpr std::size_t kBlobRefBytes = 29;

inline constexpr std::array<char, 8> kSegmentMagic = {'F', 'U', 'S', 'E', 'E', 'S', 'E', 'G'};
inline constexpr std::uint32_t kBatchMagic = 0x31425346;  // "FSB1" read little-endian

// Batch flags.
// The chain continues at the first batch of the next segment.
inline constexpr std::uint32_t kBatchFlagRoll = 1u << 0;
// Written by a clean close: proves every earlier batch was acknowledged.
inline constexpr std::uint32_t kBatchFlagClose = 1u << 1;
// The batch carries a view (bytes 52..60): set on every batch of a
// replicated log's segments, on none of a local log's.
inline constexpr std::uint32_t kBatchFlagView = 1u << 2;
inline constexpr std::uint32_t kBatchFlagsKnown = kBatchFlagRoll | kBatchFlagClose | kBatchFlagView;

// Offsets inside the segment header block.
namespace segment_header_offset {
inline constexpr std::size_t magic = 0;            // 8 bytes
inline constexpr std::size_t format_version = 8;   // u32
inline constexpr std::size_t header_crc = 12;      // u32, CRC-32C of bytes [0, 64) with this field zero
inline constexpr std::size_t segment_number = 16;  // u64
inline constexpr std::size_t salt = 24;            // u64, drawn each time the file is (re)started
inline constexpr std::size_t first_sequence = 32;  // u64, sequence of the segment's first batch
inline constexpr std::size_t segment_bytes = 40;   // u64, preallocated size of the file
inline constexpr std::size_t prev_crc = 48;        // u32, CRC of the batch before the first one
inline constexpr std::size_t reserved = 52;        // 12 bytes of zero
}  // namespace segment_header_offset
static_assert(segment_header_offset::reserved + 12 == kSegmentHeaderUsedBytes);

// Offsets inside the batch header.
namespace batch_header_offset {
inline constexpr std::size_t magic = 0;          // u32
inline constexpr std::size_t crc = 4;            // u32, CRC-32C over salt, header [8, 64) and body
inline constexpr std::size_t total_length = 8;   // u32, header + body + padding, whole blocks
inline constexpr std::size_t body_length = 12;   // u32, bytes of sections after the header
inline constexpr std::size_t sequence = 16;      // u64, global, +1 per batch
inline constexpr std::size_t prev_crc = 24;      // u32, CRC of the previous batch (the chain)
inline constexpr std::size_t flags = 28;         // u32
inline constexpr std::size_t acked = 32;         // u64, highest sequence acknowledged at submission
inline constexpr std::size_t life = 40;          // u64, drawn at each open of the log
inline constexpr std::size_t section_count = 48; // u32
inline constexpr std::size_t view = 52;          // u64, with kBatchFlagView; zero without
inline constexpr std::size_t reserved = 60;      // 4 bytes of zero
}  // namespace batch_header_offset
static_assert(batch_header_offset::reserved + 4 == kBatchHeaderBytes);

namespace section_header_offset {
inline constexpr std::size_t shard = 0;          // u32
inline constexpr std::size_t record_count = 4;   // u32
inline constexpr std::size_t first_lsn = 8;      // u64
inline constexpr std::size_t records_bytes = 16; // u32, bytes of records after this header
inline constexpr std::size_t reserved = 20;      // u32 zero
}  // namespace section_header_offset
static_assert(section_header_offset::reserved + 4 == kSectionHeaderBytes);

struct SegmentHeader {
  std::uint64_t segment_number = 0;
  std::uint64_t salt = 0;
  std::uint64_t first_sequence = 0;
  std::uint64_t segment_bytes = 0;
  std::uint32_t prev_crc = 0;
  bool replicated = false;  // written as kFormatVersionReplicated
  friend bool operator==(const SegmentHeader&, const SegmentHeader&) = default;
};

struct BatchHeader {
  std::uint32_t crc = 0;
  std::uint32_t total_length = 0;
  std::uint32_t body_length = 0;
  std::uint64_t sequence = 0;
  std::uint32_t prev_crc = 0;
  std::uint32_t flags = 0;
  std::uint64_t acked = 0;
  std::uint64_t life = 0;
  std::uint32_t section_count = 0;
  std::uint64_t view = 0;  // with kBatchFlagView: the sealing primary's view, >= 1
  friend bool operator==(const BatchHeader&, const BatchHeader&) = default;
};

struct SectionHeader {
  ShardId shard = 0;
  std::uint32_t record_count = 0;
  Lsn first_lsn = 0;
  std::uint32_t records_bytes = 0;
};

// A decoded section: its header and views of each record's bytes as stored
// (for a blob reference, the reference's bytes, not the record's).
struct SectionView {
  SectionHeader header;
  std::vector<std::span<const std::byte>> records;
  std::vector<bool> blob_refs;  // parallel to records
};

// A record's prefix: its stored length shifted left once, the low bit set
// when the stored bytes are a blob reference rather than the record itself.
constexpr std::uint64_t record_prefix(std::uint64_t stored_bytes, bool blob_ref) {
  return stored_bytes << 1 | (blob_ref ? 1 : 0);
}

// Little-endian integer codecs.
void store_u32(std::byte* at, std::uint32_t value);
void store_u64(std::byte* at, std::uint64_t value);
std::uint32_t load_u32(const std::byte* at);
std::uint64_t load_u64(const std::byte* at);

// LEB128 varint. encode returns bytes written (at most kVarintBytesMax).
std::size_t encode_varint(std::uint64_t value, std::byte* out);
std::size_t varint_length(std::uint64_t value);
// Decodes a varint at the front of in; nullopt if truncated or over-long.
struct DecodedVarint {
  std::uint64_t value;
  std::size_t length;
};
std::optional<DecodedVarint> decode_varint(std::span<const std::byte> in);

// Rounds up to whole blocks.
constexpr std::uint64_t round_up_to_block(std::uint64_t bytes) {
  return (bytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
}

// Segment header block (kSegmentHeaderBytes, rest zero).
void encode_segment_header(const SegmentHeader& header, std::span<std::byte> block);
enum class SegmentHeaderStatus { valid, zeroed, damaged };
struct DecodedSegmentHeader {
  SegmentHeaderStatus status;
  SegmentHeader header;
};
DecodedSegmentHeader decode_segment_header(std::span<const std::byte> block);

// Batch header: encode writes kBatchHeaderBytes at the front of out (the CRC
// field as given; seal_batch computes it).
void encode_batch_header(const BatchHeader& header, std::span<std::byte> out);
// Decodes and sanity-checks the fixed fields (magic, lengths, flags); does
// not verify the CRC. nullopt when the bytes cannot be a batch header.
std::optional<BatchHeader> decode_batch_header(std::span<const std::byte> in);
// The CRC a batch must carry: over the segment salt, header bytes [8, 64)
// and the body. batch holds at least header + body_length bytes.
std::uint32_t batch_crc(std::uint64_t salt, std::span<const std::byte> batch,
                        std::uint32_t body_length);
// Computes and stores the CRC of an encoded batch; returns it.
std::uint32_t seal_batch(std::uint64_t salt, std::span<std::byte> batch, std::uint32_t body_length);

void encode_section_header(const SectionHeader& header, std::byte* out);
SectionHeader decode_section_header(const std::byte* in);

// Decodes a batch body into sections and records, checking that every length
// agrees and nothing is left over. errc::corrupt with a description if not.
struct DecodeError {
  std::string message;
};
std::optional<DecodeError> decode_body(std::span<const std::byte> body, std::uint32_t section_count,
                                       std::vector<SectionView>& sections_out);
// The same for a body whose section count is not at hand (a replicated
// log's batch travels as its body alone): sections until the body ends.
std::optional<DecodeError> decode_body_sections(std::span<const std::byte> body, std::vector<SectionView>& sections_out);

}  // namespace fusee::wal
