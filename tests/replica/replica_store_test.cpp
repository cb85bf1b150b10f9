// A replica's directory (replica/replica_store.hpp) over the fault file
// system: what is synced comes back; a crash that keeps or drops writes
// whole, around a cut, is never damage; a torn or rotted record always is,
// and the suspicion survives restarts until a repair is durable; a lost
// directory comes back wiped, another cluster's is refused, and so is a
// second writer.
#include <doctest/doctest.h>

#include "replica/replica_store.hpp"
#include "tests/support/fault_file_system.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::replica {
namespace {

using replication::DiskWrite;
using replication::Entry;
using testing::all_crash_outcomes;
using testing::CrashOutcome;
using testing::FaultFileSystem;
using testing::ok_or_fail;
using testing::value_or_fail;

constexpr const char* kDir = "/r";
constexpr const char* kLog = "/r/replica/log";

// Payloads of different lengths, and view 1's longer than later views', so
// that a cut followed by new records leaves old bytes past them unless the
// cut is durable first.
Entry entry(replication::Seq seq, replication::View view) {
  return {seq, view, seq - 1, std::string(10 + 37 * seq + (view == 1 ? 90 : 0), static_cast<char>('a' + seq % 26))};
}

StoreRecovery recover(io::FileSystem& fs) {
  StoreRecovery recovered;
  auto store = ReplicaStore::open(fs, kDir, "c", recovered);
  REQUIRE(store.has_value());
  return recovered;
}

std::unique_ptr<FaultFileSystem> with_log(std::vector<Entry> entries) {
  auto fs = std::make_unique<FaultFileSystem>();
  ok_or_fail(ReplicaStore::initialize(*fs, kDir, "c", false));
  StoreRecovery recovered;
  auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
  DiskWrite write{1, 0, std::move(entries), false};
  ok_or_fail(store->apply(write));
  ok_or_fail(store->sync());
  return fs;
}

TEST_SUITE("unit") {
  TEST_CASE("replica store: what is synced comes back, in order") {
    auto fs = with_log({entry(1, 1), entry(2, 1), entry(3, 2)});
    auto recovered = recover(*fs->crash_image(CrashOutcome::drop_all()));
    CHECK_FALSE(recovered.log.suspect);
    CHECK_FALSE(recovered.log.wiped);
    CHECK(recovered.log.entries == std::vector<Entry>{entry(1, 1), entry(2, 1), entry(3, 2)});
  }

  TEST_CASE("replica store: a crash that keeps writes whole and in order, around a cut, is never damage") {
    auto fs = with_log({entry(1, 1), entry(2, 1), entry(3, 1)});
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    ok_or_fail(store->apply({2, 1, {entry(2, 2), entry(3, 2)}, false}));
    ok_or_fail(store->apply({3, 3, {entry(4, 2)}, false}));
    REQUIRE(fs->pending_data_op_count() >= 2);
    bool hole_found = false;
    for (const CrashOutcome& outcome : all_crash_outcomes(fs->pending_data_op_count(), 64)) {
      if (outcome.data == CrashOutcome::Data::tear) continue;
      CAPTURE(outcome.describe());
      auto image = fs->crash_image(outcome);
      auto after = recover(*image);
      // A later write that landed without an earlier one leaves a hole:
      // damage, as it must be (zeros could be a sector that rotted).
      if (outcome.data == CrashOutcome::Data::random_subset && after.log.suspect) {
        hole_found = true;
        continue;
      }
      CHECK_FALSE(after.log.suspect);
      const auto& got = after.log.entries;
      REQUIRE(got.size() >= 1);
      CHECK(got[0] == entry(1, 1));
      // The old chain, cut, or the new one: never a mix.
      for (std::size_t i = 1; i < got.size(); ++i) CHECK(got[i].view == got[1].view);
    }
    CHECK(hole_found);
  }

  TEST_CASE("replica store: a rotted record makes the replica suspect until a repair is durable") {
    auto fs = with_log({entry(1, 1), entry(2, 1)});
    ok_or_fail(fs->corrupt_bit(kLog, (kRecordHeaderBytes + entry(1, 1).payload.size() + 50) * 8));
    auto recovered = recover(*fs);
    CHECK(recovered.log.suspect);
    CHECK(recovered.log.entries.size() == 1);
    CHECK_FALSE(recovered.damage.empty());
    // The damage is cut from the file, and remembered across a crash.
    auto again = recover(*fs->crash_image(CrashOutcome::drop_all()));
    CHECK(again.log.suspect);
    CHECK(again.log.entries.size() == 1);

    StoreRecovery reopened;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", reopened));
    DiskWrite repair{1, 1, {entry(2, 2)}, true};
    ok_or_fail(store->apply(repair));
    // Not durable yet: a crash now leaves it suspect.
    CHECK(recover(*fs->crash_image(CrashOutcome::drop_all())).log.suspect);
    ok_or_fail(store->sync());
    ok_or_fail(store->finish(repair));
    auto repaired = recover(*fs->crash_image(CrashOutcome::drop_all()));
    CHECK_FALSE(repaired.log.suspect);
    CHECK(repaired.log.entries == std::vector<Entry>{entry(1, 1), entry(2, 2)});
  }

  TEST_CASE("replica store: a torn write is found as damage") {
    bool found = false;
    for (std::uint64_t seed = 0; seed < 64 && !found; ++seed) {
      auto fs = with_log({entry(1, 1)});
      StoreRecovery recovered;
      auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
      ok_or_fail(store->apply({1, 1, {entry(2, 1)}, false}));
      auto after = recover(*fs->crash_image(CrashOutcome::tear(seed)));
      if (after.log.entries.size() == 2) continue;  // it survived whole
      found = found || after.log.suspect;
    }
    CHECK(found);
  }

  TEST_CASE("replica store: past the last whole record, only a short run of zeros is a clean end") {
    auto fs = with_log({entry(1, 1), entry(2, 1)});
    auto image = fs->contents(kLog);
    REQUIRE(image.has_value());
    const ReadChain chain = read_chain(*image);
    REQUIRE(chain.ends.size() == 2);
    REQUIRE_FALSE(chain.damaged);
    auto with_tail = [&](std::vector<std::byte> tail) {
      std::vector<std::byte> bytes(*image);
      bytes.insert(bytes.end(), tail.begin(), tail.end());
      return read_chain(bytes);
    };
    // Fewer zeros than a header: an append that did not land.
    CHECK_FALSE(with_tail(std::vector<std::byte>(kRecordHeaderBytes - 1)).damaged);
    // A header's worth of zeros or more: a zeroed record, as far as anyone
    // can tell -- damage, though the batches before it are kept.
    const ReadChain zeroed = with_tail(std::vector<std::byte>(3 * kRecordHeaderBytes));
    CHECK(zeroed.damaged);
    CHECK(zeroed.entries.size() == 2);
    // Zeros, then bytes: a hole.
    std::vector<std::byte> hole(kRecordHeaderBytes);
    hole.push_back(std::byte{1});
    CHECK(with_tail(hole).damaged);
    // Batch 2's record again after itself, and a valid record of another
    // chain: whole records that do not follow, which nothing writes.
    CHECK(with_tail({image->begin() + static_cast<std::ptrdiff_t>(chain.ends[0]), image->end()}).damaged);
    std::vector<std::byte> foreign;
    encode_record(entry(3, 7), 0xdeadbeef, foreign);
    CHECK(with_tail(foreign).damaged);
    // The same record chained to batch 2 belongs: three batches.
    std::vector<std::byte> follows;
    encode_record(entry(3, 7), chain.crcs.back(), follows);
    const ReadChain three = with_tail(follows);
    CHECK_FALSE(three.damaged);
    CHECK(three.entries.size() == 3);

    // What recovery does with a synced last record that reads back as
    // zeros (cut, then extended with zeros, in the durable image): suspect,
    // durably, with the batches before it.
    ok_or_fail(fs->truncate_durable(kLog, chain.ends[0]));
    ok_or_fail(fs->truncate_durable(kLog, chain.ends[1]));
    const StoreRecovery recovered = recover(*fs);
    CHECK(recovered.log.suspect);
    CHECK(recovered.log.entries.size() == 1);
    CHECK(recover(*fs->crash_image(CrashOutcome::drop_all())).log.suspect);
  }

  TEST_CASE("replica store: a lost directory is wiped, not an empty log; a rebuilt one starts suspect") {
    FaultFileSystem fs;
    CHECK(recover(fs).log.wiped);
    ok_or_fail(ReplicaStore::initialize(fs, kDir, "c", true));
    auto rebuilt = recover(fs);
    CHECK_FALSE(rebuilt.log.wiped);
    CHECK(rebuilt.log.suspect);
    CHECK(rebuilt.log.entries.empty());
    // A directory that is a cluster's is not made one again.
    auto again = ReplicaStore::initialize(fs, kDir, "c", false);
    REQUIRE_FALSE(again.has_value());
    CHECK(again.error() == make_error_code(StoreErrc::already_initialized));
  }

  TEST_CASE("replica store: another cluster's directory is refused, and a second writer") {
    testing::TempDir dir;
    io::PosixFileSystem fs;
    ok_or_fail(ReplicaStore::initialize(fs, dir.sub("r"), "blue", false));
    StoreRecovery recovered;
    auto foreign = ReplicaStore::open(fs, dir.sub("r"), "green", recovered);
    REQUIRE_FALSE(foreign.has_value());
    CHECK(foreign.error() == make_error_code(StoreErrc::foreign_cluster));
    auto first = ReplicaStore::open(fs, dir.sub("r"), "blue", recovered);
    REQUIRE(first.has_value());
    auto second = ReplicaStore::open(fs, dir.sub("r"), "blue", recovered);
    CHECK_FALSE(second.has_value());
  }

  TEST_CASE("replica store: a batch over the bound is refused, not written") {
    auto fs = with_log({entry(1, 1)});
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    Entry big{2, 1, 0, std::string(kRecordPayloadBytesMax + 1, 'x')};
    auto refused = store->apply({2, 1, {big}, false});
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error() == make_error_code(StoreErrc::payload_too_large));
    CHECK(store->end() == 1);
  }
}

}  // namespace
}  // namespace fusee::replica
