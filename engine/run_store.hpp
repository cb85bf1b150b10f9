// RunStore: what outlives the log's segments — finished runs (kept for a
// retention), per-shard checkpoints, parked runs' journals, and the index
// behind list_runs (by workflow, status and finish time, paginated). Backed
// by RocksDB in <dir>/runs; this header names no RocksDB type, and only
// run_store.cpp includes RocksDB.
//
// Durability: every write returns once it is durable (a synced RocksDB write
// batch); a write is all or nothing. Thread-safe: any thread may call any
// method at once.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "rows/run_rows.hpp"
#include "fusee/engine.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::engine {

// The rows it stores (rows/run_rows.hpp), as the engine names them.
using rows::Checkpoint;
using rows::decode_finished_run;
using rows::encode_finished_run;
using rows::FinishedRun;
using rows::JournalPlace;
using rows::ParkedRun;
using rows::RunPage;
using rows::RunQuery;

class RocksRunStore;

// One file of a consistent copy of the store (RunStore::live_copy): what a
// backup uploads so that a restore starts from a snapshot of the store
// instead of replaying the whole log (backup/snapshot.hpp).
struct StoreFile {
  std::string name;          // in the store's directory: "000012.sst", "CURRENT"
  std::string path;          // where to read it, through the store's file system
  std::uint64_t number = 0;  // RocksDB's file number (0: the file has none)
  bool immutable = false;    // a table file: never rewritten, so uploaded once
  std::uint64_t bytes = 0;   // the copy is the file's first `bytes` (its MANIFEST and log grow)
  // The file's bytes as of the copy, when the file on disk no longer says
  // them (CURRENT).
  std::optional<std::string> contents;
};

// While a copy lives, the store deletes none of its files.
class StoreCopy {
 public:
  virtual ~StoreCopy() = default;
  // The store's identity (RocksDB's DB id): a store made anew (its
  // directory lost) has another, and numbers its files from 1 again.
  std::string store_id;
  std::vector<StoreFile> files;
};

// Where a replica's run store stands in its replicated log
// (hosting/store_applier.hpp): every run-store record of the batches
// before `seq` is applied, and the first `records` of batch `seq`.
struct ReplicaApplied {
  std::uint64_t seq = 0;
  std::uint32_t records = 0;
  // The LSN (of the log's run-store shard) of the last record applied: the
  // shard's floor when the log opens over a chain that retired the records
  // before it (0 from a store written before this was kept).
  std::uint64_t lsn = 0;
  friend bool operator==(const ReplicaApplied&, const ReplicaApplied&) = default;
};

// The run store's interface: RocksDB on the local disk (open, below), or
// the server's store reached through remote mode's connection
// (remote/remote_run_store.hpp).
class RunStore {
 public:
  // Opens (creating) the store in dir/runs. errc corrupt (wal) or an I/O
  // error, with `error_text` (if given) saying what RocksDB said.
  // With `fs`, RocksDB's files live in it (io::make_rocksdb_env), so that
  // tests crash the store with the log; without, RocksDB uses the disk
  // directly.
  static Result<std::unique_ptr<RunStore>> open(const std::string& dir, std::string* error_text = nullptr,
                                                io::FileSystem* fs = nullptr);
  // Opens an existing store without changing a byte of it (RocksDB's
  // read-only mode, its files read through `fs`, which may refuse writes):
  // for `fusee inspect`. write() then fails with EROFS.
  static Result<std::unique_ptr<RunStore>> open_read_only(const std::string& dir, io::FileSystem& fs,
                                                          std::string* error_text = nullptr);
  RunStore() = default;
  virtual ~RunStore() = default;
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  // A set of changes written together, durably.
  class Batch {
   public:
    Batch();
    ~Batch();
    Batch(Batch&&) noexcept;
    Batch& operator=(Batch&&) noexcept;
    void put_finished(const FinishedRun& run);
    void erase_finished(const FinishedRun& run);
    // A checkpoint with keep_from_sequence 0 has it filled in by whoever
    // holds the log when the batch is written (remote mode: the server).
    void put_checkpoint(const Checkpoint& checkpoint);
    // One record of an unfinished run's journal, as the log held it: among
    // the journals loaded at open (live), or among parked runs' journals,
    // which stay in the store until the run wakes.
    void put_journal_record(JournalPlace place, std::uint32_t shard, const std::string& id, std::uint64_t lsn,
                            std::span<const std::byte> record);
    // Several records of one run's journal, in increasing LSN order (none:
    // nothing is put), as one value under the first one's LSN (a "chunk"):
    // a checkpoint puts a key per run rather than per record, which is what
    // RocksDB's memtable inserts and, after a crash, its log's replay cost.
    // Read back record by record like put_journal_record's.
    struct StoredRecord {
      std::uint64_t lsn = 0;
      std::span<const std::byte> bytes;
    };
    void put_journal_records(JournalPlace place, std::uint32_t shard, const std::string& id,
                             std::span<const StoredRecord> records);
    // Every journal record of run `id` on `shard` in `place`.
    void erase_journal(JournalPlace place, std::uint32_t shard, const std::string& id);
    // Marks run `id` parked (out of memory), with what list_runs shows and
    // when a timer wakes it (none: only a signal or a request does).
    void put_parked(std::uint32_t shard, const ParkedRun& run);
    void erase_parked(std::uint32_t shard, const ParkedRun& run);
    // A finished run's streams (opaque here), read back by streams().
    void put_streams(const std::string& id, const std::string& streams);
    // A finished run's journal (engine/kept_journal.hpp's stored form), read back by
    // journal_of_finished(); it goes with the run.
    void put_journal_of_finished(const std::string& id, const std::string& journal);
    // Where the store stands in a replica's log (replicated mode: every
    // replica applies the run store's batches the log committed, in order):
    // written with the batch it follows, so that a restart applies on from
    // there. Not part of encode()'s bytes.
    void put_replica_applied(const ReplicaApplied& applied);

    // The ids of the finished and parked runs put (remote mode's id filters
    // learn them).
    const std::vector<std::string>& stored_ids() const;
    // The checkpoints put, in order (they are written last).
    std::vector<Checkpoint>& checkpoints();
    // Every shard a change names (checkpoints, journals, parked runs):
    // remote mode's server fences the write on their leases.
    std::vector<std::uint32_t> shards() const;
    // The batch as bytes, and back (remote mode sends it to the server);
    // decode refuses (nothing) bytes that are not one.
    std::vector<std::byte> encode() const;
    static std::optional<Batch> decode(std::span<const std::byte> bytes);

   private:
    friend class RocksRunStore;
    struct Impl;
    std::unique_ptr<Impl> impl_;
  };
  [[nodiscard]] virtual Result<void> write(Batch batch) = 0;
  // The same, durable only at the next sync() or synced write: a crash may
  // lose it and the writes after it, never a part of one. For checkpoints,
  // which the log backs until the store is synced and a segment retires.
  [[nodiscard]] virtual Result<void> write_unsynced(Batch batch) { return write(std::move(batch)); }
  // Makes every write so far durable.
  [[nodiscard]] virtual Result<void> sync() { return ok(); }

  [[nodiscard]] virtual Result<std::optional<FinishedRun>> finished(const std::string& id) = 0;
  [[nodiscard]] virtual Result<RunPage> list(const RunQuery& query) = 0;
  [[nodiscard]] virtual Result<std::optional<Checkpoint>> checkpoint(std::uint32_t shard) = 0;
  [[nodiscard]] virtual Result<std::optional<std::string>> streams(const std::string& id) = 0;
  [[nodiscard]] virtual Result<std::optional<std::string>> journal_of_finished(const std::string& id) = 0;
  using JournalVisitor =
      std::function<Result<void>(const std::string& id, std::uint64_t lsn, std::span<const std::byte>)>;
  // Visits the live journal records of every run stored for `shard`: run by
  // run (in key order), each run's records in LSN order.
  [[nodiscard]] virtual Result<void> load_journals(std::uint32_t shard, const JournalVisitor& visit) = 0;
  // Visits one run's journal records in `place`, in LSN order.
  [[nodiscard]] virtual Result<void> read_journal(JournalPlace place, std::uint32_t shard, const std::string& id,
                                                  const JournalVisitor& visit) = 0;
  [[nodiscard]] virtual Result<std::optional<ParkedRun>> parked(std::uint32_t shard, const std::string& id) = 0;
  // Parked runs of `shard` with a timer, earliest first (then by id), from
  // `from_ms` on; visit returns false to stop.
  [[nodiscard]] virtual Result<void> parked_by_wake(std::uint32_t shard, std::int64_t from_ms,
                                                    const std::function<bool(const ParkedRun&)>& visit) = 0;
  // Every parked run of `shard`, in id order.
  [[nodiscard]] virtual Result<void> all_parked(std::uint32_t shard,
                                                const std::function<void(const ParkedRun&)>& visit) = 0;
  // What put_replica_applied wrote last ({0, 0}: nothing). A remote store
  // does not offer it (errc operation_not_supported).
  [[nodiscard]] virtual Result<ReplicaApplied> replica_applied() {
    return make_error_code(std::errc::operation_not_supported);
  }
  // Bytes RocksDB reports for the live data (an estimate), for benchmarks.
  virtual std::uint64_t size_bytes() const = 0;
  // Deletes finished runs that finished before `before_ms` (retention);
  // returns how many went.
  [[nodiscard]] virtual Result<std::size_t> expire_finished(std::int64_t before_ms) = 0;
  // Visits the id of every finished run and every parked run: what the
  // server builds remote mode's id filters (engine/id_filter.hpp) from. A
  // remote store does not offer it (errc operation_not_supported).
  [[nodiscard]] virtual Result<void> stored_ids(const std::function<void(std::string_view id)>& visit) = 0;
  // The store's files as of now, after writing its memtable to a table
  // file, kept from deletion while the copy lives: every write that
  // returned before the call is in them. A remote or read-only store does
  // not offer it (errc operation_not_supported).
  [[nodiscard]] virtual Result<std::unique_ptr<StoreCopy>> live_copy() {
    return make_error_code(std::errc::operation_not_supported);
  }
};

}  // namespace fusee::engine
