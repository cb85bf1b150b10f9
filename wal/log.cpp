#include "wal/log.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "base/assert.hpp"
#include "wal/errc.hpp"
#include "wal/record_reader.hpp"
#include "wal/segment_file.hpp"

namespace fusee::wal {
namespace {

std::uint64_t default_random() {
  static std::mutex mu;
  static std::random_device device;
  std::lock_guard lock(mu);
  return (std::uint64_t(device()) << 32) ^ device();
}


}  // namespace

Result<std::unique_ptr<Log>> Log::open(io::FileSystem& fs, LogOptions options, RecoveryPlan* plan_out) {
  if (options.shard_count == 0 || options.shard_count > kShardsMax) return make_error_code(errc::invalid_argument);
  if (options.segment_bytes < kSegmentBytesMin || options.segment_bytes > kSegmentBytesMax ||
      options.segment_bytes % kBlockBytes != 0)
    return make_error_code(errc::invalid_argument);
  if (options.batch_bytes_max > kBatchBytesMax || options.batch_bytes_max < 2 * kBlockBytes ||
      options.batch_bytes_max % kBlockBytes != 0 || options.handoff_bytes_max == 0)
    return make_error_code(errc::invalid_argument);
  if (!options.random) options.random = default_random;
  if (!options.warn) options.warn = [](const std::string& line) { std::fprintf(stderr, "fusee: %s\n", line.c_str()); };
  if (!options.now_us)
    options.now_us = [] {
      return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                            std::chrono::steady_clock::now().time_since_epoch())
                                            .count());
    };

  if (!options.now_ms)
    options.now_ms = [] {
      return static_cast<std::int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count());
    };

  // A replica's directory is the replica's: nothing below touches it.
  if (options.sink) return open_as_primary(fs, std::move(options), plan_out);
  if (!FUSEE_TRY(fs.exists(options.dir))) {
    FUSEE_TRY_VOID(fs.create_dir(options.dir));
    FUSEE_TRY_VOID(fs.sync_dir(io::parent_path(options.dir)));
  }
  auto wal_dir = io::join_path(options.dir, "wal");
  auto staging_dir = io::join_path(options.dir, "wal.new");
  // A wal.new left by a crash during creation never held an acknowledged record.
  if (FUSEE_TRY(fs.exists(staging_dir))) FUSEE_TRY_VOID(io::remove_tree(fs, staging_dir));

  auto plan = FUSEE_TRY(plan_recovery(fs, wal_dir, options.shard_count, options.base, options.list_batches));
  if (plan.fresh) {
    FUSEE_TRY_VOID(create_empty_log(fs, options.dir, 1, 0, options.segment_bytes, options.direct_io, options.random(),
                                    options.view != 0));
    plan = FUSEE_TRY(plan_recovery(fs, wal_dir, options.shard_count, options.base, options.list_batches));
  }
  if (plan_out != nullptr) *plan_out = plan;
  if (plan.refused) return make_error_code(errc::recovery_refused);
  if (plan.replicated != (options.view != 0)) {
    options.warn(fmt::format("{} holds a {} log; it cannot be opened as a {} one", wal_dir,
                             plan.replicated ? "replicated" : "local", plan.replicated ? "local" : "replicated"));
    return make_error_code(errc::invalid_argument);
  }
  FUSEE_TRY_VOID(apply_recovery(fs, plan));

  std::unique_ptr<Log> log(new Log(fs, std::move(options), std::move(plan)));
  FUSEE_TRY_VOID(log->start_writing());
  return log;
}

Log::Log(io::FileSystem& fs, LogOptions options, RecoveryPlan plan)
    : fs_(fs), options_(std::move(options)), plan_(std::move(plan)) {
  wal_dir_ = plan_.wal_dir;
  // A group must fit one batch, so it never has to be cut.
  group_bytes_max_ = std::min(kGroupBytesMax, options_.batch_bytes_max - kBatchHeaderBytes - kSectionHeaderBytes);
  auto shards = options_.shard_count;
  durable_lsns_.assign(shards, 0);
  shard_durable_cvs_ = std::make_unique<std::condition_variable[]>(shards);
  index_.resize(shards);
  stages_.reserve(shards);
  unpublished_blob_refs_.resize(shards);
  for (ShardId shard = 0; shard < shards; ++shard) {
    // A shard whose records were all retired goes on past its checkpoint.
    Lsn floor = shard < options_.base.shard_lsn_floors.size() ? options_.base.shard_lsn_floors[shard] : 0;
    durable_lsns_[shard] = std::max(plan_.shards[shard].last_lsn, floor);
    stages_.emplace_back(durable_lsns_[shard] + 1);
  }
  for (const auto& section : plan_.sections) index_[section.shard].push_back(section);
  blob_file_last_segment_ = plan_.blob_file_last_segment;
  published_sequence_ = plan_.last_sequence;
  next_sequence_ = plan_.last_sequence + 1;
  last_crc_ = plan_.last_crc;
}

void Log::stamp_view(BatchHeader& header) const {
  if (options_.view == 0) return;
  header.flags |= kBatchFlagView;
  header.view = options_.view;
}

Result<void> Log::start_writing() {
  auto it = std::find_if(plan_.segments.begin(), plan_.segments.end(),
                         [&](const auto& s) { return s.number == plan_.write_segment; });
  FUSEE_ASSERT(it != plan_.segments.end(), "recovery plan names no write segment");
  for (const auto& segment : plan_.segments) {
    if (segment.header_status == SegmentHeaderStatus::valid && segment.number <= plan_.write_segment)
      read_segments_.push_back(
          {segment.number, segment.header.salt, segment.header.segment_bytes, nullptr, segment.header.first_sequence});
  }
  segment_.number = it->number;
  segment_.salt = it->header.salt;
  segment_.size_bytes = it->header.segment_bytes;
  bool direct = false;
  segment_.file = FUSEE_TRY(open_segment_for_write(fs_, it->path, options_.direct_io, &direct));
  direct_ = direct;
  if (options_.direct_io && !direct && !fallback_warned_.exchange(true))
    options_.warn(fmt::format("{}: the file system refuses O_DIRECT; the log writes buffered with fdatasync",
                              wal_dir_));
  write_offset_ = plan_.write_offset;
  prepare_next_bytes_ = options_.segment_bytes;
  segment_started_us_ = options_.now_us();
  life_ = options_.random();
  stats_.segment_bytes = segment_.size_bytes;
  stats_.direct_io = direct_;
  if (options_.payload_offload_bytes > 0) {
    blobs_ = FUSEE_TRY(BlobWriter::open(fs_, blob_dir_of(wal_dir_),
                                        {.file_bytes_max = options_.blob_file_bytes_max,
                                         .direct_io = options_.direct_io,
                                         .verify_writes = options_.verify_writes}));
    blob_thread_ = std::thread([this] { blob_loop(); });
  }
  // The owner needs O_DIRECT + RWF_DSYNC writes and an io_uring; on tmpfs the
  // kernel would run each ring write on a worker thread, one at a time.
  bool want_owner = options_.writer_mode == LogWriterMode::owner;
  if (options_.writer_mode == LogWriterMode::automatic) {
    // FUSEE_LOG_OWNER=0 keeps the threads; =1 takes the owner even on tmpfs.
    const char* forced = std::getenv("FUSEE_LOG_OWNER");
    if (forced != nullptr && std::string(forced) == "0")
      want_owner = false;
    else if (forced != nullptr && std::string(forced) == "1")
      want_owner = true;
    else
      want_owner = !FUSEE_TRY(fs_.is_memory_backed(wal_dir_));
  }
  if (want_owner && direct_) {
    auto queue = fs_.open_write_queue(kWritesInFlightMax);
    if (queue) queue_ = std::move(*queue);  // otherwise (no io_uring, seccomp) the threads stay
  }
  if (options_.prepare_segments) preparer_thread_ = std::thread([this] { preparer_loop(); });
  if (queue_) {
    owner_ = true;
    stats_.owner_thread = true;
    owner_thread_ = std::thread([this] { owner_loop(); });
  } else {
    for (std::size_t i = 0; i < kWritesInFlightMax; ++i) writers_.emplace_back([this] { writer_loop(); });
  }
  return ok();
}

Log::~Log() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    closing_ = true;
  }
  work_cv_.notify_all();
  blob_cv_.notify_all();
  wake_all_waiters();
  for (auto& writer : writers_) writer.join();
  if (owner_thread_.joinable()) owner_thread_.join();
  if (blob_thread_.joinable()) blob_thread_.join();
  stop_preparer();
  abandon_buffers_the_kernel_holds();
}

void Log::abandon_buffers_the_kernel_holds() {
  if (!queue_) return;
  // The owner stopped; a ring that failed may still hold writes, which read
  // their buffers until the kernel finishes them. drain() waits a bounded
  // time; past it those buffers must outlive the log.
  auto held = queue_->drain();
  if (held == 0) return;
  std::size_t buffers = 0;
  for (auto& write : in_flight_) {
    if (write->buffer.size() == 0) continue;
    io::keep_for_the_kernel(std::move(write->buffer));
    ++buffers;
  }
  options_.warn(fmt::format("{}: the kernel still held {} log writes at shutdown; their {} buffers stay allocated",
                            wal_dir_, held, buffers));
}

void Log::wake_all_waiters() {
  if (queue_) queue_->wake();
  durable_cv_.notify_all();
  for (std::uint32_t shard = 0; shard < options_.shard_count; ++shard) shard_durable_cvs_[shard].notify_all();
}

Result<void> Log::check_shard(ShardId shard) const {
  if (shard >= options_.shard_count) return make_error_code(errc::invalid_argument);
  return ok();
}

Result<Lsn> Log::append(ShardId shard, std::span<const std::byte> record) {
  FUSEE_TRY_VOID(check_shard(shard));
  if (record.size() > kRecordBytesMax) return make_error_code(errc::record_too_large);
  if (blobs_ && record.size() > options_.payload_offload_bytes) return append_blob(shard, record);
  auto encoded_bytes = varint_length(record_prefix(record.size(), false)) + record.size();
  // A record no batch takes would wait in its stage for ever (a replicated
  // log's batches are bounded by what a replica's segment takes).
  if (kBatchHeaderBytes + kSectionHeaderBytes + encoded_bytes > options_.batch_bytes_max) {
    return make_error_code(errc::record_too_large);
  }
  Lsn lsn = 0;
  bool ring_wake = false;
  {
    std::lock_guard lock(mu_);
    if (poison_) return make_error_code(errc::poisoned);
    if (closing_) return make_error_code(errc::closed);
    if (staged_bytes_ + encoded_bytes > options_.staged_bytes_max) return make_error_code(errc::queue_full);
    auto& stage = stages_[shard];
    if (fits_open_group_locked(shard, encoded_bytes)) {
      // Not sealable until the group ends: end_group() wakes a log thread.
      lsn = stage.push(record);
      staged_bytes_ += encoded_bytes;
      ++staged_records_;
      return lsn;
    }
    lsn = stage.push(record);
    staged_bytes_ += encoded_bytes;
    ++staged_records_;
    ring_wake = owner_ && !in_flight_.empty() && in_flight_.size() < kWritesInFlightMax;
  }
  work_cv_.notify_one();
  // An owner blocked in the ring with a slot free should seal this now.
  if (ring_wake) queue_->wake();
  if (options_.sink && !options_.sink_thread) options_.sink->staged();
  return lsn;
}

Result<void> Log::wait_durable(ShardId shard, Lsn lsn) {
  FUSEE_TRY_VOID(check_shard(shard));
  std::unique_lock lock(mu_);
  if (lsn >= stages_[shard].next_lsn()) return make_error_code(errc::invalid_argument);
  auto waiting_since = std::chrono::steady_clock::now();
  for (;;) {
    if (durable_lsns_[shard] >= lsn || poison_ || stopping_) break;
    // Inline write: on a fast disk, the waiting thread seals and writes the
    // batch itself instead of handing it to a log thread and being woken
    // back, two thread wake-ups that cost about as much as the flush. It was
    // going to block for the flush anyway. With nothing in flight it writes
    // at once; beside one write in flight, once its records have waited a
    // quarter of a flush (sooner would split a group commit for nothing).
    auto flush_us = last_flush_us_.load();
    if (options_.inline_writes && flush_us <= options_.inline_flush_max_us && has_work_locked()) {
      auto waited = std::chrono::steady_clock::now() - waiting_since;
      auto quarter_flush = std::chrono::microseconds(flush_us / 4);
      if (in_flight_.empty() || waited >= quarter_flush) {
        std::unique_lock seal_lock(seal_mu_, std::try_to_lock);  // never wait on seal_mu_ holding mu_
        if (seal_lock.owns_lock()) {
          lock.unlock();
          thread_local io::AlignedBuffer inline_buffer;
          if (seal_and_write(seal_lock, inline_buffer)) {
            std::lock_guard stats_lock(mu_);
            ++stats_.inline_writes;
          }
          // Appender threads are many: none keeps a large batch's buffer.
          if (inline_buffer.size() > kInlineBufferKeepBytes) inline_buffer = io::AlignedBuffer();
          lock.lock();
          continue;
        }
      } else {
        shard_durable_cvs_[shard].wait_for(lock, quarter_flush - waited);
        continue;
      }
    }
    shard_durable_cvs_[shard].wait(lock);
  }
  if (durable_lsns_[shard] >= lsn) return ok();
  if (poison_) return poison_;
  return make_error_code(errc::closed);
}

bool Log::write_inline() {
  std::unique_lock lock(mu_);
  if (!options_.inline_writes || poison_ || stopping_) return false;
  if (last_flush_us_.load() > options_.inline_flush_max_us) return false;
  if (!in_flight_.empty() || !has_work_locked()) return false;
  std::unique_lock seal_lock(seal_mu_, std::try_to_lock);  // never wait on seal_mu_ holding mu_
  if (!seal_lock.owns_lock()) return false;
  lock.unlock();
  thread_local io::AlignedBuffer inline_buffer;
  bool wrote = seal_and_write(seal_lock, inline_buffer);
  if (wrote) {
    std::lock_guard stats_lock(mu_);
    ++stats_.inline_writes;
  }
  if (inline_buffer.size() > kInlineBufferKeepBytes) inline_buffer = io::AlignedBuffer();
  return wrote;
}

Lsn Log::durable_lsn(ShardId shard) const {
  std::lock_guard lock(mu_);
  FUSEE_ASSERT(shard < durable_lsns_.size(), "shard out of range");
  return durable_lsns_[shard];
}

Lsn Log::last_lsn(ShardId shard) const {
  std::lock_guard lock(mu_);
  FUSEE_ASSERT(shard < stages_.size(), "shard out of range");
  return stages_[shard].next_lsn() - 1;
}

void Log::set_durable_hook(DurableHook hook) {
  std::lock_guard lock(hook_mu_);
  hook_ = std::move(hook);
}

void Log::set_poison_hook(std::function<void(std::error_code)> hook) {
  std::lock_guard lock(mu_);
  poison_hook_ = std::move(hook);
}

std::error_code Log::poison() const {
  std::lock_guard lock(mu_);
  return poison_;
}

LogStats Log::stats() const {
  std::uint64_t segments_prepared = 0;
  std::uint64_t preparations_failed = 0;
  {
    std::lock_guard lock(prepare_mu_);
    segments_prepared = segments_prepared_;
    preparations_failed = preparations_failed_;
  }
  std::lock_guard lock(mu_);
  auto stats = stats_;
  stats.segments_prepared = segments_prepared;
  stats.preparations_failed = preparations_failed;
  stats.last_flush_us = last_flush_us_.load();
  for (std::size_t i = 0; i < flush_latency_counts_.size(); ++i) stats.flush_latency_counts[i] = flush_latency_counts_[i].load();
  stats.flush_latency_sum_us = flush_latency_sum_us_.load();
  stats.staged_bytes = staged_bytes_;
  stats.blobs_pending = blobs_pending_;
  stats.segments_live = read_segments_.size();
  for (const auto& segment : read_segments_) stats.live_bytes += segment.size_bytes;
  return stats;
}

void Log::poison_locked(std::error_code error) {
  const bool first = !poison_;
  if (!poison_) poison_ = error;
  // Staged records can never be acknowledged now; drop them.
  for (auto& stage : stages_) stage.clear();
  staged_bytes_ = 0;
  staged_records_ = 0;
  open_groups_ = 0;
  // Their blobs will never be written: give the places back (the blob
  // thread's job in flight, if any, is written and released by write()).
  for (const auto& job : blob_jobs_) blobs_->release(job.ref);
  blob_jobs_.clear();
  blobs_pending_ = 0;
  work_cv_.notify_all();
  blob_cv_.notify_all();
  wake_all_waiters();
  if (first && poison_hook_) poison_hook_(poison_);
}

bool Log::has_work_locked() const {
  if (in_flight_.size() >= in_flight_max()) return false;
  if (staged_records_ > 0) {
    if (blobs_pending_ == 0 && open_groups_ == 0) return true;
    // Some staged records wait for their blob or their group's end; is
    // anything else sealable?
    for (const auto& stage : stages_)
      if (stage.sealable_count() > 0) return true;
    if (!only_open_groups_staged_locked()) return false;
  }
  return close_marker_wanted_ && !close_marker_written_ && in_flight_.empty();
}

void Log::writer_loop() {
  io::AlignedBuffer buffer;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || poison_ || has_work_locked(); });
      give_way_to_inline_writer(lock);
      if (stopping_ || poison_) return;
      if (!has_work_locked()) continue;
    }
    std::unique_lock seal_lock(seal_mu_);
    seal_and_write(seal_lock, buffer);
  }
}

bool Log::seal_and_write(std::unique_lock<std::mutex>& seal_lock, io::AlignedBuffer& buffer) {
  std::shared_ptr<io::File> file;
  Write* write = nullptr;
  if (!seal_next(file, buffer, write)) return false;
  seal_lock.unlock();
  auto started = std::chrono::steady_clock::now();
  auto result = write_batch(file, write->segment, write->offset,
                            std::span<const std::byte>(buffer.data(), write->batch_bytes));
  if (result) note_flush(std::chrono::steady_clock::now() - started);
  complete(write, result);
  return true;
}

void Log::give_way_to_inline_writer(std::unique_lock<std::mutex>& lock) {
  // With nothing in flight on a fast disk, the thread that staged these
  // records is probably about to wait for them, and then writes them itself
  // with no hand-off (see wait_durable). Give it a quarter of a flush before
  // taking them; a thread that does not wait (code running ahead of the
  // disk) costs its records only that much.
  if (!options_.inline_writes || !in_flight_.empty()) return;
  auto flush_us = last_flush_us_.load();
  if (flush_us > options_.inline_flush_max_us) return;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(std::max<std::uint64_t>(flush_us / 4, 20));
  work_cv_.wait_until(lock, deadline, [&] { return stopping_ || poison_ || !in_flight_.empty() || !has_work_locked(); });
}

void Log::note_flush(std::chrono::steady_clock::duration duration, bool through_ring) {
  auto measured_us =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(duration).count());
  std::size_t bucket = 0;
  while (bucket < kFlushLatencyBoundsUs.size() && measured_us > kFlushLatencyBoundsUs[bucket]) ++bucket;
  flush_latency_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  flush_latency_sum_us_.fetch_add(measured_us, std::memory_order_relaxed);
  // A blocking write measures the disk. A ring write also measures how soon
  // the kernel's worker thread got a CPU: on a busy machine that is a timer
  // tick (4 ms), which is not the disk, and if it counted, it would switch
  // inline writes off for good (only inline writes would show the disk
  // fast again). So a ring write may only lower the estimate.
  if (through_ring) {
    auto current = last_flush_us_.load();
    if (current != 0 && measured_us >= current) return;
  }
  last_flush_us_ = measured_us;
}

bool Log::seal_next(std::shared_ptr<io::File>& file, io::AlignedBuffer& buffer, Write*& write) {
  BatchPlan batch;
  std::vector<Lsn> first_lsns;
  std::vector<ShardStage::Taken> taken;
  std::uint64_t acked = 0;
  std::uint32_t flags = 0;
  std::uint64_t records = 0;
  {
    // Under mu_ only what is O(sections): the plan and the records taken
    // out of their stages. Their bytes are copied below, outside it, so an
    // appender never waits for a large batch's copy (seal_mu_, held here,
    // keeps sealing in order).
    std::unique_lock lock(mu_);
    // Another writer may have taken the work between the wake-up and seal_mu_.
    if (stopping_ || poison_ || !has_work_locked()) return false;
    if (only_open_groups_staged_locked()) {
      // Closing: a group still open was never committed, so its records
      // are left unwritten (their appender is told errc::closed).
      flags = kBatchFlagClose;
      close_marker_written_ = true;
    } else {
      batch = plan_batch(stages_, turn_, options_.batch_bytes_max, options_.handoff_bytes_max);
      FUSEE_ASSERT(!batch.empty(), "records are staged but the plan took none");
      turn_ = (turn_ + 1) % options_.shard_count;
    }
    first_lsns.reserve(batch.sections.size());
    taken.reserve(batch.sections.size());
    for (const auto& section : batch.sections) {
      auto& stage = stages_[section.shard];
      first_lsns.push_back(stage.first_lsn());
      taken.push_back(stage.take(section.record_count));
      staged_bytes_ -= section.records_bytes;
      staged_records_ -= section.record_count;
      records += section.record_count;
    }
    acked = published_sequence_;
  }
  auto total = batch_total_bytes(batch.body_bytes);
  if (buffer.size() < total) buffer = io::AlignedBuffer(std::max<std::size_t>(total, 64 * kKiB));
  encode_sections(batch, first_lsns, taken, std::span<std::byte>(buffer.data() + kBatchHeaderBytes, batch.body_bytes));
  taken.clear();  // the chunks may go
  // Padding is zero so the bytes on disk are a function of the records.
  std::memset(buffer.data() + kBatchHeaderBytes + batch.body_bytes, 0, total - kBatchHeaderBytes - batch.body_bytes);
  if (options_.verify_writes) {
    // What goes to disk must decode to what was planned (recovery checks it
    // again, always, when it reads it back). O(bytes), so a test option, and
    // outside mu_ so that appenders never wait for it.
    std::vector<SectionView> decoded;
    auto body = std::span<const std::byte>(buffer.data() + kBatchHeaderBytes, batch.body_bytes);
    FUSEE_ASSERT(!decode_body(body, static_cast<std::uint32_t>(batch.sections.size()), decoded),
                 "a sealed batch does not decode");
    FUSEE_ASSERT(decoded.size() == batch.sections.size(), "a sealed batch lost a section");
  }
  if (options_.sink) {
    hand_to_sink(batch, first_lsns, records, flags,
                 std::span<const std::byte>(buffer.data() + kBatchHeaderBytes, batch.body_bytes),
                 static_cast<std::uint32_t>(total));
    return false;  // nothing for the caller to write
  }

  if (options_.prepare_segments && records > 0 && prepare_asked_for_ != segment_.number + 1 &&
      prepare_due(write_offset_ + total)) {
    prepare_asked_for_ = segment_.number + 1;
    want_prepared(prepare_asked_for_, prepare_next_bytes_);
  }
  // Every batch leaves a block free at the segment's end for the roll marker.
  if (write_offset_ + total + kBlockBytes > segment_.size_bytes) {
    auto rolled = roll_segment(total);
    if (!rolled) {
      std::lock_guard lock(mu_);
      poison_locked(rolled.error());
      return false;
    }
  }
  if (!direct_ && segment_.file->direct()) {
    // Another write found O_DIRECT refused; this segment goes buffered too.
    auto reopened = fs_.open(io::join_path(wal_dir_, segment_file_name(segment_.number)), {.write = true});
    if (!reopened) {
      std::lock_guard lock(mu_);
      poison_locked(reopened.error());
      return false;
    }
    segment_.file = std::move(*reopened);
  }
  BatchHeader header;
  header.total_length = total;
  header.body_length = batch.body_bytes;
  header.sequence = next_sequence_++;
  header.prev_crc = last_crc_;
  header.flags = flags;
  header.acked = acked;
  header.life = life_;
  stamp_view(header);
  header.section_count = static_cast<std::uint32_t>(batch.sections.size());
  encode_batch_header(header, buffer.span());
  last_crc_ = seal_batch(segment_.salt, std::span<std::byte>(buffer.data(), total), header.body_length);

  auto pending = std::make_unique<Write>();
  pending->sequence = header.sequence;
  pending->sections = std::move(batch.sections);
  pending->first_lsns = std::move(first_lsns);
  pending->segment = segment_.number;
  pending->offset = write_offset_;
  pending->batch_bytes = total;
  pending->records = records;
  pending->flags = flags;
  write_offset_ += total;
  file = segment_.file;
  write = pending.get();
  std::lock_guard lock(mu_);
  in_flight_.push_back(std::move(pending));
  return true;
}

Result<void> Log::roll_segment(std::uint64_t batch_bytes) {
  // The marker is sealed first because the new segment's header names its
  // CRC; it is written only once the new segment is durable, so a valid
  // marker always proves its successor exists.
  io::AlignedBuffer marker(kBlockBytes);
  BatchHeader header;
  header.total_length = kBlockBytes;
  header.sequence = next_sequence_;
  header.prev_crc = last_crc_;
  header.flags = kBatchFlagRoll;
  header.life = life_;
  stamp_view(header);
  {
    std::lock_guard lock(mu_);
    header.acked = published_sequence_;
  }
  encode_batch_header(header, marker.span());
  auto marker_crc = seal_batch(segment_.salt, marker.span(), 0);

  Segment next;
  next.number = segment_.number + 1;
  next.salt = options_.random();
  auto needed_bytes = round_up_to_block(kSegmentHeaderBytes + batch_bytes + kBlockBytes);
  auto taken = options_.prepare_segments ? take_prepared(next.number, needed_bytes) : TakenSegment{};
  next.size_bytes = taken.size_bytes;
  if (taken.late) {
    ++rolls_late_;
    if (std::has_single_bit(rolls_late_))  // the 1st, 2nd, 4th, ...: said, not flooded
      options_.warn(fmt::format("{}: segment {} was not prepared in time ({} late rolls so far); the roll took it "
                                "unfinished, and its first writes are slower",
                                wal_dir_, next.number, rolls_late_));
  }
  // The size of the segment after the next one (prepared from now on), from
  // how fast this one filled: doubled from the next one's while it filled
  // fast. So sizes follow the load one segment late.
  auto following_bytes = next_segment_bytes(next.size_bytes > 0 ? next.size_bytes : segment_.size_bytes);
  SegmentHeader next_header{next.number, next.salt, header.sequence + 1, next.size_bytes, marker_crc,
                            options_.view != 0};
  bool direct = false;
  if (next.size_bytes > 0) {
    // Prepared: full size, durable. Its header, written durably, makes it
    // the next segment; one cut short also needs its directory entry synced
    // before the marker below can name it.
    next.file = FUSEE_TRY(write_segment_header(fs_, wal_dir_, next_header, options_.direct_io && direct_, &direct));
    if (taken.partial) FUSEE_TRY_VOID(fs_.sync_dir(wal_dir_));
  } else {
    next.size_bytes = std::max(following_bytes, needed_bytes);
    next_header.segment_bytes = next.size_bytes;
    // With a preparer, a roll on the write path skips the zeros: every
    // writer waits behind it. Without one (the benchmark's comparison), as
    // the log once did.
    next.file = FUSEE_TRY(options_.prepare_segments
                              ? create_segment_unzeroed(fs_, wal_dir_, next_header, options_.direct_io && direct_, &direct)
                              : create_segment(fs_, wal_dir_, next_header, options_.direct_io && direct_, &direct));
    std::lock_guard lock(mu_);
    ++stats_.rolls_unprepared;
  }
  {
    std::lock_guard lock(mu_);
    stats_.rolls_late = rolls_late_;
  }
  if (!direct) direct_ = false;

  auto pending = std::make_unique<Write>();
  pending->sequence = header.sequence;
  pending->segment = segment_.number;
  pending->offset = write_offset_;
  pending->batch_bytes = kBlockBytes;
  pending->flags = kBatchFlagRoll;
  auto* marker_write = pending.get();
  {
    std::lock_guard lock(mu_);
    in_flight_.push_back(std::move(pending));
    ++stats_.segments_created;
    stats_.segment_bytes = next.size_bytes;
    read_segments_.push_back({next.number, next.salt, next.size_bytes, nullptr, next_header.first_sequence});
  }
  ++next_sequence_;
  auto old_file = segment_.file;
  auto written = write_batch(old_file, segment_.number, write_offset_, marker.span());
  complete(marker_write, written);
  FUSEE_TRY_VOID(written);
  last_crc_ = marker_crc;
  segment_ = std::move(next);
  write_offset_ = kSegmentHeaderBytes;
  segment_started_us_ = options_.now_us();
  prepare_next_bytes_ = following_bytes;
  std::function<void(std::uint64_t)> hook;
  {
    std::lock_guard lock(mu_);
    hook = roll_hook_;
  }
  if (hook) hook(oldest_segment_retires_at());
  return ok();
}

Result<void> Log::write_batch(std::shared_ptr<io::File>& file, std::uint64_t segment, std::uint64_t offset,
                              std::span<const std::byte> bytes) {
  auto written = sync_gate_.write_durably(*file, offset, bytes);
  if (!written && file->direct() && written.error() == std::errc::invalid_argument) {
    // The file system took the O_DIRECT open but refuses the write: rewrite
    // this write buffered (with fdatasync) and stay buffered.
    {
      std::lock_guard lock(mu_);
      stats_.direct_io = false;
    }
    direct_ = false;
    if (!fallback_warned_.exchange(true))
      options_.warn(fmt::format("{}: O_DIRECT writes refused (EINVAL); the log writes buffered with fdatasync",
                                wal_dir_));
    auto buffered = FUSEE_TRY(fs_.open(io::join_path(wal_dir_, segment_file_name(segment)), {.write = true}));
    file = std::move(buffered);
    written = sync_gate_.write_durably(*file, offset, bytes);
  }
  return written;
}

void Log::complete(Write* write, const Result<void>& result) {
  std::vector<std::pair<ShardId, Lsn>> advanced;
  std::unique_lock lock(mu_);
  if (!result) poison_locked(result.error());
  write->done = true;
  while (!poison_ && !in_flight_.empty() && in_flight_.front()->done) {
    const auto& done = *in_flight_.front();
    for (std::size_t i = 0; i < done.sections.size(); ++i) {
      const auto& section = done.sections[i];
      auto last = done.first_lsns[i] + section.record_count - 1;
      durable_lsns_[section.shard] = last;
      index_[section.shard].push_back({section.shard, done.first_lsns[i], section.record_count, done.segment,
                                       done.offset, done.batch_bytes, done.sequence});
      advanced.emplace_back(section.shard, last);
      note_blob_refs_published(section.shard, done.first_lsns[i], last, done.segment);
    }
    published_sequence_ = done.sequence;
    // Monotonic in the log's order: a restore cuts the chain at a moment,
    // which must be a prefix (a clock stepped back would otherwise make the
    // answer depend on where the restore starts reading).
    published_at_ms_ = std::max(published_at_ms_, options_.now_ms());
    if (options_.track_published) {
      published_.push_back(
          PublishedBatch{done.sequence, done.segment, done.offset, done.batch_bytes, done.flags, published_at_ms_});
    }
    ++stats_.flushes;
    stats_.bytes_written += done.batch_bytes;
    stats_.records_written += done.records;
    if (!done.sections.empty()) ++stats_.batches_written;
    if (done.flags & kBatchFlagClose) close_marker_published_ = true;
    in_flight_.pop_front();
  }
  durable_cv_.notify_all();
  work_cv_.notify_all();
  for (auto [shard, lsn] : advanced) shard_durable_cvs_[shard].notify_all();
  std::unique_lock hook_lock(hook_mu_);  // taken before mu_ is released: hooks run in order
  lock.unlock();
  if (hook_)
    for (auto [shard, lsn] : advanced) hook_(shard, lsn);
}

std::vector<PublishedBatch> Log::take_published() {
  std::lock_guard lock(mu_);
  return std::exchange(published_, {});
}

std::uint64_t Log::published_sequence() const {
  std::lock_guard lock(mu_);
  return published_sequence_;
}

std::int64_t Log::published_at_ms() const {
  std::lock_guard lock(mu_);
  return published_at_ms_;
}

Result<void> Log::close() {
  if (options_.sink) return close_as_primary();
  {
    std::unique_lock lock(mu_);
    if (stopping_) return make_error_code(errc::closed);
    closing_ = true;
    close_marker_wanted_ = true;
    work_cv_.notify_all();
    if (queue_) queue_->wake();
    durable_cv_.wait(lock, [&] { return close_marker_published_ || poison_; });
    stopping_ = true;
  }
  work_cv_.notify_all();
  blob_cv_.notify_all();
  wake_all_waiters();
  for (auto& writer : writers_) writer.join();
  writers_.clear();
  if (owner_thread_.joinable()) owner_thread_.join();
  if (blob_thread_.joinable()) blob_thread_.join();
  stop_preparer();
  {
    std::lock_guard lock(mu_);
    if (poison_) return poison_;
  }
  // Harmless if it stays (recovery deletes it), so a failure is only said.
  if (auto removed = remove_prepared_segment(); !removed)
    options_.warn(fmt::format("{}: could not remove the prepared segment: {}", wal_dir_, removed.error().message()));
  return ok();
}

Result<void> Log::read(ShardId shard, Lsn first, Lsn last,
                       const std::function<void(Lsn, std::span<const std::byte>)>& visit) {
  FUSEE_TRY_VOID(check_shard(shard));
  std::vector<SectionLocation> sections;
  std::map<std::uint64_t, std::uint64_t> salts;
  {
    std::lock_guard lock(mu_);
    last = std::min(last, durable_lsns_[shard]);
    if (first > last) return ok();
    const auto& index = index_[shard];
    auto it = std::upper_bound(index.begin(), index.end(), first,
                               [](Lsn lsn, const SectionLocation& s) { return lsn < s.first_lsn; });
    if (it != index.begin()) --it;
    for (; it != index.end() && it->first_lsn <= last; ++it) sections.push_back(*it);
    for (const auto& segment : read_segments_) salts[segment.number] = segment.salt;
  }
  if (options_.sink) return read_through_sink(sections, shard, first, last, visit);
  return read_sections(fs_, wal_dir_, sections, salts, shard, first, last, visit);
}

}  // namespace fusee::wal
