// The run store applied from the replicated log (hosting/store_applier.hpp),
// fed committed batches by hand: what it applies and where it says it
// stands, what a restart skips, what a writer hears in each case (its view's
// record applied; another view's record at its LSN; its view ended; the log
// going on past it), a record that is no run store's, and an expiry.
#include <doctest/doctest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <string>

#include "engine/forwarding_run_store.hpp"
#include "engine/run_store.hpp"
#include "fusee/error.hpp"
#include "replica/replica_segments.hpp"
#include "hosting/store_applier.hpp"
#include "wal/errc.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"

namespace fusee::hosting {
namespace {

using namespace std::chrono_literals;

constexpr wal::ShardId kStoreShard = 2;  // an engine of 2 shards

engine::FinishedRun finished_run(const std::string& id, std::int64_t finished_ms) {
  engine::FinishedRun run;
  run.id = id;
  run.workflow = "order";
  run.finished_ms = finished_ms;
  run.started_ms = finished_ms - 1;
  return run;
}

std::string as_text(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::string batch_record(const std::string& id, std::int64_t finished_ms = 1000) {
  engine::RunStore::Batch batch;
  batch.put_finished(finished_run(id, finished_ms));
  return as_text(encode_store_batch(batch));
}

// A committed batch's body: a journal record of shard 0 beside the store's.
std::string body_of(wal::Lsn first_store_lsn, const std::vector<std::string>& store_records) {
  return replica::encode_records_body(0, 7, {"a journal record"}) +
         replica::encode_records_body(kStoreShard, first_store_lsn, store_records);
}

bool stored(engine::RunStore& store, const std::string& id) {
  return testing::value_or_fail(store.finished(id)).has_value();
}

// A writer of lead `lead` (of `view`) whose append gives `lsn`: returns once
// its waiter is in place (the append runs under the applier's lock, held
// until then), so that no batch fed after it can miss it.
std::future<Result<std::size_t>> submit_async(StoreApplier& applier, std::uint64_t lead, replication::View view,
                                              wal::Lsn lsn) {
  auto appended = std::make_shared<std::promise<void>>();
  auto outcome = std::async(std::launch::async, [&applier, lead, view, lsn, appended] {
    return applier.submit(lead, view, [lsn, appended]() -> Result<wal::Lsn> {
      appended->set_value();
      return lsn;
    });
  });
  appended->get_future().wait();
  return outcome;
}

// A store whose writes wait until open() (reads and the rest go through).
class GatedStore final : public engine::ForwardingRunStore {
 public:
  explicit GatedStore(std::shared_ptr<engine::RunStore> inner) : ForwardingRunStore(std::move(inner)) {}
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  Result<void> write(Batch batch) override { return write_unsynced(std::move(batch)); }
  Result<void> write_unsynced(Batch batch) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    return inner().write_unsynced(std::move(batch));
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

struct Fixture {
  testing::TempDir dir;
  std::shared_ptr<engine::RunStore> store;
  std::promise<std::string> failed;  // from the applying thread, once
  std::shared_future<std::string> failure = failed.get_future().share();
  Fixture() { store = testing::value_or_fail(engine::RunStore::open(dir.path())); }
  std::unique_ptr<StoreApplier> applier() {
    return std::make_unique<StoreApplier>(store, kStoreShard,
                                          [this](const std::string& why) { failed.set_value(why); });
  }
  bool has_failed(std::chrono::milliseconds within = 0ms) const {
    return failure.wait_for(within) == std::future_status::ready;
  }
};

TEST_SUITE("unit") {
  TEST_CASE("store applier: committed records are applied in order, with where it stands; a restart skips them") {
    Fixture f;
    auto applier = f.applier();
    CHECK(applier->feed_after() == 0);
    applier->committed(1, 1, replica::encode_records_body(0, 1, {"journal only"}));
    applier->committed(2, 1, body_of(1, {batch_record("one"), batch_record("two")}));
    applier->committed(3, 2, replica::encode_records_body(1, 1, {"journal only"}));
    REQUIRE(applier->wait_done(3, 2));
    CHECK(stored(*f.store, "one"));
    CHECK(stored(*f.store, "two"));
    // Where it stands: batch 2, both its records, the last at LSN 2 of the
    // store's shard (the floor a log retired below it opens with).
    CHECK(testing::value_or_fail(f.store->replica_applied()) == engine::ReplicaApplied{2, 2, 2});
    CHECK(applier->stats().records_applied == 2);
    applier.reset();

    // Reopened: fed again from the batch it stands in, it skips what it applied.
    auto again = f.applier();
    CHECK(again->feed_after() == 1);
    again->committed(2, 1, body_of(1, {batch_record("one"), batch_record("two")}));
    again->committed(3, 2, body_of(3, {batch_record("three")}));
    REQUIRE(again->wait_done(3, 2));
    CHECK(again->stats().records_skipped == 2);
    CHECK(again->stats().records_applied == 1);
    CHECK(stored(*f.store, "three"));
    CHECK(testing::value_or_fail(f.store->replica_applied()) == engine::ReplicaApplied{3, 1, 3});
    CHECK_FALSE(f.has_failed());
  }

  TEST_CASE("store applier: a writer hears its record applied only in its own view") {
    Fixture f;
    auto applier = f.applier();
    auto submit = [&](std::uint64_t lead, replication::View view, wal::Lsn lsn) {
      return submit_async(*applier, lead, view, lsn);
    };
    // Applied in its view: what it wrote.
    auto mine = submit(1, 3, 1);
    auto lost = submit(1, 3, 2);
    applier->committed(1, 3, body_of(1, {batch_record("mine")}));
    CHECK(mine.get().has_value());
    // The log went on past LSN 2 of view 3 without it (its batch never
    // committed: LSN 3 did).
    applier->committed(2, 3, body_of(3, {batch_record("later")}));
    auto lost_outcome = lost.get();
    REQUIRE_FALSE(lost_outcome.has_value());
    CHECK(lost_outcome.error() == make_error_code(errc::unavailable));

    // Another view's record took its LSN: unknown, not success.
    auto taken = submit(2, 4, 4);
    applier->committed(3, 5, body_of(4, {batch_record("another primary's")}));
    auto taken_outcome = taken.get();
    REQUIRE_FALSE(taken_outcome.has_value());
    CHECK(taken_outcome.error() == make_error_code(errc::unavailable));

    // Its lead ended first: unknown; later writers of that lead are refused,
    // and nothing opens for it.
    auto ended = submit(3, 6, 9);
    applier->lead_ended(3);
    auto ended_outcome = ended.get();
    REQUIRE_FALSE(ended_outcome.has_value());
    CHECK(ended_outcome.error() == make_error_code(errc::unavailable));
    bool appended = false;
    auto refused = applier->submit(3, 6, [&]() -> Result<wal::Lsn> {
      appended = true;
      return wal::Lsn{10};
    });
    CHECK_FALSE(refused.has_value());
    CHECK_FALSE(appended);
    CHECK_FALSE(applier->wait_done(99, 3));
    // The same view led again (its log reopened): the new lead writes.
    auto again = submit(4, 6, 9);
    applier->committed(4, 6, body_of(9, {batch_record("the view's second lead")}));
    CHECK(again.get().has_value());
    CHECK(applier->wait_done(4, 4));
    // The append's own error is the writer's.
    auto full = applier->submit(5, 7, []() -> Result<wal::Lsn> { return make_error_code(wal::errc::record_too_large); });
    REQUIRE_FALSE(full.has_value());
    CHECK(full.error() == make_error_code(wal::errc::record_too_large));
    CHECK_FALSE(f.has_failed());
  }

  TEST_CASE("store applier: a replica far behind is fed no more than it holds") {
    Fixture f;
    // The store's writes wait at a gate: the applier holds what it was fed.
    auto gated = std::make_shared<GatedStore>(f.store);
    StoreApplier applier(gated, kStoreShard, [](const std::string&) {});
    engine::RunStore::Batch batch;
    batch.put_streams("big", std::string(StoreApplier::kQueuedBytesMax / 8, 'x'));
    const std::string record = as_text(encode_store_batch(batch));
    replication::Seq fed = 0;
    while (fed < 20 && applier.committed(fed + 1, 1, body_of(fed + 1, {record}))) ++fed;
    // Records a little over an eighth of the bound each: seven held (the
    // one being applied counts until it is), the eighth refused.
    CHECK(fed == 7);
    gated->open();
    // Refused batches come again (the feed's next turns), and go in as it applies.
    const auto give_up = std::chrono::steady_clock::now() + 60s;
    while (fed < 20 && std::chrono::steady_clock::now() < give_up) {
      if (applier.committed(fed + 1, 1, body_of(fed + 1, {record}))) {
        ++fed;
      } else {
        std::this_thread::sleep_for(1ms);
      }
    }
    REQUIRE(applier.wait_done(20, 1));
    CHECK(applier.stats().records_applied == 20);
    CHECK(testing::value_or_fail(f.store->replica_applied()) == engine::ReplicaApplied{20, 1, 20});
  }

  TEST_CASE("store applier: an expiry removes the same runs on every replica and says how many") {
    Fixture f;
    auto applier = f.applier();
    applier->committed(1, 1, body_of(1, {batch_record("old", 1000), batch_record("new", 5000)}));
    auto expired = submit_async(*applier, 1, 1, 3);
    applier->committed(2, 1, body_of(3, {as_text(encode_store_expiry(2000))}));
    CHECK(testing::value_or_fail(expired.get()) == 1);
    CHECK_FALSE(stored(*f.store, "old"));
    CHECK(stored(*f.store, "new"));
    CHECK(testing::value_or_fail(f.store->replica_applied()) == engine::ReplicaApplied{2, 1, 3});
  }

  TEST_CASE("store applier: a record that is no run store's stops it, and its writer hears why") {
    for (const std::string& bad : {std::string("Bnot a batch"), std::string("E123"), std::string("Xwhat"),
                                  std::string()}) {
      CAPTURE(bad);
      Fixture f;
      auto applier = f.applier();
      auto writer = submit_async(*applier, 1, 1, 1);
      applier->committed(1, 1, body_of(1, {bad}));
      auto outcome = writer.get();
      REQUIRE_FALSE(outcome.has_value());
      CHECK(outcome.error() == make_error_code(wal::errc::corrupt));
      CHECK_FALSE(applier->wait_done(1, 1));
      CHECK(f.has_failed(10s));
      CHECK(testing::value_or_fail(f.store->replica_applied()) == engine::ReplicaApplied{});
      // Nothing after it is applied either.
      applier->committed(2, 1, body_of(2, {batch_record("after")}));
      CHECK_FALSE(stored(*f.store, "after"));
    }
  }

  TEST_CASE("store applier: a store section that does not decode stops it") {
    Fixture f;
    auto applier = f.applier();
    auto body = body_of(1, {batch_record("cut")});
    body.resize(body.size() - 3);  // the store section cut short
    applier->committed(1, 1, body);
    CHECK_FALSE(applier->wait_done(1, 1));
    REQUIRE(f.has_failed(10s));
    CHECK(f.failure.get().find("does not decode") != std::string::npos);
  }
}

}  // namespace
}  // namespace fusee::hosting
