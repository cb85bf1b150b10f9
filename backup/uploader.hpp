// Uploader: a local engine's continuous backup (docs/backup.md). Every
// `interval` it takes the batches the log published since the last upload
// (wal::Log::take_published), copies the new bytes of their segment files
// to the target as chunks, then writes a manifest naming them and every
// batch they complete with its publication time. A manifest is written
// only after its chunks, so whatever a restore reads whole. What is
// uploaded covers a sequence (covered_sequence()); the log retires no
// segment past it (the checkpointer asks).
//
// With a run store (UploaderOptions::store), it also uploads snapshots of
// the store (snapshot.hpp): at the first upload to a target that has none,
// then once snapshot_log_bytes of log went up since the last, or
// snapshot_interval passed with any. A restore starts from the newest
// snapshot before its moment; a directory whose log was retired without a
// backup can then start one (its first snapshot bridges the gap).
//
// At start it checks the target is this directory's (its identity), and
// picks up where the last manifest ended: batches the log holds past it
// (published before a crash, not yet uploaded) go first, with the last
// upload's time as theirs, or, with UploaderOptions::record_time_ms, the
// newest of their records' times. A target that does not answer at start is
// connected to later, each interval; one that is another directory's
// refuses the start, or, found later (its identity or a manifest of
// another directory where ours goes), stops the backup for good, loudly.
//
// An upload that fails is tried again at the next interval; the log keeps
// growing meanwhile, and the warning says so once per failure streak. Past
// backlog_bytes_max of log not uploaded, backlog_full() turns true (the
// engine then refuses new requests, errc::busy) until an upload succeeds.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backup/backup_target.hpp"
#include "backup/manifest.hpp"
#include "engine/run_store.hpp"
#include "wal/io/file_system.hpp"
#include "wal/log.hpp"

namespace fusee::backup {

struct UploaderOptions {
  std::chrono::milliseconds interval{1000};
  // Upload a segment's batches only once the log has published one in a
  // later segment (Config::backup_upload_interval unset): whole segments,
  // and the one being written at finish(). `interval` is then how often it
  // looks.
  bool whole_segments = false;
  // Past this many bytes of log not on the target (0: no bound),
  // backlog_full() says so, and the engine refuses new requests.
  std::uint64_t backlog_bytes_max = 0;
  std::function<void(const std::string&)> warn;
  // The clock batches' publication times read (the log's); for the upload
  // lag. Unset: the system clock.
  std::function<std::int64_t()> now_ms;
  // When a record (as stored in a batch) was made, on that clock, if it
  // says: the engine's journal records do (JournalRecord::at_ms). A batch
  // published before a crash and uploaded after it gets the newest of its
  // records' times (at most a flush before its publication) instead of the
  // last upload's. Unset: the last upload's.
  std::function<std::optional<std::int64_t>(std::span<const std::byte>)> record_time_ms;
  // The most batch bytes one manifest covers: a backlog (after an outage or
  // a crash) goes up in several, each bounded in memory. Tests lower it.
  std::uint64_t upload_bytes_max = 64ull << 20;
  // The run store to snapshot (nothing: no snapshots, and a backup needs
  // the log from its first batch).
  engine::RunStore* store = nullptr;
  std::uint64_t snapshot_log_bytes = 256ull << 20;
  std::chrono::milliseconds snapshot_interval{std::chrono::hours(1)};
  // After a snapshot failed, the next is tried no sooner than this (each
  // one makes the store write its memtable to a table file).
  std::chrono::milliseconds snapshot_retry{10000};
  // Retention (retention.hpp): what no restore to a moment in the last
  // `retention` needs is deleted from the target (0: nothing is). Looked at
  // after each snapshot, and after an upload at most every retention_check.
  std::chrono::milliseconds retention{0};
  std::chrono::milliseconds retention_check{60000};
  // How often, at most, an upload first checks that the target still holds
  // this directory's identity and the newest manifest uploaded (a target
  // emptied or replaced under a running engine stops the backup, loudly,
  // instead of uploading into a history with no beginning). 0: every upload.
  std::chrono::milliseconds target_check{10000};
};

struct UploaderStats {
  std::uint64_t uploads = 0;   // manifests written
  std::uint64_t chunks = 0;
  std::uint64_t bytes = 0;     // chunk and blob pack bytes
  std::uint64_t blobs = 0;     // large records uploaded in blob packs
  std::uint64_t failures = 0;  // uploads and snapshots that failed (each tried again)
  std::uint64_t snapshots = 0;  // taken by this uploader
  std::uint64_t snapshot_sequence = 0;  // the newest snapshot on the target covers the log to here (0: none)
  std::int64_t snapshot_at_ms = 0;
  std::uint64_t retired_objects = 0;  // deleted from the target by retention
  std::uint64_t covered_sequence = 0;
  std::int64_t covered_at_ms = 0;  // publication time of the newest batch uploaded (0: none)
  std::uint64_t pending_batches = 0;  // published, not yet uploaded
  std::uint64_t backlog_bytes = 0;    // their bytes, as of the last failed upload (0 after a good one)
  bool backlog_full = false;          // backlog_bytes past UploaderOptions::backlog_bytes_max
  bool connected = false;             // the target answered and its identity is this directory's
  bool stopped = false;               // for good: the target is another directory's (error says)
  // From a batch's publication to the end of the upload that covers it,
  // over the last kLagWindow batches uploaded (0 before any).
  std::int64_t lag_p50_ms = 0;
  std::int64_t lag_p99_ms = 0;
  std::int64_t lag_max_ms = 0;
  // What losing the disk now would lose, as a span of time: from the newest
  // batch on the target (or the open, before any) to now, while the log
  // holds batches past it; 0 when it holds none.
  std::int64_t loss_window_ms = 0;
  std::string error;                  // the last failure; empty once an upload succeeded
};

class Uploader {
 public:
  static constexpr std::size_t kLagWindow = 8192;

  // `log` must have been opened with track_published and list_batches (its
  // recovery plan lists the chain's batches). Fails, with `problem`, when
  // the target belongs to another directory or holds batches past this
  // log's, or when the log no longer holds what the target lacks.
  static Result<std::unique_ptr<Uploader>> start(io::FileSystem& fs, wal::Log& log, std::string wal_dir,
                                                 BackupTarget& target, Identity identity, UploaderOptions options,
                                                 std::string* problem);
  ~Uploader();
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  std::uint64_t covered_sequence() const;
  // Whether the backlog is past UploaderOptions::backlog_bytes_max.
  bool backlog_full() const { return backlog_full_.load(std::memory_order_relaxed); }
  // Uploads what is published now (with whole_segments, what lies in
  // complete segments), once, on the caller's thread.
  [[nodiscard]] Result<void> upload_now();
  // After the log's close: uploads the rest (the close marker too) and
  // stops the thread.
  [[nodiscard]] Result<void> finish();
  UploaderStats stats() const;

 private:
  Uploader(io::FileSystem& fs, wal::Log& log, std::string wal_dir, BackupTarget& target, Identity identity,
           UploaderOptions options);
  std::int64_t now_ms() const;
  void loop();
  // Checks the target's identity and finds where it ends (the last
  // manifest). A refusal (another directory's target, a gap) sets
  // `refusal`; a failure to reach the target does not.
  Result<void> connect_locked(std::string* refusal);
  // Uploads the pending batches (with whole_segments, those of complete
  // segments only, unless `everything`).
  Result<void> upload_locked(bool everything);
  Result<void> upload_pending_locked(bool everything);
  // Uploads the first `count` pending batches: their chunks and blob packs,
  // then a manifest naming them.
  Result<void> upload_first_locked(std::size_t count);
  void note_failure_locked(const char* doing, std::error_code error);
  // Takes a snapshot when one is due (see the class comment).
  void maybe_snapshot_locked();
  // Deletes what no restore within the retention needs, when it is time.
  void maybe_retire_locked(bool snapshot_taken);
  void note_backlog_locked(std::uint64_t backlog_bytes);  // caller holds mu_
  void stop_locked(const std::string& why);
  // UploaderOptions::target_check: the identity and the newest manifest
  // still there; stops the backup when not.
  [[nodiscard]] Result<void> check_target_locked();
  // Writes an object of the log's (a chunk, a blob pack) that no one else
  // may write over: when one of that name exists, writes over it only if
  // `same_history` finds the two agree (this directory's own earlier
  // attempt), and stops the backup otherwise.
  [[nodiscard]] Result<void> put_once(const std::string& name, std::span<const std::byte> bytes,
                                      bool (*same_history)(std::span<const std::byte>, std::span<const std::byte>));
  // One is the other's beginning (the log only grows).
  static bool same_history_chunk(std::span<const std::byte> there, std::span<const std::byte> ours);
  // The same large records, in the same order, as far as both go.
  static bool same_history_pack(std::span<const std::byte> there, std::span<const std::byte> ours);
  // For the pending batches published before this open that lie in this
  // chunk: the newest of their records' times (record_time_ms).
  void note_record_times(std::span<const BatchRef> batches, std::uint64_t segment, std::uint64_t offset,
                         std::span<const std::byte> chunk, std::map<std::uint64_t, std::int64_t>& times) const;
  struct PackUploaded {
    std::string name;  // empty: the chunk's batches reference no blob
    std::uint64_t bytes = 0;
    std::uint64_t blobs = 0;
  };
  // Uploads the blob pack of the chunk of `segment` from `offset` (none
  // when the chunk's batches reference no blob).
  Result<PackUploaded> upload_blob_pack(std::span<const BatchRef> batches, std::uint64_t segment, std::uint64_t offset,
                                       std::span<const std::byte> chunk);
  Result<std::vector<std::byte>> read_segment(std::uint64_t segment, std::uint64_t offset, std::uint64_t bytes);

  io::FileSystem& fs_;
  wal::Log& log_;
  std::string wal_dir_;
  BackupTarget& target_;
  Identity identity_;
  UploaderOptions options_;
  std::mutex upload_mu_;  // one upload at a time
  std::int64_t target_checked_at_ms_ = INT64_MIN;  // under upload_mu_
  std::vector<BatchRef> pending_;                      // under upload_mu_
  bool connected_ = false;                             // under upload_mu_
  // Batches up to this sequence (past the target at connect) were published
  // before this open: their time comes from their records (under upload_mu_).
  std::uint64_t unknown_time_through_ = 0;
  bool stopped_ = false;                               // under upload_mu_
  // Snapshots (under upload_mu_): the table files on the target, the newest
  // snapshot, the log uploaded since, whether one is due at once.
  std::set<std::string> tables_;
  std::map<std::string, std::uint32_t> table_crcs_;  // of tables_ known so far (under upload_mu_)
  std::uint64_t snapshot_covers_ = 0;
  std::int64_t snapshot_at_ms_ = 0;
  std::uint64_t log_bytes_since_snapshot_ = 0;
  bool snapshot_due_ = false;
  std::int64_t snapshot_retry_at_ms_ = 0;
  std::map<std::string, Snapshot> snapshots_read_;  // retention's, by object name
  std::int64_t retention_next_ms_ = 0;
  std::atomic<bool> backlog_full_{false};
  std::int64_t started_ms_ = 0;
  std::vector<std::int64_t> lags_ms_;  // ring of the last kLagWindow batches' lags (under mu_)
  std::size_t lag_next_ = 0;
  std::map<std::uint64_t, std::uint64_t> uploaded_end_;  // per segment, bytes uploaded from its start (under upload_mu_)
  mutable std::mutex mu_;
  UploaderStats stats_;  // under mu_
  std::condition_variable wake_;
  bool stopping_ = false;  // under mu_
  std::thread thread_;
};

}  // namespace fusee::backup
