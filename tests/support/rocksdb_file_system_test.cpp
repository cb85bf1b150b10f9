// The RocksDB Env over the FileSystem seam: RocksDB opens, writes, iterates,
// flushes, compacts and reopens on the FaultFileSystem, and after a crash at
// any operation keeps every acknowledged write batch whole and no batch torn.
#include "wal/io/rocksdb_file_system.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/fault_file_system.hpp"

namespace fusee::testing {
namespace {

using Names = CrashOutcome::Names;

const std::string kDbPath = "/data/runs";
// Several keys per batch, so a batch that is partly present shows.
constexpr int kKeysPerBatch = 4;

std::string key_of(int batch, int index) { return fmt::format("batch-{:04}/key-{}", batch, index); }
std::string value_of(int batch, int index) { return fmt::format("value {} of batch {}", index, batch); }

// A disk holding a durable /data.
std::unique_ptr<FaultFileSystem> new_data_disk() {
  auto fs = std::make_unique<FaultFileSystem>();
  REQUIRE(fs->create_dir("/data").has_value());
  REQUIRE(fs->sync_dir("/").has_value());
  return fs;
}

// And a durable, empty store directory in it. RocksDB never syncs the
// directory holding the store's own, so the caller makes it durable before
// the first open, as the engine does (sdk/facade/engine.cpp).
std::unique_ptr<FaultFileSystem> new_disk() {
  auto fs = new_data_disk();
  REQUIRE(fs->create_dir(kDbPath).has_value());
  REQUIRE(fs->sync_dir("/data").has_value());
  return fs;
}

// The Env first, so the DB goes before it.
struct Store {
  std::shared_ptr<rocksdb::Env> env;
  std::unique_ptr<rocksdb::DB> db;
};

// As engine/run_store.cpp opens the run store, with no timers writing
// statistics behind the test's back. No info_log: the Env's discarding logger
// is what RocksDB gets.
rocksdb::Status open_store(std::shared_ptr<rocksdb::Env> env, Store& store) {
  store.env = std::move(env);
  rocksdb::Options options;
  options.env = store.env.get();
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_background_jobs = 1;
  options.stats_dump_period_sec = 0;
  options.stats_persist_period_sec = 0;
  rocksdb::DB* db = nullptr;
  auto status = rocksdb::DB::Open(options, kDbPath, &db);
  store.db.reset(db);
  return status;
}

// RocksDB sleeps a second after a failed flush or compaction (a fixed wait
// on the Env's clock), and closing the store waits for it: on a frozen disk,
// a second per crash point that fails one. This Env cuts every sleep to a
// millisecond. As an EnvWrapper it reaches the adapter's files through
// RocksDB's legacy file wrappers, which pass every call through.
class ShortSleepEnv final : public rocksdb::EnvWrapper {
 public:
  explicit ShortSleepEnv(const std::shared_ptr<rocksdb::Env>& target) : rocksdb::EnvWrapper(target) {}
  const char* Name() const override { return "ShortSleepEnv"; }
  void SleepForMicroseconds(int micros) override {
    rocksdb::EnvWrapper::SleepForMicroseconds(std::min(micros, 1000));
  }
};

Store open_or_fail(io::FileSystem& fs) {
  Store store;
  auto status = open_store(io::make_rocksdb_env(fs), store);
  REQUIRE_MESSAGE(status.ok(), "open: " << status.ToString());
  return store;
}

void close_or_fail(Store& store) {
  auto status = store.db->Close();
  CHECK_MESSAGE(status.ok(), "close: " << status.ToString());
  store.db.reset();
}

// Acknowledged once this returns OK: the batch is in the synced WAL.
rocksdb::Status write_batch(rocksdb::DB& db, int batch) {
  rocksdb::WriteBatch writes;
  for (int index = 0; index < kKeysPerBatch; ++index) {
    auto put = writes.Put(key_of(batch, index), value_of(batch, index));
    REQUIRE(put.ok());
  }
  rocksdb::WriteOptions durable;
  durable.sync = true;
  return db.Write(durable, &writes);
}

void write_batches_or_fail(rocksdb::DB& db, int from, int to) {
  for (int batch = from; batch < to; ++batch) {
    auto status = write_batch(db, batch);
    REQUIRE_MESSAGE(status.ok(), "write batch " << batch << ": " << status.ToString());
  }
}

// Reads the whole store and returns how many batches it holds, checking that
// every batch is whole with its own values and that they are the first ones
// written: RocksDB recovers a prefix of a single writer's batches.
int batches_present(rocksdb::DB& db) {
  std::map<int, std::vector<int>> found;  // batch -> key indexes, in key order
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    int batch = -1;
    int index = -1;
    auto key = it->key().ToString();
    REQUIRE_MESSAGE(std::sscanf(key.c_str(), "batch-%d/key-%d", &batch, &index) == 2, "stray key " << key);
    CHECK_MESSAGE(it->value().ToString() == value_of(batch, index), "wrong value under " << key);
    found[batch].push_back(index);
  }
  REQUIRE_MESSAGE(it->status().ok(), "iteration: " << it->status().ToString());
  int expected_batch = 0;
  for (const auto& entry : found) {
    int batch = entry.first;
    std::size_t keys = entry.second.size();
    CHECK_MESSAGE(batch == expected_batch, "batch " << batch << " present without batch " << expected_batch);
    CHECK_MESSAGE(keys == kKeysPerBatch,
                  "batch " << batch << " partly present: " << keys << " of " << kKeysPerBatch << " keys");
    expected_batch = batch + 1;
  }
  return static_cast<int>(found.size());
}

int count_files(FaultFileSystem& fs, const std::string& suffix) {
  auto files = fs.list_files_recursive();
  return static_cast<int>(std::count_if(files.begin(), files.end(), [&](const std::string& path) {
    return path.starts_with(kDbPath + "/") && path.ends_with(suffix);
  }));
}

// What a crashed life managed: batches it began writing, and batches whose
// write returned OK.
struct Life {
  int attempted = 0;
  int acknowledged = 0;
};

// Opens the store on the crash image and requires what the crashed life was
// promised: every acknowledged batch whole, nothing torn, nothing invented.
// Then the store must take writes and reopen with them.
void check_after_crash(FaultFileSystem& image, const Life& life, const std::string& where) {
  INFO(where);
  auto store = open_or_fail(image);
  int present = batches_present(*store.db);
  CHECK_MESSAGE(present >= life.acknowledged, "acknowledged batches lost: " << present << " of "
                                                                            << life.acknowledged << " present");
  CHECK(present <= life.attempted);
  write_batches_or_fail(*store.db, present, present + 2);
  close_or_fail(store);
  auto again = open_or_fail(image);
  CHECK(batches_present(*again.db) == present + 2);
  close_or_fail(again);
}

// Batches, with two flushes (two overlapping table files: batch 0 is written
// again, unchanged, before the second) and a compaction merging them, so
// crashes land in WAL appends, table writes, MANIFEST edits and the
// deletion of obsolete files. Stops at the first error: once the file system
// is frozen, nothing more is acknowledged.
constexpr int kWorkloadBatches = 7;
void crashing_life(FaultFileSystem& fs, Life& life) {
  Store store;
  if (!open_store(std::make_shared<ShortSleepEnv>(io::make_rocksdb_env(fs)), store).ok()) return;
  for (int batch = 0; batch < kWorkloadBatches; ++batch) {
    life.attempted = batch + 1;
    if (!write_batch(*store.db, batch).ok()) return;
    life.acknowledged = batch + 1;
    if (batch == 3 && !write_batch(*store.db, 0).ok()) return;
    if (batch == 1 || batch == 3) {
      if (!store.db->Flush(rocksdb::FlushOptions()).ok()) return;
    }
    if (batch == 3) {
      if (!store.db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok()) return;
    }
  }
  (void)store.db->Close();
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("rocksdb env: a clean close and reopen keeps every batch, and iteration sees them in key order") {
    auto fs = new_disk();
    auto store = open_or_fail(*fs);
    write_batches_or_fail(*store.db, 0, 5);
    CHECK(batches_present(*store.db) == 5);
    close_or_fail(store);

    auto reopened = open_or_fail(*fs);
    std::vector<std::string> keys;
    std::unique_ptr<rocksdb::Iterator> it(reopened.db->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) keys.push_back(it->key().ToString());
    REQUIRE(it->status().ok());
    CHECK(keys.size() == 5 * kKeysPerBatch);
    CHECK(std::is_sorted(keys.begin(), keys.end()));
    it->Seek(key_of(3, 0));
    REQUIRE(it->Valid());
    CHECK(it->value().ToString() == value_of(3, 0));
    it.reset();
    std::string value;
    CHECK(reopened.db->Get(rocksdb::ReadOptions(), key_of(4, kKeysPerBatch - 1), &value).ok());
    CHECK(value == value_of(4, kKeysPerBatch - 1));
    CHECK(reopened.db->Get(rocksdb::ReadOptions(), key_of(5, 0), &value).IsNotFound());
    close_or_fail(reopened);
  }

  TEST_CASE("rocksdb env: every file RocksDB keeps is on the seam, and its info log is discarded") {
    auto fs = new_disk();
    auto store = open_or_fail(*fs);
    write_batches_or_fail(*store.db, 0, 1);
    close_or_fail(store);
    CHECK(count_files(*fs, "/CURRENT") == 1);
    CHECK(count_files(*fs, "/IDENTITY") == 1);
    CHECK(count_files(*fs, ".log") >= 1);
    CHECK(count_files(*fs, "/LOG") == 0);
    auto files = fs->list_files_recursive();
    CHECK(std::any_of(files.begin(), files.end(), [](const std::string& path) {
      return path.starts_with(kDbPath + "/MANIFEST-");
    }));
    CHECK(std::any_of(files.begin(), files.end(), [](const std::string& path) {
      return path.starts_with(kDbPath + "/OPTIONS-");
    }));
  }

  TEST_CASE("rocksdb env: flush and compaction write table files through the seam and keep every key") {
    auto fs = new_disk();
    auto store = open_or_fail(*fs);
    write_batches_or_fail(*store.db, 0, 3);
    REQUIRE(store.db->Flush(rocksdb::FlushOptions()).ok());
    // Batch 0 again, with the same values, so the two tables overlap and the
    // compaction must merge them rather than move them down whole.
    write_batches_or_fail(*store.db, 0, 1);
    write_batches_or_fail(*store.db, 3, 6);
    REQUIRE(store.db->Flush(rocksdb::FlushOptions()).ok());
    CHECK(count_files(*fs, ".sst") == 2);
    REQUIRE(store.db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok());
    // The two tables merged into one, and the inputs were deleted.
    CHECK(count_files(*fs, ".sst") == 1);
    CHECK(batches_present(*store.db) == 6);
    close_or_fail(store);

    auto reopened = open_or_fail(*fs);
    CHECK(batches_present(*reopened.db) == 6);
    close_or_fail(reopened);
  }

  TEST_CASE("rocksdb env: errors reach RocksDB as the statuses it tests for") {
    auto fs = new_disk();
    auto env = io::make_rocksdb_env(*fs);
    CHECK(env->FileExists("/data/missing").IsNotFound());
    std::vector<std::string> children;
    CHECK(env->GetChildren("/data/missing", &children).IsNotFound());
    std::uint64_t size = 0;
    CHECK(env->GetFileSize("/data/missing", &size).IsPathNotFound());
    CHECK(env->DeleteFile("/data/missing").IsPathNotFound());
    CHECK(env->CreateDir("/data").IsIOError());
    CHECK(env->CreateDirIfMissing("/data").ok());

    fs->inject(Fault{OpKind::create, 1, FaultEffect::no_space});
    std::unique_ptr<rocksdb::WritableFile> file;
    CHECK(env->NewWritableFile("/data/full", &file, rocksdb::EnvOptions()).IsNoSpace());

    REQUIRE(env->NewWritableFile("/data/file", &file, rocksdb::EnvOptions()).ok());
    REQUIRE(file->Append("0123456789").ok());
    REQUIRE(file->Sync().ok());
    REQUIRE(file->Close().ok());
    CHECK(env->GetFileSize("/data/file", &size).ok());
    CHECK(size == 10);
    bool directory = true;
    CHECK(env->GetFileSystem()->IsDirectory("/data/file", rocksdb::IOOptions(), &directory, nullptr).ok());
    CHECK_FALSE(directory);
    CHECK(env->GetFileSystem()->IsDirectory("/data", rocksdb::IOOptions(), &directory, nullptr).ok());
    CHECK(directory);
    // A new writable file over an old one starts empty (O_TRUNC).
    REQUIRE(env->NewWritableFile("/data/file", &file, rocksdb::EnvOptions()).ok());
    REQUIRE(file->Close().ok());
    CHECK(env->GetFileSize("/data/file", &size).ok());
    CHECK(size == 0);
  }

  TEST_CASE("rocksdb env: a store whose directory the caller did not sync is lost with it, as on a real disk") {
    // The adapter adds no sync RocksDB did not ask for: RocksDB creates the
    // store's directory and syncs what is inside, never the directory that
    // holds it, so a power loss may take the whole store.
    auto fs = new_data_disk();
    auto store = open_or_fail(*fs);
    write_batches_or_fail(*store.db, 0, 1);
    auto image = fs->crash_image(CrashOutcome::keep_all(Names::revert));
    CHECK_FALSE(image->exists(kDbPath).value());
    REQUIRE(fs->sync_dir("/data").has_value());
    image = fs->crash_image(CrashOutcome::drop_all(Names::revert));
    auto reopened = open_or_fail(*image);
    CHECK(batches_present(*reopened.db) == 1);
    close_or_fail(reopened);
    close_or_fail(store);
  }
}

TEST_SUITE("crash") {
  TEST_CASE("rocksdb env: a crash after any acknowledged batch keeps exactly the acknowledged batches") {
    auto fs = new_disk();
    auto store = open_or_fail(*fs);
    std::uint64_t images = 0;
    for (int batch = 0; batch < 5; ++batch) {
      write_batches_or_fail(*store.db, batch, batch + 1);
      if (batch == 2) REQUIRE(store.db->Flush(rocksdb::FlushOptions()).ok());
      // Every batch written was acknowledged, so the store holds exactly them.
      Life life{batch + 1, batch + 1};
      for (const auto& outcome : all_crash_outcomes(fs->pending_data_op_count(), 2)) {
        auto image = fs->crash_image(outcome);
        check_after_crash(*image, life, fmt::format("crash after batch {}, {}", batch, outcome.describe()));
        ++images;
      }
    }
    close_or_fail(store);
    std::cout << "rocksdb env: " << images << " crash images after acknowledged batches checked\n";
  }

  TEST_CASE("rocksdb env: after a crash at any operation, acknowledged batches are whole and none is torn") {
    std::uint64_t crash_points = 0;
    std::uint64_t crash_states = 0;
    for (std::uint64_t crash_at = 0;; ++crash_at) {
      auto fs = new_disk();
      fs->set_crash_after_ops(fs->operation_count() + crash_at);
      Life life;
      crashing_life(*fs, life);
      bool crashed = fs->crashed();
      ++crash_points;
      auto pending = fs->pending_data_op_count();
      std::vector<CrashOutcome> outcomes;
      for (auto names : {Names::revert, Names::keep}) {
        outcomes.push_back(CrashOutcome::drop_all(names));
        outcomes.push_back(CrashOutcome::keep_all(names));
        if (pending > 1) outcomes.push_back(CrashOutcome::keep_first_k(pending / 2, names));
        outcomes.push_back(CrashOutcome::random_subset(crash_at, names));
        outcomes.push_back(CrashOutcome::tear(crash_at, names));
      }
      for (const auto& outcome : outcomes) {
        auto image = fs->crash_image(outcome);
        check_after_crash(*image, life, fmt::format("crash after {} ops, {}", crash_at, outcome.describe()));
        ++crash_states;
      }
      if (!crashed) break;  // the workload ran to its end: every point is covered
    }
    std::cout << "rocksdb env crash enumeration: " << crash_points << " crash points, " << crash_states
              << " crash states checked\n";
    CHECK(crash_points > 50);
  }
}

}  // namespace fusee::testing
