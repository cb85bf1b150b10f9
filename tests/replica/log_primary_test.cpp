// The shared log as a replicated log's primary (wal::LogOptions::sink;
// docs/replication.md, step 3 of "The plan for the replica over the shared
// log") over a replica's directory: it seals batches for the replica and
// writes nothing itself; its waiters hear of a batch only once publish_through
// says a quorum holds it; a step-down fails them; the bodies, written by the
// replica's store as every replica derives them, reopen as the same log with
// its LSNs going on, and read back through the sink.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "replica/replica_segments.hpp"
#include "replica/replica_store.hpp"
#include "tests/support/fault_file_system.hpp"
#include "tests/support/result_checks.hpp"
#include "wal/errc.hpp"
#include "wal/log.hpp"
#include "wal/recovery.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;
using testing::FaultFileSystem;
using testing::ok_or_fail;
using testing::value_or_fail;

constexpr const char* kDir = "/r";

// The replica's side, by hand: takes each sealed body, and on the test's
// word writes it through the replica's store (sequence, view 1) and
// publishes it.
class RecordingSink : public wal::ReplicatedSink {
 public:
  explicit RecordingSink(ReplicaStore* store) : store_(store) {}
  void sealed(std::uint64_t sequence, std::vector<std::byte> body) override {
    std::lock_guard lock(mu_);
    sealed_.push_back({sequence, std::move(body)});
    cv_.notify_all();
  }
  Result<std::vector<std::byte>> read_body(std::uint64_t sequence) override {
    ++reads_;
    if (store_ != nullptr) {
      const replication::Entry entry = FUSEE_TRY(store_->read(sequence));
      const auto* bytes = reinterpret_cast<const std::byte*>(entry.payload.data());
      return std::vector<std::byte>(bytes, bytes + entry.payload.size());
    }
    std::lock_guard lock(mu_);
    for (const auto& [seq, body] : all_) {
      if (seq == sequence) return body;
    }
    return make_error_code(wal::errc::corrupt);
  }
  // Waits for the next sealed batch (nullopt after 10 s).
  std::optional<std::pair<std::uint64_t, std::vector<std::byte>>> next() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, 10s, [&] { return !sealed_.empty(); })) return std::nullopt;
    auto batch = std::move(sealed_.front());
    sealed_.pop_front();
    all_.push_back(batch);
    return batch;
  }
  std::size_t waiting() {
    std::lock_guard lock(mu_);
    return sealed_.size();
  }
  std::atomic<int> reads_{0};

 private:
  ReplicaStore* store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::uint64_t, std::vector<std::byte>>> sealed_;
  std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> all_;
};

wal::LogOptions primary_options(std::shared_ptr<wal::ReplicatedSink> sink) {
  wal::LogOptions options;
  options.dir = kDir;
  options.shard_count = 2;
  options.view = 1;
  options.sink = std::move(sink);
  options.batch_bytes_max = batch_bytes_max(kSegmentBytesMin);
  options.warn = [](const std::string&) {};
  options.verify_writes = true;
  return options;
}

std::vector<std::byte> record(wal::ShardId shard, wal::Lsn lsn) {
  return std::vector<std::byte>(600 + lsn % 50, std::byte(shard * 100 + lsn % 97));
}

// Every file of the replica's log, name and bytes.
std::map<std::string, std::vector<std::byte>> wal_files(FaultFileSystem& fs) {
  std::map<std::string, std::vector<std::byte>> files;
  for (const std::string& name : value_or_fail(fs.list(wal_dir_of(kDir)))) {
    files[name] = value_or_fail(fs.contents(wal_dir_of(kDir) + "/" + name));
  }
  return files;
}

std::string as_text(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST_SUITE("unit") {
  TEST_CASE("log as primary: sealed for the sink, published only by publish_through, failed by a step-down") {
    FaultFileSystem fs;
    ok_or_fail(ReplicaStore::initialize(fs, kDir, "c", false, kSegmentBytesMin));
    auto sink = std::make_shared<RecordingSink>(nullptr);
    auto log = value_or_fail(wal::Log::open(fs, primary_options(sink)));
    std::vector<std::pair<wal::ShardId, wal::Lsn>> heard;
    std::mutex heard_mu;
    log->set_durable_hook([&](wal::ShardId shard, wal::Lsn lsn) {
      std::lock_guard lock(heard_mu);
      heard.emplace_back(shard, lsn);
    });
    const auto files_before = wal_files(fs);

    CHECK(value_or_fail(log->append(0, record(0, 1))) == 1);
    CHECK(value_or_fail(log->append(1, record(1, 1))) == 1);
    auto waiter = std::async(std::launch::async, [&] { return log->wait_durable(1, 1); });
    auto first = sink->next();
    REQUIRE(first.has_value());
    CHECK(first->first == 1);
    // Sealed is not published: the primary's own copy counts for nothing.
    CHECK(waiter.wait_for(50ms) == std::future_status::timeout);
    CHECK(log->durable_lsn(0) == 0);
    // Both records may not have made the first batch; publish what comes.
    std::uint64_t last_sequence = first->first;
    while (log->durable_lsn(1) < 1) {
      log->publish_through(last_sequence);
      if (log->durable_lsn(1) >= 1) break;
      auto more = sink->next();
      REQUIRE(more.has_value());
      last_sequence = more->first;
    }
    ok_or_fail(waiter.get());
    CHECK(log->durable_lsn(0) == 1);
    CHECK(log->published_sequence() == last_sequence);
    {
      std::lock_guard lock(heard_mu);
      CHECK(heard.size() == 2);
    }
    // The body is the shared log's sections, as a replica's store takes it.
    const auto records = records_in_body(as_text(first->second), 0);
    REQUIRE(records.has_value());
    CHECK(records->size() == 1);
    // Read back through the sink.
    std::vector<std::vector<std::byte>> read;
    ok_or_fail(log->read(1, 1, 1, [&](wal::Lsn, std::span<const std::byte> bytes) {
      read.emplace_back(bytes.begin(), bytes.end());
    }));
    REQUIRE(read.size() == 1);
    CHECK(read[0] == record(1, 1));
    CHECK(sink->reads_ > 0);
    // The log wrote nothing into the replica's directory, not a byte.
    CHECK(wal_files(fs) == files_before);

    // A publication twice, or of a sequence not yet sealed, changes nothing.
    log->publish_through(last_sequence);
    log->publish_through(last_sequence + 100);
    CHECK(log->published_sequence() == last_sequence);

    // Step down with a batch sealed and not published: its waiter gets the
    // error, nothing more is published, later appends are refused.
    REQUIRE(log->append(0, record(0, 2)));
    auto stranded = std::async(std::launch::async, [&] { return log->wait_durable(0, 2); });
    auto unpublished = sink->next();
    REQUIRE(unpublished.has_value());
    log->step_down(make_error_code(std::errc::connection_aborted));
    auto result = stranded.get();
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error() == make_error_code(std::errc::connection_aborted));
    log->publish_through(unpublished->first);
    CHECK(log->durable_lsn(0) == 1);
    CHECK_FALSE(log->append(0, record(0, 3)).has_value());
    CHECK(log->close().error() == make_error_code(std::errc::connection_aborted));
    CHECK(wal_files(fs) == files_before);
  }

  TEST_CASE("log as primary: the bodies a replica's store wrote reopen as the same log, LSNs going on") {
    FaultFileSystem fs;
    ok_or_fail(ReplicaStore::initialize(fs, kDir, "c", false, kSegmentBytesMin));
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(fs, kDir, "c", recovered, kSegmentBytesMin));
    constexpr wal::Lsn kRecords = 200;
    auto drive = [&](wal::Log& log, RecordingSink& sink, wal::Lsn from, wal::Lsn to) {
      // Appenders on both shards; the test plays the replica: each body is
      // written through the store and synced, then published.
      std::thread appender([&] {
        for (wal::Lsn lsn = from; lsn <= to; ++lsn) {
          for (wal::ShardId shard = 0; shard < 2; ++shard) REQUIRE(log.append(shard, record(shard, lsn)));
        }
      });
      while (log.durable_lsn(0) < to || log.durable_lsn(1) < to) {
        auto batch = sink.next();
        REQUIRE(batch.has_value());
        replication::Entry entry{batch->first, 1, log.published_sequence(), as_text(batch->second)};
        ok_or_fail(store->apply({batch->first, store->end(), {entry}, false}));
        ok_or_fail(store->sync());
        log.publish_through(batch->first);
      }
      appender.join();
    };
    {
      auto sink = std::make_shared<RecordingSink>(store.get());
      auto log = value_or_fail(wal::Log::open(fs, primary_options(sink)));
      drive(*log, *sink, 1, kRecords);
      ok_or_fail(log->close());
    }
    // Segments rolled, and the replica's strict read finds the chain whole.
    const ReadChain chain = value_or_fail(read_chain(fs, kDir, "c"));
    CHECK_FALSE(chain.damaged);
    CHECK(chain.segments.size() > 1);
    // Reopened over what the store wrote, with the core's word that a
    // quorum holds all but its last three batches: those are in flight --
    // their LSNs taken, not durable -- until publish_through reaches them.
    const std::uint64_t end = store->end();
    auto sink = std::make_shared<RecordingSink>(store.get());
    auto options = primary_options(sink);
    options.sink_published_sequence = end - 3;
    auto log = value_or_fail(wal::Log::open(fs, options));
    CHECK(log->published_sequence() == end - 3);
    CHECK(log->durable_lsn(0) < kRecords);
    CHECK(log->last_lsn(0) == kRecords);
    CHECK(log->last_lsn(1) == kRecords);
    std::size_t before_publication = 0;
    ok_or_fail(log->read(0, 1, kRecords, [&](wal::Lsn, std::span<const std::byte>) { ++before_publication; }));
    CHECK(before_publication == log->durable_lsn(0));
    auto tail_waiter = std::async(std::launch::async, [&] { return log->wait_durable(0, kRecords); });
    CHECK(tail_waiter.wait_for(50ms) == std::future_status::timeout);
    log->publish_through(end);
    ok_or_fail(tail_waiter.get());
    CHECK(log->durable_lsn(0) == kRecords);
    CHECK(log->durable_lsn(1) == kRecords);
    CHECK(log->published_sequence() == end);
    drive(*log, *sink, kRecords + 1, kRecords + 10);
    for (wal::ShardId shard = 0; shard < 2; ++shard) {
      wal::Lsn expected = 1;
      ok_or_fail(log->read(shard, 1, kRecords + 10, [&](wal::Lsn lsn, std::span<const std::byte> bytes) {
        CHECK(lsn == expected);
        CHECK(std::vector<std::byte>(bytes.begin(), bytes.end()) == record(shard, lsn));
        ++expected;
      }));
      CHECK(expected == kRecords + 11);
    }
    // A range in the middle: exactly its records.
    std::vector<wal::Lsn> middle;
    ok_or_fail(log->read(1, 50, 60, [&](wal::Lsn lsn, std::span<const std::byte>) { middle.push_back(lsn); }));
    CHECK(middle.size() == 11);
    CHECK(middle.front() == 50);
    CHECK(middle.back() == 60);
    // Closed with a batch sealed and not published: the core's word that
    // comes after publishes nothing.
    REQUIRE(log->append(0, record(0, kRecords + 11)));
    auto unpublished = sink->next();
    REQUIRE(unpublished.has_value());
    ok_or_fail(log->close());
    log->publish_through(unpublished->first);
    CHECK(log->durable_lsn(0) == kRecords + 10);
  }

  TEST_CASE("log as primary: publications from two threads at once, each batch published once, in order") {
    FaultFileSystem fs;
    ok_or_fail(ReplicaStore::initialize(fs, kDir, "c", false, kSegmentBytesMin));
    auto sink = std::make_shared<RecordingSink>(nullptr);
    auto log = value_or_fail(wal::Log::open(fs, primary_options(sink)));
    std::mutex heard_mu;
    std::vector<wal::Lsn> heard;
    log->set_durable_hook([&](wal::ShardId, wal::Lsn lsn) {
      std::lock_guard lock(heard_mu);
      heard.push_back(lsn);
    });
    constexpr wal::Lsn kRecords = 2000;
    std::atomic<std::uint64_t> sealed_through{0};
    std::atomic<bool> done{false};
    std::thread appender([&] {
      for (wal::Lsn lsn = 1; lsn <= kRecords; ++lsn) REQUIRE(log->append(0, record(0, lsn)));
    });
    std::thread replica([&] {
      while (log->durable_lsn(0) < kRecords) {
        if (auto batch = sink->next()) sealed_through = batch->first;
      }
      done = true;
    });
    // Two publishers, as a core's thread and a late retry would be.
    std::vector<std::thread> publishers;
    for (int i = 0; i < 2; ++i) {
      publishers.emplace_back([&] {
        while (!done) log->publish_through(sealed_through.load());
      });
    }
    appender.join();
    replica.join();
    for (auto& publisher : publishers) publisher.join();
    CHECK(log->durable_lsn(0) == kRecords);
    std::lock_guard lock(heard_mu);
    CHECK(std::is_sorted(heard.begin(), heard.end()));
    CHECK(std::adjacent_find(heard.begin(), heard.end()) == heard.end());
    CHECK(heard.back() == kRecords);
    ok_or_fail(log->close());
  }

  TEST_CASE("log as primary: a second publisher while the first is inside its publication") {
    // The interleaving the racing test above only meets by chance, forced:
    // publisher A, inside its publication of two batches (held in the
    // durable hook of the first), while publisher B publishes the same two.
    // Unserialised, A's pointer to the second batch is freed by B before A
    // completes it -- a use after free that `make test-asan` reports.
    FaultFileSystem fs;
    ok_or_fail(ReplicaStore::initialize(fs, kDir, "c", false, kSegmentBytesMin));
    auto sink = std::make_shared<RecordingSink>(nullptr);
    auto log = value_or_fail(wal::Log::open(fs, primary_options(sink)));
    REQUIRE(log->append(0, record(0, 1)));
    REQUIRE(sink->next().has_value());
    REQUIRE(log->append(0, record(0, 2)));
    REQUIRE(sink->next().has_value());  // two batches in flight
    std::mutex heard_mu;
    std::vector<wal::Lsn> heard;
    std::thread second;
    log->set_durable_hook([&](wal::ShardId, wal::Lsn lsn) {
      bool first = false;
      {
        std::lock_guard lock(heard_mu);
        heard.push_back(lsn);
        first = heard.size() == 1;
      }
      if (!first) return;
      second = std::thread([&] { log->publish_through(2); });
      // Time for B to take its batches and run as far as it can.
      std::this_thread::sleep_for(200ms);
    });
    log->publish_through(2);
    second.join();
    CHECK(heard == std::vector<wal::Lsn>{1, 2});
    CHECK(log->durable_lsn(0) == 2);
    ok_or_fail(log->close());
  }

  TEST_CASE("log as primary: refused over a directory that is no replica's, and without a view") {
    FaultFileSystem fs;
    auto sink = std::make_shared<RecordingSink>(nullptr);
    auto none = wal::Log::open(fs, primary_options(sink));
    REQUIRE_FALSE(none.has_value());
    CHECK(none.error() == make_error_code(wal::errc::recovery_refused));
    ok_or_fail(ReplicaStore::initialize(fs, kDir, "c", false, kSegmentBytesMin));
    auto options = primary_options(sink);
    options.view = 0;
    auto viewless = wal::Log::open(fs, options);
    REQUIRE_FALSE(viewless.has_value());
    CHECK(viewless.error() == make_error_code(wal::errc::invalid_argument));
  }
}

}  // namespace
}  // namespace fusee::replica
