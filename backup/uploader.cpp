#include "backup/uploader.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "backup/blob_pack.hpp"
#include "base/crc32c.hpp"
#include "backup/retention.hpp"
#include "backup/snapshot.hpp"
#include "wal/blob_store.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"
#include "wal/segment_file.hpp"

namespace fusee::backup {
namespace {

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

}  // namespace

Uploader::Uploader(io::FileSystem& fs, wal::Log& log, std::string wal_dir, BackupTarget& target, Identity identity,
                   UploaderOptions options)
    : fs_(fs),
      log_(log),
      wal_dir_(std::move(wal_dir)),
      target_(target),
      identity_(std::move(identity)),
      options_(std::move(options)),
      started_ms_(now_ms()) {}

std::int64_t Uploader::now_ms() const {
  if (options_.now_ms) return options_.now_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<std::unique_ptr<Uploader>> Uploader::start(io::FileSystem& fs, wal::Log& log, std::string wal_dir,
                                                  BackupTarget& target, Identity identity, UploaderOptions options,
                                                  std::string* problem) {
  std::unique_ptr<Uploader> uploader(
      new Uploader(fs, log, std::move(wal_dir), target, std::move(identity), std::move(options)));
  {
    std::lock_guard upload_lock(uploader->upload_mu_);
    std::string refusal;
    if (auto connected = uploader->connect_locked(&refusal); !connected) {
      if (!refusal.empty()) {
        if (problem) *problem = std::move(refusal);
        return connected.error();
      }
      // Unreachable: the engine goes on; the log keeps everything until
      // the target answers and the loop connects.
      uploader->note_failure_locked("connecting to", connected.error());
    }
  }
  uploader->thread_ = std::thread([raw = uploader.get()] { raw->loop(); });
  return uploader;
}

Result<void> Uploader::connect_locked(std::string* refusal) {
  auto refuse = [&](std::string why) {
    *refusal = std::move(why);
    return std::make_error_code(std::errc::operation_not_permitted);
  };
  // The target is this directory's, or nobody's yet.
  auto known = FUSEE_TRY(target_.get(kIdentityName));
  if (!known) {
    auto json = identity_json(identity_);
    (void)FUSEE_TRY(target_.put_new(kIdentityName, bytes_of(json)));
    known = FUSEE_TRY(target_.get(kIdentityName));  // ours, or the one that won
  }
  if (known) {
    auto theirs = parse_identity(*known);
    if (!theirs) return refuse(fmt::format("{} holds an identity that does not read", target_.describe()));
    if (theirs->directory != identity_.directory) {
      return refuse(fmt::format("{} is the backup of another data directory (backup id {}, this one's is {}): a "
                                "target takes one directory; the backup stops",
                                target_.describe(), theirs->directory, identity_.directory));
    }
    if (theirs->shards != identity_.shards) {
      return refuse(fmt::format("{} holds a backup of {} shards; this directory has {} (resharded?): back it up to "
                                "a new target",
                                target_.describe(), theirs->shards, identity_.shards));
    }
  }
  // Where the target ends.
  std::uint64_t covered = 0;
  std::int64_t covered_at_ms = 0;
  std::map<std::uint64_t, std::uint64_t> uploaded_end;
  auto manifests = FUSEE_TRY(target_.list(kManifestPrefix));
  if (!manifests.empty()) {
    auto bytes = FUSEE_TRY(target_.get(manifests.back()));
    auto last = bytes ? parse_manifest(*bytes) : std::nullopt;
    if (!last) return refuse(fmt::format("{}: manifest {} does not read", target_.describe(), manifests.back()));
    if (last->directory != identity_.directory) {
      return refuse(fmt::format("{}: manifest {} is another data directory's ({}): the backup stops",
                                target_.describe(), manifests.back(), last->directory));
    }
    covered = last->batches.back().sequence;
    covered_at_ms = last->batches.back().at_ms;
    for (const auto& chunk : last->chunks) {
      auto& end = uploaded_end[chunk.segment];
      end = std::max(end, chunk.offset + chunk.bytes);
    }
  }
  // The newest snapshot, and the store's table files already there.
  std::set<std::string> tables;
  std::uint64_t snapshot_covers = 0;
  std::int64_t snapshot_at_ms = 0;
  if (options_.store) {
    auto snapshots = FUSEE_TRY(target_.list(kSnapshotPrefix));
    if (!snapshots.empty()) {
      auto bytes = FUSEE_TRY(target_.get(snapshots.back()));
      auto newest = bytes ? parse_snapshot(*bytes) : std::nullopt;
      if (!newest) return refuse(fmt::format("{}: {} does not read", target_.describe(), snapshots.back()));
      if (newest->directory != identity_.directory) {
        return refuse(fmt::format("{}: {} is another data directory's ({}): the backup stops", target_.describe(),
                                  snapshots.back(), newest->directory));
      }
      snapshot_covers = newest->covers_sequence;
      snapshot_at_ms = newest->covers_at_ms;
    }
    for (auto& name : FUSEE_TRY(target_.list(kStoreTablePrefix))) tables.insert(std::move(name));
  }
  const auto& plan = log_.recovery_plan();
  const bool gap = !plan.batches.empty() && plan.batches.front().sequence > covered + 1;
  if (gap && !options_.store) {
    return refuse(fmt::format("the log starts at batch {} and {} ends at batch {}: the batches in between were "
                              "retired without a backup (a backup that takes no snapshots of the run store "
                              "needs the whole log)",
                              plan.batches.front().sequence, target_.describe(), covered));
  }
  if (covered > plan.last_sequence) {
    return refuse(fmt::format("{} holds batches up to {}, past this log's end ({}): a restored directory backs up "
                              "to a new target",
                              target_.describe(), covered, plan.last_sequence));
  }
  // What the log holds past the target: published before a crash (or
  // since the open, while the target did not answer), oldest first.
  uploaded_end_ = std::move(uploaded_end);
  std::vector<BatchRef> pending;
  for (const auto& batch : plan.batches) {
    if (batch.sequence <= covered) continue;
    pending.push_back(
        BatchRef{batch.sequence, batch.segment, batch.offset, batch.total_length, batch.flags, covered_at_ms});
  }
  if (!pending.empty()) unknown_time_through_ = pending.back().sequence;
  pending.insert(pending.end(), pending_.begin(), pending_.end());
  pending_ = std::move(pending);
  connected_ = true;
  tables_ = std::move(tables);
  snapshot_covers_ = snapshot_covers;
  snapshot_at_ms_ = snapshot_at_ms;
  // The first upload takes one when the target has none, or when the log
  // here starts past the target's end: retired without a backup, it
  // restores only from a snapshot taken now.
  snapshot_due_ = options_.store != nullptr && (snapshot_covers == 0 || gap);
  std::lock_guard lock(mu_);
  stats_.snapshot_sequence = snapshot_covers;
  stats_.snapshot_at_ms = snapshot_at_ms;
  stats_.covered_sequence = covered;
  stats_.covered_at_ms = covered_at_ms;
  stats_.pending_batches = pending_.size();
  stats_.connected = true;
  return ok();
}

Uploader::~Uploader() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t Uploader::covered_sequence() const {
  std::lock_guard lock(mu_);
  return stats_.covered_sequence;
}

UploaderStats Uploader::stats() const {
  const auto published = log_.published_sequence();  // (the log's lock, not ours)
  const auto now = now_ms();
  std::lock_guard lock(mu_);
  auto stats = stats_;
  stats.backlog_full = backlog_full_.load();
  // The batches not on the target, counted from the log's end and the
  // target's, not from what the uploader holds: an upload under way (an
  // S3 call that hangs) took them out of its queue and has not covered
  // them yet.
  if (stats.connected) stats.pending_batches = published > stats.covered_sequence ? published - stats.covered_sequence : 0;
  if (published > stats.covered_sequence) {
    stats.loss_window_ms = std::max<std::int64_t>(0, now - (stats.covered_at_ms > 0 ? stats.covered_at_ms : started_ms_));
  }
  if (!lags_ms_.empty()) {
    auto lags = lags_ms_;
    std::sort(lags.begin(), lags.end());
    auto at = [&](double q) { return lags[std::min(lags.size() - 1, static_cast<std::size_t>(q * lags.size()))]; };
    stats.lag_p50_ms = at(0.50);
    stats.lag_p99_ms = at(0.99);
    stats.lag_max_ms = lags.back();
  }
  return stats;
}

void Uploader::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, options_.interval, [&] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    (void)upload_now();  // a failure is counted and told; the next interval tries again
    lock.lock();
  }
}

Result<void> Uploader::finish() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard upload_lock(upload_mu_);
  return upload_pending_locked(/*everything=*/true);
}

Result<void> Uploader::upload_now() {
  std::lock_guard upload_lock(upload_mu_);
  return upload_pending_locked(/*everything=*/false);
}

Result<void> Uploader::upload_pending_locked(bool everything) {
  if (stopped_) return std::make_error_code(std::errc::operation_not_permitted);
  auto published = log_.take_published();
  pending_.insert(pending_.end(), published.begin(), published.end());
  if (!connected_) {
    std::string refusal;
    if (auto connected = connect_locked(&refusal); !connected) {
      if (!refusal.empty()) {
        stop_locked(refusal);
      } else {
        note_failure_locked("connecting to", connected.error());
      }
      return connected.error();
    }
  }
  if (auto checked = check_target_locked(); !checked) {
    if (checked.error() == std::make_error_code(std::errc::operation_not_permitted)) return checked.error();
    note_failure_locked("checking", checked.error());
    return checked.error();
  }
  auto uploaded = upload_locked(everything);
  if (uploaded) {
    {
      std::lock_guard lock(mu_);
      stats_.error.clear();
      note_backlog_locked(0);
    }
    maybe_snapshot_locked();
    return ok();
  }
  if (uploaded.error() == std::make_error_code(std::errc::operation_not_permitted)) return uploaded.error();
  note_failure_locked("uploading to", uploaded.error());
  return uploaded.error();
}

void Uploader::note_failure_locked(const char* doing, std::error_code error) {
  std::uint64_t backlog = 0;
  for (const auto& batch : pending_) backlog += batch.bytes;
  std::lock_guard lock(mu_);
  stats_.pending_batches = pending_.size();
  ++stats_.failures;
  bool first = stats_.error.empty();
  stats_.error = fmt::format("{} {}: {}", doing, target_.describe(), error.message());
  if (first && options_.warn) {
    options_.warn(fmt::format("backup: {}; trying again every {} ms, and the log keeps every segment meanwhile",
                              stats_.error, options_.interval.count()));
  }
  note_backlog_locked(backlog);
}

void Uploader::maybe_snapshot_locked() {
  if (!options_.store || stopped_) return;
  const auto now = now_ms();
  const bool due = snapshot_due_ || log_bytes_since_snapshot_ >= options_.snapshot_log_bytes ||
                   (log_bytes_since_snapshot_ > 0 && now - snapshot_at_ms_ >= options_.snapshot_interval.count());
  if (!due || now < snapshot_retry_at_ms_) {
    maybe_retire_locked(false);
    return;
  }
  std::string problem;
  auto taken = take_snapshot(fs_,
                             SnapshotSource{*options_.store, identity_.shards,
                                            [this] { return log_.published_sequence(); },
                                            [this] {
                                              // At or after the time of the batch it covers
                                              // (the times are monotonic; the clock may not be).
                                              std::int64_t covered_at = 0;
                                              {
                                                std::lock_guard lock(mu_);
                                                covered_at = stats_.covered_at_ms;
                                              }
                                              return std::max({now_ms(), log_.published_at_ms(), covered_at});
                                            }},
                             target_, identity_.directory, tables_, table_crcs_, &problem);
  if (!taken) {
    if (!problem.empty()) {
      stop_locked(problem);
      return;
    }
    snapshot_retry_at_ms_ = now + options_.snapshot_retry.count();
    note_failure_locked("taking a snapshot of the run store to", taken.error());
    return;
  }
  if (!*taken) return;  // nothing published yet
  snapshots_read_.emplace((*taken)->name, (*taken)->snapshot);
  snapshot_due_ = false;
  log_bytes_since_snapshot_ = 0;
  snapshot_covers_ = (*taken)->snapshot.covers_sequence;
  snapshot_at_ms_ = (*taken)->snapshot.covers_at_ms;
  {
    std::lock_guard lock(mu_);
    ++stats_.snapshots;
    stats_.bytes += (*taken)->bytes;
    stats_.snapshot_sequence = snapshot_covers_;
    stats_.snapshot_at_ms = snapshot_at_ms_;
  }
  maybe_retire_locked(true);
}

void Uploader::maybe_retire_locked(bool snapshot_taken) {
  if (options_.retention.count() <= 0 || stopped_) return;
  const auto now = now_ms();
  if (!snapshot_taken && now < retention_next_ms_) return;
  retention_next_ms_ = now + options_.retention_check.count();
  std::string problem;
  auto retired = retire_before(target_, identity_.directory, now - options_.retention.count(), snapshots_read_,
                               tables_, &problem);
  if (!retired) {
    // Tried again at the next check; nothing a restore needs is gone.
    if (options_.warn) {
      options_.warn(fmt::format("backup: retention on {} failed: {}", target_.describe(),
                                problem.empty() ? retired.error().message() : problem));
    }
    std::lock_guard lock(mu_);
    ++stats_.failures;
    return;
  }
  std::lock_guard lock(mu_);
  stats_.retired_objects += retired->objects;
}

void Uploader::note_backlog_locked(std::uint64_t backlog_bytes) {
  stats_.backlog_bytes = backlog_bytes;
  const bool full = options_.backlog_bytes_max > 0 && backlog_bytes > options_.backlog_bytes_max;
  if (full == backlog_full_.load()) return;
  backlog_full_ = full;
  if (!options_.warn) return;
  if (full) {
    options_.warn(fmt::format("backup: {} bytes of the log are not on {} yet, past backup_backlog_bytes_max ({}): "
                              "new requests are refused (busy) until the backup catches up; runs in flight go on",
                              backlog_bytes, target_.describe(), options_.backlog_bytes_max));
  } else {
    options_.warn(fmt::format("backup: the backlog is uploaded; new requests are taken again"));
  }
}

Result<void> Uploader::check_target_locked() {
  const auto now = now_ms();
  if (target_checked_at_ms_ != INT64_MIN && now - target_checked_at_ms_ < options_.target_check.count() &&
      now >= target_checked_at_ms_) {
    return ok();
  }
  auto identity_bytes = FUSEE_TRY(target_.get(kIdentityName));
  auto identity = identity_bytes ? parse_identity(*identity_bytes) : std::nullopt;
  std::string lost;
  if (!identity) {
    lost = fmt::format("its {} object is gone or does not read", kIdentityName);
  } else if (identity->directory != identity_.directory || identity->shards != identity_.shards) {
    lost = fmt::format("its identity is now another directory's ({})", identity->directory);
  } else {
    std::uint64_t covered = 0;
    {
      std::lock_guard lock(mu_);
      covered = stats_.covered_sequence;
    }
    if (covered > 0 && !FUSEE_TRY(target_.get(manifest_name(covered)))) {
      lost = fmt::format("{}, the newest manifest this directory uploaded, is gone", manifest_name(covered));
    }
  }
  if (!lost.empty()) {
    stop_locked(fmt::format("{} no longer holds this directory's backup: {} (emptied, replaced, or a retention "
                            "rule of the bucket's?). Uploading on would make a history with no beginning; reopen "
                            "the engine to start a new backup there, or point it at a new target",
                            target_.describe(), lost));
    return std::make_error_code(std::errc::operation_not_permitted);
  }
  target_checked_at_ms_ = now;
  return ok();
}

Result<void> Uploader::put_once(const std::string& name, std::span<const std::byte> bytes,
                                bool (*same_history)(std::span<const std::byte>, std::span<const std::byte>)) {
  if (FUSEE_TRY(target_.put_new(name, bytes))) return ok();
  // One of that name is there: this directory's, from an upload that failed
  // before its manifest (then one of the two is the other's beginning: the
  // log only grows), or another writer's -- a copy of this directory
  // backing up to the same target, whose history went another way. Writing
  // over it would leave the history already on the target unrestorable.
  auto there = FUSEE_TRY(target_.get(name));
  if (there && !same_history(*there, bytes)) {
    stop_locked(fmt::format("{} holds {} with other contents than this directory's log: another copy of this data "
                            "directory (cp -a, a restored snapshot of the disk) writes the same target. The history "
                            "on the target is left as it is; back this directory up to a new target",
                            target_.describe(), name));
    return std::make_error_code(std::errc::operation_not_permitted);
  }
  return target_.put(name, bytes);
}

bool Uploader::same_history_chunk(std::span<const std::byte> there, std::span<const std::byte> ours) {
  const auto common = std::min(there.size(), ours.size());
  return std::equal(there.begin(), there.begin() + static_cast<std::ptrdiff_t>(common), ours.begin());
}

bool Uploader::same_history_pack(std::span<const std::byte> there, std::span<const std::byte> ours) {
  auto theirs = decode_blob_pack(there, nullptr);
  auto mine = decode_blob_pack(ours, nullptr);
  if (!theirs || !mine) return false;
  const auto common = std::min(theirs->size(), mine->size());
  for (std::size_t k = 0; k < common; ++k) {
    if ((*theirs)[k].ref != (*mine)[k].ref || (*theirs)[k].bytes != (*mine)[k].bytes) return false;
  }
  return true;
}

void Uploader::stop_locked(const std::string& why) {
  stopped_ = true;
  std::lock_guard lock(mu_);
  stats_.stopped = true;
  stats_.error = why;
  if (options_.warn) {
    options_.warn(fmt::format("backup: STOPPED: {}; nothing more is uploaded, and the log keeps every segment from "
                              "the last upload on",
                              why));
  }
}

Result<void> Uploader::upload_locked(bool everything) {
  // With whole segments, the batches of the segment being written wait:
  // the one the newest published batch lies in.
  auto due = [&] {
    if (!options_.whole_segments || everything || pending_.empty()) return pending_.size();
    const auto active = pending_.back().segment;
    std::size_t count = 0;
    while (count < pending_.size() && pending_[count].segment < active) ++count;
    return count;
  };
  // A backlog (after an outage, or a crash) goes up in manifests of at most
  // upload_bytes_max of batches each, so that an upload's chunks, blob packs
  // and manifest stay bounded in memory, and each one covers more.
  for (auto left = due(); left > 0; left = due()) {
    std::size_t count = 0;
    std::uint64_t bytes = 0;
    while (count < left && (count == 0 || bytes + pending_[count].bytes <= options_.upload_bytes_max)) {
      bytes += pending_[count].bytes;
      ++count;
    }
    FUSEE_TRY_VOID(upload_first_locked(count));
  }
  return ok();
}

Result<void> Uploader::upload_first_locked(std::size_t count) {
  const std::span<BatchRef> batches(pending_.data(), count);
  // The new bytes of each segment the batches lie in, from where the last
  // upload ended (its start, for a segment new to the target: the header is
  // in it).
  Manifest manifest;
  manifest.directory = identity_.directory;
  std::map<std::uint64_t, std::uint64_t> ends;
  for (const auto& batch : batches) {
    auto& end = ends[batch.segment];
    end = std::max(end, batch.offset + batch.bytes);
  }
  std::uint64_t uploaded_bytes = 0;  // chunks and blob packs
  std::uint64_t uploaded_blobs = 0;
  std::map<std::uint64_t, std::int64_t> record_times;  // sequence -> newest record time, for unknown times
  for (const auto& [segment, end] : ends) {
    auto begin = uploaded_end_.contains(segment) ? uploaded_end_[segment] : 0;
    if (end <= begin) continue;
    auto bytes = FUSEE_TRY(read_segment(segment, begin, end - begin));
    note_record_times(batches, segment, begin, bytes, record_times);
    // The large records its batches reference, before any manifest names it.
    auto pack = FUSEE_TRY(upload_blob_pack(batches, segment, begin, bytes));
    auto name = chunk_name(segment, begin);
    FUSEE_TRY_VOID(put_once(name, bytes, &same_history_chunk));
    manifest.chunks.push_back(ChunkRef{name, segment, begin, end - begin, pack.name, crc32c(bytes)});
    uploaded_bytes += bytes.size() + pack.bytes;
    uploaded_blobs += pack.blobs;
  }
  {
    // Published before this open: the newest record's time. Every batch:
    // never before the batch ahead of it, also across lives (a clock stepped
    // back after a restart), so that the times on the target follow the
    // chain and a restore's cut is a prefix whichever way it reads.
    std::int64_t previous = 0;
    {
      std::lock_guard lock(mu_);
      previous = stats_.covered_at_ms;
    }
    for (auto& batch : batches) {
      if (batch.sequence <= unknown_time_through_) {
        if (auto found = record_times.find(batch.sequence); found != record_times.end()) {
          batch.at_ms = std::max(batch.at_ms, found->second);
        }
      }
      batch.at_ms = std::max(batch.at_ms, previous);
      previous = batch.at_ms;
    }
  }
  manifest.batches.assign(batches.begin(), batches.end());
  auto json = manifest_json(manifest);
  const auto name = manifest_name(batches.back().sequence);
  if (!FUSEE_TRY(target_.put_new(name, bytes_of(json)))) {
    // One of that name is there: ours, from an upload whose answer was lost
    // (the same batches again), or another writer's, and then the backup
    // stops, loudly.
    auto there = FUSEE_TRY(target_.get(name));
    auto theirs = there ? parse_manifest(*there) : std::nullopt;
    if (!theirs || theirs->directory != identity_.directory) {
      stop_locked(fmt::format("{} holds {} written by another data directory ({}): two directories write one "
                              "target",
                              target_.describe(), name, theirs ? theirs->directory : "unreadable"));
      return std::make_error_code(std::errc::operation_not_permitted);
    }
    FUSEE_TRY_VOID(target_.put(name, bytes_of(json)));
  }
  for (const auto& chunk : manifest.chunks) uploaded_end_[chunk.segment] = chunk.offset + chunk.bytes;
  // Segments before the last are complete: forget them.
  while (uploaded_end_.size() > 1) uploaded_end_.erase(uploaded_end_.begin());
  std::lock_guard lock(mu_);
  ++stats_.uploads;
  stats_.chunks += manifest.chunks.size();
  stats_.bytes += uploaded_bytes;
  stats_.blobs += uploaded_blobs;
  stats_.covered_sequence = batches.back().sequence;
  stats_.covered_at_ms = batches.back().at_ms;
  const auto now = now_ms();
  for (const auto& batch : batches) {
    // A batch published before this open waited for it: its lag would be
    // the downtime, not the upload's.
    if (batch.sequence <= unknown_time_through_) continue;
    auto lag = std::max<std::int64_t>(0, now - batch.at_ms);
    if (lags_ms_.size() < kLagWindow) {
      lags_ms_.push_back(lag);
    } else {
      lags_ms_[lag_next_] = lag;
      lag_next_ = (lag_next_ + 1) % kLagWindow;
    }
  }
  for (const auto& batch : batches) log_bytes_since_snapshot_ += batch.bytes;
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count));
  stats_.pending_batches = pending_.size();
  return ok();
}

void Uploader::note_record_times(std::span<const BatchRef> batches, std::uint64_t segment, std::uint64_t offset,
                                 std::span<const std::byte> chunk, std::map<std::uint64_t, std::int64_t>& times) const {
  if (!options_.record_time_ms) return;
  for (const auto& batch : batches) {
    if (batch.sequence > unknown_time_through_) break;
    if (batch.segment != segment || batch.offset < offset) continue;
    std::optional<std::int64_t> newest;
    auto note = [&](std::span<const std::byte> record) {
      if (auto at = options_.record_time_ms(record); at && (!newest || *at > *newest)) newest = at;
    };
    (void)visit_batch_records(
        chunk, offset, batch,
        [&](std::span<const std::byte> record, bool blob_ref) {
          if (!blob_ref) {
            note(record);
            return;
          }
          // A large record: its time is in its bytes in the blob area. A
          // batch may hold nothing else (a start with a large input), and
          // the time before it would put the batch too early.
          if (record.size() != wal::kBlobRefBytes) return;
          std::string problem;
          auto bytes = wal::read_blob(fs_, wal::blob_dir_of(wal_dir_), wal::decode_blob_ref(record.data()), &problem);
          if (bytes) note(*bytes);
        },
        nullptr);
    if (newest) times[batch.sequence] = *newest;
  }
}

Result<Uploader::PackUploaded> Uploader::upload_blob_pack(std::span<const BatchRef> window, std::uint64_t segment,
                                               std::uint64_t offset, std::span<const std::byte> chunk) {
  std::vector<BatchRef> batches;
  for (const auto& batch : window) {
    if (batch.segment == segment && batch.offset >= offset) batches.push_back(batch);
  }
  std::string problem;
  auto refs = blob_refs_of_batches(chunk, offset, batches, &problem);
  if (!refs) {
    if (options_.warn) options_.warn(fmt::format("backup: segment {}: {}", segment, problem));
    return std::make_error_code(std::errc::io_error);
  }
  if (refs->empty()) return PackUploaded{};
  std::vector<PackedBlob> blobs;
  const auto blob_dir = wal::blob_dir_of(wal_dir_);
  for (const auto& ref : *refs) {
    auto bytes = wal::read_blob(fs_, blob_dir, ref, &problem);
    if (!bytes) {
      if (options_.warn) options_.warn(fmt::format("backup: {}", problem));
      return bytes.error();
    }
    blobs.push_back(PackedBlob{ref, std::move(*bytes)});
  }
  auto name = blob_pack_name(segment, offset);
  auto pack = encode_blob_pack(blobs);
  FUSEE_TRY_VOID(put_once(name, pack, &same_history_pack));
  return PackUploaded{name, pack.size(), blobs.size()};
}

Result<std::vector<std::byte>> Uploader::read_segment(std::uint64_t segment, std::uint64_t offset,
                                                      std::uint64_t bytes) {
  // io_error when shorter than the log published.
  return read_range(fs_, io::join_path(wal_dir_, wal::segment_file_name(segment)), offset, bytes);
}

}  // namespace fusee::backup
