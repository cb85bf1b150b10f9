// Crash enumeration over the uploader (backup/uploader.hpp): the engine
// dies at every call it makes to the target, before the call takes effect
// or after it did (its answer lost), in the middle of an upload (each
// writes several manifests here) or between two. Each case then checks two things:
//  - right after the crash, a restore of the target holds every record
//    made durable before the last upload that completed (a crash inside an
//    upload never spoils what earlier uploads wrote);
//  - the next life resumes from the target's last manifest, uploads what
//    the log kept, and at its clean close the target restores to exactly
//    the log: every record, in order, large ones (the blob area) included.
// And around those: nothing a crash leaves on the target is taken for
// damage (backup::verify_target passes right after the crash and after the
// next life), and a copy of the crashed directory, started after the next
// life as a second writer of the same target, is stopped with a clear
// error and changes nothing a restore gives.
// The log's disk crashes too (a random crash image); the target's is a
// separate one that does not (object storage, or another machine).
// The second case adds a run store whose checkpoint moves on each round,
// a snapshot of it after each upload, and retention that deletes what the
// snapshot two rounds back makes unneeded: a restore then starts from the
// newest snapshot whose log is whole on the target, and the log it writes
// back begins where that snapshot's checkpoint needs it, whatever call of
// a snapshot or a deletion the crash cut.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <atomic>
#include <random>
#include <string>
#include <vector>

#include "backup/blob_pack.hpp"
#include "backup/directory_target.hpp"
#include "backup/manifest.hpp"
#include "backup/restore.hpp"
#include "backup/uploader.hpp"
#include "engine/run_store.hpp"
#include "tests/support/crash_sample.hpp"
#include "tests/support/fault_file_system.hpp"
#include "wal/log.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

// Dies at its `crash_at`-th call: `after` says whether that call still took
// effect on the target. Every call from then on fails, as a dead process
// makes none.
class CrashingTarget final : public backup::BackupTarget {
 public:
  explicit CrashingTarget(backup::BackupTarget& inner) : inner_(inner) {}
  std::uint64_t crash_at = 0;  // 0: never
  bool after = false;
  std::uint64_t calls = 0;
  bool dead = false;

  Result<void> put(const std::string& name, std::span<const std::byte> bytes) override {
    if (!enter()) return gone();
    auto done = inner_.put(name, bytes);
    return leave() ? done : Result<void>(gone());
  }
  Result<bool> put_new(const std::string& name, std::span<const std::byte> bytes) override {
    if (!enter()) return Result<bool>(boost::system::in_place_error, gone());
    auto done = inner_.put_new(name, bytes);
    return leave() ? done : Result<bool>(boost::system::in_place_error, gone());
  }
  Result<std::optional<std::vector<std::byte>>> get(const std::string& name) override {
    if (!enter()) return gone();
    auto done = inner_.get(name);
    if (!leave()) return gone();
    return done;
  }
  Result<void> remove(const std::string& name) override {
    if (!enter()) return gone();
    auto done = inner_.remove(name);
    return leave() ? done : Result<void>(gone());
  }
  Result<std::vector<std::string>> list(const std::string& prefix) override {
    if (!enter()) return gone();
    auto done = inner_.list(prefix);
    if (!leave()) return gone();
    return done;
  }
  std::string describe() const override { return "crashing " + inner_.describe(); }

 private:
  static std::error_code gone() { return std::make_error_code(std::errc::owner_dead); }
  // Whether the call goes ahead.
  bool enter() {
    if (dead) return false;
    ++calls;
    if (calls == crash_at && !after) dead = true;
    return !dead;
  }
  // Whether its answer comes back.
  bool leave() {
    if (calls == crash_at && after) dead = true;
    return !dead;
  }
  backup::BackupTarget& inner_;
};

// Every fifth record is 3000 bytes, past the offload size: the blob area.
std::vector<std::byte> record_of(int n) {
  auto text = fmt::format("record-{}", n);
  if (n % 5 == 0) text += std::string(3000, static_cast<char>('a' + n % 26));
  auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  return {bytes.begin(), bytes.end()};
}

// The test's clock, which publication times, snapshots and retention read:
// it moves 1 s a round, so that what retention deletes does not depend on
// how fast the machine is.
std::atomic<std::int64_t> test_clock_ms{1'000'000};

wal::LogOptions log_options(const std::string& dir) {
  wal::LogOptions options;
  options.now_ms = [] { return test_clock_ms.load(); };
  options.dir = dir;
  options.shard_count = 1;
  options.segment_bytes = 64 * 1024;  // a roll every dozen records or so
  options.direct_io = false;
  options.payload_offload_bytes = 1024;
  options.blob_file_bytes_max = 16 * 1024;
  options.warn = [](const std::string&) {};
  options.track_published = true;
  options.list_batches = true;
  return options;
}

backup::UploaderOptions uploader_options(engine::RunStore* store = nullptr) {
  backup::UploaderOptions options;
  options.store = store;
  options.snapshot_log_bytes = 1;  // a snapshot after every upload
  options.snapshot_retry = std::chrono::milliseconds::zero();
  options.now_ms = [] { return test_clock_ms.load(); };
  // With a store, retention too: each snapshot retires those two rounds
  // older, and the log before them.
  if (store) {
    options.retention = std::chrono::milliseconds(1500);
    options.retention_check = std::chrono::milliseconds::zero();
  }
  options.interval = std::chrono::hours(1);  // uploads only when the test asks
  options.warn = [](const std::string&) {};
  options.upload_bytes_max = 24 * 1024;  // an upload of 8 records writes two manifests or more
  return options;
}

std::vector<std::vector<std::byte>> records_of(io::FileSystem& fs, const std::string& dir) {
  auto log = wal::Log::open(fs, log_options(dir));
  REQUIRE(log.has_value());
  std::vector<std::vector<std::byte>> records;
  REQUIRE((*log)->read(0, 1, (*log)->durable_lsn(0), [&](wal::Lsn, std::span<const std::byte> bytes) {
    records.emplace_back(bytes.begin(), bytes.end());
  }).has_value());
  return records;
}

// The record's number (record_of's n).
int number_of(const std::vector<std::byte>& record) {
  std::string text(reinterpret_cast<const char*>(record.data()), std::min<std::size_t>(record.size(), 16));
  return std::stoi(text.substr(std::string("record-").size()));
}

// Restores the target's latest into a new directory of `fs`: its records,
// and the number of the first (0 without a snapshot, which restores the
// whole log). From a snapshot, its checkpoint must find its next record
// in the log restored (as recovery checks).
struct Restored {
  std::vector<std::vector<std::byte>> records;
  int first = 0;
  bool from_snapshot = false;
};

Restored restore_latest(io::FileSystem& fs, backup::BackupTarget& target, const std::string& dir) {
  std::string problem;
  auto restored = backup::restore_directory(fs, target, dir, std::nullopt, &problem);
  REQUIRE_MESSAGE(restored.has_value(), problem);
  Restored out;
  if (restored->snapshot_sequence == 0) {
    out.records = records_of(fs, dir);
    return out;
  }
  std::string why;
  auto store = engine::RunStore::open(dir, &why, &fs);
  REQUIRE_MESSAGE(store.has_value(), why);
  out.from_snapshot = true;
  auto checkpoint = (*store)->checkpoint(0);
  REQUIRE(checkpoint.has_value());
  REQUIRE(checkpoint->has_value());
  const auto lsn = (*checkpoint)->lsn;
  // Opened as the engine opens it: past the checkpoint (engine::read_checkpoints).
  auto options = log_options(dir);
  options.base = wal::RecoveryBase{(*checkpoint)->keep_from_sequence, {lsn}, {}};
  auto log = wal::Log::open(fs, options);
  REQUIRE(log.has_value());
  bool first = true;
  REQUIRE((*log)->read(0, 1, (*log)->durable_lsn(0), [&](wal::Lsn at, std::span<const std::byte> bytes) {
    if (first) CHECK(at <= lsn + 1);  // the checkpoint's next record is there
    first = false;
    out.records.emplace_back(bytes.begin(), bytes.end());
  }).has_value());
  CHECK((*log)->durable_lsn(0) >= lsn);
  if (!out.records.empty()) out.first = number_of(out.records.front());
  return out;
}

// A checkpoint of shard 0 at what the log made durable: what the engine's
// checkpointer writes, minus the runs.
void checkpoint(engine::RunStore& store, wal::Log& log) {
  engine::RunStore::Batch batch;
  const auto lsn = log.durable_lsn(0);
  batch.put_checkpoint(engine::Checkpoint{0, lsn, log.keep_from_sequence(0, lsn), "", 0});
  REQUIRE(store.write(std::move(batch)).has_value());
}

struct Life1 {
  std::uint64_t calls = 0;      // target calls the whole life makes (no crash)
  int durable = 0;              // records made durable before the crash
  int durable_at_upload = 0;    // ... before the last upload that completed
};

// The first life: 6 rounds of 8 records, each made durable, then (with a
// store) a checkpoint, then an upload (and a snapshot).
Life1 run_life_1(FaultFileSystem& fs, CrashingTarget& target, std::unique_ptr<FaultFileSystem>* image,
                 std::uint64_t image_seed, bool with_store) {
  Life1 life;
  auto options = log_options("/data");
  auto log = wal::Log::open(fs, options);
  REQUIRE(log.has_value());
  std::unique_ptr<engine::RunStore> store;
  if (with_store) {
    // As the engine makes it: RocksDB does not sync the directory it makes.
    REQUIRE(fs.create_dir("/data/runs").has_value());
    REQUIRE(fs.sync_dir("/data").has_value());
    auto opened = engine::RunStore::open("/data", nullptr, &fs);
    REQUIRE(opened.has_value());
    store = std::move(*opened);
  }
  std::string problem;
  auto uploader = backup::Uploader::start(fs, **log, "/data/wal", target, backup::Identity{"dir", 1},
                                          uploader_options(store.get()), &problem);
  REQUIRE_MESSAGE(uploader.has_value(), problem);
  int n = 0;
  for (int round = 0; round < 6 && !target.dead; ++round) {
    for (int k = 0; k < 8; ++k, ++n) {
      auto lsn = (*log)->append(0, record_of(n));
      REQUIRE(lsn.has_value());
      REQUIRE((*log)->wait_durable(0, *lsn).has_value());
      life.durable = n + 1;
    }
    if (store) checkpoint(*store, **log);
    test_clock_ms += 1000;
    if ((*uploader)->upload_now()) life.durable_at_upload = life.durable;
  }
  life.calls = target.calls;
  if (image) {
    // The process dies here: its disk is what the crash leaves.
    std::mt19937_64 random(image_seed);
    auto outcome = random() % 2 ? CrashOutcome::random_subset(random()) : CrashOutcome::drop_all();
    *image = fs.crash_image(outcome);
  } else {
    REQUIRE((*log)->close().has_value());
    REQUIRE((*uploader)->finish().has_value());
  }
  uploader->reset();  // before the store it reads
  return life;
}

// Chunks and blob packs of segments before every one the manifests name:
// what a crash in retention can leave, until the next retention sweeps it.
std::vector<std::string> unnamed_old_objects(backup::BackupTarget& target) {
  std::optional<std::uint64_t> first_segment;
  for (const auto& name : target.list(backup::kManifestPrefix).value()) {
    auto bytes = target.get(name).value();
    REQUIRE(bytes.has_value());
    auto manifest = backup::parse_manifest(*bytes);
    REQUIRE(manifest.has_value());
    for (const auto& chunk : manifest->chunks) first_segment = std::min(first_segment.value_or(chunk.segment), chunk.segment);
  }
  std::vector<std::string> old;
  for (const char* prefix : {backup::kChunkPrefix, backup::kBlobPackPrefix}) {
    for (const auto& name : target.list(prefix).value()) {
      auto segment = backup::number_of_name(name.substr(0, std::string_view(prefix).size() + 10), prefix);
      REQUIRE(segment.has_value());
      if (!first_segment || *segment < *first_segment) old.push_back(name);
    }
  }
  return old;
}

// The engine's disk with /data on it, and the target's, which never crashes.
struct Disks {
  Disks() {
    REQUIRE(fs.create_dir("/data").has_value());
    REQUIRE(fs.sync_dir("/").has_value());
    auto opened = backup::open_directory_target(remote, "/target");
    REQUIRE(opened.has_value());
    inner = std::move(*opened);
  }
  FaultFileSystem fs;
  FaultFileSystem remote;
  std::unique_ptr<backup::BackupTarget> inner;
};

}  // namespace

TEST_SUITE("crash") {
TEST_CASE("uploader: a crash at every call to the target, before or after it took effect, loses nothing uploaded") {
  bool with_store = false;
  SUBCASE("the log alone") {}
  SUBCASE("with a run store, a checkpoint each round and a snapshot each upload") { with_store = true; }
  // How many calls a life makes without a crash.
  std::uint64_t calls = 0;
  {
    Disks disks;
    CrashingTarget target(*disks.inner);
    calls = run_life_1(disks.fs, target, nullptr, 0, with_store).calls;
    auto restored = restore_latest(disks.remote, *disks.inner, "/restored");
    CHECK(restored.records.size() + static_cast<std::size_t>(restored.first) == 48);
    if (with_store) {
      CHECK(restored.first > 0);  // from a snapshot, not the first batch
      // Retention deleted the log before the snapshot two rounds back.
      auto manifests = disks.inner->list(backup::kManifestPrefix);
      REQUIRE(manifests.has_value());
      REQUIRE(!manifests->empty());
      auto first = disks.inner->get(manifests->front());
      REQUIRE(first.has_value());
      REQUIRE(first->has_value());
      auto manifest = backup::parse_manifest(**first);
      REQUIRE(manifest.has_value());
      CHECK(manifest->batches.front().sequence > 1);
      CHECK(disks.inner->list(backup::kSnapshotPrefix)->size() <= 4);  // two rounds back, the last, and the close's
    }
  }
  REQUIRE(calls > 10);
  std::uint64_t cases = 0;
  // Each (call, before or after it took effect) is a point: make test checks
  // a seeded sample within the budget, make test-long every one
  // (tests/support/crash_sample.hpp).
  CrashSample sample(with_store ? "uploader crash enumeration with a run store" : "uploader crash enumeration",
                     std::chrono::seconds(5), 24);
  while (auto point = sample.next((calls + 4) * 2 - 1)) {
    const std::uint64_t crash_at = *point / 2 + 1;
    const bool after = *point % 2 == 1;
    {
      CAPTURE(crash_at);
      CAPTURE(after);
      Disks disks;
      auto& remote = disks.remote;
      auto& inner = disks.inner;
      CrashingTarget target(*inner);
      target.crash_at = crash_at;
      target.after = after;
      std::unique_ptr<FaultFileSystem> image;
      auto life = run_life_1(disks.fs, target, &image, crash_at * 2 + after, with_store);
      // (A life makes a call or two more or fewer from run to run: whether
      // a segment's roll batch is published before an upload decides if
      // the next segment gets a chunk of its own then.)
      if (!target.dead) continue;
      ++cases;
      // What the target holds now: at least what the last completed upload
      // covered (nothing, before any).
      if (life.durable_at_upload > 0) {
        auto restored = restore_latest(remote, *inner, fmt::format("/early-{}-{}", crash_at, after));
        REQUIRE(restored.first + static_cast<int>(restored.records.size()) >= life.durable_at_upload);
        for (int n = restored.first; n < life.durable_at_upload; ++n) {
          CHECK(restored.records[static_cast<std::size_t>(n - restored.first)] == record_of(n));
        }
      }
      // Whatever the crash cut, the target verifies: a half-written upload
      // is never reported as damage.
      if (inner->get(backup::kIdentityName).value().has_value()) {
        std::string problem;
        CHECK_MESSAGE(backup::verify_target(remote, *inner, std::nullopt, &problem).has_value(), problem);
      }
      // The same crashed directory twice: the next life, and a copy of it.
      auto copy = image->crash_image(CrashOutcome::keep_all());
      // The copy, started beside the next life (both from the crash, before
      // either writes): a second writer of the same target.
      std::unique_ptr<wal::Log> copy_log;
      std::unique_ptr<engine::RunStore> copy_store;
      std::unique_ptr<backup::Uploader> copy_uploader;
      {
        auto log = wal::Log::open(*copy, log_options("/data"));
        REQUIRE(log.has_value());
        copy_log = std::move(*log);
        if (with_store) {
          auto opened = engine::RunStore::open("/data", nullptr, copy.get());
          REQUIRE(opened.has_value());
          copy_store = std::move(*opened);
        }
        std::string problem;
        auto uploader = backup::Uploader::start(*copy, *copy_log, "/data/wal", *inner, backup::Identity{"dir", 1},
                                                uploader_options(copy_store.get()), &problem);
        REQUIRE_MESSAGE(uploader.has_value(), problem);
        copy_uploader = std::move(*uploader);
      }
      // The next life, on what the crash left, with the target back.
      REQUIRE(records_of(*image, "/data").size() >= static_cast<std::size_t>(life.durable));
      {
        auto log = wal::Log::open(*image, log_options("/data"));
        REQUIRE(log.has_value());
        std::unique_ptr<engine::RunStore> store;
        if (with_store) {
          auto opened = engine::RunStore::open("/data", nullptr, image.get());
          REQUIRE(opened.has_value());
          store = std::move(*opened);
        }
        std::string problem;
        auto uploader = backup::Uploader::start(*image, **log, "/data/wal", *inner, backup::Identity{"dir", 1},
                                                uploader_options(store.get()), &problem);
        REQUIRE_MESSAGE(uploader.has_value(), problem);
        for (int n = 1000; n < 1010; ++n) {
          auto lsn = (*log)->append(0, record_of(n));
          REQUIRE(lsn.has_value());
          REQUIRE((*log)->wait_durable(0, *lsn).has_value());
        }
        if (store) checkpoint(*store, **log);
        test_clock_ms += 1000;
        REQUIRE((*uploader)->upload_now().has_value());
        if (store) CHECK((*uploader)->stats().snapshots == 1);
        REQUIRE((*log)->close().has_value());
        REQUIRE((*uploader)->finish().has_value());
      }
      auto local = records_of(*image, "/data");
      REQUIRE(local.size() >= static_cast<std::size_t>(life.durable) + 10);
      for (int n = 0; n < life.durable; ++n) CHECK(local[static_cast<std::size_t>(n)] == record_of(n));
      auto restored = restore_latest(remote, *inner, fmt::format("/restored-{}-{}", crash_at, after));
      const auto skipped = local.size() - restored.records.size();
      REQUIRE(skipped <= local.size());
      CHECK(std::vector(local.begin() + static_cast<std::ptrdiff_t>(skipped), local.end()) == restored.records);
      CHECK(restored.from_snapshot == with_store);
      {
        std::string problem;
        CHECK_MESSAGE(backup::verify_target(remote, *inner, std::nullopt, &problem).has_value(), problem);
      }
      // A retention the crash cut was finished by the next life's.
      if (with_store) CHECK(unnamed_old_objects(*inner) == std::vector<std::string>{});
      // The copy writes other records where the next life wrote its own,
      // and uploads them: it is stopped, naming the other copy.
      for (int n = 2000; n < 2010; ++n) {
        auto lsn = copy_log->append(0, record_of(n));
        REQUIRE(lsn.has_value());
        REQUIRE(copy_log->wait_durable(0, *lsn).has_value());
      }
      if (copy_store) checkpoint(*copy_store, *copy_log);
      test_clock_ms += 1000;
      CHECK(!copy_uploader->upload_now().has_value());
      CHECK(copy_uploader->stats().stopped);
      CHECK_MESSAGE(copy_uploader->stats().error.find("another copy") != std::string::npos,
                    copy_uploader->stats().error);
      REQUIRE(copy_log->close().has_value());
      (void)copy_uploader->finish();
      copy_uploader.reset();  // before the store it reads
      auto after_copy = restore_latest(remote, *inner, fmt::format("/after-copy-{}-{}", crash_at, after));
      CHECK(after_copy.records == restored.records);
    }
  }
  sample.report(cases);
  CHECK(cases > 10);
}
}
