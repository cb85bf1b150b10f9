// PrimaryLog (replica/primary_log.hpp) over a replica's store, the core
// played by the test and the loop by the test's thread: one turn's records
// are one batch, proposed at the log's sequence, their LSNs going on from
// the replica's log; publication names each record's batch; a refused
// proposal stops the log and leaves its records unproposed; an opening
// whose view ended is thrown away and never waited for (the file system
// holds the opener mid-read); a directory holding another log than the
// core's is refused; a record no batch of the replica's segments takes is
// refused rather than staged for ever.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>

#include "replica/primary_log.hpp"
#include "replica/replica_segments.hpp"
#include "replica/replica_store.hpp"
#include "replica/store_errc.hpp"
#include "tests/support/fault_file_system.hpp"
#include "tests/support/result_checks.hpp"
#include "wal/errc.hpp"

namespace fusee::replica {
namespace {

using namespace std::chrono_literals;
using replication::Seq;
using testing::FaultFileSystem;
using testing::ok_or_fail;
using testing::value_or_fail;

constexpr const char* kDir = "/r";

// A file system that holds every list() of the replica's wal directory
// while closed: the opener's recovery starts there.
class GatedFileSystem final : public io::FileSystem {
 public:
  explicit GatedFileSystem(io::FileSystem& inner) : inner_(inner) {}
  void close_gate() {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  void open_gate() {
    {
      std::lock_guard lock(mu_);
      closed_ = false;
    }
    cv_.notify_all();
  }
  int held() {
    std::lock_guard lock(mu_);
    return held_;
  }
  Result<std::unique_ptr<io::File>> open(const std::string& path, io::OpenOptions options) override {
    return inner_.open(path, options);
  }
  Result<void> rename(const std::string& from, const std::string& to) override { return inner_.rename(from, to); }
  Result<void> remove(const std::string& path) override { return inner_.remove(path); }
  Result<void> create_dir(const std::string& path) override { return inner_.create_dir(path); }
  Result<void> remove_dir(const std::string& path) override { return inner_.remove_dir(path); }
  Result<std::vector<std::string>> list(const std::string& path) override {
    if (path == wal_dir_of(kDir)) {
      std::unique_lock lock(mu_);
      ++held_;
      cv_.wait(lock, [&] { return !closed_; });
      --held_;
    }
    return inner_.list(path);
  }
  Result<bool> exists(const std::string& path) override { return inner_.exists(path); }
  Result<void> sync_dir(const std::string& path) override { return inner_.sync_dir(path); }

 private:
  io::FileSystem& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  int held_ = 0;
};

// The store, a primary log over it, the core's part and the loop.
struct Replica {
  explicit Replica(std::uint64_t segment_bytes = kSegmentBytesMin) : gated(fs) {
    ok_or_fail(ReplicaStore::initialize(fs, kDir, "c", false, segment_bytes));
    StoreRecovery recovered;
    store = value_or_fail(ReplicaStore::open(fs, kDir, "c", recovered, segment_bytes));
    PrimaryLogHooks hooks;
    hooks.propose = [this](Seq seq, std::string body) {
      if (refuse) return false;
      proposals.emplace_back(seq, body);
      // As the core would: written and synced (the test publishes it).
      write({seq, 2, 0, std::move(body)});
      return true;
    };
    hooks.published = [this](wal::Lsn lsn) { published.emplace_back(lsn, log->batch_of(lsn)); };
    hooks.post = [this](std::function<void()> run) {
      std::lock_guard lock(mu);
      posted.push_back(std::move(run));
      cv.notify_all();
    };
    hooks.opened = [this](Result<void> result) { opened.push_back(result ? std::error_code() : result.error()); };
    hooks.warn = [](const std::string&) {};
    log = std::make_unique<PrimaryLog>(gated, kDir, *store, std::move(hooks));
  }
  void write(replication::Entry entry) {
    ok_or_fail(store->apply({entry.seq, store->end(), {entry}, false}));
    ok_or_fail(store->sync());
  }
  // Batches of view 1, one record each: LSNs 1..count of shard 0.
  void write_batches(Seq count) {
    for (Seq seq = store->end() + 1; seq <= count; ++seq) {
      write({seq, 1, 0, encode_records_body(0, seq, {"before " + std::to_string(seq)})});
    }
  }
  // Runs what was posted, as the loop would, until `done` (false after 10 s).
  bool run_until(const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      std::function<void()> run;
      {
        std::unique_lock lock(mu);
        if (!cv.wait_until(lock, give_up, [&] { return !posted.empty(); })) return false;
        run = std::move(posted.front());
        posted.pop_front();
      }
      run();
    }
    return true;
  }
  std::vector<std::byte> bytes(const std::string& text) {
    return std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                  reinterpret_cast<const std::byte*>(text.data()) + text.size());
  }

  FaultFileSystem fs;
  GatedFileSystem gated;
  std::unique_ptr<ReplicaStore> store;
  bool refuse = false;
  std::vector<std::pair<Seq, std::string>> proposals;
  std::vector<std::pair<wal::Lsn, Seq>> published;  // each with batch_of() as the hook ran
  std::vector<std::error_code> opened;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> posted;
  std::unique_ptr<PrimaryLog> log;  // last: destroyed first
};

TEST_SUITE("unit") {
  TEST_CASE("primary log: a turn's records are one batch at the log's sequence; publication names batch and LSN") {
    Replica r;
    r.write_batches(5);
    // The core's word: a quorum holds 1..3; 4 and 5 are in flight.
    r.log->open(2, 5, 3);
    CHECK(r.log->view() == 2);
    REQUIRE(r.run_until([&] { return !r.opened.empty(); }));
    REQUIRE(r.opened.size() == 1);
    CHECK_FALSE(r.opened[0]);
    REQUIRE(r.log->serving());

    std::vector<wal::Lsn> lsns;
    for (int i = 0; i < 4; ++i) lsns.push_back(value_or_fail(r.log->append(r.bytes("turn " + std::to_string(i)))));
    CHECK(lsns == std::vector<wal::Lsn>{6, 7, 8, 9});  // after the last record any primary sealed
    CHECK(r.proposals.empty());                        // nothing before the turn's seal
    CHECK(r.log->seal());
    REQUIRE(r.proposals.size() == 1);
    CHECK(r.proposals[0].first == 6);
    CHECK(records_in_body(r.proposals[0].second, 0) ==
          std::vector<std::string>{"turn 0", "turn 1", "turn 2", "turn 3"});
    CHECK(last_lsn_in_body(r.proposals[0].second, 0) == 9);
    CHECK(r.log->batch_of(7) == 6);
    CHECK(r.log->batch_of(5) == 0);  // the tail's: no batch this log proposed
    CHECK(r.log->batch_of(10) == 0);

    // Publication follows the core, in order; the tail first.
    r.log->publish_through(4);
    CHECK(r.published == std::vector<std::pair<wal::Lsn, Seq>>{{4, 0}});
    r.log->publish_through(6);
    CHECK(r.published == std::vector<std::pair<wal::Lsn, Seq>>{{4, 0}, {5, 0}, {9, 6}});
    CHECK(r.log->batch_of(9) == 0);  // published: done with
    r.log->publish_through(6);       // again: nothing more
    CHECK(r.published.size() == 3);

    // A refused proposal: the log can serve no more, and the refused
    // batch's records are in no batch proposed.
    const wal::Lsn refused = value_or_fail(r.log->append(r.bytes("refused")));
    r.refuse = true;
    CHECK_FALSE(r.log->seal());
    CHECK(r.log->batch_of(refused) == 0);
    r.log->close();
    CHECK_FALSE(r.log->serving());
    CHECK(r.log->view() == 0);
    r.log->publish_through(7);  // a late word: no log, nothing published
    CHECK(r.published.size() == 3);
  }

  TEST_CASE("primary log: an opening whose view ended is thrown away, and the loop never waits for it") {
    Replica r;
    r.write_batches(3);
    r.gated.close_gate();
    r.log->open(2, 3, 3);
    while (r.gated.held() == 0) std::this_thread::yield();  // the opener reads
    r.log->close();
    // A later view opens at once: the loop does not wait for the read of
    // the one that ended (it is still held).
    auto later = std::async(std::launch::async, [&] { r.log->open(4, 3, 3); });
    const bool waited = later.wait_for(5s) == std::future_status::timeout;
    CHECK_FALSE(waited);
    while (!waited && r.gated.held() < 2) std::this_thread::yield();  // both read
    r.gated.open_gate();
    later.wait();
    REQUIRE(r.run_until([&] { return !r.opened.empty(); }));
    // Both results were posted; only view 4's counts.
    REQUIRE(r.run_until([&] {
      std::lock_guard lock(r.mu);
      return r.posted.empty();
    }));
    CHECK(r.opened.size() == 1);
    CHECK(r.log->view() == 4);
    CHECK(r.log->serving());
    CHECK(value_or_fail(r.log->append(r.bytes("in view 4"))) == 4);

    // An opening dropped before its result is run: thrown away too.
    r.log->close();
    r.log->open(6, 3, 3);
    r.log->close();
    r.log->open(8, 3, 3);
    REQUIRE(r.run_until([&] { return r.opened.size() == 2; }));
    CHECK(r.log->view() == 8);
    CHECK(r.log->serving());
    // And one still reading when the replica stops: the destructor waits.
    r.gated.close_gate();
    r.log->close();
    r.log->open(10, 3, 3);
    while (r.gated.held() == 0) std::this_thread::yield();
    auto stopped = std::async(std::launch::async, [&] { r.log.reset(); });
    CHECK(stopped.wait_for(100ms) == std::future_status::timeout);
    r.gated.open_gate();
    stopped.wait();
  }

  TEST_CASE("primary log: a directory that holds another log than the core's is refused") {
    Replica r;
    r.write_batches(3);
    r.log->open(2, 5, 3);  // the core holds 5 batches; the files 3
    REQUIRE(r.run_until([&] { return !r.opened.empty(); }));
    CHECK(r.opened[0] == make_error_code(StoreErrc::unreadable_batch));
    CHECK_FALSE(r.log->serving());
    CHECK(r.log->view() == 0);
  }

  TEST_CASE("primary log: a record no batch of the replica's segments takes is refused, not staged") {
    Replica r;  // the smallest segments: a batch of a quarter of 64 KiB
    r.log->open(1, 0, 0);
    REQUIRE(r.run_until([&] { return !r.opened.empty(); }));
    REQUIRE(r.log->serving());
    // The largest record it takes, found by halving: each one taken is
    // sealed alone (so the next starts a batch), and must be proposed.
    std::size_t largest = 0;
    std::size_t refused_from = kSegmentBytesMin;
    while (largest + 1 < refused_from) {
      const std::size_t bytes = (largest + refused_from) / 2;
      auto lsn = r.log->append(std::vector<std::byte>(bytes, std::byte{7}));
      if (lsn) {
        largest = bytes;
        CHECK(r.log->seal());
        REQUIRE(r.proposals.size() > 0);
        CHECK(records_in_body(r.proposals.back().second, 0)->back().size() == bytes);
      } else {
        CHECK(lsn.error() == make_error_code(wal::errc::record_too_large));
        refused_from = bytes;
      }
    }
    CHECK(largest > kSegmentBytesMin / 8);
    CHECK(largest < kSegmentBytesMin / 4);
    CHECK_FALSE(r.log->append(std::vector<std::byte>(largest + 1, std::byte{7})));
    // The largest one went into a batch of its own, which the store took.
    REQUIRE_FALSE(r.proposals.empty());
    CHECK(records_in_body(r.proposals.back().second, 0)->back().size() == largest);
    CHECK(r.store->end() == r.proposals.size());
  }
}

}  // namespace
}  // namespace fusee::replica
