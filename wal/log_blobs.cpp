// The shared log's side of the blob area: staging a large record's reference
// (held back in its shard) and the blob thread that writes and syncs the
// bytes, then lets the reference into a batch. Part of class Log
// (wal/log.hpp); the blob files themselves are wal/blob_store.hpp.
#include <array>

#include "wal/errc.hpp"
#include "wal/log.hpp"

namespace fusee::wal {

Result<Lsn> Log::append_blob(ShardId shard, std::span<const std::byte> record) {
  // The reference (place and CRC) is made here, on the appender's thread, so
  // the blob thread only writes; below the threshold this costs nothing.
  // From here until the reference is staged below, only the reservation
  // itself keeps retirement away from the blob's file (BlobWriter::in_use).
  auto ref = FUSEE_TRY(blobs_->reserve(record));
  if (options_.after_blob_reserved) options_.after_blob_reserved(ref.file_number);
  std::array<std::byte, kBlobRefBytes> ref_bytes;
  encode_blob_ref(ref, ref_bytes.data());
  auto encoded_bytes = varint_length(record_prefix(kBlobRefBytes, true)) + kBlobRefBytes;
  // The blob's bytes wait in memory too, so they count against the bound.
  auto charged_bytes = encoded_bytes + record.size();
  Lsn lsn = 0;
  {
    std::lock_guard lock(mu_);
    std::error_code refused;
    if (poison_)
      refused = make_error_code(errc::poisoned);
    else if (closing_)
      refused = make_error_code(errc::closed);
    else if (staged_bytes_ + charged_bytes > options_.staged_bytes_max)
      refused = make_error_code(errc::queue_full);
    if (refused) {
      blobs_->release(ref);
      return refused;
    }
    auto& stage = stages_[shard];
    // A reference counts against its group's bound like any record.
    (void)fits_open_group_locked(shard, encoded_bytes);
    lsn = stage.push(ref_bytes, /*blob_ref=*/true);
    stage.block(lsn);
    unpublished_blob_refs_[shard][lsn] = ref.file_number;
    ++blobs_pending_;
    staged_bytes_ += charged_bytes;
    ++staged_records_;
    blob_jobs_.push_back({shard, lsn, ref, std::vector<std::byte>(record.begin(), record.end())});
  }
  blob_cv_.notify_one();
  return lsn;
}

void Log::blob_loop() {
  for (;;) {
    BlobJob job;
    {
      std::unique_lock lock(mu_);
      blob_cv_.wait(lock, [&] { return stopping_ || poison_ || !blob_jobs_.empty(); });
      if (stopping_ || poison_) return;
      job = std::move(blob_jobs_.front());
      blob_jobs_.pop_front();
    }
    auto written = blobs_->write(job.ref, job.bytes);
    std::lock_guard lock(mu_);
    // Poisoned meanwhile: poison_locked dropped the job's stage and reset
    // the counters this job would take back.
    if (poison_) return;
    if (!written) {
      poison_locked(written.error());
      return;
    }
    // The reference may now enter a batch, and with it the shard's later records.
    stages_[job.shard].unblock(job.lsn);
    --blobs_pending_;
    staged_bytes_ -= job.bytes.size();
    ++stats_.blobs_written;
    work_cv_.notify_all();
    shard_durable_cvs_[job.shard].notify_all();
    if (queue_) queue_->wake();
  }
}

}  // namespace fusee::wal
