// The shared write-ahead log: every shard's records go into one chain of
// batches in <dir>/wal/, written with group commit.
//
// Durability contract. append() stages a record and returns its per-shard LSN
// at once; nothing is durable yet. The record is durable — it survives a
// process crash and a power loss, given a disk that honours flushes — once
// durable_lsn(shard) reaches its LSN, which wait_durable() waits for and the
// durable hook announces. Positions publish strictly in order: when LSN n of
// a shard is durable, so is every earlier record of every shard appended
// before it was sealed into a batch. A crash can lose only records that were
// never reported durable. A failed write poisons the log (P5): no later
// position is ever published, every waiter gets the error, and only a reopen
// decides, from what is on disk, what survived.
//
// Thread-safety: append, wait_durable, durable_lsn and read may be called from
// any thread at once. The durable hook runs on a log thread, in publication
// order, and must not call back into the log's blocking calls.
//
// Lifetime: the FileSystem passed to open() must outlive the Log.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/result.hpp"
#include "wal/batch_builder.hpp"
#include "wal/blob_store.hpp"
#include "wal/io/file_system.hpp"
#include "wal/io/write_queue.hpp"
#include "wal/limits.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"
#include "wal/sync_gate.hpp"

namespace fusee::wal {

// Who writes sealed batches.
enum class LogWriterMode {
  // The io_uring owner where it can run: O_DIRECT + RWF_DSYNC, an io_uring
  // (setup can fail, or a seccomp profile refuse it), not tmpfs.
  // FUSEE_LOG_OWNER=0 in the environment keeps the threads; =1 takes the
  // owner on tmpfs too.
  automatic,
  owner,    // one thread submits through an io_uring, reaps in the same call
  threads,  // log threads with blocking writes
};

// Where a replicated log's primary hands its batches (docs/replication.md,
// "The plan for the replica over the shared log", step 3): the replica
// process, which proposes each body to the replication core and writes it
// as every replica derives it. The log then seals and never writes.
class ReplicatedSink {
 public:
  virtual ~ReplicatedSink() = default;
  // Each sealed batch's body (the shared log's sections), once, in sequence
  // order, on the sealing thread. It must only hand the body on, never call
  // into the log (publish_through from here would run the durable hook on
  // the sealing thread). The batch is durable once the sink's owner calls
  // Log::publish_through with its sequence or a later one.
  virtual void sealed(std::uint64_t sequence, std::vector<std::byte> body) = 0;
  // A published batch's body back (Log::read), checked by the reader.
  virtual Result<std::vector<std::byte>> read_body(std::uint64_t sequence) = 0;
  // Without a sink thread (LogOptions::sink_thread false): records became
  // sealable (an append outside a group, or a group's end), so the owner
  // should call Log::seal_pending soon. On the appending thread, outside
  // the log's locks; it must only wake the owner, never call into the log.
  virtual void staged() {}
};

struct LogOptions {
  std::string dir;                 // the data directory; the log lives in <dir>/wal
  std::uint32_t shard_count = 1;
  std::uint64_t segment_bytes = kSegmentBytesDefault;
  // 0: a local log. From 1: a replicated log's primary in this view
  // (docs/replication.md): every batch carries the view and new segments are
  // a replicated log's. A directory holds one kind of log: opening it as the
  // other is refused (errc::invalid_argument).
  std::uint64_t view = 0;
  // O_DIRECT writes carrying RWF_DSYNC (Linux default). false, or a file
  // system that refuses O_DIRECT: buffered writes plus fdatasync.
  bool direct_io = true;
  std::size_t staged_bytes_max = kStagedBytesMaxDefault;
  std::size_t batch_bytes_max = kBatchBytesMax;     // tests lower it to force cuts
  // Records longer than this go to the blob area (<dir>/wal/blobs/) and the
  // batch carries a reference, so one large record does not hold up every
  // shard's small ones behind one long write. 0 turns offload off.
  std::size_t payload_offload_bytes = kPayloadOffloadBytesDefault;
  // A blob file rolls past this size (wal/blob_store.hpp); tests lower it.
  std::uint64_t blob_file_bytes_max = kBlobFileBytesDefault;
  LogWriterMode writer_mode = LogWriterMode::automatic;
  // A thread waiting for its records with nothing in flight writes the batch
  // itself (on a fast disk), saving two thread hand-offs. Off: log threads
  // or the owner always write.
  bool inline_writes = true;
  // Inline writes only while the latest flush took at most this long: on a
  // slow disk the waiting thread is better left free to be woken.
  std::uint64_t inline_flush_max_us = kInlineFlushMaxUsDefault;
  std::size_t handoff_bytes_max = kHandoffBytesMax;
  // Prepare the next segment ahead of each roll on a thread of its own
  // (wal/log_prepare.cpp). Off: each roll creates, zero-fills and syncs the
  // next segment on the write path, as the log once did; kept so that the
  // roll benchmark can show what preparing saves.
  bool prepare_segments = true;
  // O(bytes) self-checks, for tests: each sealed batch is decoded and each
  // blob checksummed again before it is written (outside the log's locks).
  // Off by default: at tens of MB per batch they cost milliseconds, and
  // recovery verifies every batch and blob it reads anyway.
  bool verify_writes = false;
  // Salts and life values. Default: std::random_device. Tests inject a seed.
  std::function<std::uint64_t()> random;
  // Operator warnings (the buffered fallback). Default: one line on stderr.
  std::function<void(const std::string&)> warn;
  // Monotonic microseconds, for the segment fill rate. Default: steady_clock.
  // Tests inject a fake clock; the log reads no other clock.
  std::function<std::uint64_t()> now_us;
  // The checkpoints that retired old segments (RecoveryBase).
  RecoveryBase base;
  // Keep a list of published batches (their place and when) for
  // take_published(): a backup copies the log as it becomes durable.
  bool track_published = false;
  // Fill the recovery plan's batch list (recovery_plan().batches), for a
  // backup picking up batches published before a crash.
  bool list_batches = false;
  // Wall-clock milliseconds since the epoch, for published batches' times.
  // Default: the system clock.
  std::function<std::int64_t()> now_ms;
  // Tests only: called on the appender's thread after a large record's
  // place in the blob area is reserved and before the log takes its lock to
  // stage the reference, with the blob file's number, so that a test can
  // hold an appender in that gap (tests/wal/blob_retire_race_test.cpp).
  std::function<void(std::uint64_t blob_file)> after_blob_reserved;
  // Set: the log is a replicated log's primary in `view` (which must be set)
  // over a replica's directory, whose files the replica writes: the log
  // reads them at open (as a replica's: replica_files) and never changes a
  // byte, seals each batch for the sink instead of writing it, and
  // publishes only what publish_through says a quorum holds. No blob area
  // (a replica takes no blob reference), no inline writes, no close marker,
  // no published-batch list (its batches have no place of the log's own).
  std::shared_ptr<ReplicatedSink> sink;
  // With a sink: the replica's log is a quorum's through this sequence (the
  // core's published sequence when it became primary). Later batches in
  // the directory are in flight: their records take their LSNs, but count
  // as durable only once publish_through reaches them (a view change may
  // still drop them).
  std::uint64_t sink_published_sequence = 0;
  // With a sink: a thread of the log's own seals what is staged, as its log
  // threads would write it. false: nothing is sealed until the sink's owner
  // calls seal_pending() on its own thread (a replica process seals on its
  // loop, once per turn, so the sink is called on that thread only).
  bool sink_thread = true;
  // Tests only: called on the rolling thread once a late roll has asked the
  // preparation under way to stop (and before it waits for it to stop),
  // with the segment's number, so a test can hold the preparer until then
  // (tests/wal/segment_prepare_test.cpp). It must only wake others.
  std::function<void(std::uint64_t segment)> on_preparation_cut;
};

// A batch the log published (made durable, and told its waiters of): where
// its bytes lie and when. Marker batches (roll, close) too.
struct PublishedBatch {
  std::uint64_t sequence = 0;
  std::uint64_t segment = 0;
  std::uint64_t offset = 0;  // of its first byte in the segment file
  std::uint32_t bytes = 0;   // whole blocks
  std::uint32_t flags = 0;   // kBatchFlagRoll, kBatchFlagClose
  // Taken before any waiter is told, so every acknowledgement of its
  // records comes at or after it.
  std::int64_t at_ms = 0;
};

// What one retire() call removed.
struct RetireStats {
  std::uint64_t segments = 0;
  std::uint64_t blob_files = 0;
  std::uint64_t bytes = 0;  // segment and blob file sizes
};

// Durable-write latency histogram buckets: counts[i] holds writes that took
// at most kFlushLatencyBoundsUs[i] microseconds (and more than the bound
// before); the last count, writes slower than every bound.
inline constexpr std::array<std::uint64_t, 9> kFlushLatencyBoundsUs = {50,   100,  200,   500,  1000,
                                                                       2000, 5000, 10000, 50000};

struct LogStats {
  std::uint64_t batches_written = 0;
  std::uint64_t records_written = 0;
  std::uint64_t bytes_written = 0;    // whole blocks, padding included
  std::uint64_t flushes = 0;          // durable writes (each batch, marker and header)
  std::uint64_t segments_created = 0;
  std::uint64_t segments_prepared = 0;  // by the preparer thread, ahead of a roll
  // Rolls that found no prepared segment big enough and created one on the
  // write path (the preparer failed, or a batch outgrew the prepared size).
  std::uint64_t rolls_unprepared = 0;
  // Rolls that came before the next segment's preparation had finished:
  // the roll cut it short and took the file as far as it was zeroed (or,
  // not begun, created it without zeros). Such a segment's first writes
  // past the zeros are slower; the warning says so once, then at 2, 4, 8...
  std::uint64_t rolls_late = 0;
  std::uint64_t preparations_failed = 0;
  std::uint64_t blobs_written = 0;
  std::uint64_t segment_bytes = 0;    // size of the segment being written (grows under load)
  bool direct_io = false;             // false once the log fell back to buffered
  bool owner_thread = false;          // the io_uring owner writes (else log threads)
  std::uint64_t inline_writes = 0;    // batches written by a waiting thread itself
  std::uint64_t groups = 0;           // atomic groups closed (begin_group/end_group)
  std::uint64_t groups_cut_at_cap = 0;  // groups ended early by group_bytes_max
  std::uint64_t last_flush_us = 0;    // duration of the latest durable write
  std::uint64_t segments_retired = 0;
  std::uint64_t blob_files_retired = 0;
  std::uint64_t segments_live = 0;    // segment files in the chain (retired ones excluded)
  std::uint64_t live_bytes = 0;       // their sizes
  std::array<std::uint64_t, kFlushLatencyBoundsUs.size() + 1> flush_latency_counts{};  // every durable write
  std::uint64_t flush_latency_sum_us = 0;
  std::uint64_t staged_bytes = 0;     // appended, not yet sealed into a batch (not durable)
  std::uint64_t blobs_pending = 0;    // staged large records whose blob is not yet durable
};

class Log {
 public:
  using DurableHook = std::function<void(ShardId shard, Lsn durable_lsn)>;

  // Opens (creating if absent) the log in options.dir/wal: plans recovery,
  // applies it, then starts writing after the recovered chain. A refused
  // recovery fails with errc::recovery_refused; *plan_out (if given) carries
  // the plan either way, its refusal naming file, offset and sequences.
  static Result<std::unique_ptr<Log>> open(io::FileSystem& fs, LogOptions options,
                                           RecoveryPlan* plan_out = nullptr);

  // Stops the log threads without writing anything more: staged records are
  // dropped unacknowledged, as in a crash. Call close() for a clean stop.
  ~Log();
  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;

  // Stages one record for shard and returns its LSN. Fails with
  // errc::queue_full when the stage is at its bound (nothing staged),
  // errc::record_too_large, errc::poisoned, errc::closed.
  [[nodiscard]] Result<Lsn> append(ShardId shard, std::span<const std::byte> record);

  // Atomic groups: shard's records appended between begin_group(shard) and
  // end_group(shard) reach the disk in one batch, so a crash keeps all of
  // them or none. One group per shard at a time, opened and closed by the
  // shard's one appender. Appends inside a group wake no log thread (the
  // records cannot be sealed yet); end_group() does. A group stops at
  // group_bytes_max(): the append that would pass it ends the group first
  // and stages its record after it, so in_group() tells the appender whether
  // its next records still join the group. A group left open is never
  // written (close() and a poisoned log drop its records, unacknowledged).
  void begin_group(ShardId shard);
  void end_group(ShardId shard);
  bool in_group(ShardId shard) const;
  std::size_t group_bytes_max() const { return group_bytes_max_; }

  // Blocks until shard's records up to lsn are durable. Fails with the poison
  // error (the flush's own error code) or errc::closed. Not for an LSN in a
  // group still open: that waits for its end_group().
  [[nodiscard]] Result<void> wait_durable(ShardId shard, Lsn lsn);

  // For a caller that would otherwise sleep until its records are durable
  // (an engine shard with nothing else to do): if an inline write applies
  // now (a fast disk, nothing in flight, records staged), seals and writes
  // one batch on the calling thread and returns true once it is published;
  // otherwise returns false at once. Never waits for another writer.
  bool write_inline();

  Lsn durable_lsn(ShardId shard) const;
  // The LSN the last append of shard got (durable or not).
  Lsn last_lsn(ShardId shard) const;

  // Called after each publication with every shard whose position advanced.
  // Set it before the first append.
  void set_durable_hook(DurableHook hook);
  // Called once, on whichever thread poisons the log, while the log's lock is
  // held: it may only wake others, never call into the log. Set it before
  // the first append.
  void set_poison_hook(std::function<void(std::error_code)> hook);

  // --- Retirement (checkpoints decide; see engine/checkpointer.hpp) ---
  // The sequence from which the log must be kept for a checkpoint of shard
  // covering its LSNs up to `lsn`: the batch holding lsn + 1 when that is
  // durable, else the next batch to be published.
  std::uint64_t keep_from_sequence(ShardId shard, Lsn lsn) const;
  // The keep_from_sequence that would let the oldest segment retire (the
  // first sequence of the segment after it); 0 when only the segment being
  // written is left.
  std::uint64_t oldest_segment_retires_at() const;
  // Retires, oldest first, every segment whose batches all have a sequence
  // below keep_from_sequence (never the segment being written): its header
  // is zeroed and synced, the file is removed and the directory synced; then
  // blob files that only retired batches reference are removed, the blob
  // directory synced after each. Serialised with itself; appends go on.
  // An error leaves what was done done: recovery finishes a half retirement.
  // before_retiring, if set, runs once before the first segment is touched
  // and only if one is (the checkpointer syncs the run store there, which
  // it writes unsynced: a segment may go only once a durable checkpoint
  // covers it); its error stops the call with nothing retired.
  [[nodiscard]] Result<RetireStats> retire(std::uint64_t keep_from_sequence,
                                           const std::function<Result<void>()>& before_retiring = {});
  // Called on the sealing thread after each roll to a new segment, with
  // oldest_segment_retires_at(); it must only wake others. Set it before
  // the first append.
  void set_roll_hook(std::function<void(std::uint64_t retires_at)> hook);

  // With LogOptions::track_published: the batches published since the last
  // call, in sequence order (each once).
  std::vector<PublishedBatch> take_published();
  // The sequence of the newest batch published (made durable, in order).
  std::uint64_t published_sequence() const;
  // The publication time of the newest batch published (the engine clock's
  // ms, never less than an earlier batch's: a clock stepped back does not
  // put a later batch before an earlier one); INT64_MIN before the first.
  std::int64_t published_at_ms() const;
  // Reads shard's durable records with first <= LSN <= last, in order.
  [[nodiscard]] Result<void> read(ShardId shard, Lsn first, Lsn last,
                                  const std::function<void(Lsn, std::span<const std::byte>)>& visit);

  // Waits for everything staged to be durable, writes the close marker, and
  // stops the threads. Later appends fail with errc::closed. With a sink:
  // stops at once (what was sealed and not published stays unacknowledged).
  [[nodiscard]] Result<void> close();

  // --- With LogOptions::sink (wal/log_replicated.cpp).
  // A quorum holds every batch through `sequence` durably: they are
  // published to their waiters, in order. Sequences not yet sealed wait.
  // From any thread but the sealing one (ReplicatedSink::sealed); nothing
  // is published after step_down or close.
  void publish_through(std::uint64_t sequence);
  // The replica stopped being this view's primary (or failed): every waiter
  // gets `error`, nothing more is published, and the log is closed by its
  // owner.
  void step_down(std::error_code error);
  // With LogOptions::sink_thread false: seals, on the calling thread, what is
  // staged (as many batches as it takes, up to the batches in flight the log
  // allows), each handed to the sink before this returns.
  void seal_pending();

  // The error that poisoned the log, or an empty code.
  std::error_code poison() const;
  LogStats stats() const;
  const RecoveryPlan& recovery_plan() const { return plan_; }
  std::uint32_t shard_count() const { return options_.shard_count; }

 private:
  Log(io::FileSystem& fs, LogOptions options, RecoveryPlan plan);
  // A replicated log's primary marks each batch it seals with its view.
  void stamp_view(BatchHeader& header) const;

  // A batch on its way to disk; publication follows sequence order.
  struct Write {
    std::uint64_t sequence = 0;
    std::vector<SectionPlan> sections;  // shard, count
    std::vector<Lsn> first_lsns;
    std::uint64_t segment = 0;
    std::uint64_t offset = 0;
    std::uint32_t batch_bytes = 0;
    std::uint64_t records = 0;
    std::uint32_t flags = 0;
    bool done = false;
    // Owner mode: the write's own buffer and file, alive until it completes.
    io::AlignedBuffer buffer;
    std::shared_ptr<io::File> file;
    std::chrono::steady_clock::time_point submitted;
  };
  struct Segment {
    std::uint64_t number = 0;
    std::uint64_t salt = 0;
    std::uint64_t size_bytes = 0;
    std::shared_ptr<io::File> file;
    std::uint64_t first_sequence = 0;
  };

  Result<void> start_writing();
  void writer_loop();
  // With a sink (wal/log_replicated.cpp): open and close, and the thread
  // that seals batches for it.
  static Result<std::unique_ptr<Log>> open_as_primary(io::FileSystem& fs, LogOptions options, RecoveryPlan* plan_out);
  Result<void> close_as_primary();
  // Recovered batches past options_.sink_published_sequence become writes in
  // flight, published by publish_through like sealed ones.
  void hold_unpublished_tail();
  void sink_loop();
  // Caller holds seal_mu_: the sealed batch goes to the sink.
  void hand_to_sink(BatchPlan& batch, std::vector<Lsn>& first_lsns, std::uint64_t records, std::uint32_t flags,
                    std::span<const std::byte> body, std::uint32_t total_bytes);
  Result<void> read_through_sink(std::span<const SectionLocation> sections, ShardId shard, Lsn first, Lsn last,
                                 const std::function<void(Lsn, std::span<const std::byte>)>& visit);
  std::size_t in_flight_max() const { return options_.sink ? kSinkBatchesInFlightMax : kWritesInFlightMax; }
  // The io_uring owner: seals, submits through queue_, reaps in the same
  // call, publishes. Replaces writer_loop's threads.
  void owner_loop();
  void owner_complete(Write* write, const io::WriteCompletion& completion, const io::AlignedBuffer& buffer,
                      std::shared_ptr<io::File>& file);
  // Lets a thread about to write inline take the staged records first.
  void give_way_to_inline_writer(std::unique_lock<std::mutex>& lock);
  // Records a flush's duration (for the inline-write decisions).
  void note_flush(std::chrono::steady_clock::duration duration, bool through_ring = false);
  // Whether a batch (or the close marker) is ready to be sealed and a write
  // slot is free. Caller holds mu_.
  bool has_work_locked() const;
  // Whether every staged record belongs to an open group (close() then
  // writes its marker without them).
  bool only_open_groups_staged_locked() const;
  void end_group_locked(ShardId shard);
  // Whether a record of encoded_bytes joins shard's open group; one that
  // would take the group past group_bytes_max_ ends it first (false).
  bool fits_open_group_locked(ShardId shard, std::size_t encoded_bytes);
  // Seals the next batch and writes it on the calling thread. Caller holds
  // seal_mu_ (through seal_lock, released once the batch is sealed). Returns
  // false when there was nothing to seal or the log stopped.
  bool seal_and_write(std::unique_lock<std::mutex>& seal_lock, io::AlignedBuffer& buffer);
  bool seal_next(std::shared_ptr<io::File>& file, io::AlignedBuffer& buffer, Write*& write);
  Result<void> roll_segment(std::uint64_t batch_bytes);
  // Size of a segment to prepare: base_bytes doubled (up to
  // kSegmentGrowthBytesMax) while the current one filled faster than
  // kSegmentGrowthRateBytesPerSecond, else the configured size.
  std::uint64_t next_segment_bytes(std::uint64_t base_bytes);
  // The segment preparer (wal/log_prepare.cpp).
  void preparer_loop();
  // Asks the preparer for segment `number` of size_bytes (replacing any
  // earlier request).
  void want_prepared(std::uint64_t number, std::uint64_t size_bytes);
  // Whether the next segment's preparation should start now, with `bytes`
  // of the current one written: once a quarter is written, or sooner when
  // at the rate it fills it would be full before kPrepareLeadFactor times
  // the preparation's expected duration. Caller holds seal_mu_.
  bool prepare_due(std::uint64_t written_bytes) const;
  // What a roll into segment `number` got from the preparer.
  struct TakenSegment {
    std::uint64_t size_bytes = 0;  // 0: nothing usable; the roll creates the file
    bool partial = false;  // cut short: full size, zeros in part, directory entry not yet synced
    bool late = false;     // the preparation had not finished (or begun) when the roll came
  };
  // For a roll into `number`: never waits for a preparation's zeros. A
  // preparation still under way is cut short (it stops within one step)
  // and its file taken as it is; a ready one holding needed_bytes is taken
  // whole. The roll then owns the file.
  TakenSegment take_prepared(std::uint64_t number, std::uint64_t needed_bytes);
  void stop_preparer();
  // After a clean close: the prepared segment past the chain goes.
  Result<void> remove_prepared_segment();
  Result<void> write_batch(std::shared_ptr<io::File>& file, std::uint64_t segment, std::uint64_t offset,
                           std::span<const std::byte> bytes);
  void complete(Write* write, const Result<void>& result);
  void poison_locked(std::error_code error);
  Result<Lsn> append_blob(ShardId shard, std::span<const std::byte> record);
  // Caller holds mu_: blob references of shard in [first, last] are now in
  // a published batch of `segment`.
  void note_blob_refs_published(ShardId shard, Lsn first, Lsn last, std::uint64_t segment);
  Result<void> retire_blob_files(std::uint64_t retired_through_segment, RetireStats& stats);
  // Zeroes segment `number`'s header and syncs it, removes the file and
  // syncs the directory; returns the file's size. Redoes what a failed
  // earlier call left undone.
  Result<std::uint64_t> retire_segment_file(std::uint64_t number);
  void blob_loop();
  // At destruction, after the owner stopped: writes the ring still holds
  // after its bounded drain keep their buffers for good (io::keep_for_the_kernel).
  void abandon_buffers_the_kernel_holds();
  void wake_all_waiters();
  Result<void> check_shard(ShardId shard) const;

  io::FileSystem& fs_;
  LogOptions options_;
  RecoveryPlan plan_;
  std::string wal_dir_;

  // mu_ guards staging, publication and the section index.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;     // staged records, close requests, stop
  std::condition_variable durable_cv_;  // publications and poison, for close()
  // One per shard, so a publication wakes only the waiters it concerns, not
  // every appender of every shard.
  std::unique_ptr<std::condition_variable[]> shard_durable_cvs_;
  std::vector<ShardStage> stages_;
  std::size_t staged_bytes_ = 0;
  std::size_t staged_records_ = 0;
  std::size_t open_groups_ = 0;  // stages with a group open (their records are not sealable)
  std::size_t group_bytes_max_ = 0;
  std::vector<Lsn> durable_lsns_;
  std::deque<std::unique_ptr<Write>> in_flight_;
  std::uint64_t published_sequence_ = 0;
  std::vector<PublishedBatch> published_;  // under mu_: since the last take_published()
  std::int64_t published_at_ms_ = INT64_MIN;  // under mu_: the newest batch's (monotonic)
  std::vector<std::vector<SectionLocation>> index_;  // per shard, by LSN
  std::error_code poison_;
  bool closing_ = false;          // no more appends
  bool close_marker_wanted_ = false;
  bool close_marker_written_ = false;
  bool close_marker_published_ = false;
  bool stopping_ = false;         // threads exit
  LogStats stats_;
  ShardId turn_ = 0;              // which shard goes first in the next batch

  // seal_mu_ serializes sealing: sequence, chain CRC, position and rolls.
  std::mutex seal_mu_;
  io::AlignedBuffer sink_buffer_;  // seal_pending's (under seal_mu_)
  Segment segment_;
  std::uint64_t write_offset_ = 0;
  std::uint64_t segment_started_us_ = 0;  // when writing into segment_ began
  std::uint64_t next_sequence_ = 1;
  std::uint32_t last_crc_ = 0;
  std::uint64_t life_ = 0;
  std::atomic<bool> direct_{false};  // false once O_DIRECT was refused
  // Every batch and marker write goes through it: one fdatasync at a time,
  // and the first failure sticks (wal/sync_gate.hpp). A new segment's header
  // needs no gate: only the roll writes that file's descriptor.
  SyncGate sync_gate_;
  std::atomic<bool> fallback_warned_{false};
  std::vector<Segment> read_segments_;  // live segments, oldest first, for reads and retirement (mu_)
  std::mutex retire_mu_;                // one retire() at a time
  // A segment out of read_segments_ whose file a failed retire() did not
  // finish removing; the next retire() finishes it first (mu_).
  std::optional<Segment> retiring_;
  std::function<void(std::uint64_t)> roll_hook_;
  // Blob references staged but not yet published, per shard: LSN -> blob
  // file (mu_); and for each blob file, the newest segment whose published
  // batches reference it (mu_).
  std::vector<std::map<Lsn, std::uint64_t>> unpublished_blob_refs_;
  std::map<std::uint64_t, std::uint64_t> blob_file_last_segment_;

  std::mutex hook_mu_;  // keeps hook calls in publication order
  std::mutex publish_mu_;  // one publish_through at a time (each frees what it publishes)
  DurableHook hook_;
  std::function<void(std::error_code)> poison_hook_;  // set before appends; read under mu_

  std::vector<std::thread> writers_;

  // The next segment, prepared ahead of the roll (wal/log_prepare.cpp).
  struct PreparedSegment {
    // partial: cut short by a late roll after its full size was durable.
    enum class State { none, wanted, preparing, ready, partial, failed, taken };
    std::uint64_t number = 0;
    std::uint64_t size_bytes = 0;
    State state = State::none;
  };
  mutable std::mutex prepare_mu_;  // guards prepared_, prepare_stop_, segments_prepared_
  std::condition_variable prepare_cv_;
  PreparedSegment prepared_;
  bool prepare_stop_ = false;
  // The segment whose preparation was last asked for, and the size the next
  // preparation gets (decided at each roll). Both under seal_mu_.
  std::uint64_t prepare_asked_for_ = 0;
  std::uint64_t prepare_next_bytes_ = 0;
  std::uint64_t segments_prepared_ = 0;
  std::uint64_t preparations_failed_ = 0;  // not counting those a roll or close cut short
  // The last whole preparation's speed (prepare_mu_; 0 until one finished).
  std::uint64_t prepare_bytes_per_s_ = 0;
  // Rolls that came before their segment's preparation had finished (seal_mu_).
  std::uint64_t rolls_late_ = 0;
  std::atomic<bool> prepare_cancel_{false};  // stops a preparation part-way
  std::atomic<std::uint64_t> prepare_zeroed_bytes_{0};  // of the preparation under way
  std::thread preparer_thread_;

  // Owner mode (see LogWriterMode).
  std::unique_ptr<io::WriteQueue> queue_;
  std::thread owner_thread_;
  bool owner_ = false;
  std::atomic<std::uint64_t> last_flush_us_{0};  // real time: a heuristic, never decides content
  std::array<std::atomic<std::uint64_t>, kFlushLatencyBoundsUs.size() + 1> flush_latency_counts_{};
  std::atomic<std::uint64_t> flush_latency_sum_us_{0};

  // The blob area: large records are written and synced by blob_thread_
  // while their references wait staged (blocked) in their shard.
  struct BlobJob {
    ShardId shard = 0;
    Lsn lsn = 0;
    BlobRef ref;
    std::vector<std::byte> bytes;
  };
  std::unique_ptr<BlobWriter> blobs_;
  std::deque<BlobJob> blob_jobs_;       // guarded by mu_
  std::size_t blobs_pending_ = 0;       // staged references whose blob is not durable (mu_)
  std::condition_variable blob_cv_;
  std::thread blob_thread_;
};

}  // namespace fusee::wal
