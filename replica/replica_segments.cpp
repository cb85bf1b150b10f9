#include "replica/replica_segments.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "base/assert.hpp"
#include "base/crc32c.hpp"
#include "wal/errc.hpp"
#include "wal/segment_file.hpp"

namespace fusee::replica {

namespace {

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

// The header of the segment after `point`'s, which a rolling batch `seq`
// with CRC `crc` opens.
wal::SegmentHeader next_header(const std::string& cluster, const ChainPoint& point, replication::Seq seq,
                               std::uint32_t crc) {
  return {point.segment + 1, segment_salt(cluster, point.segment + 1), seq + 1, point.capacity, crc, true};
}

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); }

// The sections of a body, decoded; nothing when it is none.
std::optional<std::vector<wal::SectionView>> sections_of(std::span<const std::byte> body) {
  std::vector<wal::SectionView> sections;
  if (wal::decode_body_sections(body, sections)) return std::nullopt;
  return sections;
}

}  // namespace

std::string encode_records_body(wal::ShardId shard, wal::Lsn first_lsn, const std::vector<std::string>& records) {
  std::uint64_t records_bytes = 0;
  for (const std::string& record : records) {
    records_bytes += wal::varint_length(wal::record_prefix(record.size(), false)) + record.size();
  }
  std::string body(wal::kSectionHeaderBytes + records_bytes, '\0');
  auto* out = reinterpret_cast<std::byte*>(body.data());
  wal::encode_section_header({shard, static_cast<std::uint32_t>(records.size()), first_lsn,
                              static_cast<std::uint32_t>(records_bytes)},
                             out);
  std::size_t at = wal::kSectionHeaderBytes;
  for (const std::string& record : records) {
    at += wal::encode_varint(wal::record_prefix(record.size(), false), out + at);
    if (!record.empty()) std::memcpy(out + at, record.data(), record.size());
    at += record.size();
  }
  return body;
}

std::optional<std::vector<std::string>> records_in_body(std::string_view body, wal::ShardId shard) {
  auto sections = sections_of(bytes_of(body));
  if (!sections) return std::nullopt;
  std::vector<std::string> records;
  for (const wal::SectionView& section : *sections) {
    for (std::size_t i = 0; i < section.records.size(); ++i) {
      if (section.blob_refs[i]) return std::nullopt;
      if (section.header.shard != shard) continue;
      records.emplace_back(reinterpret_cast<const char*>(section.records[i].data()), section.records[i].size());
    }
  }
  return records;
}

wal::Lsn last_lsn_in_body(std::string_view body, wal::ShardId shard) {
  wal::Lsn last = 0;
  const auto bytes = bytes_of(body);
  for (std::uint64_t offset = 0; offset + wal::kSectionHeaderBytes <= bytes.size();) {
    const wal::SectionHeader header = wal::decode_section_header(bytes.data() + offset);
    if (header.shard == shard && header.record_count > 0) last = header.first_lsn + header.record_count - 1;
    offset += wal::kSectionHeaderBytes + header.records_bytes;
  }
  return last;
}

wal::Lsn first_lsn_in_body(std::string_view body, wal::ShardId shard) {
  const auto bytes = bytes_of(body);
  for (std::uint64_t offset = 0; offset + wal::kSectionHeaderBytes <= bytes.size();) {
    const wal::SectionHeader header = wal::decode_section_header(bytes.data() + offset);
    if (header.shard == shard && header.record_count > 0) return header.first_lsn;
    offset += wal::kSectionHeaderBytes + header.records_bytes;
  }
  return 0;
}

std::uint64_t segment_salt(const std::string& cluster, std::uint64_t segment) {
  // Two CRC-32Cs of (cluster, number), seeded differently: not secret, only
  // distinct per cluster and segment, as a drawn salt is per file.
  std::vector<std::byte> bytes(cluster.size() + 8);
  std::memcpy(bytes.data(), cluster.data(), cluster.size());
  wal::store_u64(bytes.data() + cluster.size(), segment);
  const std::uint64_t low = crc32c(bytes);
  const std::uint64_t high = crc32c_extend(0x5eed5eedu, bytes);
  return high << 32 | low;
}

wal::SegmentHeader first_segment_header(const std::string& cluster, std::uint64_t capacity) {
  return {1, segment_salt(cluster, 1), 1, capacity, 0, true};
}

ChainPoint point_before(const wal::SegmentHeader& header) {
  ChainPoint point;
  point.segment = header.segment_number;
  point.salt = header.salt;
  point.capacity = header.segment_bytes;
  point.seq = header.first_sequence - 1;
  point.crc = header.prev_crc;
  return point;
}

bool fill_anchor(replication::Message& message, const LogStart& start) {
  std::optional<replication::LogAnchor>* anchor = nullptr;
  if (auto* append = std::get_if<replication::AppendRequest>(&message.body)) anchor = &append->anchor;
  if (auto* fetched = std::get_if<replication::FetchReply>(&message.body)) anchor = &fetched->anchor;
  if (anchor == nullptr || !*anchor) return true;
  if ((*anchor)->seq != start.first_seq - 1) return false;
  (*anchor)->segment = start.segment;
  (*anchor)->crc = start.prev_crc;
  return true;
}

std::string log_start_path(const std::string& dir) { return io::join_path(io::join_path(dir, "replica"), "start"); }

Result<LogStart> read_log_start(io::FileSystem& fs, const std::string& dir) {
  const std::string path = log_start_path(dir);
  if (!FUSEE_TRY(fs.exists(path))) return LogStart{};
  const auto bytes = FUSEE_TRY(io::read_file(fs, path));
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  LogStart start;
  unsigned long long segment = 0;
  unsigned long long first_seq = 0;
  unsigned crc = 0;
  unsigned long long view = 0;
  char end = 0;
  if (std::sscanf(text.c_str(), "segment %llu first %llu crc %u view %llu%c", &segment, &first_seq, &crc, &view,
                  &end) != 5 ||
      end != '\n' || segment < 1 || first_seq < 1) {
    return make_error_code(wal::errc::corrupt);
  }
  start.segment = segment;
  start.first_seq = first_seq;
  start.prev_crc = crc;
  start.prev_view = view;
  return start;
}

Result<void> write_log_start(io::FileSystem& fs, const std::string& dir, const LogStart& start) {
  const std::string path = log_start_path(dir);
  const std::string text = fmt::format("segment {} first {} crc {} view {}\n", start.segment, start.first_seq,
                                       start.prev_crc, start.prev_view);
  {
    auto file = FUSEE_TRY(fs.open(path + ".new", {.write = true, .create = true}));
    FUSEE_TRY_VOID(file->truncate(0));
    FUSEE_TRY_VOID(wal::write_fully(*file, 0, std::as_bytes(std::span(text)), io::WriteFlags::none));
    FUSEE_TRY_VOID(file->sync_data());
  }
  FUSEE_TRY_VOID(fs.rename(path + ".new", path));
  return fs.sync_dir(io::parent_path(path));
}

ChainPoint start_point(const std::string& cluster, std::uint64_t capacity) {
  ChainPoint point;
  point.segment = 1;
  point.salt = segment_salt(cluster, 1);
  point.capacity = capacity;
  return point;
}

Result<EncodedBatch> encode_entry(const std::string& cluster, const ChainPoint& before,
                                  const replication::Entry& entry) {
  if (entry.payload.size() > payload_bytes_max(before.capacity)) return make_error_code(StoreErrc::payload_too_large);
  FUSEE_ASSERT(entry.seq == before.seq + 1, "a batch follows the chain");
  const auto sections = sections_of(bytes_of(entry.payload));
  if (!sections) return make_error_code(StoreErrc::malformed_batch);
  for (const wal::SectionView& section : *sections) {
    for (bool blob_ref : section.blob_refs) {
      if (blob_ref) return make_error_code(StoreErrc::malformed_batch);
    }
  }
  const std::uint64_t body_bytes = entry.payload.size();
  const std::uint64_t total = wal::round_up_to_block(wal::kBatchHeaderBytes + body_bytes);

  EncodedBatch batch;
  batch.bytes.assign(total, std::byte{0});
  if (body_bytes > 0) std::memcpy(batch.bytes.data() + wal::kBatchHeaderBytes, entry.payload.data(), body_bytes);
  const std::uint64_t end = before.offset + total;
  batch.roll = before.capacity - end < batch_bytes_max(before.capacity);

  wal::BatchHeader header;
  header.total_length = static_cast<std::uint32_t>(total);
  header.body_length = static_cast<std::uint32_t>(body_bytes);
  header.sequence = entry.seq;
  header.prev_crc = before.crc;
  header.flags = wal::kBatchFlagView | (batch.roll ? wal::kBatchFlagRoll : 0);
  header.acked = entry.acked;
  header.life = entry.view;
  header.section_count = static_cast<std::uint32_t>(sections->size());
  header.view = entry.view;
  wal::encode_batch_header(header, batch.bytes);
  const std::uint32_t crc = wal::seal_batch(before.salt, batch.bytes, header.body_length);

  batch.after = before;
  batch.after.seq = entry.seq;
  batch.after.crc = crc;
  batch.after.offset = end;
  if (batch.roll) {
    batch.next = next_header(cluster, before, entry.seq, crc);
    batch.after.segment = batch.next.segment_number;
    batch.after.salt = batch.next.salt;
    batch.after.offset = wal::kSegmentHeaderBytes;
  }
  return batch;
}

std::string wal_dir_of(const std::string& dir) { return io::join_path(dir, "wal"); }

std::string segment_path(const std::string& dir, std::uint64_t segment) {
  return io::join_path(wal_dir_of(dir), wal::segment_file_name(segment));
}

Result<std::unique_ptr<io::File>> create_replica_segment(io::FileSystem& fs, const std::string& dir,
                                                         const wal::SegmentHeader& header) {
  const std::string path = segment_path(dir, header.segment_number);
  auto file = FUSEE_TRY(fs.open(path, {.write = true, .create = true}));
  FUSEE_TRY_VOID(file->truncate(0));
  std::vector<std::byte> block(wal::kSegmentHeaderBytes);
  wal::encode_segment_header(header, block);
  FUSEE_TRY_VOID(wal::write_fully(*file, 0, block, io::WriteFlags::none));
  FUSEE_TRY_VOID(file->sync_data());
  FUSEE_TRY_VOID(fs.sync_dir(wal_dir_of(dir)));
  return file;
}

Result<ReadChain> read_chain(io::FileSystem& fs, const std::string& dir, const std::string& cluster,
                             std::uint64_t held_bytes_max) {
  ReadChain chain;
  std::size_t held_from = 0;  // entries before this one are elided
  std::uint64_t held_bytes = 0;
  const std::string wal_dir = wal_dir_of(dir);
  if (FUSEE_TRY(fs.exists(wal_dir))) {
    for (const std::string& name : FUSEE_TRY(fs.list(wal_dir))) {
      if (auto number = wal::parse_segment_file_name(name)) chain.segments.push_back(*number);
    }
  }
  std::sort(chain.segments.begin(), chain.segments.end());
  auto present = [&](std::uint64_t number) {
    return std::binary_search(chain.segments.begin(), chain.segments.end(), number);
  };
  // A start record that does not parse says nothing of where the log
  // starts: damage, as a lost start segment is (the replica is suspect,
  // its log empty, until a primary's log repairs it).
  auto recorded = read_log_start(fs, dir);
  if (!recorded && recorded.error() != make_error_code(wal::errc::corrupt)) return recorded.error();
  const bool start_unreadable = !recorded;
  chain.start = recorded ? *recorded : LogStart{};
  const LogStart& start = chain.start;
  std::uint64_t end_segment = start.segment;  // the segment the chain ends in
  auto damaged = [&](std::string what) {
    chain.damaged = true;
    chain.damage = fmt::format("{} (after batch {})", what,
                               chain.points.empty() ? start.first_seq - 1 : chain.points.back().seq);
  };

  const std::string start_path = segment_path(dir, start.segment);
  if (start_unreadable) {
    damaged(fmt::format("{} does not parse: where the log starts is lost", log_start_path(dir)));
  } else if (!present(start.segment)) {
    damaged(fmt::format("{} is missing{}", start_path, start.segment == 1 ? "" : " (the log's start)"));
  } else {
    auto first = FUSEE_TRY(io::read_file(fs, start_path));
    chain.file_bytes += first.size();
    const auto decoded = wal::decode_segment_header(first);
    // The segment the log starts in: the cluster's first, or the one the
    // start records (its header is the chain's start: nothing before it is
    // read to check it).
    const wal::SegmentHeader expected{start.segment, segment_salt(cluster, start.segment), start.first_seq,
                                      decoded.header.segment_bytes, start.prev_crc, true};
    if (decoded.status != wal::SegmentHeaderStatus::valid || decoded.header != expected ||
        decoded.header.segment_bytes < kSegmentBytesMin || decoded.header.segment_bytes > kSegmentBytesMax ||
        decoded.header.segment_bytes % wal::kBlockBytes != 0) {
      damaged(start.segment == 1
                  ? fmt::format("{} has no valid header of this cluster's first segment", start_path)
                  : fmt::format("{} has no valid header of this cluster's segment starting the log at batch {}",
                                start_path, start.first_seq));
    } else {
      chain.points.push_back(point_before(decoded.header));
      std::vector<std::byte> image = std::move(first);
      for (;;) {
        const ChainPoint& point = chain.points.back();
        const std::string path = segment_path(dir, point.segment);
        const auto at = [&] { return fmt::format("{} offset {}", path, point.offset); };
        if (point.offset >= image.size()) break;  // the chain runs to the file's end
        const auto rest = std::span<const std::byte>(image).subspan(point.offset);
        // Zeros shorter than a header are no batch: the tail of an append
        // that did not land. Anything longer that is not the next batch is
        // damage -- zeros included: a sector can read back as zeros, and
        // a replica that took them for the log's end would vouch without
        // a batch it acknowledged.
        if (rest.size() < wal::kBatchHeaderBytes) {
          if (!all_zero(rest)) damaged(fmt::format("a partial batch header at {}", at()));
          break;
        }
        if (all_zero(rest.first(wal::kBatchHeaderBytes))) {
          damaged(fmt::format("{} at {}", all_zero(rest) ? "a zeroed tail" : "zeros where a batch should be", at()));
          break;
        }
        const auto header = wal::decode_batch_header(rest);
        if (!header || header->total_length > rest.size() ||
            wal::batch_crc(point.salt, rest, header->body_length) != header->crc) {
          damaged(fmt::format("a batch that fails its checksum or is cut short at {}", at()));
          break;
        }
        // A whole batch that does not follow: nothing writes one (a cut is
        // durable before anything past it), so it is damage too.
        if (header->sequence != point.seq + 1 || header->prev_crc != point.crc) {
          damaged(fmt::format("a batch that does not follow the one before at {}", at()));
          break;
        }
        const auto bytes = rest.first(header->total_length);
        replication::Entry entry;
        entry.seq = header->sequence;
        entry.view = header->view;
        entry.acked = header->acked;
        entry.payload.assign(reinterpret_cast<const char*>(bytes.data() + wal::kBatchHeaderBytes),
                             header->body_length);
        // Every replica derives the same bytes from the same batch: any
        // other bytes were not written by one.
        auto expected = encode_entry(cluster, point, entry);
        if (!expected || !std::equal(expected->bytes.begin(), expected->bytes.end(), bytes.begin(), bytes.end())) {
          damaged(fmt::format("batch {} at {} is not the cluster's encoding of itself", header->sequence, at()));
          break;
        }
        if (expected->roll) {
          if (point.offset + bytes.size() != image.size()) {
            damaged(fmt::format("bytes follow the rolling batch {} in {}", entry.seq, path));
            break;
          }
          const std::string next_path = segment_path(dir, expected->next.segment_number);
          if (!present(expected->next.segment_number)) {
            damaged(fmt::format("batch {} rolls to {}, which is missing", entry.seq, next_path));
            break;
          }
          auto next = FUSEE_TRY(io::read_file(fs, next_path));
          const auto next_decoded = wal::decode_segment_header(next);
          if (next_decoded.status != wal::SegmentHeaderStatus::valid || next_decoded.header != expected->next) {
            damaged(fmt::format("batch {} rolls to {}, whose header does not continue the chain", entry.seq,
                                next_path));
            break;
          }
          chain.file_bytes += next.size();
          image = std::move(next);
          end_segment = expected->next.segment_number;
        }
        held_bytes += entry.payload.size();
        chain.entries.push_back(std::move(entry));
        chain.points.push_back(expected->after);
        while (held_bytes > held_bytes_max && held_from < chain.entries.size()) {
          replication::Entry& oldest = chain.entries[held_from++];
          held_bytes -= oldest.payload.size();
          oldest.elided_bytes = oldest.payload.size();
          std::string().swap(oldest.payload);
          oldest.elided = true;
        }
      }
    }
  }
  // Segments past the one the chain ends in hold their header at most: a
  // roll's new segment whose rolling batch did not land (the rolling batch
  // is durable before anything goes into the segment it opens), or what a
  // cut left (it empties later segments before it cuts the chain). One that
  // holds more is batches the chain lost: damage, never left over.
  for (const std::uint64_t number : chain.segments) {
    if (number < start.segment) {
      chain.retired_segments.push_back(number);
      continue;
    }
    if (number <= end_segment) continue;
    auto file = FUSEE_TRY(fs.open(segment_path(dir, number), {}));
    const std::uint64_t size = FUSEE_TRY(file->size());
    chain.file_bytes += size;
    chain.leftover_segments.push_back(number);
    if (size > wal::kSegmentHeaderBytes && !chain.damaged) {
      damaged(fmt::format("{} lies past the chain's end and holds batches", segment_path(dir, number)));
    }
  }
  return chain;
}

}  // namespace fusee::replica
