// FaultFileSystem: an in-memory io::FileSystem for tests that keeps what is
// durable apart from what was merely written, so a test can crash it at any
// point and get back exactly what a real disk may hold afterwards (dropped,
// partly kept or torn writes; reverted directory entries), and can inject
// EIO, ENOSPC, short writes and the "fsync lies" failure on the Nth operation.
//
// Thread-safety: every method of a FaultFileSystem and of the Files it opens
// may be called from several threads at once; one mutex per file system
// serialises them. Files share the file system's state through a shared_ptr,
// so a File may outlive the FaultFileSystem that opened it (useful when a test
// discards a crashed file system before the code under test has closed its
// files); its calls then act on the orphaned state.
//
// The model (the log's crash tests rely on it, so it is precise):
// - Data. Per file, a synced image plus an ordered list of pending operations
//   (write, truncate, allocate). Reads see the synced image with every pending
//   operation applied. sync_data() makes all of that file's pending operations
//   durable. A write with WriteFlags::dsync is durable when it returns (with
//   the size growth it needs), but earlier pending operations stay pending.
//   Every pending operation carries a sequence number global to the file
//   system, so a crash replays the survivors in their real order: a later
//   durable write wins over an earlier kept one where they overlap.
// - Failed writeback, as Linux (ext4, XFS) does it. A sync_data that fails
//   with FaultEffect::sync_loses_data drops the file's pending operations
//   from what the disk will hold, but the pages stay in the cache marked
//   clean: reads through any File still see those bytes (stale pages) until
//   File::drop_cache() or an O_DIRECT read (which sees the disk), and a
//   later successful sync does not write them. A later write to a stale
//   page dirties the whole page again, stale bytes included. The error is
//   recorded per file (errseq_t) and reported once per open file
//   description: the File whose sync failed reports EIO, another File opened
//   before the failure reports EIO at its next sync_data, a File opened
//   after it reports nothing, and a second sync_data through the same File
//   (another thread's, concurrent with the failure) returns success.
// - Names. Directory entries (creates, renames, removes, mkdir, rmdir) change
//   the visible namespace at once and become durable only when sync_dir() is
//   called on the directory that holds the entry. A rename across directories
//   is a link in the target and an unlink in the source, each made durable by
//   its own directory's sync (so a crash can leave the file in both).
// - Crash. crash_image() builds a new file system from the durable state plus
//   the pending operations a CrashOutcome chooses to keep; the original is left
//   untouched. Same outcome and seed, same image.
// - Freezing. After set_crash_after_ops(n), once n counted operations have run
//   every further call fails with EIO and changes nothing. Counted operations
//   are the mutating and syncing calls: write_at, sync_data, truncate,
//   allocate, open with create, rename, remove, create_dir, remove_dir,
//   sync_dir and each write queue completion, whether they succeed or fail (a call refused because the file
//   system is already crashed is not counted).
// - Direct I/O. A file opened with OpenOptions::direct refuses (EINVAL) a read
//   or write whose offset, length or buffer address is not a multiple of
//   io::kDirectAlignment, as Linux does.
// - Write queues (open_write_queue). submit() only queues (not counted, not
//   faulted; EIO once crashed). submit_and_wait() first puts every queued
//   write in flight: it becomes a pending, visible write exactly like a plain
//   write_at (one to a read-only file, or a misaligned or refused direct
//   write, puts nothing in flight and completes with EBADF or EINVAL, still a
//   counted operation that consumes no fault). It then completes writes in flight, oldest first: all of them,
//   or, when Options::write_queue_seed is set and two or more are in flight,
//   only the first when the seeded generator says so (the rest complete in a
//   later call). Each completion is a counted operation of kind write and is
//   where faults fire: none, and the write becomes durable (a dsync write);
//   io_error or no_space (or sync_loses_data, as EIO), and the write is
//   dropped (never durable, no longer visible) and completes with the error;
//   short_write, and only its first half (rounded down to 512 bytes on a
//   direct file) stays and becomes durable, the rest is dropped, and the
//   completion reports the shorter count. Once the file system is crashed
//   (also partway through a call) no write completes, and a call that finds
//   it crashed fails with EIO, so writes in flight stay pending for
//   crash_image to drop, keep or tear. It never blocks; wake() does nothing.
//   Destroying a queue drops its queued writes and leaves those in flight
//   pending (visible, not durable). A sync_data on the file makes writes in
//   flight durable like any pending write; their completions then change
//   nothing but still report a fault if one fires.
//
// Every random choice comes from a std::mt19937_64 seeded by the caller, and
// only its raw output is used (never a std:: distribution, whose results differ
// between standard libraries), so a seed replays the same image everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::testing {

// How a crash resolves what was written but was not yet durable. Data and
// names are resolved independently: the data outcome decides which pending
// data operations (write, truncate, allocate) survive, `names` decides whether
// the unsynced directory entries survive.
struct CrashOutcome {
  enum class Data {
    drop_all,       // no pending data operation survives
    keep_all,       // every pending data operation survives
    keep_first_k,   // the first keep_count pending data operations, in global order
    random_subset,  // each pending data operation survives with probability 1/2
    tear,           // each 512-byte sector of each pending write is kept, dropped,
                    // zeroed or filled with garbage; truncates and allocates are
                    // kept or dropped with probability 1/2
  };
  enum class Names {
    revert,  // every unsynced directory entry is undone; a file whose create is
             // undone vanishes with its data
    keep,    // every unsynced directory entry survives
  };

  Data data = Data::drop_all;
  std::size_t keep_count = 0;  // keep_first_k only
  std::uint64_t seed = 0;      // random_subset and tear only
  Names names = Names::revert;

  static CrashOutcome drop_all(Names names = Names::revert) {
    return {Data::drop_all, 0, 0, names};
  }
  static CrashOutcome keep_all(Names names = Names::revert) {
    return {Data::keep_all, 0, 0, names};
  }
  static CrashOutcome keep_first_k(std::size_t k, Names names = Names::revert) {
    return {Data::keep_first_k, k, 0, names};
  }
  static CrashOutcome random_subset(std::uint64_t seed, Names names = Names::revert) {
    return {Data::random_subset, 0, seed, names};
  }
  static CrashOutcome tear(std::uint64_t seed, Names names = Names::revert) {
    return {Data::tear, 0, seed, names};
  }

  // For failure messages, so a failing case can be replayed:
  // "keep_first_k(3), names=revert", "tear(seed=7), names=keep".
  std::string describe() const;
};

// Every outcome worth trying for a state with `pending_data_ops` pending data
// operations, under both name outcomes: drop_all, keep_first_k for each k in
// between, keep_all, and random_subset and tear for seeds [0, seed_count).
std::vector<CrashOutcome> all_crash_outcomes(std::size_t pending_data_ops,
                                             std::uint64_t seed_count);

// Which counted operations a Fault applies to. `any` and `sync` are filters
// over several kinds; the others name one call.
enum class OpKind {
  any,
  sync,  // sync_data and sync_dir
  write,
  sync_data,
  truncate,
  allocate,
  create,  // open with OpenOptions::create (whether or not the file existed)
  rename,
  remove,
  create_dir,
  remove_dir,
  sync_dir,
};

enum class FaultEffect {
  io_error,     // EIO, nothing changes
  no_space,     // ENOSPC, nothing changes
  short_write,  // write_at writes only the first half (rounded down to 512 bytes
                // on a direct file; possibly 0) and returns that count; any
                // other operation fails with EIO instead
  sync_loses_data,  // sync_data fails with EIO and drops that file's pending
                    // (not yet durable) operations, as Linux does when
                    // writeback fails: the pages are marked clean but stay
                    // readable in the cache, and the next sync_data through
                    // the same File succeeds with the data gone ("fsync lies
                    // the second time"; see "Failed writeback" above). Any
                    // other operation fails with EIO.
};

// Fires on the nth (1-based) counted operation that matches `kind`, and with
// `persistent` on every later matching operation too. A call rejected before
// it reaches the disk (bad path, read-only file, misaligned direct I/O) does
// not consume a fault.
struct Fault {
  OpKind kind = OpKind::any;
  std::uint64_t nth = 1;
  FaultEffect effect = FaultEffect::io_error;
  bool persistent = false;
};

struct FaultFileSystemOptions {
  // Simulates a file system that refuses O_DIRECT (tmpfs): open with direct
  // fails with EINVAL.
  bool refuse_direct_open = false;
  // Simulates one that accepts O_DIRECT at open but refuses direct writes:
  // every write_at on a direct file fails with EINVAL (the first one is where
  // the caller learns it).
  bool refuse_direct_write = false;
  // Write queues: without a seed, each submit_and_wait completes every write
  // in flight; with one, each queue draws from a std::mt19937_64 seeded with
  // it whether to complete only the first of two or more, so callers see
  // partial reaping (see the model above). Same seed, same sequence.
  std::optional<std::uint64_t> write_queue_seed;
  // Called on the calling thread at the start of every File::write_at and
  // File::sync_data, with the path the File was opened with and the bytes
  // written (0 for a sync), outside the
  // file system's lock: a test may block in it to force an interleaving of
  // several threads. It may call the inspection methods (faults_fired(),
  // contents()...) but no File or FileSystem operation.
  std::function<void(OpKind kind, const std::string& path, std::size_t bytes)> before_operation;
  // Likewise, once such a call has done its work, before it returns.
  std::function<void(OpKind kind, const std::string& path, std::size_t bytes)> after_operation;
};

namespace detail {
struct FaultState;
}

class FaultFileSystem final : public io::FileSystem {
 public:
  using Options = FaultFileSystemOptions;

  // An empty file system holding only "/".
  FaultFileSystem();
  explicit FaultFileSystem(Options options);
  ~FaultFileSystem() override;
  FaultFileSystem(const FaultFileSystem&) = delete;
  FaultFileSystem& operator=(const FaultFileSystem&) = delete;

  // io::FileSystem. Paths are absolute ("/data/wal/0000000001.seg"); a
  // parent directory must exist (ENOENT otherwise); "." and empty components
  // are ignored and ".." is refused (EINVAL).
  [[nodiscard]] Result<std::unique_ptr<io::File>> open(const std::string& path,
                                                       io::OpenOptions options) override;
  [[nodiscard]] Result<void> rename(const std::string& from, const std::string& to) override;
  [[nodiscard]] Result<void> remove(const std::string& path) override;
  [[nodiscard]] Result<void> create_dir(const std::string& path) override;
  [[nodiscard]] Result<void> remove_dir(const std::string& path) override;
  [[nodiscard]] Result<std::vector<std::string>> list(const std::string& path) override;
  [[nodiscard]] Result<bool> exists(const std::string& path) override;
  [[nodiscard]] Result<void> sync_dir(const std::string& path) override;
  // A queue for Files of this file system (see the model above). Not counted,
  // never faulted; EINVAL for a depth outside [1, io::kWriteQueueDepthMax].
  // The queue shares this file system's state, like a File.
  [[nodiscard]] Result<std::unique_ptr<io::WriteQueue>> open_write_queue(
      std::size_t depth) override;

  // --- Crashing ---

  // A new file system whose durable state is what this one's disk would hold
  // after a crash resolved as `outcome`: no pending operations, no faults, no
  // crash point, operation_count() 0, the same Options. This one is unchanged
  // (and may keep running). Works on a crashed file system too.
  std::unique_ptr<FaultFileSystem> crash_image(const CrashOutcome& outcome) const;

  // The number of pending data operations a crash could keep or lose (dsync
  // writes are already durable and not counted); keep_first_k(k) is
  // meaningful for k in [0, pending_data_op_count()].
  std::size_t pending_data_op_count() const;
  // The number of directory-entry changes not yet made durable by sync_dir.
  std::size_t pending_namespace_op_count() const;

  // Freezes the file system once `n` counted operations have run in total
  // (counting those already run): later calls fail with EIO. n = 0 freezes it
  // at once if nothing ran yet.
  void set_crash_after_ops(std::uint64_t n);
  bool crashed() const;
  // Counted operations run so far (see the model above).
  std::uint64_t operation_count() const;

  // --- Faults ---

  // Arms a fault; several may be armed, and the first armed one that fires on
  // an operation decides its effect. Matching counts start from the moment a
  // fault is armed.
  void inject(const Fault& fault);
  void clear_faults();
  // How many operations a fault has fired on; an I/O error loop stops when a
  // run ends with this still 0.
  std::uint64_t faults_fired() const;

  Options options() const;
  void set_options(Options options);

  // --- Inspection and damage (never counted, never faulted, work when crashed) ---
  // Paths resolve in the visible namespace.

  // What a read sees now.
  Result<std::vector<std::byte>> contents(const std::string& path) const;
  // The bytes of the file that are durable whatever a crash keeps: the synced
  // image plus the dsync writes since. (Whether the file's name survives is a
  // separate question; see pending_namespace_op_count and CrashOutcome::Names.)
  Result<std::vector<std::byte>> durable_contents(const std::string& path) const;
  // Flip one bit of the durable image (EINVAL past its end); pending
  // operations are replayed on top again, so reads see the damage unless a
  // pending write covers it.
  Result<void> corrupt_bit(const std::string& path, std::uint64_t bit_offset);
  // Cut (or extend with zeros) the durable image, likewise.
  Result<void> truncate_durable(const std::string& path, std::uint64_t size_bytes);
  // The paths of every regular file, sorted ("/data/wal/0000000001.seg").
  std::vector<std::string> list_files_recursive() const;
  // Bytes returned by File::read_at so far (0 in a new clone or crash image).
  std::uint64_t bytes_read() const;

  // A full copy: namespace, contents, pending operations, options, armed faults,
  // counters and crash point (but no open files).
  std::unique_ptr<FaultFileSystem> clone() const;

 private:
  explicit FaultFileSystem(std::shared_ptr<detail::FaultState> state);

  std::shared_ptr<detail::FaultState> state_;
};

}  // namespace fusee::testing
