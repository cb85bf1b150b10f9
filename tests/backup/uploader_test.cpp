// The uploader against a target that fails (backup/uploader.hpp): a failed
// upload covers nothing, is counted and told once per streak, and the next
// one takes everything since; a restore then holds every record the log
// made durable before the last upload.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backup/blob_pack.hpp"
#include "backup/directory_target.hpp"
#include "backup/restore.hpp"
#include "backup/uploader.hpp"
#include "engine/run_store.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"
#include "wal/log_format.hpp"

using namespace fusee;

namespace {

// A directory target whose writes fail while `failing` is set, as an
// unreachable target does.
class FlakyTarget final : public backup::BackupTarget {
 public:
  explicit FlakyTarget(std::unique_ptr<backup::BackupTarget> inner) : inner_(std::move(inner)) {}
  std::atomic<bool> failing{false};
  std::atomic<int> refused{0};

  Result<void> put(const std::string& name, std::span<const std::byte> bytes) override {
    if (failing) {
      ++refused;
      return unreachable();
    }
    return inner_->put(name, bytes);
  }
  Result<bool> put_new(const std::string& name, std::span<const std::byte> bytes) override {
    if (failing) return Result<bool>(boost::system::in_place_error, unreachable());
    return inner_->put_new(name, bytes);
  }
  Result<std::optional<std::vector<std::byte>>> get(const std::string& name) override {
    if (failing) return unreachable();
    return inner_->get(name);
  }
  Result<void> remove(const std::string& name) override {
    if (failing) return unreachable();
    return inner_->remove(name);
  }
  Result<std::vector<std::string>> list(const std::string& prefix) override {
    if (failing) return unreachable();
    return inner_->list(prefix);
  }
  static std::error_code unreachable() { return std::make_error_code(std::errc::network_unreachable); }
  std::string describe() const override { return "flaky " + inner_->describe(); }

 private:
  std::unique_ptr<backup::BackupTarget> inner_;
};

// Every seventh record is 3000 bytes: past the offload size of the case
// with a blob area, where those go to blob files.
std::vector<std::byte> record_of(int n) {
  auto text = "record-" + std::to_string(n);
  if (n % 7 == 0) text += std::string(3000, static_cast<char>('a' + n % 26));
  auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  return {bytes.begin(), bytes.end()};
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("uploader: a failed upload covers nothing and is told once; the next one takes everything since") {
  // With a blob area, the large records go up in blob packs and come back.
  bool blobs = false;
  SUBCASE("segments only") { blobs = false; }
  SUBCASE("with a blob area") { blobs = true; }
  testing::TempDir dir;
  io::PosixFileSystem fs;
  wal::LogOptions options;
  options.dir = dir.sub("data");
  options.shard_count = 1;
  options.segment_bytes = 64 * 1024;  // several segments
  options.direct_io = false;
  options.payload_offload_bytes = blobs ? 1024 : 0;
  options.blob_file_bytes_max = 16 * 1024;  // several blob files
  options.warn = [](const std::string&) {};
  options.track_published = true;
  options.list_batches = true;
  auto log = wal::Log::open(fs, options);
  REQUIRE(log.has_value());
  auto inner = backup::open_directory_target(fs, dir.sub("target"));
  REQUIRE(inner.has_value());
  FlakyTarget target(std::move(*inner));
  std::mutex mu;
  std::vector<std::string> warnings;
  backup::UploaderOptions uploader_options;
  uploader_options.interval = std::chrono::hours(1);  // uploads only when asked, below
  uploader_options.warn = [&](const std::string& text) {
    std::lock_guard lock(mu);
    warnings.push_back(text);
  };
  std::string problem;
  auto uploader = backup::Uploader::start(fs, **log, options.dir + "/wal", target, backup::Identity{"test", 1},
                                          uploader_options, &problem);
  REQUIRE_MESSAGE(uploader.has_value(), problem);
  auto write = [&](int from, int to) {
    for (int n = from; n < to; ++n) {
      auto lsn = (*log)->append(0, record_of(n));
      REQUIRE(lsn.has_value());
      REQUIRE((*log)->wait_durable(0, *lsn).has_value());
    }
  };
  write(0, 50);
  REQUIRE((*uploader)->upload_now().has_value());
  auto covered = (*uploader)->stats().covered_sequence;
  CHECK(covered > 0);
  // The target goes away: two uploads fail, told once.
  target.failing = true;
  write(50, 400);
  CHECK_FALSE((*uploader)->upload_now().has_value());
  write(400, 500);
  CHECK_FALSE((*uploader)->upload_now().has_value());
  auto stats = (*uploader)->stats();
  CHECK(stats.failures == 2);
  CHECK(stats.covered_sequence == covered);  // what failed covers nothing
  CHECK(stats.pending_batches > 0);
  CHECK(stats.error.find("uploading to flaky directory") != std::string::npos);
  {
    std::lock_guard lock(mu);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("the log keeps every segment meanwhile") != std::string::npos);
  }
  // Back: the next upload takes everything since, across the segments.
  target.failing = false;
  REQUIRE((*uploader)->upload_now().has_value());
  stats = (*uploader)->stats();
  CHECK(stats.error.empty());
  CHECK(stats.pending_batches == 0);
  CHECK(stats.covered_sequence > covered);
  CHECK(stats.blobs == (blobs ? 500u / 7 + 1 : 0u));
  REQUIRE((*log)->close().has_value());
  REQUIRE((*uploader)->finish().has_value());
  // A restore holds all 500 records, in order.
  std::string why;
  auto restored = backup::restore_directory(fs, target, dir.sub("restored"), std::nullopt, &why);
  REQUIRE_MESSAGE(restored.has_value(), why);
  auto reopened_options = options;
  reopened_options.dir = dir.sub("restored");
  auto reopened = wal::Log::open(fs, reopened_options);
  REQUIRE(reopened.has_value());
  std::vector<std::vector<std::byte>> records;
  REQUIRE((*reopened)->read(0, 1, (*reopened)->durable_lsn(0), [&](wal::Lsn, std::span<const std::byte> bytes) {
    records.emplace_back(bytes.begin(), bytes.end());
  }).has_value());
  REQUIRE(records.size() == 500);
  for (int n = 0; n < 500; ++n) CHECK(records[static_cast<std::size_t>(n)] == record_of(n));
}
}

namespace {

// A log on a POSIX directory, with what a backup needs from it.
struct LogUnderTest {
  explicit LogUnderTest(const std::string& dir,
                        std::uint64_t payload_offload_bytes = wal::kPayloadOffloadBytesDefault,
                        std::function<std::int64_t()> now_ms = {}) {
    options.now_ms = std::move(now_ms);
    options.dir = dir;
    options.payload_offload_bytes = payload_offload_bytes;
    options.shard_count = 1;
    options.segment_bytes = 64 * 1024;
    options.direct_io = false;
    options.warn = [](const std::string&) {};
    options.track_published = true;
    options.list_batches = true;
    auto opened = wal::Log::open(fs, options);
    REQUIRE(opened.has_value());
    log = std::move(*opened);
  }
  void write(int from, int to) {
    for (int n = from; n < to; ++n) {
      auto lsn = log->append(0, record_of(n));
      REQUIRE(lsn.has_value());
      REQUIRE(log->wait_durable(0, *lsn).has_value());
    }
  }
  io::PosixFileSystem fs;
  wal::LogOptions options;
  std::unique_ptr<wal::Log> log;
};

struct Warnings {
  std::mutex mu;
  std::vector<std::string> texts;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& text) {
      std::lock_guard lock(mu);
      texts.push_back(text);
    };
  }
  bool any(const std::string& part) {
    std::lock_guard lock(mu);
    for (const auto& text : texts) {
      if (text.find(part) != std::string::npos) return true;
    }
    return false;
  }
};

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("uploader: a target that does not answer at start is connected to later; the backlog bound trips and clears") {
  testing::TempDir dir;
  LogUnderTest under(dir.sub("data"));
  auto inner = backup::open_directory_target(under.fs, dir.sub("target"));
  REQUIRE(inner.has_value());
  FlakyTarget target(std::move(*inner));
  target.failing = true;
  Warnings warnings;
  backup::UploaderOptions options;
  options.interval = std::chrono::hours(1);
  options.backlog_bytes_max = 100 * 1024;  // batches take whole 4 KiB blocks
  options.warn = warnings.sink();
  std::string problem;
  auto uploader = backup::Uploader::start(under.fs, *under.log, dir.sub("data") + "/wal", target,
                                          backup::Identity{"test", 1}, options, &problem);
  REQUIRE_MESSAGE(uploader.has_value(), problem);  // the engine goes on
  auto stats = (*uploader)->stats();
  CHECK_FALSE(stats.connected);
  CHECK(stats.covered_sequence == 0);  // nothing retires meanwhile
  CHECK(warnings.any("connecting to flaky"));
  under.write(0, 5);  // 5 batches: under the bound
  CHECK_FALSE((*uploader)->upload_now().has_value());
  CHECK_FALSE((*uploader)->backlog_full());
  under.write(5, 200);  // over it
  CHECK_FALSE((*uploader)->upload_now().has_value());
  CHECK((*uploader)->backlog_full());
  stats = (*uploader)->stats();
  CHECK(stats.backlog_full);
  CHECK(stats.backlog_bytes > 100 * 1024);
  CHECK(warnings.any("past backup_backlog_bytes_max"));
  // The target answers: connected, everything uploaded, the bound clears.
  target.failing = false;
  REQUIRE((*uploader)->upload_now().has_value());
  stats = (*uploader)->stats();
  CHECK(stats.connected);
  CHECK_FALSE(stats.backlog_full);
  CHECK_FALSE((*uploader)->backlog_full());
  CHECK(stats.backlog_bytes == 0);
  CHECK(stats.pending_batches == 0);
  CHECK(warnings.any("new requests are taken again"));
  REQUIRE(under.log->close().has_value());
  REQUIRE((*uploader)->finish().has_value());
  std::string why;
  auto restored = backup::restore_directory(under.fs, target, dir.sub("restored"), std::nullopt, &why);
  REQUIRE_MESSAGE(restored.has_value(), why);
  LogUnderTest reopened(dir.sub("restored"));
  std::size_t records = 0;
  REQUIRE(reopened.log->read(0, 1, reopened.log->durable_lsn(0), [&](wal::Lsn, std::span<const std::byte>) {
    ++records;
  }).has_value());
  CHECK(records == 200);
}

TEST_CASE("uploader: another directory's manifest where ours goes stops the backup, loudly, for good") {
  testing::TempDir dir;
  LogUnderTest under(dir.sub("data"));
  auto target = backup::open_directory_target(under.fs, dir.sub("target"));
  REQUIRE(target.has_value());
  Warnings warnings;
  backup::UploaderOptions options;
  options.interval = std::chrono::hours(1);
  options.warn = warnings.sink();
  std::string problem;
  auto uploader = backup::Uploader::start(under.fs, *under.log, dir.sub("data") + "/wal", **target,
                                          backup::Identity{"ours", 1}, options, &problem);
  REQUIRE_MESSAGE(uploader.has_value(), problem);
  under.write(0, 10);
  REQUIRE((*uploader)->upload_now().has_value());
  const auto covered = (*uploader)->stats().covered_sequence;
  under.write(10, 20);
  // Another writer got there first (say its identity check raced ours):
  // whatever name our next manifest takes, one of another directory is
  // there.
  backup::Manifest theirs;
  theirs.directory = "theirs";
  theirs.batches = {wal::PublishedBatch{covered + 1, 1, 0, 4096, 0, 0}};
  auto json = backup::manifest_json(theirs);
  for (std::uint64_t sequence = covered + 1; sequence <= covered + 20; ++sequence) {
    REQUIRE((*target)->put(backup::manifest_name(sequence), std::as_bytes(std::span(json))).has_value());
  }
  CHECK_FALSE((*uploader)->upload_now().has_value());
  auto stats = (*uploader)->stats();
  CHECK(stats.stopped);
  CHECK(stats.covered_sequence == covered);
  CHECK(stats.error.find("written by another data directory (theirs)") != std::string::npos);
  CHECK(warnings.any("backup: STOPPED"));
  // For good: nothing more is tried.
  under.write(20, 30);
  CHECK_FALSE((*uploader)->upload_now().has_value());
  CHECK((*uploader)->stats().covered_sequence == covered);
  REQUIRE(under.log->close().has_value());
  CHECK_FALSE((*uploader)->finish().has_value());
}
}


TEST_SUITE("unit") {
TEST_CASE("uploader: a damaged blob pack on the target fails the restore, naming it") {
  testing::TempDir dir;
  LogUnderTest under(dir.sub("data"), 1024);  // every seventh record goes to the blob area
  auto target = backup::open_directory_target(under.fs, dir.sub("target"));
  REQUIRE(target.has_value());
  backup::UploaderOptions options;
  options.interval = std::chrono::hours(1);
  options.warn = [](const std::string&) {};
  std::string problem;
  auto uploader = backup::Uploader::start(under.fs, *under.log, dir.sub("data") + "/wal", **target,
                                          backup::Identity{"test", 1}, options, &problem);
  REQUIRE_MESSAGE(uploader.has_value(), problem);
  under.write(0, 30);
  REQUIRE(under.log->close().has_value());
  REQUIRE((*uploader)->finish().has_value());
  CHECK((*uploader)->stats().blobs == 5);
  auto packs = (*target)->list(backup::kBlobPackPrefix);
  REQUIRE(packs.has_value());
  REQUIRE_FALSE(packs->empty());
  {
    auto path = dir.sub("target") + "/" + packs->front();
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(40);
    file.put('!');
  }
  auto restored = backup::restore_directory(under.fs, **target, dir.sub("restored"), std::nullopt, &problem);
  CHECK_FALSE(restored.has_value());
  CHECK_MESSAGE(problem.find("blob pack " + packs->front() + ": its checksum does not match") != std::string::npos,
                problem);
}
}

TEST_SUITE("unit") {
TEST_CASE("uploader: with whole segments (no upload interval), only complete segments go up, and the rest at finish") {
  testing::TempDir dir;
  LogUnderTest data(dir.sub("data"), 0);
  auto target = backup::open_directory_target(data.fs, dir.sub("target"));
  REQUIRE(target.has_value());
  backup::UploaderOptions options;
  options.interval = std::chrono::hours(1);  // uploads only when asked
  options.whole_segments = true;
  options.warn = [](const std::string&) {};
  std::string problem;
  auto uploader = backup::Uploader::start(data.fs, *data.log, data.options.dir + "/wal", **target,
                                          backup::Identity{"test", 1}, options, &problem);
  REQUIRE_MESSAGE(uploader.has_value(), problem);
  // Those the log moved past go up, each whole (one chunk from its start),
  // and none of the one being written.
  data.write(0, 600);
  REQUIRE((*uploader)->upload_now().has_value());
  auto stats = (*uploader)->stats();
  CHECK(stats.covered_sequence > 0);
  CHECK(stats.pending_batches > 0);  // the segment being written
  CHECK(stats.covered_sequence < data.log->published_sequence());
  auto manifests = (*target)->list(backup::kManifestPrefix);
  REQUIRE(manifests.has_value());
  std::set<std::uint64_t> segments;
  for (const auto& name : *manifests) {
    auto bytes = (*target)->get(name);
    REQUIRE(bytes.has_value());
    auto manifest = backup::parse_manifest(**bytes);
    REQUIRE(manifest.has_value());
    for (const auto& chunk : manifest->chunks) {
      CHECK(chunk.offset == 0);  // a segment goes up whole
      CHECK(segments.insert(chunk.segment).second);
    }
  }
  CHECK(segments.size() >= 2);
  // A clean close: the rest goes up, the segment being written too.
  REQUIRE(data.log->close().has_value());
  REQUIRE((*uploader)->finish().has_value());
  CHECK((*uploader)->stats().pending_batches == 0);
  auto restored = backup::restore_directory(data.fs, **target, dir.sub("restored"), std::nullopt, &problem);
  REQUIRE_MESSAGE(restored.has_value(), problem);
  auto reopened_options = data.options;
  reopened_options.dir = dir.sub("restored");
  auto reopened = wal::Log::open(data.fs, reopened_options);
  REQUIRE(reopened.has_value());
  int count = 0;
  REQUIRE((*reopened)->read(0, 1, (*reopened)->durable_lsn(0), [&](wal::Lsn, std::span<const std::byte> bytes) {
    CHECK(std::vector<std::byte>(bytes.begin(), bytes.end()) == record_of(count));
    ++count;
  }).has_value());
  CHECK(count == 600);
}
}

namespace {

// A directory target whose writes wait at a gate the test holds, as a slow
// target does (no timing: the test decides when an upload may end). It
// counts the writes under way at once.
class GatedTarget final : public backup::BackupTarget {
 public:
  explicit GatedTarget(std::unique_ptr<backup::BackupTarget> inner) : inner_(std::move(inner)) {}
  void hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // Whether a write is waiting at the gate now.
  bool waiting() {
    std::lock_guard lock(mu_);
    return waiting_ > 0;
  }
  int most_at_once() {
    std::lock_guard lock(mu_);
    return most_at_once_;
  }

  Result<void> put(const std::string& name, std::span<const std::byte> bytes) override {
    Gate gate(*this);
    return inner_->put(name, bytes);
  }
  Result<bool> put_new(const std::string& name, std::span<const std::byte> bytes) override {
    Gate gate(*this);
    return inner_->put_new(name, bytes);
  }
  Result<std::optional<std::vector<std::byte>>> get(const std::string& name) override { return inner_->get(name); }
  Result<void> remove(const std::string& name) override {
    Gate gate(*this);
    return inner_->remove(name);
  }
  Result<std::vector<std::string>> list(const std::string& prefix) override { return inner_->list(prefix); }
  std::string describe() const override { return "gated " + inner_->describe(); }

 private:
  struct Gate {
    explicit Gate(GatedTarget& target) : target_(target) {
      std::unique_lock lock(target_.mu_);
      ++target_.at_once_;
      target_.most_at_once_ = std::max(target_.most_at_once_, target_.at_once_);
      ++target_.waiting_;
      target_.cv_.wait(lock, [&] { return !target_.held_; });
      --target_.waiting_;
    }
    ~Gate() {
      std::lock_guard lock(target_.mu_);
      --target_.at_once_;
    }
    GatedTarget& target_;
  };
  std::unique_ptr<backup::BackupTarget> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  int waiting_ = 0;
  int at_once_ = 0;
  int most_at_once_ = 0;
};

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("uploader: a slow target holds no durable write back; uploads never overlap, and catch up once it answers") {
  testing::TempDir dir;
  LogUnderTest data(dir.sub("data"));
  auto inner = backup::open_directory_target(data.fs, dir.sub("target"));
  REQUIRE(inner.has_value());
  GatedTarget target(std::move(*inner));
  backup::UploaderOptions options;
  options.interval = std::chrono::milliseconds(1);  // the uploader's thread tries all the time
  options.warn = [](const std::string&) {};
  std::string problem;
  auto uploader = backup::Uploader::start(data.fs, *data.log, data.options.dir + "/wal", target,
                                          backup::Identity{"test", 1}, options, &problem);
  REQUIRE_MESSAGE(uploader.has_value(), problem);
  data.write(0, 10);
  REQUIRE(testing::eventually([&] { return (*uploader)->stats().pending_batches == 0; }));
  // The target stalls in the middle of an upload: every record below is
  // still made durable (the log never waits for the backup), and the
  // backlog grows.
  target.hold();
  data.write(10, 20);
  REQUIRE(testing::eventually([&] { return target.waiting(); }));
  const auto covered = (*uploader)->stats().covered_sequence;
  data.write(20, 300);
  auto stats = (*uploader)->stats();
  CHECK(stats.covered_sequence == covered);
  CHECK(data.log->published_sequence() > covered);
  // What an upload that hangs holds is still pending, and said so.
  CHECK(stats.pending_batches == data.log->published_sequence() - covered);
  CHECK(stats.failures == 0);  // slow is not failed
  // The target answers again: everything goes up.
  target.release();
  REQUIRE(testing::eventually([&] {
    return (*uploader)->stats().covered_sequence == data.log->published_sequence();
  }));
  CHECK(target.most_at_once() == 1);  // one upload at a time, one object at a time
  REQUIRE(data.log->close().has_value());
  REQUIRE((*uploader)->finish().has_value());
  auto restored = backup::restore_directory(data.fs, target, dir.sub("restored"), std::nullopt, &problem);
  REQUIRE_MESSAGE(restored.has_value(), problem);
  LogUnderTest reopened(dir.sub("restored"));
  int count = 0;
  REQUIRE(reopened.log->read(0, 1, reopened.log->durable_lsn(0), [&](wal::Lsn, std::span<const std::byte> bytes) {
    CHECK(std::vector<std::byte>(bytes.begin(), bytes.end()) == record_of(count));
    ++count;
  }).has_value());
  CHECK(count == 300);
}
}

namespace {
// An uploader of `data`'s log to `target`, started.
std::unique_ptr<backup::Uploader> start_uploader(LogUnderTest& data, backup::BackupTarget& target,
                                                 const backup::UploaderOptions& options) {
  std::string problem;
  auto uploader = backup::Uploader::start(data.fs, *data.log, data.options.dir + "/wal", target,
                                          backup::Identity{"test", 1}, options, &problem);
  REQUIRE_MESSAGE(uploader.has_value(), problem);
  return std::move(*uploader);
}

// A record that says when it was made: 8 bytes of ms, then `size` - 8 of filler.
std::vector<std::byte> timed_record(std::int64_t at_ms, std::size_t size) {
  std::vector<std::byte> record(size, std::byte{'t'});
  wal::store_u64(record.data(), static_cast<std::uint64_t>(at_ms));
  return record;
}
std::optional<std::int64_t> time_of_record(std::span<const std::byte> record) {
  if (record.size() < 8) return std::nullopt;
  return static_cast<std::int64_t>(wal::load_u64(record.data()));
}
}  // namespace

TEST_SUITE("unit") {
TEST_CASE("uploader: a batch published before a crash that holds only a large record takes that record's time") {
  // The batch holds a blob reference alone (a start with a large input);
  // its time is in the blob area. Taking the batch's before it would put
  // it seconds early, where a restore to before the request holds it.
  testing::TempDir dir;
  backup::UploaderOptions options;
  options.interval = std::chrono::hours(1);  // uploads when the test says
  options.warn = [](const std::string&) {};
  options.record_time_ms = time_of_record;
  {
    LogUnderTest data(dir.sub("data"), 1024, [] { return std::int64_t{1'000}; });  // the clock stands at 1 s
    auto target = backup::open_directory_target(data.fs, dir.sub("target"));
    REQUIRE(target.has_value());
    auto uploader = start_uploader(data, **target, options);
    auto small = data.log->append(0, timed_record(1'000, 16));
    REQUIRE(small.has_value());
    REQUIRE(data.log->wait_durable(0, *small).has_value());
    REQUIRE(uploader->upload_now().has_value());
    auto large = data.log->append(0, timed_record(5'000, 4'000));  // to the blob area
    REQUIRE(large.has_value());
    REQUIRE(data.log->wait_durable(0, *large).has_value());
  }  // not uploaded: the next life finds it in the log
  LogUnderTest data(dir.sub("data"), 1024, [] { return std::int64_t{9'000}; });
  auto target = backup::open_directory_target(data.fs, dir.sub("target"));
  REQUIRE(target.has_value());
  auto uploader = start_uploader(data, **target, options);
  REQUIRE(uploader->upload_now().has_value());
  auto names = (*target)->list(backup::kManifestPrefix);
  REQUIRE(names.has_value());
  std::int64_t large_batch_ms = -1;
  for (const auto& name : *names) {
    auto bytes = (*target)->get(name);
    REQUIRE(bytes.has_value());
    REQUIRE(bytes->has_value());
    auto manifest = backup::parse_manifest(**bytes);
    REQUIRE(manifest.has_value());
    for (const auto& batch : manifest->batches) {
      if (batch.sequence == 2) large_batch_ms = batch.at_ms;  // the first life's second batch
    }
  }
  CHECK(large_batch_ms == 5'000);
}

TEST_CASE("uploader: a target emptied under a running engine stops the backup, loudly, instead of uploading on") {
  testing::TempDir dir;
  LogUnderTest data(dir.sub("data"));
  auto target = backup::open_directory_target(data.fs, dir.sub("target"));
  REQUIRE(target.has_value());
  backup::UploaderOptions options;
  options.interval = std::chrono::hours(1);  // uploads when the test says
  options.target_check = std::chrono::milliseconds(0);  // before every upload
  std::vector<std::string> warnings;
  options.warn = [&](const std::string& line) { warnings.push_back(line); };
  auto uploader = start_uploader(data, **target, options);
  data.write(0, 5);
  REQUIRE(uploader->upload_now().has_value());
  CHECK_FALSE(uploader->stats().stopped);
  // Someone empties the target (a bucket lifecycle rule, rm -r).
  for (const auto& entry : std::filesystem::directory_iterator(dir.sub("target"))) {
    std::filesystem::remove_all(entry.path());
  }
  data.write(5, 10);
  CHECK_FALSE(uploader->upload_now().has_value());
  auto stats = uploader->stats();
  CHECK(stats.stopped);
  CHECK_MESSAGE(testing::contains(stats.error, "no longer holds this directory's backup"), stats.error);
  CHECK(std::any_of(warnings.begin(), warnings.end(),
                    [](const auto& line) { return testing::contains(line, "STOPPED"); }));
  CHECK((*target)->list(backup::kManifestPrefix)->empty());  // nothing uploaded into the emptied target
}

TEST_CASE("uploader: after a restart the upload lag counts this life's batches, not the downtime") {
  testing::TempDir dir;
  auto now = std::make_shared<std::atomic<std::int64_t>>(1'000'000);
  auto clock = [now] { return now->load(); };
  backup::UploaderOptions options;
  options.interval = std::chrono::hours(1);  // uploads when the test says
  options.warn = [](const std::string&) {};
  options.now_ms = clock;
  {
    LogUnderTest data(dir.sub("data"), wal::kPayloadOffloadBytesDefault, clock);
    auto target = backup::open_directory_target(data.fs, dir.sub("target"));
    REQUIRE(target.has_value());
    auto uploader = start_uploader(data, **target, options);
    data.write(0, 5);
    REQUIRE(uploader->upload_now().has_value());
    data.write(5, 10);  // published, never uploaded in this life
  }
  now->store(1'000'000 + 3'600'000);  // an hour down
  LogUnderTest data(dir.sub("data"), wal::kPayloadOffloadBytesDefault, clock);
  auto target = backup::open_directory_target(data.fs, dir.sub("target"));
  REQUIRE(target.has_value());
  auto uploader = start_uploader(data, **target, options);
  data.write(10, 12);
  now->fetch_add(40);
  REQUIRE(uploader->upload_now().has_value());
  auto stats = uploader->stats();
  CHECK(stats.covered_sequence == data.log->published_sequence());
  CHECK(stats.pending_batches == 0);
  CHECK_MESSAGE(stats.lag_p99_ms <= 40, stats.lag_p99_ms);
  CHECK_MESSAGE(stats.lag_max_ms <= 40, stats.lag_max_ms);
}
}

TEST_SUITE("unit") {
TEST_CASE("uploader: retention deletes what no restore within it needs; a moment within it restores, one before is refused") {
  testing::TempDir dir;
  std::atomic<std::int64_t> now_ms{1'000'000};
  auto clock = [&] { return now_ms.load(); };
  LogUnderTest data(dir.sub("data"), 0, clock);
  auto store = engine::RunStore::open(data.options.dir);
  REQUIRE(store.has_value());
  auto target = backup::open_directory_target(data.fs, dir.sub("target"));
  REQUIRE(target.has_value());
  backup::UploaderOptions options;
  options.interval = std::chrono::hours(1);  // uploads only when asked
  options.warn = [](const std::string&) {};
  options.now_ms = clock;
  options.store = store->get();
  options.snapshot_log_bytes = 1;  // a snapshot after every upload
  options.retention = std::chrono::seconds(10);
  options.retention_check = std::chrono::milliseconds::zero();
  std::string problem;
  auto uploader = start_uploader(data, **target, options);
  // 12 rounds, 3 s apart: records, a checkpoint, an upload and a snapshot.
  std::vector<std::int64_t> round_ms;
  for (int round = 0; round < 12; ++round) {
    now_ms += 3000;
    data.write(round * 60, round * 60 + 60);
    engine::RunStore::Batch batch;
    const auto lsn = data.log->durable_lsn(0);
    batch.put_checkpoint(engine::Checkpoint{0, lsn, data.log->keep_from_sequence(0, lsn), "", 0});
    REQUIRE((*store)->write(std::move(batch)).has_value());
    REQUIRE(uploader->upload_now().has_value());
    round_ms.push_back(now_ms.load());
  }
  auto stats = uploader->stats();
  CHECK(stats.snapshots == 12);
  CHECK(stats.retired_objects > 0);
  CHECK(stats.failures == 0);
  // The snapshots left: the newest taken 10 s ago or earlier, and those since.
  auto snapshots = (*target)->list(backup::kSnapshotPrefix);
  REQUIRE(snapshots.has_value());
  CHECK(snapshots->size() == 5);  // at 27 s (the horizon's), 30, 33, 36, 39
  // No object is left that no kept snapshot or manifest names.
  std::set<std::string> named{backup::kIdentityName};
  for (const auto& name : *snapshots) {
    named.insert(name);
    auto bytes = (*target)->get(name);
    REQUIRE(bytes.has_value());
    auto snapshot = backup::parse_snapshot(**bytes);
    REQUIRE(snapshot.has_value());
    for (const auto& file : snapshot->files) named.insert(file.object);
  }
  auto manifests = (*target)->list(backup::kManifestPrefix);
  REQUIRE(manifests.has_value());
  for (const auto& name : *manifests) {
    named.insert(name);
    auto bytes = (*target)->get(name);
    REQUIRE(bytes.has_value());
    auto manifest = backup::parse_manifest(**bytes);
    REQUIRE(manifest.has_value());
    for (const auto& chunk : manifest->chunks) {
      named.insert(chunk.name);
      if (!chunk.blob_pack.empty()) named.insert(chunk.blob_pack);
    }
  }
  auto all = (*target)->list("");
  REQUIRE(all.has_value());
  for (const auto& name : *all) CHECK_MESSAGE(named.contains(name), name);
  // Every moment within the retention restores, from a snapshot, to exactly
  // the records made durable by then; one before it is refused.
  auto local = [&] {
    std::vector<std::vector<std::byte>> records;
    REQUIRE(data.log->read(0, 1, data.log->durable_lsn(0), [&](wal::Lsn, std::span<const std::byte> bytes) {
      records.emplace_back(bytes.begin(), bytes.end());
    }).has_value());
    return records;
  }();
  for (int round = 8; round < 12; ++round) {
    CAPTURE(round);
    auto into = dir.sub("at-" + std::to_string(round));
    auto restored = backup::restore_directory(data.fs, **target, into, round_ms[static_cast<std::size_t>(round)], &problem);
    REQUIRE_MESSAGE(restored.has_value(), problem);
    CHECK(restored->snapshot_sequence > 0);
    auto reopened_store = engine::RunStore::open(into);
    REQUIRE(reopened_store.has_value());
    auto checkpoint = (*reopened_store)->checkpoint(0);
    REQUIRE(checkpoint.has_value());
    REQUIRE(checkpoint->has_value());
    auto reopened_options = data.options;
    reopened_options.dir = into;
    reopened_options.base = wal::RecoveryBase{(*checkpoint)->keep_from_sequence, {(*checkpoint)->lsn}, {}};
    auto reopened = wal::Log::open(data.fs, reopened_options);
    REQUIRE(reopened.has_value());
    CHECK((*reopened)->durable_lsn(0) == static_cast<wal::Lsn>((round + 1) * 60));
    std::vector<std::vector<std::byte>> records;
    wal::Lsn first = 0;
    REQUIRE((*reopened)->read(0, 1, (*reopened)->durable_lsn(0), [&](wal::Lsn lsn, std::span<const std::byte> bytes) {
      if (first == 0) first = lsn;
      records.emplace_back(bytes.begin(), bytes.end());
    }).has_value());
    REQUIRE(first > 0);
    CHECK(first <= (*checkpoint)->lsn + 1);
    for (std::size_t k = 0; k < records.size(); ++k) CHECK(records[k] == local[first - 1 + k]);
  }
  auto early = backup::restore_directory(data.fs, **target, dir.sub("too-early"), round_ms[2], &problem);
  CHECK_FALSE(early.has_value());
  CHECK_MESSAGE(problem.find("cannot be restored to that moment") != std::string::npos, problem);
  REQUIRE(data.log->close().has_value());
  REQUIRE(uploader->finish().has_value());
}
}
