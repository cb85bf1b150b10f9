#include "wal/recovery.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "base/crc32c.hpp"
#include "wal/blob_store.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"
#include "wal/segment_file.hpp"

namespace fusee::wal {
namespace {

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

// Reads exactly out.size() bytes, zero-filling past the end of the file (a
// short file reads as if preallocated with zeros).
Result<void> read_padded(io::File& file, std::uint64_t offset, std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    auto got = FUSEE_TRY(file.read_at(offset + done, out.subspan(done)));
    if (got == 0) break;
    done += got;
  }
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(done), out.end(), std::byte{0});
  return ok();
}

// What the chain walk found at one position.
struct Probe {
  enum Kind { valid, end, refuse } kind = end;
  BatchHeader header;
  std::span<const std::byte> bytes;  // the whole batch when valid, until the next probe
  std::string why;                   // for end and refuse
};

// The chain walk reads a segment front to back. It reads a window at a
// time and serves each batch from it: two reads and two allocations per
// batch cost as much as the disk's read of the whole log (a restore reads
// its result back through this walk, and so does every open).
class SegmentWindow {
 public:
  static constexpr std::uint64_t kWindowBytes = 1024 * 1024;

  // `file` stays open while the window is used; `limit_bytes` bounds reads
  // (the segment's preallocated size).
  void reset(io::File& file, std::uint64_t limit_bytes) {
    file_ = &file;
    limit_ = limit_bytes;
    begin_ = end_ = 0;
  }
  // [offset, offset + length), offset + length <= the limit; zeros past the
  // file's end. Valid until the next call.
  Result<std::span<const std::byte>> view(std::uint64_t offset, std::uint64_t length) {
    if (offset < begin_ || offset + length > end_) {
      const auto want = std::max(length, std::min(kWindowBytes, limit_ - offset));
      if (buffer_.size() < want) buffer_.resize(static_cast<std::size_t>(want));
      FUSEE_TRY_VOID(read_padded(*file_, offset, std::span(buffer_).first(static_cast<std::size_t>(want))));
      begin_ = offset;
      end_ = offset + want;
    }
    return std::span<const std::byte>(buffer_).subspan(static_cast<std::size_t>(offset - begin_),
                                                       static_cast<std::size_t>(length));
  }

 private:
  io::File* file_ = nullptr;
  std::uint64_t limit_ = 0;
  std::vector<std::byte> buffer_;
  std::uint64_t begin_ = 0;  // [begin_, end_) of the file is in buffer_
  std::uint64_t end_ = 0;
};

class Planner {
 public:
  Planner(io::FileSystem& fs, std::string wal_dir, std::uint32_t shard_count, const RecoveryBase& base,
          bool list_batches, bool replica_files)
      : fs_(fs), shard_count_(shard_count), base_(base), list_batches_(list_batches), replica_files_(replica_files) {
    plan_.wal_dir = std::move(wal_dir);
    plan_.shards.resize(shard_count);
  }

  Result<RecoveryPlan> run() {
    auto exists = FUSEE_TRY(fs_.exists(plan_.wal_dir));
    if (!exists) {
      plan_.fresh = true;
      return std::move(plan_);
    }
    FUSEE_TRY_VOID(drop_cached_blob_pages());
    FUSEE_TRY_VOID(load_segments());
    if (!plan_.refused) FUSEE_TRY_VOID(walk_chain());
    if (!plan_.refused) check_against_checkpoints();
    if (!plan_.refused) FUSEE_TRY_VOID(scan_past_end());
    if (!plan_.refused) FUSEE_TRY_VOID(find_unreferenced_blobs());
    if (!plan_.refused) choose_deletions();
    return std::move(plan_);
  }

 private:
  void refuse(std::string why) {
    if (plan_.refused) return;
    plan_.refused = true;
    plan_.refusal = std::move(why);
  }

  // Recovery decides from what is on the disk. After a failed fdatasync,
  // Linux keeps the pages it could not write in the page cache, marked
  // clean: a plain read in the same boot (a reopen after the log poisoned)
  // would see a batch or blob the disk does not hold, and apply()'s sync
  // would find nothing to write. Every segment's cached pages are evicted
  // as load_segments opens it, and every blob file's here, before the
  // chain's blob references are read.
  Result<void> drop_cached_blob_pages() {
    auto blob_dir = blob_dir_of(plan_.wal_dir);
    for (auto number : FUSEE_TRY(list_blob_files(fs_, blob_dir))) {
      auto file = FUSEE_TRY(fs_.open(io::join_path(blob_dir, blob_file_name(number)), {}));
      FUSEE_TRY_VOID(file->drop_cache());
    }
    return ok();
  }

  Result<void> load_segments() {
    auto names = FUSEE_TRY(fs_.list(plan_.wal_dir));
    for (const auto& name : names) {
      auto number = parse_segment_file_name(name);
      if (!number) continue;  // blobs/ and other files are not segments
      SegmentSummary segment;
      segment.number = *number;
      segment.path = io::join_path(plan_.wal_dir, name);
      auto file = FUSEE_TRY(fs_.open(segment.path, {}));
      FUSEE_TRY_VOID(file->drop_cache());  // see drop_cached_blob_pages
      segment.file_bytes = FUSEE_TRY(file->size());
      std::vector<std::byte> block(kSegmentHeaderBytes);
      FUSEE_TRY_VOID(read_padded(*file, 0, block));
      auto decoded = decode_segment_header(block);
      segment.header_status = decoded.status;
      segment.header = decoded.header;
      if (decoded.status == SegmentHeaderStatus::valid &&
          decoded.header.segment_number != segment.number)
        segment.header_status = SegmentHeaderStatus::damaged;
      plan_.segments.push_back(std::move(segment));
    }
    std::sort(plan_.segments.begin(), plan_.segments.end(),
              [](const auto& a, const auto& b) { return a.number < b.number; });
    if (plan_.segments.empty()) {
      refuse(fmt::format("{} holds no segment file, but a log directory is only put in place "
                         "after its first segment is durable",
                         plan_.wal_dir));
      return ok();
    }
    // One directory holds one kind of log: a segment of the other kind is
    // not a torn write but a mix-up (a replica's files copied into a local
    // directory, or the reverse).
    const SegmentSummary* local = nullptr;
    const SegmentSummary* replicated = nullptr;
    for (const auto& segment : plan_.segments) {
      if (segment.header_status != SegmentHeaderStatus::valid) continue;
      (segment.header.replicated ? replicated : local) = &segment;
    }
    if (local != nullptr && replicated != nullptr) {
      refuse(fmt::format("{} holds segments of a local log ({}) and of a replicated one ({})", plan_.wal_dir,
                         local->path, replicated->path));
      return ok();
    }
    plan_.replicated = replicated != nullptr;
    for (std::size_t i = 1; i < plan_.segments.size(); ++i) {
      if (plan_.segments[i].number != plan_.segments[i - 1].number + 1) {
        refuse(fmt::format("segment {} is missing: {} is followed by {}", plan_.segments[i - 1].number + 1,
                           plan_.segments[i - 1].path, plan_.segments[i].path));
        return ok();
      }
    }
    // Leading segments whose header was zeroed were being retired when the
    // process stopped; the chain starts after them. A header torn while it
    // was being zeroed reads as damaged: that segment is a leftover too when
    // the checkpoints need nothing before the next segment.
    while (first_ + 1 < plan_.segments.size()) {
      const auto& oldest = plan_.segments[first_];
      const auto& next = plan_.segments[first_ + 1];
      bool zeroed = oldest.header_status == SegmentHeaderStatus::zeroed;
      bool unneeded = oldest.header_status == SegmentHeaderStatus::damaged &&
                      next.header_status == SegmentHeaderStatus::valid &&
                      next.header.first_sequence <= base_.first_sequence_max;
      if (!zeroed && !unneeded) break;
      retired_.push_back(oldest.path);
      ++first_;
    }
    const auto& first = plan_.segments[first_];
    if (first.header_status != SegmentHeaderStatus::valid) {
      refuse(fmt::format("{} (the oldest segment) has a {} header: the log's start is lost", first.path,
                         first.header_status == SegmentHeaderStatus::zeroed ? "zeroed" : "damaged"));
      return ok();
    }
    if (first.header.first_sequence > base_.first_sequence_max) {
      refuse(fmt::format("{} starts at sequence {}, but no segment holds sequences {} to {}{}", first.path,
                         first.header.first_sequence, base_.first_sequence_max, first.header.first_sequence - 1,
                         base_.first_sequence_max == 1 ? ""
                                                       : " (the shards' checkpoints need the log from there on)"));
    }
    return ok();
  }

  // Retirement removes only what checkpoints cover, so each shard's records
  // past its checkpoint must all be in the chain.
  void check_against_checkpoints() {
    for (ShardId shard = 0; shard < shard_count_; ++shard) {
      Lsn floor = shard < base_.shard_lsn_floors.size() ? base_.shard_lsn_floors[shard] : 0;
      Lsn start = shard < base_.shard_replay_from.size() && base_.shard_replay_from[shard] > 0
                      ? std::min(base_.shard_replay_from[shard], floor + 1)
                      : floor + 1;
      const auto& range = plan_.shards[shard];
      if (range.last_lsn == 0) {
        if (start <= floor) {
          refuse(fmt::format("shard {}'s records from LSN {} to {} are missing: its checkpoint left them in the "
                             "log, which holds no record of the shard",
                             shard, start, floor));
          return;
        }
        if (floor > 0 && plan_.first_sequence <= 1) {
          refuse(fmt::format("shard {}'s checkpoint covers LSN {}, but the log, which starts at its beginning, "
                             "holds no record of the shard",
                             shard, floor));
          return;
        }
        continue;
      }
      if (range.last_lsn < floor) {
        refuse(fmt::format("shard {}'s checkpoint covers LSN {}, but the log ends at LSN {} of the shard", shard,
                           floor, range.last_lsn));
        return;
      }
      if (range.first_lsn > start) {
        refuse(fmt::format("shard {}'s records from LSN {} to {} are missing: its checkpoint covers LSN {} and "
                           "the log starts at LSN {}",
                           shard, start, range.first_lsn - 1, floor, range.first_lsn));
        return;
      }
    }
  }

  bool check_size(const SegmentSummary& segment) {
    if (segment.header.segment_bytes < kSegmentHeaderBytes + 2 * kBlockBytes ||
        segment.header.segment_bytes % kBlockBytes != 0) {
      refuse(fmt::format("{} declares an impossible size of {} bytes", segment.path,
                         segment.header.segment_bytes));
      return false;
    }
    // A replica's segments are not preallocated (replica/replica_segments.hpp):
    // the file ends where its last batch does, and reads past it are zeros.
    // Only for a caller that says it reads a replica's files: a log's own
    // replicated segments are preallocated, and one cut short is damage.
    if (segment.file_bytes < segment.header.segment_bytes && !(replica_files_ && segment.header.replicated)) {
      refuse(fmt::format("{} is {} bytes, but it was preallocated to {}: the file was truncated",
                         segment.path, segment.file_bytes, segment.header.segment_bytes));
      return false;
    }
    return true;
  }

  Result<Probe> probe(SegmentWindow& window, const SegmentSummary& segment, std::uint64_t offset,
                      std::uint64_t expected_sequence, std::uint32_t expected_prev) {
    Probe result;
    if (offset + kBlockBytes > segment.header.segment_bytes) {
      result.why = "end of segment";
      return result;
    }
    auto block = FUSEE_TRY(window.view(offset, kBlockBytes));
    auto at = [&] { return fmt::format("{} offset {}", segment.path, offset); };
    if (all_zero(block)) {
      result.why = "";  // preallocated zeros: a clean end
      return result;
    }
    auto header = decode_batch_header(block);
    if (!header) {
      result.why = fmt::format("no batch header at {} (torn or never written)", at());
      return result;
    }
    if (header->sequence != expected_sequence) {
      result.why = fmt::format("batch at {} has sequence {}, not the next one ({}): stale", at(),
                               header->sequence, expected_sequence);
      return result;
    }
    if (header->prev_crc != expected_prev) {
      result.why = fmt::format("batch sequence {} at {} does not chain to the previous batch "
                               "(written by an earlier life of the log)",
                               header->sequence, at());
      return result;
    }
    if (offset + header->total_length > segment.header.segment_bytes) {
      result.why = fmt::format("batch sequence {} at {} runs past the segment's end", header->sequence, at());
      return result;
    }
    auto bytes = FUSEE_TRY(window.view(offset, header->total_length));
    if (batch_crc(segment.header.salt, bytes, header->body_length) != header->crc) {
      result.why = fmt::format("batch sequence {} at {} fails its checksum (torn write)", header->sequence, at());
      return result;
    }
    result.kind = Probe::valid;
    result.header = *header;
    result.bytes = bytes;
    return result;
  }

  // Records one valid batch of the chain. Returns false (and refuses) when a
  // batch that passed its checksum is inconsistent: that is not a torn write.
  bool accept(const SegmentSummary& segment, std::uint64_t offset, const Probe& probe) {
    const auto& header = probe.header;
    // (Formatted only for a refusal: it is not free, and every batch comes here.)
    auto at = [&] { return fmt::format("{} offset {}", segment.path, offset); };
    if (((header.flags & kBatchFlagView) != 0) != segment.header.replicated) {
      refuse(fmt::format("batch sequence {} at {} {} a view, but its segment is a {} log's", header.sequence, at(),
                         segment.header.replicated ? "carries no" : "carries", segment.header.replicated ? "replicated" : "local"));
      return false;
    }
    auto& sections = sections_;  // reused from batch to batch
    auto body = probe.bytes.subspan(kBatchHeaderBytes, header.body_length);
    if (auto error = decode_body(body, header.section_count, sections)) {
      refuse(fmt::format("batch sequence {} at {} passes its checksum but does not decode: {}",
                         header.sequence, at(), error->message));
      return false;
    }
    // A replica's roll rides on its segment's last batch (so that the roll
    // takes no sequence of its own): only the log's own roll and close
    // markers are empty.
    const std::uint32_t empty_flags =
        replica_files_ && segment.header.replicated ? kBatchFlagClose : kBatchFlagRoll | kBatchFlagClose;
    if ((header.flags & empty_flags) && !sections.empty()) {
      refuse(fmt::format("marker batch sequence {} at {} carries records", header.sequence, at()));
      return false;
    }
    for (const auto& section : sections) {
      auto shard = section.header.shard;
      if (!check_blob_refs(section, header, at, segment.number)) return false;
      if (shard >= shard_count_) {
        refuse(fmt::format("batch sequence {} at {} has a section for shard {}, but the log has {} shards",
                           header.sequence, at(), shard, shard_count_));
        return false;
      }
      auto& range = plan_.shards[shard];
      Lsn expected = range.last_lsn == 0 ? (plan_.first_sequence == 1 ? 1 : section.header.first_lsn)
                                         : range.last_lsn + 1;
      if (section.header.first_lsn != expected) {
        refuse(fmt::format("batch sequence {} at {}: shard {} continues at LSN {}, expected {}",
                           header.sequence, at(), shard, section.header.first_lsn, expected));
        return false;
      }
      if (range.first_lsn == 0) range.first_lsn = section.header.first_lsn;
      range.last_lsn = section.header.first_lsn + section.header.record_count - 1;
      plan_.sections.push_back({shard, section.header.first_lsn, section.header.record_count, segment.number,
                                offset, header.total_length, header.sequence});
      plan_.chain_records += section.header.record_count;
    }
    if (list_batches_) {
      std::uint64_t records = 0;
      for (const auto& section : sections) records += section.header.record_count;
      plan_.batches.push_back({segment.number, offset, header.sequence, header.total_length, header.flags,
                               header.acked, header.life, header.section_count, records, header.view});
    }
    plan_.last_sequence = header.sequence;
    plan_.last_crc = header.crc;
    plan_.ends_with_close = (header.flags & kBatchFlagClose) != 0;
    ++plan_.chain_batches;
    return true;
  }

  // Resolves every blob reference of a section: the blob must be there,
  // whole, with the CRC and kind the reference names. A batch is sealed only
  // once its blobs are durable, so a mismatch is damage, never a torn write.
  template <typename At>
  bool check_blob_refs(const SectionView& section, const BatchHeader& header, const At& at,
                       std::uint64_t segment_number) {
    for (std::size_t r = 0; r < section.records.size(); ++r) {
      if (!section.blob_refs[r]) continue;
      auto ref = decode_blob_ref(section.records[r].data());
      std::string problem;
      auto blob = read_blob(fs_, blob_dir_of(plan_.wal_dir), ref, &problem);
      if (!blob) {
        refuse(fmt::format("shard {} LSN {} (batch sequence {} at {}) is a large record whose blob is bad: {}",
                           section.header.shard, section.header.first_lsn + r, header.sequence, at(),
                           problem.empty() ? blob.error().message() : problem));
        return false;
      }
      referenced_blob_files_.insert(ref.file_number);
      auto& last = plan_.blob_file_last_segment[ref.file_number];
      last = std::max(last, segment_number);
      ++plan_.blob_records;
    }
    return true;
  }

  Result<void> find_unreferenced_blobs() {
    auto files = FUSEE_TRY(list_blob_files(fs_, blob_dir_of(plan_.wal_dir)));
    for (auto number : files) {
      if (referenced_blob_files_.count(number))
        plan_.blob_files_referenced.push_back(number);
      else
        plan_.blob_files_unreferenced.push_back(number);
    }
    return ok();
  }

  Result<void> walk_chain() {
    auto index = first_;
    auto* segment = &plan_.segments[index];
    if (!check_size(*segment)) return ok();
    plan_.first_sequence = segment->header.first_sequence;
    // An empty chain ends where the oldest segment's header says it starts:
    // after retirement that is not sequence 0, and the next batch (and the
    // check for acknowledged batches past the end) must continue from there.
    plan_.last_sequence = segment->header.first_sequence - 1;
    plan_.last_crc = segment->header.prev_crc;
    auto expected_sequence = segment->header.first_sequence;
    auto expected_prev = segment->header.prev_crc;
    std::uint64_t offset = kSegmentHeaderBytes;
    auto file = FUSEE_TRY(fs_.open(segment->path, {}));
    SegmentWindow window;
    window.reset(*file, segment->header.segment_bytes);
    for (;;) {
      auto found = FUSEE_TRY(probe(window, *segment, offset, expected_sequence, expected_prev));
      if (found.kind != Probe::valid) {
        plan_.tail = found.why;
        break;
      }
      if (!accept(*segment, offset, found)) return ok();
      ++segment->chain_batches;
      offset += found.header.total_length;
      expected_sequence = found.header.sequence + 1;
      expected_prev = found.header.crc;
      if (found.header.flags & kBatchFlagRoll) {
        // The next segment was durable before this marker was written, so it
        // must be there, whole, and continue the chain.
        auto marker_at = fmt::format("the roll marker (sequence {}) at {} offset {}", found.header.sequence,
                                     segment->path, offset - found.header.total_length);
        if (index + 1 >= plan_.segments.size()) {
          refuse(fmt::format("{} points to segment {}, which is missing", marker_at, segment->number + 1));
          return ok();
        }
        auto& next = plan_.segments[index + 1];
        if (next.header_status != SegmentHeaderStatus::valid) {
          refuse(fmt::format("{} points to {}, whose header is {}", marker_at, next.path,
                             next.header_status == SegmentHeaderStatus::zeroed ? "zeroed" : "damaged"));
          return ok();
        }
        if (next.header.first_sequence != expected_sequence || next.header.prev_crc != expected_prev) {
          refuse(fmt::format("{} points to {}, which starts at sequence {} instead of {}", marker_at, next.path,
                             next.header.first_sequence, expected_sequence));
          return ok();
        }
        if (!check_size(next)) return ok();
        ++index;
        segment = &next;
        offset = kSegmentHeaderBytes;
        file = FUSEE_TRY(fs_.open(segment->path, {}));
        window.reset(*file, segment->header.segment_bytes);
      }
    }
    end_index_ = index;
    plan_.write_segment = segment->number;
    plan_.write_offset = offset;
    return ok();
  }

  // Looks past the chain's end for a valid batch that proves an acknowledged
  // batch was lost.
  Result<void> scan_past_end() {
    auto expected = plan_.last_sequence + 1;
    for (auto index = end_index_; index < plan_.segments.size() && !plan_.refused; ++index) {
      const auto& segment = plan_.segments[index];
      if (segment.header_status != SegmentHeaderStatus::valid) continue;  // no salt to check with
      std::uint64_t start = index == end_index_ ? plan_.write_offset : kSegmentHeaderBytes;
      FUSEE_TRY_VOID(scan_segment_past_end(segment, start, expected));
    }
    return ok();
  }

  // One segment of the scan past the end, from `start` (block-aligned) on.
  //
  // The work is bounded: about twice the bytes scanned, however many blocks
  // look like batch headers. Checking each such block by reading and
  // checksumming the batch it claims (up to kBatchBytesMax) would let a torn
  // batch whose payload holds fake headers make one open read gigabytes.
  // Instead a first pass reads the range once, keeping the CRC-32C of every
  // prefix that ends on a block boundary and every block that decodes as a
  // batch header; a candidate's checksum then follows from two prefix CRCs
  // (crc32c_combine) and at most one more block read, for its body's last
  // partial block.
  Result<void> scan_segment_past_end(const SegmentSummary& segment, std::uint64_t start, std::uint64_t expected) {
    auto limit = std::min(segment.file_bytes, segment.header.segment_bytes);
    if (start + kBlockBytes > limit) return ok();
    auto file = FUSEE_TRY(fs_.open(segment.path, {}));

    struct Candidate {
      std::uint64_t offset = 0;
      BatchHeader header;
      std::array<std::byte, kBatchHeaderBytes> head{};
    };
    std::vector<Candidate> candidates;
    // prefix_crcs[i]: crc32c of [start, start + i * kBlockBytes).
    std::vector<std::uint32_t> prefix_crcs{0};
    constexpr std::uint64_t kChunkBytes = 1 * kMiB;
    std::vector<std::byte> chunk(static_cast<std::size_t>(std::min(kChunkBytes, limit - start)));
    for (auto offset = start; offset + kBlockBytes <= limit;) {
      auto chunk_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, limit - offset));
      chunk_bytes -= chunk_bytes % kBlockBytes;
      FUSEE_TRY_VOID(read_padded(*file, offset, std::span(chunk).first(chunk_bytes)));
      for (std::size_t at = 0; at < chunk_bytes; at += kBlockBytes) {
        auto block = std::span<const std::byte>(chunk).subspan(at, kBlockBytes);
        auto header = decode_batch_header(block);
        auto batch_offset = offset + at;
        if (header && batch_offset + header->total_length <= limit &&
            batch_offset + kBatchHeaderBytes + header->body_length <= limit) {
          Candidate candidate{batch_offset, *header, {}};
          std::copy_n(block.begin(), kBatchHeaderBytes, candidate.head.begin());
          candidates.push_back(candidate);
        }
        prefix_crcs.push_back(crc32c_extend(prefix_crcs.back(), block));
      }
      offset += chunk_bytes;
    }

    std::array<std::byte, 8> salt_bytes;
    store_u64(salt_bytes.data(), segment.header.salt);
    const auto salt_crc = crc32c(salt_bytes);
    std::vector<std::byte> tail(kBlockBytes);
    for (const auto& candidate : candidates) {
      const auto& header = candidate.header;
      auto body_begin = candidate.offset + kBatchHeaderBytes;
      auto body_end = body_begin + header.body_length;
      // The CRC of [start, body_begin) and of [start, body_end).
      auto head_index = (candidate.offset - start) / kBlockBytes;
      auto to_body_begin = crc32c_extend(prefix_crcs[head_index], candidate.head);
      auto end_index = (body_end - start) / kBlockBytes;
      auto end_floor = start + end_index * kBlockBytes;
      auto to_body_end = prefix_crcs[end_index];
      if (body_end > end_floor) {
        auto part = std::span(tail).first(static_cast<std::size_t>(body_end - end_floor));
        FUSEE_TRY_VOID(read_padded(*file, end_floor, part));
        to_body_end = crc32c_extend(to_body_end, part);
      }
      auto body_crc = to_body_end ^ crc32c_combine(to_body_begin, 0, header.body_length);
      // batch_crc: the salt, the header from its length field on, the body.
      auto head_crc = crc32c_extend(salt_crc, std::span<const std::byte>(candidate.head).subspan(8));
      if (crc32c_combine(head_crc, body_crc, header.body_length) != header.crc) continue;
      ++plan_.stale_batches_past_end;
      if (header.acked >= expected) {
        refuse(fmt::format(
            "batch sequence {} at {} offset {} was written after sequence {} was acknowledged, but the "
            "chain ends at sequence {} ({} offset {}): an acknowledged batch was lost",
            header.sequence, segment.path, candidate.offset, header.acked, plan_.last_sequence,
            plan_.segments[end_index_].path, plan_.write_offset));
        return ok();
      }
    }
    return ok();
  }

  void choose_deletions() {
    // Highest first, so a crash part-way never leaves a gap in the numbers.
    for (auto index = plan_.segments.size(); index-- > end_index_ + 1;)
      plan_.files_to_delete.push_back(plan_.segments[index].path);
    for (const auto& path : retired_) plan_.files_to_delete.push_back(path);
    if (!plan_.files_to_delete.empty() && plan_.tail.empty())
      plan_.tail = fmt::format("{} segment file(s) past the end", plan_.files_to_delete.size() - retired_.size());
  }

  io::FileSystem& fs_;
  std::uint32_t shard_count_;
  RecoveryBase base_;
  RecoveryPlan plan_;
  std::size_t first_ = 0;
  std::size_t end_index_ = 0;
  std::vector<std::string> retired_;
  std::set<std::uint64_t> referenced_blob_files_;
  bool list_batches_ = false;
  bool replica_files_ = false;
  std::vector<SectionView> sections_;  // accept's, kept for its capacity
};

}  // namespace

Result<RecoveryPlan> plan_recovery(io::FileSystem& fs, const std::string& wal_dir, std::uint32_t shard_count,
                                   const RecoveryBase& base, bool list_batches, bool replica_files) {
  if (shard_count == 0 || shard_count > kShardsMax) return make_error_code(errc::invalid_argument);
  Planner planner(fs, wal_dir, shard_count, base, list_batches, replica_files);
  return planner.run();
}

Result<void> apply_recovery(io::FileSystem& fs, const RecoveryPlan& plan) {
  if (plan.refused || plan.fresh) return make_error_code(errc::invalid_argument);
  // What this recovery returns must survive the next crash (P3). A previous
  // life's buffered writes may still sit unsynced in the page cache (its
  // fdatasync failed or never ran) and yet have been read as the chain, so
  // the chain's segments are synced before anything is built on them.
  for (const auto& segment : plan.segments) {
    if (segment.header_status != SegmentHeaderStatus::valid || segment.number > plan.write_segment) continue;
    if (std::find(plan.files_to_delete.begin(), plan.files_to_delete.end(), segment.path) !=
        plan.files_to_delete.end())
      continue;
    auto file = FUSEE_TRY(fs.open(segment.path, {.write = true}));
    FUSEE_TRY_VOID(file->sync_data());
  }
  for (const auto& path : plan.files_to_delete) {
    FUSEE_TRY_VOID(fs.remove(path));
    // One at a time, so the numbers left on disk never have a gap.
    FUSEE_TRY_VOID(fs.sync_dir(plan.wal_dir));
  }
  // Once more, even when nothing was removed: an earlier life of this boot
  // may have removed a file and stopped before its sync (killed, or the sync
  // failed and the caller opened again). The plan was read from a directory
  // without that file; until a sync makes the removal durable, a machine
  // crash brings it back under a log built as if it were gone. TLC found a
  // refusal that way (docs/spec.md, FuseeLogRestarts.cfg): a torn retired
  // header brought back behind a segment retired later.
  FUSEE_TRY_VOID(fs.sync_dir(plan.wal_dir));
  // Blobs written for batches that never joined the chain.
  if (!plan.blob_files_unreferenced.empty())
    FUSEE_TRY_VOID(delete_blob_files_except(fs, blob_dir_of(plan.wal_dir), plan.blob_files_referenced));
  return ok();
}

std::string blob_dir_of(const std::string& wal_dir) { return io::join_path(wal_dir, "blobs"); }

Result<std::vector<std::byte>> read_batch(io::File& file, std::uint64_t salt, std::uint64_t offset,
                                          std::uint32_t batch_bytes) {
  std::vector<std::byte> bytes(batch_bytes);
  FUSEE_TRY_VOID(read_padded(file, offset, bytes));
  auto header = decode_batch_header(bytes);
  if (!header || header->total_length != batch_bytes ||
      batch_crc(salt, bytes, header->body_length) != header->crc)
    return make_error_code(errc::corrupt);
  return bytes;
}

}  // namespace fusee::wal
