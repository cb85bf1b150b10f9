#include "backup/restore.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <set>

#include "backup/blob_pack.hpp"
#include "backup/manifest.hpp"
#include "backup/manifest_chain.hpp"
#include "backup/snapshot.hpp"
#include "base/assert.hpp"
#include "base/crc32c.hpp"
#include "engine/meta.hpp"
#include "engine/offline_dir.hpp"
#include "wal/blob_store.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"
#include "wal/segment_file.hpp"

namespace fusee::backup {
namespace {

// The preallocated size a segment's header names (0 when it does not read).
std::uint64_t segment_bytes_of(std::span<const std::byte> bytes) {
  if (bytes.size() < wal::kSegmentHeaderBytes) return 0;
  auto decoded = wal::decode_segment_header(bytes.first(wal::kSegmentHeaderBytes));
  return decoded.status == wal::SegmentHeaderStatus::valid ? decoded.header.segment_bytes : 0;
}

constexpr std::uint64_t block_floor(std::uint64_t at) { return at / io::kDirectAlignment * io::kDirectAlignment; }
constexpr std::uint64_t block_ceil(std::uint64_t at) { return block_floor(at + io::kDirectAlignment - 1); }

// A buffer aligned for direct writes and not zeroed first (AlignedBuffer's
// is): a restore fills it, and zeroing a 64 MiB segment costs as much as
// reading it back. In huge pages where the kernel gives them (transparent
// huge pages on request, Debian's default): the first touch of 64 MiB in
// 4 KiB pages is 16,384 page faults. Copying 100 MB into fresh 4 KiB pages
// took 80-95 ms here, into huge pages 38-48 ms, into pages already touched
// 28-33 ms; a restore of 135 MiB takes about 400 ms.
class SegmentBuffer {
 public:
  static constexpr std::uint64_t kHugePageBytes = 2 * 1024 * 1024;

  explicit SegmentBuffer(std::uint64_t size_bytes) : size_(block_ceil(std::max<std::uint64_t>(size_bytes, 1))) {
    const auto huge = (size_ + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    mapped_bytes_ = huge + kHugePageBytes;  // room to start on a huge page's boundary
    mapped_ = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped_ == MAP_FAILED) throw std::bad_alloc();
    const auto at = reinterpret_cast<std::uintptr_t>(mapped_);
    data_ = reinterpret_cast<std::byte*>((at + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
    (void)::madvise(data_, huge, MADV_HUGEPAGE);  // a hint: 4 KiB pages where refused
  }
  ~SegmentBuffer() { ::munmap(mapped_, mapped_bytes_); }
  SegmentBuffer(const SegmentBuffer&) = delete;
  SegmentBuffer& operator=(const SegmentBuffer&) = delete;

  std::byte* data() { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  std::uint64_t size_;
  std::uint64_t mapped_bytes_ = 0;
  void* mapped_ = nullptr;
  std::byte* data_ = nullptr;
};

// Writes a restored segment file, new, as its bytes arrive: each chunk's
// whole blocks while the next chunk is read, then the rest, synced. The
// file is preallocated to the size its header names (reserve), so past the
// last batch it reads as zeros without their being written -- the state of
// a segment the log created on a roll that found none prepared
// (wal::create_segment_unzeroed), whose first writes into unwritten extents
// are slower; a restore writes half a segment less, and its read-back and
// an open's scan past the end read no disk there. Direct writes where the
// file system takes them: buffered ones put every byte through the page
// cache and write it back at the sync, at a fraction of the disk's speed.
class SegmentWriter {
 public:
  static Result<SegmentWriter> create(io::FileSystem& fs, std::string path) {
    FUSEE_TRY_VOID(fs.open(path, {.write = true, .create = true, .exclusive = true}));
    bool direct = false;
    auto file = FUSEE_TRY(wal::open_segment_for_write(fs, path, true, &direct));
    return SegmentWriter(fs, std::move(path), std::move(file), direct);
  }
  // Preallocates the file to `size_bytes` (the header's size), once.
  Result<void> reserve(std::uint64_t size_bytes) {
    if (reserved_ || size_bytes == 0) return ok();
    FUSEE_TRY_VOID(file_->allocate(0, size_bytes));
    reserved_ = true;
    return ok();
  }
  // `buffer` holds the segment's bytes to `to`; [from, to) just arrived.
  Result<void> arrived(const std::byte* buffer, std::uint64_t from, std::uint64_t to) {
    if (from < written_) written_ = block_floor(from);  // a chunk written again after a failure starts earlier
    const auto stop = direct_ ? block_floor(to) : to;
    if (stop <= written_) return ok();
    FUSEE_TRY_VOID(put(written_, std::span(buffer + written_, stop - written_)));
    written_ = stop;
    return ok();
  }
  // The rest to `end` (`buffer` zeroed from there to its block's end), the
  // preallocation to `size_bytes`, and the sync.
  Result<void> finish(const std::byte* buffer, std::uint64_t end, std::uint64_t size_bytes) {
    FUSEE_TRY_VOID(reserve(size_bytes));
    if (end < written_) written_ = block_floor(end);
    const auto stop = direct_ ? block_ceil(end) : end;
    if (stop > written_) FUSEE_TRY_VOID(put(written_, std::span(buffer + written_, stop - written_)));
    return file_->sync_data();
  }

 private:
  SegmentWriter(io::FileSystem& fs, std::string path, std::unique_ptr<io::File> file, bool direct)
      : fs_(&fs), path_(std::move(path)), file_(std::move(file)), direct_(direct) {}
  Result<void> put(std::uint64_t at, std::span<const std::byte> bytes) {
    auto written = wal::write_fully(*file_, at, bytes, io::WriteFlags::none);
    if (written || !direct_ || written.error() != std::errc::invalid_argument) return written;
    // A direct open taken and its write refused: buffered from here on.
    direct_ = false;
    file_ = FUSEE_TRY(fs_->open(path_, {.write = true}));
    return wal::write_fully(*file_, at, bytes, io::WriteFlags::none);
  }
  io::FileSystem* fs_;
  std::string path_;
  std::unique_ptr<io::File> file_;
  bool direct_ = false;
  bool reserved_ = false;
  std::uint64_t written_ = 0;  // [0, written_) is in the file
};

// The segment after `segment_bytes`'s, whose last batch `roll` is the roll
// marker that points to it, as the log prepared it before writing the
// marker: a header continuing the chain (the marker's sequence + 1, its
// CRC), zeros past it to the same size. (Its salt is drawn afresh when the
// log prepares a segment; no batch of it is kept to be checked with it.)
Result<void> write_next_segment(io::FileSystem& fs, const std::string& wal_dir, std::span<const std::byte> segment_bytes,
                                const BatchRef& roll, std::string* problem) {
  auto header = wal::decode_segment_header(segment_bytes.first(wal::kSegmentHeaderBytes));
  if (header.status != wal::SegmentHeaderStatus::valid || roll.offset + wal::kBatchHeaderBytes > segment_bytes.size()) {
    if (problem) *problem = fmt::format("segment {}'s header or its roll marker at {} does not read", roll.segment, roll.offset);
    return std::make_error_code(std::errc::invalid_argument);
  }
  wal::SegmentHeader next;
  next.segment_number = roll.segment + 1;
  next.salt = header.header.salt ^ 0x9e3779b97f4a7c15ULL ^ roll.sequence;
  next.first_sequence = roll.sequence + 1;
  next.segment_bytes = header.header.segment_bytes;
  next.prev_crc = wal::load_u32(segment_bytes.data() + roll.offset + wal::batch_header_offset::crc);
  next.replicated = header.header.replicated;
  io::AlignedBuffer header_bytes(wal::kSegmentHeaderBytes);  // zeroed
  wal::encode_segment_header(next, std::span(header_bytes.data(), wal::kSegmentHeaderBytes));
  auto writer = FUSEE_TRY(
      SegmentWriter::create(fs, io::join_path(wal_dir, wal::segment_file_name(next.segment_number))));
  return writer.finish(header_bytes.data(), wal::kSegmentHeaderBytes, next.segment_bytes);
}

// The chunk of `chunks` (one segment's, in upload order) that holds byte
// `offset`: the last one written from at or before it.
const ChunkRef* chunk_holding(const std::vector<ChunkRef>& chunks, std::uint64_t offset) {
  const ChunkRef* holding = nullptr;
  for (const auto& chunk : chunks) {
    if (chunk.offset <= offset && offset < chunk.offset + chunk.bytes) holding = &chunk;
  }
  return holding;
}

// Checks every kept batch of one rebuilt segment as recovery will: its
// header where the manifest puts it, its CRC over the segment's salt, and
// the chain (each batch names the CRC of the one before, a segment's
// header the last of the segment before). A restore that kept a damaged
// batch would open a shorter log than promised and say nothing (recovery
// takes a bad last batch for a torn write), so damage is refused here,
// naming the object. `prev_crc`: the CRC of the batch before this
// segment's first kept one, when that was checked too.
Result<void> verify_batches(const BackupTarget& target, std::uint64_t segment, std::span<const std::byte> bytes,
                            std::span<const BatchRef> kept, const std::vector<ChunkRef>& chunks,
                            const std::map<std::string, std::string>& chunk_manifests,
                            std::optional<std::uint32_t>& prev_crc, std::string* problem) {
  auto fail = [&](const BatchRef& batch, const std::string& why) {
    const auto* chunk = chunk_holding(chunks, batch.offset);
    if (problem) {
      auto manifest = chunk ? chunk_manifests.find(chunk->name) : chunk_manifests.end();
      *problem = fmt::format("{}: batch {} (segment {} offset {}) in {}, as {} describes it, is damaged: {}",
                             target.describe(), batch.sequence, segment, batch.offset,
                             chunk ? chunk->name : std::string("no chunk"),
                             manifest != chunk_manifests.end() ? manifest->second : std::string("its manifest"), why);
    }
    return std::make_error_code(std::errc::invalid_argument);
  };
  auto header = wal::decode_segment_header(bytes.first(std::min(bytes.size(), wal::kSegmentHeaderBytes)));
  if (header.status != wal::SegmentHeaderStatus::valid) {
    if (problem) {
      const auto* chunk = chunk_holding(chunks, 0);
      *problem = fmt::format("{}: segment {}'s header in {} is damaged", target.describe(), segment,
                             chunk ? chunk->name : std::string("no chunk"));
    }
    return std::make_error_code(std::errc::invalid_argument);
  }
  for (const auto& batch : kept) {
    if (batch.offset == wal::kSegmentHeaderBytes && prev_crc && header.header.prev_crc != *prev_crc) {
      return fail(batch, "the segment's header does not continue the chain from the segment before");
    }
    if (batch.offset + batch.bytes > bytes.size()) return fail(batch, "it lies past the segment's bytes");
    auto at = bytes.subspan(batch.offset, batch.bytes);
    auto decoded = wal::decode_batch_header(at);
    if (!decoded) return fail(batch, "no batch header where the manifest puts it");
    if (decoded->sequence != batch.sequence || decoded->total_length != batch.bytes || decoded->flags != batch.flags) {
      return fail(batch, fmt::format("its header says sequence {}, {} bytes, flags {}", decoded->sequence,
                                     decoded->total_length, decoded->flags));
    }
    if (wal::kBatchHeaderBytes + decoded->body_length > at.size() ||
        wal::batch_crc(header.header.salt, at, decoded->body_length) != decoded->crc) {
      return fail(batch, "its CRC does not match its bytes");
    }
    if (prev_crc && decoded->prev_crc != *prev_crc) return fail(batch, "it does not continue the chain");
    prev_crc = decoded->crc;
  }
  return ok();
}

// Puts a chunk's large records back into the blob area, each at the file
// and offset its reference names (a blob file has no header; what lies
// between is never read).
Result<void> restore_blob_pack(io::FileSystem& fs, BackupTarget& target, const ChunkRef& chunk,
                               const std::string& manifest, const std::string& wal_dir,
                               std::set<std::uint64_t>& blob_files, std::string* problem, bool write,
                               std::uint64_t& bytes_read) {
  auto got = target.get(chunk.blob_pack);
  if (!got) {
    if (problem) {
      *problem = fmt::format("{}: blob pack {}, named with chunk {} by {}, does not read: {}", target.describe(),
                             chunk.blob_pack, chunk.name, manifest, got.error().message());
    }
    return got.error();
  }
  auto& object = *got;
  if (object) bytes_read += object->size();
  std::string why = "missing";
  auto blobs = object ? decode_blob_pack(*object, &why) : std::nullopt;
  if (!blobs) {
    if (problem) *problem = fmt::format("{}: blob pack {}: {}", target.describe(), chunk.blob_pack, why);
    return std::make_error_code(std::errc::invalid_argument);
  }
  if (!write) return ok();  // verify: the pack reads and its CRC holds
  const auto blob_dir = wal::blob_dir_of(wal_dir);
  if (!FUSEE_TRY(fs.exists(blob_dir))) FUSEE_TRY_VOID(fs.create_dir(blob_dir));
  for (const auto& blob : *blobs) {
    auto file = FUSEE_TRY(fs.open(io::join_path(blob_dir, wal::blob_file_name(blob.ref.file_number)),
                                  {.write = true, .create = true}));
    FUSEE_TRY_VOID(wal::write_durably(*file, blob.ref.offset, blob.bytes));
    blob_files.insert(blob.ref.file_number);
  }
  return ok();
}

// The log a restore writes back: the chain's batches from the first
// segment it needs, cut at the moment, and the chunks that hold them.
struct LogPlan {
  std::vector<BatchRef> batches;  // contiguous, up to the cut
  std::uint64_t left_out = 0;     // read, but published after the moment
  std::optional<std::int64_t> first_at_ms;  // the first batch's publication, cut or not
  std::map<std::uint64_t, std::vector<ChunkRef>> chunks;  // by segment, in upload order
  std::map<std::string, std::string> chunk_manifests;     // chunk name -> the manifest that names it
  // The manifest that would name the batches before the first one read,
  // when the target lacks it (removed, or retired): a hint for the
  // messages of bytes that are missing.
  std::string missing_before;
};

// Reads the manifests a restore needs, to serve the log from batch `from`
// (1: the whole log): back to the first that names a chunk of from's
// segment, then on until the moment. Nothing when the target's log does
// not hold batch `from` (retired, or never uploaded); an error, with
// `problem`, when it is damaged.
Result<std::optional<LogPlan>> plan_log(BackupTarget& target, ManifestChain& manifests, std::uint64_t from,
                                        std::optional<std::int64_t> to_ms, std::string* problem) {
  auto fail = [&](std::string why) {
    if (problem) *problem = std::move(why);
    return std::make_error_code(std::errc::invalid_argument);
  };
  LogPlan plan;
  if (manifests.names().empty()) {
    if (from == 1) return std::optional<LogPlan>(std::move(plan));  // nothing uploaded: an empty log
    return std::optional<LogPlan>();
  }
  auto found = FUSEE_TRY(manifests.start_of(from, problem));
  if (!found) return std::optional<LogPlan>();
  const auto start = found->index;
  const auto first_segment = found->segment;
  {
    const auto* first = FUSEE_TRY(manifests.at(start, problem));
    const auto before = first->batches.front().sequence;
    if (before > 1) {
      const auto expected = manifest_name(before - 1);
      const auto& names = manifests.names();
      if (std::none_of(names.begin(), names.end(), [&](const ManifestName& n) { return n.name == expected; })) {
        plan.missing_before = expected;
      }
    }
  }
  for (auto index = start; index < manifests.names().size(); ++index) {
    const auto* manifest = FUSEE_TRY(manifests.at(index, problem));
    auto first = manifest->batches.front().sequence;
    // A manifest written again after a failure names batches already seen.
    auto next = plan.batches.empty() ? first : plan.batches.back().sequence + 1;
    if (first > next) {
      return fail(fmt::format("{}: batches {} to {} are missing (manifest {} starts at {})", target.describe(), next,
                              first - 1, manifests.names()[index].name, first));
    }
    for (const auto& batch : manifest->batches) {
      if (batch.sequence >= next) plan.batches.push_back(batch);
    }
    for (const auto& chunk : manifest->chunks) {
      plan.chunks[chunk.segment].push_back(chunk);
      plan.chunk_manifests[chunk.name] = manifests.names()[index].name;
    }
    if (to_ms && manifest->batches.back().at_ms > *to_ms) break;  // the moment lies in it
  }
  if (plan.batches.empty() || plan.batches.front().sequence > from) return std::optional<LogPlan>();
  // Only the segments from batch `from`'s on.
  std::erase_if(plan.batches, [&](const BatchRef& batch) { return batch.segment < first_segment; });
  std::erase_if(plan.chunks, [&](const auto& entry) { return entry.first < first_segment; });
  // The cut: published at or before the moment. Publication follows the
  // chain, so it is a prefix.
  if (!plan.batches.empty()) plan.first_at_ms = plan.batches.front().at_ms;
  std::size_t keep = plan.batches.size();
  if (to_ms) {
    keep = 0;
    while (keep < plan.batches.size() && plan.batches[keep].at_ms <= *to_ms) ++keep;
  }
  plan.left_out = plan.batches.size() - keep;
  plan.batches.resize(keep);
  return std::optional<LogPlan>(std::move(plan));
}

// One way to restore: a snapshot (or none: the whole log) and the log it
// needs, cut at the moment.
struct Candidate {
  std::optional<Snapshot> snapshot;
  LogPlan plan;
};

// Chunks read at once: two keep a disk's queue busy while one is copied
// out. (The S3 target sends its requests one at a time on its connection:
// there the second waits for the first.)
constexpr int kFetchesAhead = 2;

// Writes `candidate` into `dir` (absent or empty). Damage on the target
// fails with invalid_argument and `problem` naming the object.
Result<RestoreSummary> write_restore(io::FileSystem& fs, BackupTarget& target, const std::string& dir,
                                     const Identity& identity, Candidate& candidate, std::string* problem,
                                     bool write = true) {
  auto fail = [&](std::string why) {
    if (problem) *problem = std::move(why);
    return std::make_error_code(std::errc::invalid_argument);
  };
  const auto& snapshot = candidate.snapshot;
  auto& plan = candidate.plan;
  const auto missing_hint =
      plan.missing_before.empty()
          ? std::string()
          : fmt::format(" ({}, which would name the bytes before, is missing)", plan.missing_before);
  auto described_by = [&](const std::string& chunk) {
    auto found = plan.chunk_manifests.find(chunk);
    return found == plan.chunk_manifests.end() ? std::string("its manifest") : found->second;
  };
  const auto& batches = plan.batches;
  auto& chunks = plan.chunks;
  const auto keep = batches.size();
  RestoreSummary summary;
  summary.shards = identity.shards;
  summary.batches = keep;
  summary.batches_left_out = plan.left_out;
  if (keep > 0) {
    summary.first_sequence = batches.front().sequence;
    summary.last_sequence = batches[keep - 1].sequence;
    summary.last_at_ms = batches[keep - 1].at_ms;
  }
  if (snapshot) summary.snapshot_sequence = snapshot->covers_sequence;
  // Each segment's bytes up to its last kept batch, from its chunks.
  std::map<std::uint64_t, std::uint64_t> ends;
  for (std::size_t i = 0; i < keep; ++i) {
    auto& end = ends[batches[i].segment];
    end = std::max(end, batches[i].offset + batches[i].bytes);
  }
  auto wal_dir = io::join_path(dir, "wal");
  if (write && !FUSEE_TRY(fs.exists(dir))) FUSEE_TRY_VOID(fs.create_dir(dir));
  // Nothing published by then: a directory with no log yet, which the
  // engine makes at open.
  if (write && keep > 0) FUSEE_TRY_VOID(fs.create_dir(wal_dir));
  // The run store's files go on their own thread beside the log: the two
  // share nothing, and a restore is as fast as its reads and writes overlap
  // (BackupTarget::get may be called from two threads at once). Declared
  // before the reads ahead below, so that an early return waits for those
  // first, then for this.
  std::string snapshot_problem;
  std::uint64_t snapshot_bytes = 0;
  std::future<Result<void>> snapshot_restored;
  if (snapshot) {
    snapshot_restored = std::async(std::launch::async, [&] {
      return restore_snapshot(fs, target, *snapshot, io::join_path(dir, "runs"), &snapshot_problem, write,
                              &snapshot_bytes);
    });
  }
  // The chunks read, in order, each fetched while the one before is checked
  // and written.
  std::vector<const ChunkRef*> order;
  for (const auto& [segment, end] : ends) {
    for (const auto& chunk : chunks[segment]) {
      if (chunk.offset >= end) break;
      order.push_back(&chunk);
    }
  }
  // A chunk as read, and its CRC-32C, taken on the reading thread too.
  struct Fetched {
    Result<std::optional<std::vector<std::byte>>> object;
    std::uint32_t crc32c = 0;
  };
  std::size_t fetched = 0;
  std::deque<std::future<Fetched>> ahead;  // kFetchesAhead at a time
  auto fetch_next = [&] {
    if (fetched == order.size()) return;
    const auto* chunk = order[fetched++];
    ahead.push_back(std::async(std::launch::async, [&target, chunk] {
      Fetched fetched{target.get(chunk->name)};
      if (fetched.object && *fetched.object) fetched.crc32c = crc32c(**fetched.object);
      return fetched;
    }));
  };
  for (int i = 0; i < kFetchesAhead; ++i) fetch_next();
  std::size_t taken = 0;
  std::set<std::uint64_t> blob_files;  // written, to sync
  std::optional<std::uint32_t> prev_crc;  // the last batch checked: the chain goes on from it
  // Each segment's bytes up to its last kept batch, in one buffer for all.
  std::uint64_t longest = 0;
  for (const auto& [segment, end] : ends) longest = std::max(longest, end);
  SegmentBuffer buffer(longest);
  for (const auto& [segment, end] : ends) {
    std::uint64_t filled = 0;  // bytes of it the chunks gave so far
    std::optional<SegmentWriter> writer;
    if (write) writer = FUSEE_TRY(SegmentWriter::create(fs, io::join_path(wal_dir, wal::segment_file_name(segment))));
    // The segment's writes, one at a time on their own thread: each chunk's
    // write overlaps the next chunk's read, check and copy. Declared after
    // the writer, so that an early return waits for the write in flight
    // before the writer goes.
    std::future<Result<void>> writing;
    std::uint64_t writing_to = 0;  // the write in flight reads the buffer below this
    auto written = [&]() -> Result<void> {
      if (!writing.valid()) return ok();
      writing_to = 0;
      return writing.get();
    };
    for (const auto& chunk : chunks[segment]) {
      if (chunk.offset >= end) break;
      if (chunk.offset > filled) {
        return fail(fmt::format("{}: segment {} lacks bytes {} to {}{}", target.describe(), segment, filled,
                                chunk.offset, missing_hint));
      }
      FUSEE_ASSERT(taken < order.size() && order[taken] == &chunk, "chunks are taken in the order they were fetched");
      ++taken;
      auto fetched_chunk = ahead.front().get();
      ahead.pop_front();
      fetch_next();
      auto& got = fetched_chunk.object;
      if (!got) {
        if (problem) {
          *problem = fmt::format("{}: chunk {}, named by {}, does not read: {}", target.describe(), chunk.name,
                                 described_by(chunk.name), got.error().message());
        }
        return got.error();
      }
      auto& object = *got;
      if (!object || object->size() != chunk.bytes) {
        return fail(fmt::format("{}: chunk {} is missing or not {} bytes (as {} says)", target.describe(), chunk.name,
                                chunk.bytes, described_by(chunk.name)));
      }
      summary.bytes_read += object->size();
      if (chunk.crc32c) {
        if (const auto crc = fetched_chunk.crc32c; crc != *chunk.crc32c) {
          return fail(fmt::format("{}: chunk {} is damaged: its CRC-32C is {:08x}, {} says {:08x}", target.describe(),
                                  chunk.name, crc, described_by(chunk.name), *chunk.crc32c));
        }
      }
      // (A chunk written again after a failure starts earlier: it wins.)
      const auto copied = std::min<std::uint64_t>(object->size(), end - chunk.offset);
      if (chunk.offset < writing_to) FUSEE_TRY_VOID(written());  // it would copy over bytes being written
      std::memcpy(buffer.data() + chunk.offset, object->data(), static_cast<std::size_t>(copied));
      filled = chunk.offset + object->size();
      if (writer) {
        if (chunk.offset == 0) {
          // (A header that does not read is refused below, by verify_batches.)
          if (const auto size = segment_bytes_of(std::span(buffer.data(), copied)); size > 0)
            FUSEE_TRY_VOID(writer->reserve(size));
        }
        FUSEE_TRY_VOID(written());
        writing_to = chunk.offset + copied;
        writing = std::async(std::launch::async, [&writer, &buffer, from = chunk.offset, to = writing_to] {
          return writer->arrived(buffer.data(), from, to);
        });
      }
      if (!chunk.blob_pack.empty()) {
        FUSEE_TRY_VOID(restore_blob_pack(fs, target, chunk, described_by(chunk.name), wal_dir, blob_files, problem,
                                         write, summary.bytes_read));
      }
    }
    if (filled < end) {
      return fail(fmt::format("{}: segment {} ends at byte {} in the backup, before its batches ({}){}",
                              target.describe(), segment, filled, end, missing_hint));
    }
    const auto bytes = std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(end));
    {
      std::vector<BatchRef> in_segment;
      for (std::size_t i = 0; i < keep; ++i) {
        if (batches[i].segment == segment) in_segment.push_back(batches[i]);
      }
      FUSEE_TRY_VOID(verify_batches(target, segment, bytes, in_segment, chunks[segment], plan.chunk_manifests,
                                    prev_crc, problem));
    }
    if (writer) {
      FUSEE_TRY_VOID(written());
      // Zeros past the last batch, to the size the header names: what a
      // segment the log prepared looks like past the batches a crash kept.
      std::memset(buffer.data() + end, 0, static_cast<std::size_t>(block_ceil(end) - end));
      FUSEE_TRY_VOID(writer->finish(buffer.data(), end, segment_bytes_of(bytes)));
    }
    ++summary.segments;
    const auto& last = batches[keep - 1];
    if (last.segment == segment && (last.flags & wal::kBatchFlagRoll) != 0 && !ends.contains(segment + 1)) {
      // The cut ends on a roll marker: the log made the next segment durable
      // before it wrote the marker, and recovery wants it there. The next
      // segment as the log prepared it: its header, zeros past it.
      if (write) FUSEE_TRY_VOID(write_next_segment(fs, wal_dir, bytes, last, problem));
      ++summary.segments;
    }
  }
  if (snapshot) {
    auto restored = snapshot_restored.get();
    summary.bytes_read += snapshot_bytes;
    if (!restored) {
      if (problem) *problem = snapshot_problem;
      return restored.error();
    }
  }
  if (!write) return summary;
  if (!blob_files.empty()) FUSEE_TRY_VOID(fs.sync_dir(wal::blob_dir_of(wal_dir)));
  if (keep > 0) FUSEE_TRY_VOID(fs.sync_dir(wal_dir));
  FUSEE_TRY_VOID(engine::write_meta(fs, dir, engine::Meta{engine::kMetaFormat, identity.shards, 0}));
  FUSEE_TRY_VOID(fs.sync_dir(io::parent_path(dir)));
  return summary;
}


// The ways to restore `target` to the moment, newest first: each snapshot
// before it whose log the target holds, then the whole log when the target
// holds it from the first batch. Refused (invalid_argument, `problem`)
// when there is none, or the moment lies before the first batch.
struct Ways {
  Identity identity;
  std::vector<Candidate> candidates;
};
Result<Ways> ways_to(BackupTarget& target, std::optional<std::int64_t> to_ms, std::string* problem) {
  auto fail = [&](std::string why) {
    if (problem) *problem = std::move(why);
    return std::make_error_code(std::errc::invalid_argument);
  };
  auto identity_bytes = FUSEE_TRY(target.get(kIdentityName));
  auto identity = identity_bytes ? parse_identity(*identity_bytes) : std::nullopt;
  if (!identity) return fail(fmt::format("{} holds no backup (no readable identity)", target.describe()));

  auto manifests = FUSEE_TRY(ManifestChain::list(target, identity->directory, problem));
  std::vector<Candidate> candidates;
  auto snapshots = FUSEE_TRY(target.list(kSnapshotPrefix));
  for (auto name = snapshots.rbegin(); name != snapshots.rend(); ++name) {
    auto bytes = FUSEE_TRY(target.get(*name));
    auto snapshot = bytes ? parse_snapshot(*bytes) : std::nullopt;
    if (!snapshot || snapshot->directory != identity->directory) {
      return fail(fmt::format("{}: {} does not read, or is another directory's than the one {} names ({})",
                              target.describe(), *name, kIdentityName, identity->directory));
    }
    if (to_ms && snapshot->covers_at_ms > *to_ms) continue;
    auto log = FUSEE_TRY(plan_log(target, manifests, snapshot->from_sequence, to_ms, problem));
    // Usable when the log on the target reaches every checkpoint in it.
    if (!log || log->batches.empty() || log->batches.back().sequence < snapshot->covers_sequence) continue;
    candidates.push_back(Candidate{std::move(snapshot), std::move(*log)});
  }
  auto whole = FUSEE_TRY(plan_log(target, manifests, 1, to_ms, problem));
  if (whole) {
    if (to_ms && whole->batches.empty() && whole->first_at_ms && candidates.empty()) {
      // Before the directory's first batch (a moment in seconds read as ms
      // lands in 1970): restoring nothing would look like success.
      return fail(fmt::format("{}: the moment ({} ms since the epoch) is before the first batch it holds (published "
                              "at {} ms): there is nothing to restore to then",
                              target.describe(), *to_ms, *whole->first_at_ms));
    }
    candidates.push_back(Candidate{std::nullopt, std::move(*whole)});
  }
  if (candidates.empty()) {
    return fail(fmt::format("{} holds no snapshot before the moment whose log it also holds, and its log does not "
                            "start at the directory's first batch: it cannot be restored to that moment",
                            target.describe()));
  }
  return Ways{std::move(*identity), std::move(candidates)};
}

// The restore itself, into `dir` (absent or empty): the newest snapshot
// before the moment whose log the target holds, else the whole log; a
// damaged one is skipped for the next older (said in the summary), and
// what was written must pass the checks an engine's open makes (read
// only) before the restore succeeds.
Result<RestoreSummary> restore_into(io::FileSystem& fs, BackupTarget& target, const std::string& dir,
                                    std::optional<std::int64_t> to_ms, std::string* problem) {
  auto fail = [&](std::string why) {
    if (problem) *problem = std::move(why);
    return std::make_error_code(std::errc::invalid_argument);
  };
  auto found = FUSEE_TRY(ways_to(target, to_ms, problem));
  auto& [identity, candidates] = found;
  std::vector<std::string> skipped;
  for (auto& candidate : candidates) {
    const auto what = candidate.snapshot ? fmt::format("snapshot {}", snapshot_name(candidate.snapshot->covers_sequence))
                                         : std::string("the whole log");
    std::string why;
    auto written = write_restore(fs, target, dir, identity, candidate, &why);
    if (written) {
      // What an engine's open would refuse, found now: read only.
      auto offline = engine::read_offline_dir(fs, dir);
      if (!offline) {
        why = fmt::format("the restored directory does not read: {}", offline.error().message());
        written = offline.error();
      } else if (!offline->refusal.empty()) {
        why = fmt::format("the restored directory would not open: {}", offline->refusal);
        written = std::make_error_code(std::errc::invalid_argument);
      }
    }
    if (written) {
      written->skipped = std::move(skipped);
      return written;
    }
    // Nothing of this attempt stays for the next.
    if (auto names = fs.list(dir)) {
      for (const auto& name : *names) (void)io::remove_tree(fs, io::join_path(dir, name));
    }
    if (why.empty()) why = written.error().message();
    if (written.error() != std::make_error_code(std::errc::invalid_argument)) {
      if (problem) *problem = why;
      return written.error();
    }
    skipped.push_back(fmt::format("{}: {}", what, why));
  }
  std::string all;
  for (const auto& line : skipped) all += (all.empty() ? "" : "; then ") + line;
  return fail(all);
}

}  // namespace

Result<VerifySummary> verify_target(io::FileSystem& fs, BackupTarget& target, std::optional<std::int64_t> to_ms,
                                    std::string* problem) {
  auto found = FUSEE_TRY(ways_to(target, to_ms, problem));
  VerifySummary summary;
  summary.shards = found.identity.shards;
  for (auto& candidate : found.candidates) {
    VerifiedWay way;
    way.way = candidate.snapshot ? snapshot_name(candidate.snapshot->covers_sequence) : std::string("the whole log");
    std::string why;
    auto checked = write_restore(fs, target, std::string(), found.identity, candidate, &why, /*write=*/false);
    if (!checked) {
      if (problem) *problem = fmt::format("{}: {}", way.way, why.empty() ? checked.error().message() : why);
      return checked.error();
    }
    way.from_ms = candidate.snapshot ? candidate.snapshot->covers_at_ms : candidate.plan.first_at_ms.value_or(0);
    way.first_sequence = checked->first_sequence;
    way.last_sequence = checked->last_sequence;
    way.last_at_ms = checked->last_at_ms;
    way.batches = checked->batches;
    summary.ways.push_back(std::move(way));
  }
  return summary;
}

Result<RestoreSummary> restore_directory(io::FileSystem& fs, BackupTarget& target, const std::string& dir,
                                         std::optional<std::int64_t> to_ms, std::string* problem) {
  const auto parent = io::parent_path(dir);
  if (!parent.empty() && !FUSEE_TRY(fs.exists(parent))) {
    if (problem) *problem = fmt::format("{}: its parent directory {} does not exist", dir, parent);
    return std::make_error_code(std::errc::no_such_file_or_directory);
  }
  const bool existed = FUSEE_TRY(fs.exists(dir));
  if (existed && !FUSEE_TRY(fs.list(dir)).empty()) {
    if (problem) *problem = fmt::format("{} is not empty: a restore makes a new data directory", dir);
    return std::make_error_code(std::errc::invalid_argument);
  }
  auto restored = restore_into(fs, target, dir, to_ms, problem);
  if (!restored) {
    // What it wrote goes: a half-restored directory (a log without its run
    // store, or no fusee.meta) must not be opened by mistake.
    if (existed) {
      if (auto names = fs.list(dir)) {
        for (const auto& name : *names) (void)io::remove_tree(fs, io::join_path(dir, name));
      }
    } else {
      (void)io::remove_tree(fs, dir);
    }
  }
  return restored;
}

}  // namespace fusee::backup
