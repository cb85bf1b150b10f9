// Retirement: removing segments (and the blob files only they reference)
// once checkpoints cover every record in them (DESIGN.md §3, "Checkpoints
// and retirement"). The log only carries out what the checkpointer decides.
//
// Order, so that a crash anywhere leaves a directory recovery accepts:
// 1. zero the oldest segment's header and sync it: from then on recovery
//    treats the file as retired and deletes it (a zeroed leading segment);
// 2. remove the file and sync the directory: the numbers left have no gap;
// 3. remove each blob file referenced only by retired batches and sync the
//    blob directory: recovery deletes any left over as unreferenced.
#include <algorithm>

#include "wal/errc.hpp"
#include "wal/log.hpp"
#include "wal/segment_file.hpp"

namespace fusee::wal {

void Log::note_blob_refs_published(ShardId shard, Lsn first, Lsn last, std::uint64_t segment) {
  auto& refs = unpublished_blob_refs_[shard];
  auto it = refs.lower_bound(first);
  while (it != refs.end() && it->first <= last) {
    auto& newest = blob_file_last_segment_[it->second];
    newest = std::max(newest, segment);
    it = refs.erase(it);
  }
}

std::uint64_t Log::keep_from_sequence(ShardId shard, Lsn lsn) const {
  std::lock_guard lock(mu_);
  if (shard >= index_.size()) return published_sequence_ + 1;
  const auto& index = index_[shard];
  auto next = lsn + 1;
  auto it = std::upper_bound(index.begin(), index.end(), next,
                             [](Lsn value, const SectionLocation& s) { return value < s.first_lsn; });
  if (it != index.begin()) {
    --it;
    if (next < it->first_lsn + it->record_count) return it->sequence;
  }
  // lsn + 1 is not durable yet: any batch holding it comes after the last
  // published one.
  return published_sequence_ + 1;
}

std::uint64_t Log::oldest_segment_retires_at() const {
  std::lock_guard lock(mu_);
  if (read_segments_.size() < 2) return 0;
  return read_segments_[1].first_sequence;
}

void Log::set_roll_hook(std::function<void(std::uint64_t)> hook) {
  std::lock_guard lock(mu_);
  roll_hook_ = std::move(hook);
}

Result<RetireStats> Log::retire(std::uint64_t keep_from_sequence,
                                const std::function<Result<void>()>& before_retiring) {
  std::lock_guard retire_lock(retire_mu_);
  RetireStats stats;
  std::uint64_t retired_through = 0;
  bool prepared = !before_retiring;
  for (;;) {
    Segment oldest;
    {
      std::lock_guard lock(mu_);
      if (poison_) return poison_;
      // Never past what is published: a batch still in flight to a segment
      // must not find its header zeroed (a caller's keep_from comes from
      // keep_from_sequence, which never exceeds this; a wrong one would).
      keep_from_sequence = std::min(keep_from_sequence, published_sequence_ + 1);
      const bool due =
          retiring_ || (read_segments_.size() >= 2 && read_segments_[1].first_sequence <= keep_from_sequence);
      if (!due) break;
      if (!prepared) {
        // Outside mu_ (it may sync a disk), then decide again. What it
        // makes durable was written before this call, so it covers
        // whatever keep_from_sequence lets go however the log rolled since.
      } else if (retiring_) {
        // An earlier call failed part-way through this segment: it goes
        // first, or a later segment would go before it and leave a gap (or
        // a live segment behind a zeroed one) that recovery must refuse.
        oldest = *retiring_;
      } else {
        // The segment being written is always the newest; it never retires.
        if (read_segments_.size() < 2 || read_segments_[1].first_sequence > keep_from_sequence) break;
        oldest = read_segments_.front();
        retiring_ = oldest;
        // Reads stop using it before it changes.
        read_segments_.erase(read_segments_.begin());
        for (auto& index : index_) {
          auto end = std::find_if(index.begin(), index.end(),
                                  [&](const SectionLocation& s) { return s.segment != oldest.number; });
          index.erase(index.begin(), end);
        }
      }
    }
    if (!prepared) {
      FUSEE_TRY_VOID(before_retiring());
      prepared = true;
      continue;
    }
    stats.bytes += FUSEE_TRY(retire_segment_file(oldest.number));
    ++stats.segments;
    retired_through = oldest.number;
    std::lock_guard lock(mu_);
    retiring_.reset();
    ++stats_.segments_retired;
  }
  if (retired_through > 0) FUSEE_TRY_VOID(retire_blob_files(retired_through, stats));
  return stats;
}

Result<std::uint64_t> Log::retire_segment_file(std::uint64_t number) {
  // Each step may have been done by a call that failed after it: a file
  // already removed is only left for the directory sync.
  auto path = io::join_path(wal_dir_, segment_file_name(number));
  std::uint64_t bytes = 0;
  if (FUSEE_TRY(fs_.exists(path))) {
    {
      auto file = FUSEE_TRY(fs_.open(path, {.write = true}));
      bytes = FUSEE_TRY(file->size());
      io::AlignedBuffer zeros(kSegmentHeaderBytes);
      std::fill(zeros.span().begin(), zeros.span().end(), std::byte{0});
      FUSEE_TRY_VOID(write_fully(*file, 0, zeros.span(), io::WriteFlags::none));
      FUSEE_TRY_VOID(file->sync_data());
    }
    FUSEE_TRY_VOID(fs_.remove(path));
  }
  FUSEE_TRY_VOID(fs_.sync_dir(wal_dir_));
  return bytes;
}

Result<void> Log::retire_blob_files(std::uint64_t retired_through_segment, RetireStats& stats) {
  std::vector<std::uint64_t> doomed;
  {
    std::lock_guard lock(mu_);
    // Every blob is in one of three places while it may still be
    // referenced, and each move between them happens under mu_ or before
    // the next place is left: reserved in blobs_ (until write() or
    // release(), which come after the reference is in
    // unpublished_blob_refs_), staged in unpublished_blob_refs_ (until
    // published, under mu_), then in blob_file_last_segment_. Reading all
    // three under mu_ sees every blob in at least one. A file doomed here
    // gets no new blob: reserve() places only in the current file, and
    // file numbers only grow.
    for (const auto& [file, newest] : blob_file_last_segment_) {
      if (newest > retired_through_segment) continue;
      if (blobs_ && blobs_->in_use(file)) continue;
      bool pending = false;
      for (const auto& refs : unpublished_blob_refs_) {
        for (const auto& [lsn, ref_file] : refs) pending = pending || ref_file == file;
      }
      if (!pending) doomed.push_back(file);
    }
  }
  auto blob_dir = blob_dir_of(wal_dir_);
  for (auto file : doomed) {
    auto path = io::join_path(blob_dir, blob_file_name(file));
    if (FUSEE_TRY(fs_.exists(path))) {
      auto handle = FUSEE_TRY(fs_.open(path, {}));
      stats.bytes += FUSEE_TRY(handle->size());
      FUSEE_TRY_VOID(fs_.remove(path));
      FUSEE_TRY_VOID(fs_.sync_dir(blob_dir));
    }
    ++stats.blob_files;
    std::lock_guard lock(mu_);
    blob_file_last_segment_.erase(file);
    ++stats_.blob_files_retired;
  }
  return ok();
}

}  // namespace fusee::wal
