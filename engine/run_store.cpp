// The run store on RocksDB. Keys (one byte of kind, then fields; big-endian
// numbers so that keys sort by them):
//   'f' id                                   -> the finished run (JSON)
//   't' time id                              -> "" (index: all, by finish time)
//   'w' u32 length, workflow, time, id       -> "" (index: by workflow)
//   's' status byte, time, id                -> "" (index: by status)
//   'c' u32 shard                            -> u64 lsn, u64 keep_from_sequence, u64 replay_from, state
//   'j' u32 shard, u32 length, id, u64 lsn   -> journal records of a loaded unfinished run, from lsn
//   'k' u32 shard, u32 length, id, u64 lsn   -> journal records of a parked run, from lsn
//   'P' u32 shard, id                        -> a parked run (JSON: workflow, generation, times)
//   'W' u32 shard, time, id                  -> "" (index: parked runs by wake time)
//   'S' id                                   -> a finished run's streams
//   'H' id                                   -> a finished run's journal (JSON)
// time is the finish time in ms with its sign bit flipped, so that negative
// times sort first. A 'j' or 'k' value is either one record (its first byte
// is the record's format version, never 0) or a chunk of one run's records
// (put_journal_records): 0x00, then for each record varint(LSN - previous
// LSN; 0 for the first, whose LSN is the key's), varint(length), bytes.
#include "engine/run_store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "rows/pending_json.hpp"
#include "wal/errc.hpp"
#include "wal/log_format.hpp"
#include "wal/io/rocksdb_file_system.hpp"

namespace fusee::engine {
namespace {

void put_u32(std::string& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((value >> shift) & 0xff));
}
void put_u64(std::string& out, std::uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((value >> shift) & 0xff));
}
std::uint64_t get_u64(std::string_view in) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | static_cast<unsigned char>(in[i]);
  return value;
}
std::uint64_t time_key(std::int64_t ms) { return static_cast<std::uint64_t>(ms) ^ (std::uint64_t{1} << 63); }

std::string finished_key(const std::string& id) { return "f" + id; }
std::string time_prefix() { return "t"; }
std::string workflow_prefix(const std::string& workflow) {
  std::string key = "w";
  put_u32(key, static_cast<std::uint32_t>(workflow.size()));
  return key + workflow;
}
std::string status_prefix(RunStatus status) { return std::string("s") + static_cast<char>('0' + static_cast<int>(status)); }
std::string index_key(const std::string& prefix, std::int64_t ms, const std::string& id) {
  std::string key = prefix;
  put_u64(key, time_key(ms));
  return key + id;
}
std::string checkpoint_key(std::uint32_t shard) {
  std::string key = "c";
  put_u32(key, shard);
  return key;
}
std::string streams_key(const std::string& id) { return "S" + id; }
// One key, outside every kind a batch's bytes may name (BatchChecker).
constexpr char kReplicaAppliedKey[] = "R";
std::string history_key(const std::string& id) { return "H" + id; }
std::string shard_prefix(char kind, std::uint32_t shard) {
  std::string key(1, kind);
  put_u32(key, shard);
  return key;
}
std::string parked_key(std::uint32_t shard, const std::string& id) { return shard_prefix('P', shard) + id; }
std::string wake_key(std::uint32_t shard, std::int64_t wake_ms, const std::string& id) {
  auto key = shard_prefix('W', shard);
  put_u64(key, time_key(wake_ms));
  return key + id;
}
std::string journal_run_prefix(JournalPlace place, std::uint32_t shard, const std::string& id) {
  auto key = shard_prefix(static_cast<char>(place), shard);
  put_u32(key, static_cast<std::uint32_t>(id.size()));
  return key + id;
}
// The first key past every key starting with prefix.
std::string prefix_end(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}
// A 'j'/'k' value that is a chunk of records starts with this byte (a
// single record starts with its format version, 1 or more).
constexpr char kJournalChunkMarker = 0;
// The log's LEB128 varints (wal/log_format.hpp), on a string.
void put_varint(std::string& out, std::uint64_t value) {
  std::byte bytes[wal::kVarintBytesMax];
  out.append(reinterpret_cast<const char*>(bytes), wal::encode_varint(value, bytes));
}
// Reads a varint at `at` (advancing it); nothing when it is cut short or
// over-long.
std::optional<std::uint64_t> get_varint(std::string_view in, std::size_t& at) {
  auto rest = in.substr(at);
  auto decoded = wal::decode_varint(std::span(reinterpret_cast<const std::byte*>(rest.data()), rest.size()));
  if (!decoded) return std::nullopt;
  at += decoded->length;
  return decoded->value;
}
std::uint32_t get_u32(std::string_view in) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 8) | static_cast<unsigned char>(in[i]);
  return value;
}

}  // namespace

namespace {

// RocksDB's info log would go into the simulated disk too: nothing to read there.
class QuietLogger final : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

std::error_code to_error(const rocksdb::Status& status, std::string* text) {
  if (text) *text = status.ToString();
  if (status.IsCorruption()) return make_error_code(wal::errc::corrupt);
  if (status.IsNoSpace()) return std::make_error_code(std::errc::no_space_on_device);
  return std::make_error_code(std::errc::io_error);
}

}  // namespace

struct RunStore::Batch::Impl {
  rocksdb::WriteBatch batch;
  std::vector<Checkpoint> checkpoints;  // put into `batch` at the write
  std::vector<std::uint32_t> shards;    // named by a change, in order (repeats kept out)
  std::vector<std::string> stored_ids;  // of put_finished and put_parked
  void touch(std::uint32_t shard) {
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  }
};

RunStore::Batch::Batch() : impl_(std::make_unique<Impl>()) {}
RunStore::Batch::~Batch() = default;
RunStore::Batch::Batch(Batch&&) noexcept = default;
RunStore::Batch& RunStore::Batch::operator=(Batch&&) noexcept = default;

void RunStore::Batch::put_finished(const FinishedRun& run) {
  impl_->stored_ids.push_back(run.id);
  auto& batch = impl_->batch;
  (void)batch.Put(finished_key(run.id), encode_finished_run(run));
  (void)batch.Put(index_key(time_prefix(), run.finished_ms, run.id), "");
  (void)batch.Put(index_key(workflow_prefix(run.workflow), run.finished_ms, run.id), "");
  (void)batch.Put(index_key(status_prefix(run.status), run.finished_ms, run.id), "");
}

void RunStore::Batch::erase_finished(const FinishedRun& run) {
  auto& batch = impl_->batch;
  (void)batch.Delete(finished_key(run.id));
  (void)batch.Delete(index_key(time_prefix(), run.finished_ms, run.id));
  (void)batch.Delete(index_key(workflow_prefix(run.workflow), run.finished_ms, run.id));
  (void)batch.Delete(index_key(status_prefix(run.status), run.finished_ms, run.id));
  (void)batch.Delete(streams_key(run.id));
  (void)batch.Delete(history_key(run.id));
}

void RunStore::Batch::put_checkpoint(const Checkpoint& checkpoint) {
  impl_->checkpoints.push_back(checkpoint);
  impl_->touch(checkpoint.shard);
}

std::vector<Checkpoint>& RunStore::Batch::checkpoints() { return impl_->checkpoints; }

const std::vector<std::string>& RunStore::Batch::stored_ids() const { return impl_->stored_ids; }

std::vector<std::uint32_t> RunStore::Batch::shards() const { return impl_->shards; }

// [u32 checkpoints][each: u32 shard, u64 lsn, u64 keep_from, u64 replay_from,
// u32 length, state][RocksDB's WriteBatch bytes]
std::vector<std::byte> RunStore::Batch::encode() const {
  std::string out;
  put_u32(out, static_cast<std::uint32_t>(impl_->checkpoints.size()));
  for (const auto& checkpoint : impl_->checkpoints) {
    put_u32(out, checkpoint.shard);
    put_u64(out, checkpoint.lsn);
    put_u64(out, checkpoint.keep_from_sequence);
    put_u64(out, checkpoint.replay_from);
    put_u32(out, static_cast<std::uint32_t>(checkpoint.state.size()));
    out += checkpoint.state;
  }
  out += impl_->batch.Data();
  auto bytes = std::as_bytes(std::span(out));
  return {bytes.begin(), bytes.end()};
}

namespace {

// Checks a WriteBatch that came as bytes: only puts, deletes and range
// deletes of this store's kinds of keys, in the default column family; it
// learns the shards the keys name (rather than trusting a list beside them).
class BatchChecker final : public rocksdb::WriteBatch::Handler {
 public:
  std::vector<std::uint32_t> shards;
  rocksdb::Status PutCF(std::uint32_t family, const rocksdb::Slice& key, const rocksdb::Slice&) override {
    return check(family, key);
  }
  rocksdb::Status DeleteCF(std::uint32_t family, const rocksdb::Slice& key) override { return check(family, key); }
  rocksdb::Status DeleteRangeCF(std::uint32_t family, const rocksdb::Slice& begin, const rocksdb::Slice& end) override {
    auto checked = check(family, begin);
    if (!checked.ok()) return checked;
    // A range stays within one kind and shard (one run's journal).
    if (end.size() < 5 || begin.size() < 5 || std::memcmp(begin.data(), end.data(), 5) != 0) {
      return rocksdb::Status::InvalidArgument("a range across runs");
    }
    return checked;
  }

 private:
  rocksdb::Status check(std::uint32_t family, const rocksdb::Slice& key) {
    if (family != 0 || key.empty()) return rocksdb::Status::InvalidArgument("not a run store key");
    switch (key[0]) {
      case 'f': case 't': case 'w': case 's': case 'S': case 'H':
        return rocksdb::Status::OK();
      case 'c': case 'j': case 'k': case 'P': case 'W': {
        if (key.size() < 5) return rocksdb::Status::InvalidArgument("a short key");
        auto shard = get_u32(std::string_view(key.data() + 1, 4));
        if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
        return rocksdb::Status::OK();
      }
      default:
        return rocksdb::Status::InvalidArgument("not a run store key");
    }
  }
};

}  // namespace

std::optional<RunStore::Batch> RunStore::Batch::decode(std::span<const std::byte> bytes) {
  std::string_view in(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto take = [&](std::size_t n) -> std::optional<std::string_view> {
    if (in.size() < n) return std::nullopt;
    auto part = in.substr(0, n);
    in.remove_prefix(n);
    return part;
  };
  Batch batch;
  auto count = take(4);
  if (!count) return std::nullopt;
  for (std::uint32_t i = 0, n = get_u32(*count); i < n; ++i) {
    auto fixed = take(4 + 8 + 8 + 8 + 4);
    if (!fixed) return std::nullopt;
    Checkpoint checkpoint;
    checkpoint.shard = get_u32(*fixed);
    checkpoint.lsn = get_u64(fixed->substr(4));
    checkpoint.keep_from_sequence = get_u64(fixed->substr(12));
    checkpoint.replay_from = get_u64(fixed->substr(20));
    auto state = take(get_u32(fixed->substr(28)));
    if (!state) return std::nullopt;
    checkpoint.state = std::string(*state);
    batch.put_checkpoint(checkpoint);
  }
  // RocksDB's own header: an 8-byte sequence and a 4-byte count.
  if (in.size() < 12) return std::nullopt;
  batch.impl_->batch = rocksdb::WriteBatch(std::string(in));
  BatchChecker checker;
  if (!batch.impl_->batch.Iterate(&checker).ok()) return std::nullopt;
  for (auto shard : checker.shards) batch.impl_->touch(shard);
  return batch;
}

void RunStore::Batch::put_parked(std::uint32_t shard, const ParkedRun& run) {
  impl_->touch(shard);
  impl_->stored_ids.push_back(run.id);
  boost::json::object object{{"workflow", run.workflow},
                             {"generation", run.generation},
                             {"started_ms", run.started_ms},
                             {"wake_ms", run.wake_ms ? boost::json::value(*run.wake_ms) : boost::json::value()},
                             {"version", run.version},
                             {"waiting", rows::pending_json(run.waiting)}};
  (void)impl_->batch.Put(parked_key(shard, run.id), boost::json::serialize(object));
  if (run.wake_ms) (void)impl_->batch.Put(wake_key(shard, *run.wake_ms, run.id), "");
}

void RunStore::Batch::erase_parked(std::uint32_t shard, const ParkedRun& run) {
  impl_->touch(shard);
  (void)impl_->batch.Delete(parked_key(shard, run.id));
  if (run.wake_ms) (void)impl_->batch.Delete(wake_key(shard, *run.wake_ms, run.id));
}

void RunStore::Batch::put_journal_record(JournalPlace place, std::uint32_t shard, const std::string& id,
                                         std::uint64_t lsn, std::span<const std::byte> record) {
  impl_->touch(shard);
  auto key = journal_run_prefix(place, shard, id);
  put_u64(key, lsn);
  (void)impl_->batch.Put(key, rocksdb::Slice(reinterpret_cast<const char*>(record.data()), record.size()));
}

void RunStore::Batch::put_journal_records(JournalPlace place, std::uint32_t shard, const std::string& id,
                                          std::span<const StoredRecord> records) {
  if (records.empty()) return;
  impl_->touch(shard);
  auto key = journal_run_prefix(place, shard, id);
  put_u64(key, records.front().lsn);
  std::string value(1, kJournalChunkMarker);
  std::uint64_t previous = records.front().lsn;
  for (const auto& record : records) {
    put_varint(value, record.lsn - previous);
    put_varint(value, record.bytes.size());
    value.append(reinterpret_cast<const char*>(record.bytes.data()), record.bytes.size());
    previous = record.lsn;
  }
  (void)impl_->batch.Put(key, value);
}

void RunStore::Batch::erase_journal(JournalPlace place, std::uint32_t shard, const std::string& id) {
  impl_->touch(shard);
  auto prefix = journal_run_prefix(place, shard, id);
  (void)impl_->batch.DeleteRange(prefix, prefix_end(prefix));
}

void RunStore::Batch::put_replica_applied(const ReplicaApplied& applied) {
  std::string value;
  put_u64(value, applied.seq);
  put_u32(value, applied.records);
  put_u64(value, applied.lsn);
  (void)impl_->batch.Put(kReplicaAppliedKey, value);
}

void RunStore::Batch::put_journal_of_finished(const std::string& id, const std::string& journal) {
  (void)impl_->batch.Put(history_key(id), journal);
}

void RunStore::Batch::put_streams(const std::string& id, const std::string& streams) {
  (void)impl_->batch.Put(streams_key(id), streams);
}

// The store on RocksDB (the only one with a disk of its own).
class RocksRunStore final : public RunStore {
 public:
  std::shared_ptr<rocksdb::Env> env;  // outlives db
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::WriteOptions durable;
  bool read_only = false;
  RocksRunStore() { durable.sync = true; }

  Result<void> write(Batch batch) override { return write_with(std::move(batch), durable); }
  Result<void> write_unsynced(Batch batch) override { return write_with(std::move(batch), rocksdb::WriteOptions()); }
  Result<void> sync() override;
  Result<void> write_with(Batch batch, const rocksdb::WriteOptions& options);
  Result<std::optional<FinishedRun>> finished(const std::string& id) override;
  Result<RunPage> list(const RunQuery& query) override;
  Result<std::optional<Checkpoint>> checkpoint(std::uint32_t shard) override;
  Result<std::optional<std::string>> streams(const std::string& id) override;
  Result<std::optional<std::string>> journal_of_finished(const std::string& id) override;
  Result<void> load_journals(std::uint32_t shard, const JournalVisitor& visit) override;
  Result<void> read_journal(JournalPlace place, std::uint32_t shard, const std::string& id,
                            const JournalVisitor& visit) override;
  Result<std::optional<ParkedRun>> parked(std::uint32_t shard, const std::string& id) override;
  Result<void> parked_by_wake(std::uint32_t shard, std::int64_t from_ms,
                              const std::function<bool(const ParkedRun&)>& visit) override;
  Result<void> all_parked(std::uint32_t shard, const std::function<void(const ParkedRun&)>& visit) override;
  std::uint64_t size_bytes() const override;
  Result<std::size_t> expire_finished(std::int64_t before_ms) override;
  Result<ReplicaApplied> replica_applied() override;
  Result<void> stored_ids(const std::function<void(std::string_view id)>& visit) override;
  Result<std::unique_ptr<StoreCopy>> live_copy() override;
};

namespace {

// Every start of a new id asks the store whether the id is parked or
// finished, and the answer is nearly always no: whole-key bloom filters in
// the memtable and in each table file answer that without a search of
// either (without them, the two lookups were ~8% of a 1-step execute's
// server CPU at 16k executes/s).
void filter_absent_keys(rocksdb::Options& options) {
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  options.memtable_prefix_bloom_size_ratio = 0.05;
  options.memtable_whole_key_filtering = true;
}

}  // namespace

Result<std::unique_ptr<RunStore>> RunStore::open(const std::string& dir, std::string* error_text,
                                                 io::FileSystem* fs) {
  auto impl = std::make_unique<RocksRunStore>();
  rocksdb::Options options;
  if (fs != nullptr) {
    impl->env = io::make_rocksdb_env(*fs);
    options.env = impl->env.get();
    options.info_log = std::make_shared<QuietLogger>();
  }
  options.create_if_missing = true;
  options.paranoid_checks = true;
  // A small store: one background job, a modest write buffer.
  options.max_background_jobs = 1;
  // The memtable bounds what RocksDB replays from its own log at open, so
  // it is kept small, and that replay is not flushed to a table file on
  // the open path (the next memtable flush writes it).
  options.write_buffer_size = 8u << 20;
  options.avoid_flush_during_recovery = true;
  // Closing need not flush the memtable to a table file: the next open
  // replays RocksDB's own log instead (the last checkpoints at shutdown
  // are synced writes, which sync every unsynced one before them).
  options.avoid_flush_during_shutdown = true;
  // Checkpoints are written unsynced (engine/checkpointer.cpp), so a crash
  // may leave the log's tail torn: it is dropped from the first damaged
  // record, and the store is as it was after the last whole write (the
  // default, named here because the checkpoints rely on it).
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  filter_absent_keys(options);
  rocksdb::DB* db = nullptr;
  auto status = rocksdb::DB::Open(options, dir + "/runs", &db);
  if (!status.ok()) return to_error(status, error_text);
  impl->db.reset(db);
  return std::unique_ptr<RunStore>(std::move(impl));
}

Result<std::unique_ptr<RunStore>> RunStore::open_read_only(const std::string& dir, io::FileSystem& fs,
                                                           std::string* error_text) {
  auto impl = std::make_unique<RocksRunStore>();
  rocksdb::Options options;
  impl->env = io::make_rocksdb_env(fs);
  options.env = impl->env.get();
  // Without a logger of its own RocksDB would create LOG even here.
  options.info_log = std::make_shared<QuietLogger>();
  options.create_if_missing = false;
  options.paranoid_checks = true;
  options.max_background_jobs = 1;
  filter_absent_keys(options);
  rocksdb::DB* db = nullptr;
  auto status = rocksdb::DB::OpenForReadOnly(options, dir + "/runs", &db);
  if (!status.ok()) return to_error(status, error_text);
  impl->db.reset(db);
  impl->read_only = true;
  return std::unique_ptr<RunStore>(std::move(impl));
}

Result<void> RocksRunStore::sync() {
  if (read_only) return make_error_code(std::errc::read_only_file_system);
  auto status = db->SyncWAL();
  if (!status.ok()) return to_error(status, nullptr);
  return ok();
}

Result<void> RocksRunStore::write_with(Batch batch, const rocksdb::WriteOptions& options) {
  if (read_only) return make_error_code(std::errc::read_only_file_system);
  auto& changes = batch.impl_->batch;
  // Checkpoints last: a batch's checkpoint covers its other changes.
  for (const auto& checkpoint : batch.impl_->checkpoints) {
    std::string value;
    put_u64(value, checkpoint.lsn);
    put_u64(value, checkpoint.keep_from_sequence);
    put_u64(value, checkpoint.replay_from);
    value += checkpoint.state;
    (void)changes.Put(checkpoint_key(checkpoint.shard), value);
  }
  auto status = db->Write(options, &changes);
  if (!status.ok()) return to_error(status, nullptr);
  return ok();
}

Result<std::optional<FinishedRun>> RocksRunStore::finished(const std::string& id) {
  std::string value;
  auto status = db->Get(rocksdb::ReadOptions(), finished_key(id), &value);
  if (status.IsNotFound()) return std::optional<FinishedRun>();
  if (!status.ok()) return to_error(status, nullptr);
  auto run = decode_finished_run(value);
  if (!run) return make_error_code(wal::errc::corrupt);
  return run;
}

Result<RunPage> RocksRunStore::list(const RunQuery& query) {
  std::string prefix = query.workflow ? workflow_prefix(*query.workflow)
                       : query.status ? status_prefix(*query.status)
                                      : time_prefix();
  std::string end = prefix;
  put_u64(end, time_key(query.finished_to_ms));
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  if (query.cursor.empty()) {
    std::string start = prefix;
    put_u64(start, time_key(query.finished_from_ms));
    it->Seek(start);
  } else {
    it->Seek(query.cursor);
    if (it->Valid() && it->key().ToStringView() == query.cursor) it->Next();
  }
  RunPage page;
  const std::size_t limit = std::max<std::size_t>(1, query.limit);
  for (; it->Valid(); it->Next()) {
    auto key = it->key().ToStringView();
    if (!key.starts_with(prefix) || key >= std::string_view(end)) break;
    if (key.size() < prefix.size() + 8) return make_error_code(wal::errc::corrupt);
    std::string id(key.substr(prefix.size() + 8));
    auto run = FUSEE_TRY(finished(id));
    if (!run) continue;  // the index outlived its run (never written so)
    if (query.status && run->status != *query.status) continue;
    if (page.runs.size() == limit) {
      // One more match exists: the page ends at the previous key.
      page.next_cursor = index_key(prefix, page.runs.back().finished_ms, page.runs.back().id);
      break;
    }
    page.runs.push_back(std::move(*run));
  }
  if (!it->status().ok()) return to_error(it->status(), nullptr);
  return page;
}

Result<std::optional<Checkpoint>> RocksRunStore::checkpoint(std::uint32_t shard) {
  std::string value;
  auto status = db->Get(rocksdb::ReadOptions(), checkpoint_key(shard), &value);
  if (status.IsNotFound()) return std::optional<Checkpoint>();
  if (!status.ok()) return to_error(status, nullptr);
  if (value.size() < 24) return make_error_code(wal::errc::corrupt);
  Checkpoint checkpoint;
  checkpoint.shard = shard;
  checkpoint.lsn = get_u64(value);
  checkpoint.keep_from_sequence = get_u64(std::string_view(value).substr(8));
  checkpoint.replay_from = get_u64(std::string_view(value).substr(16));
  checkpoint.state = value.substr(24);
  return std::optional<Checkpoint>(std::move(checkpoint));
}

Result<std::optional<std::string>> RocksRunStore::journal_of_finished(const std::string& id) {
  std::string value;
  auto status = db->Get(rocksdb::ReadOptions(), history_key(id), &value);
  if (status.IsNotFound()) return std::optional<std::string>();
  if (!status.ok()) return to_error(status, nullptr);
  return std::optional<std::string>(std::move(value));
}

Result<std::optional<std::string>> RocksRunStore::streams(const std::string& id) {
  std::string value;
  auto status = db->Get(rocksdb::ReadOptions(), streams_key(id), &value);
  if (status.IsNotFound()) return std::optional<std::string>();
  if (!status.ok()) return to_error(status, nullptr);
  return std::optional<std::string>(std::move(value));
}

namespace {

// Visits the journal records under `prefix` (a shard's or one run's).
Result<void> visit_journal(rocksdb::DB& db, const std::string& prefix, std::size_t shard_prefix_bytes,
                           const RunStore::JournalVisitor& visit) {
  auto end = prefix_end(prefix);
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().ToStringView() < std::string_view(end); it->Next()) {
    auto key = it->key().ToStringView().substr(shard_prefix_bytes);
    if (key.size() < 4) return make_error_code(wal::errc::corrupt);
    auto length = get_u32(key);
    if (key.size() != 4 + std::size_t{length} + 8) return make_error_code(wal::errc::corrupt);
    std::string id(key.substr(4, length));
    auto lsn = get_u64(key.substr(4 + length));
    auto value = it->value().ToStringView();
    auto bytes = [](std::string_view part) {
      return std::span(reinterpret_cast<const std::byte*>(part.data()), part.size());
    };
    if (value.empty() || value.front() != kJournalChunkMarker) {
      FUSEE_TRY_VOID(visit(id, lsn, bytes(value)));
      continue;
    }
    // A chunk: its records in increasing LSN order, the first at the key's.
    std::size_t at = 1;
    bool first = true;
    while (at < value.size()) {
      auto delta = get_varint(value, at);
      if (!delta || (first ? *delta != 0 : *delta == 0)) return make_error_code(wal::errc::corrupt);
      auto size = get_varint(value, at);
      if (!size || *size == 0 || *size > value.size() - at) return make_error_code(wal::errc::corrupt);
      if (lsn + *delta < lsn) return make_error_code(wal::errc::corrupt);
      lsn += *delta;
      FUSEE_TRY_VOID(visit(id, lsn, bytes(value.substr(at, *size))));
      at += *size;
      first = false;
    }
    if (first) return make_error_code(wal::errc::corrupt);  // a marker and no record
  }
  if (!it->status().ok()) return to_error(it->status(), nullptr);
  return ok();
}

std::optional<ParkedRun> decode_parked(std::string id, std::string_view text) {
  boost::system::error_code error;
  auto value = boost::json::parse(text, error);
  if (error || !value.is_object()) return std::nullopt;
  try {
    const auto& object = value.get_object();
    ParkedRun run;
    run.id = std::move(id);
    run.workflow = boost::json::value_to<std::string>(object.at("workflow"));
    run.generation = boost::json::value_to<std::uint32_t>(object.at("generation"));
    run.started_ms = boost::json::value_to<std::int64_t>(object.at("started_ms"));
    if (!object.at("wake_ms").is_null()) run.wake_ms = boost::json::value_to<std::int64_t>(object.at("wake_ms"));
    if (const auto* version = object.if_contains("version")) run.version = boost::json::value_to<std::uint32_t>(*version);
    if (const auto* waiting = object.if_contains("waiting")) {
      auto commands = rows::pending_of(*waiting);
      if (!commands) return std::nullopt;
      run.waiting = std::move(*commands);
    }
    return run;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

Result<void> RocksRunStore::load_journals(std::uint32_t shard, const JournalVisitor& visit) {
  auto prefix = shard_prefix(static_cast<char>(JournalPlace::live), shard);
  return visit_journal(*db, prefix, prefix.size(), visit);
}

Result<void> RocksRunStore::read_journal(JournalPlace place, std::uint32_t shard, const std::string& id,
                                    const JournalVisitor& visit) {
  return visit_journal(*db, journal_run_prefix(place, shard, id), 5, visit);
}

Result<std::optional<ParkedRun>> RocksRunStore::parked(std::uint32_t shard, const std::string& id) {
  std::string value;
  auto status = db->Get(rocksdb::ReadOptions(), parked_key(shard, id), &value);
  if (status.IsNotFound()) return std::optional<ParkedRun>();
  if (!status.ok()) return to_error(status, nullptr);
  auto run = decode_parked(id, value);
  if (!run) return make_error_code(wal::errc::corrupt);
  return run;
}

Result<void> RocksRunStore::parked_by_wake(std::uint32_t shard, std::int64_t from_ms,
                                      const std::function<bool(const ParkedRun&)>& visit) {
  auto prefix = shard_prefix('W', shard);
  auto end = prefix_end(prefix);
  auto start = prefix;
  put_u64(start, time_key(from_ms));
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(start); it->Valid() && it->key().ToStringView() < std::string_view(end); it->Next()) {
    auto key = it->key().ToStringView();
    if (key.size() < prefix.size() + 8) return make_error_code(wal::errc::corrupt);
    std::string id(key.substr(prefix.size() + 8));
    auto run = FUSEE_TRY(parked(shard, id));
    if (!run) continue;  // the index outlived its entry (never written so)
    if (!visit(*run)) break;
  }
  if (!it->status().ok()) return to_error(it->status(), nullptr);
  return ok();
}

Result<void> RocksRunStore::all_parked(std::uint32_t shard, const std::function<void(const ParkedRun&)>& visit) {
  auto prefix = shard_prefix('P', shard);
  auto end = prefix_end(prefix);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().ToStringView() < std::string_view(end); it->Next()) {
    auto run = decode_parked(std::string(it->key().ToStringView().substr(prefix.size())), it->value().ToStringView());
    if (!run) return make_error_code(wal::errc::corrupt);
    visit(*run);
  }
  if (!it->status().ok()) return to_error(it->status(), nullptr);
  return ok();
}

std::uint64_t RocksRunStore::size_bytes() const {
  std::uint64_t sst = 0;
  std::uint64_t memtables = 0;
  db->GetIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize, &sst);
  db->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &memtables);
  return sst + memtables;
}

Result<ReplicaApplied> RocksRunStore::replica_applied() {
  std::string value;
  auto status = db->Get(rocksdb::ReadOptions(), kReplicaAppliedKey, &value);
  if (status.IsNotFound()) return ReplicaApplied{};
  if (!status.ok()) return to_error(status, nullptr);
  // 12 bytes: written before the LSN was kept.
  if (value.size() != 12 && value.size() != 20) return make_error_code(wal::errc::corrupt);
  const std::string_view view(value);
  return ReplicaApplied{get_u64(view), get_u32(view.substr(8)), value.size() == 20 ? get_u64(view.substr(12)) : 0};
}

Result<std::size_t> RocksRunStore::expire_finished(std::int64_t before_ms) {
  if (read_only) return make_error_code(std::errc::read_only_file_system);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  std::string start = time_prefix();
  put_u64(start, time_key(INT64_MIN));
  std::string end = time_prefix();
  put_u64(end, time_key(before_ms));
  Batch batch;
  std::size_t expired = 0;
  for (it->Seek(start); it->Valid() && it->key().ToStringView() < std::string_view(end); it->Next()) {
    std::string id(it->key().ToStringView().substr(1 + 8));
    auto run = FUSEE_TRY(finished(id));
    if (!run) continue;
    batch.erase_finished(*run);
    ++expired;
  }
  if (!it->status().ok()) return to_error(it->status(), nullptr);
  if (expired > 0) FUSEE_TRY_VOID(write(std::move(batch)));
  return expired;
}

Result<void> RocksRunStore::stored_ids(const std::function<void(std::string_view id)>& visit) {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("f"); it->Valid() && it->key().starts_with("f"); it->Next()) visit(it->key().ToStringView().substr(1));
  if (!it->status().ok()) return to_error(it->status(), nullptr);
  // Parked runs: 'P', u32 shard, id.
  for (it->Seek("P"); it->Valid() && it->key().starts_with("P"); it->Next()) {
    auto key = it->key().ToStringView();
    if (key.size() < 5) return make_error_code(wal::errc::corrupt);
    visit(key.substr(5));
  }
  if (!it->status().ok()) return to_error(it->status(), nullptr);
  return ok();
}

namespace {

// Gives RocksDB back its file deletions when the copy is done with.
class RocksStoreCopy final : public StoreCopy {
 public:
  explicit RocksStoreCopy(rocksdb::DB& db) : db_(db) {}
  ~RocksStoreCopy() override { (void)db_.EnableFileDeletions(/*force=*/false); }

 private:
  rocksdb::DB& db_;
};

}  // namespace

Result<std::unique_ptr<StoreCopy>> RocksRunStore::live_copy() {
  if (read_only) return make_error_code(std::errc::operation_not_supported);
  auto status = db->DisableFileDeletions();
  if (!status.ok()) return to_error(status, nullptr);
  auto copy = std::make_unique<RocksStoreCopy>(*db);  // from here, its destructor enables them again
  status = db->GetDbIdentity(copy->store_id);
  if (!status.ok()) return to_error(status, nullptr);
  std::vector<rocksdb::LiveFileStorageInfo> files;
  rocksdb::LiveFilesStorageInfoOptions options;
  options.wal_size_for_flush = 0;  // always flush: the copy then needs little of RocksDB's log
  status = db->GetLiveFilesStorageInfo(options, &files);
  if (!status.ok()) return to_error(status, nullptr);
  for (auto& file : files) {
    StoreFile out;
    out.name = file.relative_filename;
    out.path = file.directory + "/" + file.relative_filename;
    out.number = file.file_number;
    out.immutable = file.file_type == rocksdb::kTableFile;
    out.bytes = file.size;
    if (!file.replacement_contents.empty()) out.contents = std::move(file.replacement_contents);
    copy->files.push_back(std::move(out));
  }
  return std::unique_ptr<StoreCopy>(std::move(copy));
}

}  // namespace fusee::engine
