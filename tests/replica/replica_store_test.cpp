// A replica's directory (replica/replica_store.hpp) over the fault file
// system: what is synced comes back; a crash that keeps or drops writes
// whole, around a cut or a roll, is never damage; a torn or rotted batch
// always is, and the suspicion survives restarts until a repair is durable;
// a lost directory comes back wiped, another cluster's is refused, and so is
// a second writer. Its segments are the shared log's: byte-identical on
// replicas fed the same batches however the writes were grouped, and read
// by the log's own recovery (what `fusee inspect` runs).
#include <doctest/doctest.h>

#include "replica/replica_store.hpp"
#include "tests/support/fault_file_system.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/errc.hpp"
#include "wal/recovery.hpp"
#include "wal/segment_file.hpp"

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
constexpr std::uint64_t kSmallSegmentBytes = kSegmentBytesMin;

// Payloads of different lengths, and view 1's longer than later views', so
// that a cut followed by new records leaves old bytes past them unless the
// cut is durable first.
Entry entry(replication::Seq seq, replication::View view) {
  return {seq, view, seq - 1,
          encode_records_body(0, seq, {std::string(10 + 37 * seq + (view == 1 ? 90 : 0), static_cast<char>('a' + seq % 26))})};
}

std::vector<Entry> entries_through(replication::Seq last, replication::View view) {
  std::vector<Entry> entries;
  for (replication::Seq seq = 1; seq <= last; ++seq) entries.push_back(entry(seq, view));
  return entries;
}

StoreRecovery recover(io::FileSystem& fs) {
  StoreRecovery recovered;
  auto store = ReplicaStore::open(fs, kDir, "c", recovered);
  REQUIRE(store.has_value());
  return recovered;
}

ReadChain chain_of(io::FileSystem& fs) { return value_or_fail(read_chain(fs, kDir, "c")); }

// Where batch `seq` starts: its segment file and offset.
std::pair<std::string, std::uint64_t> place_of(io::FileSystem& fs, replication::Seq seq) {
  const ReadChain chain = chain_of(fs);
  REQUIRE(seq <= chain.entries.size());
  return {segment_path(kDir, chain.points[seq - 1].segment), chain.points[seq - 1].offset};
}

std::unique_ptr<FaultFileSystem> with_log(std::vector<Entry> entries, std::uint64_t segment_bytes = kSegmentBytesDefault) {
  auto fs = std::make_unique<FaultFileSystem>();
  ok_or_fail(ReplicaStore::initialize(*fs, kDir, "c", false, segment_bytes));
  StoreRecovery recovered;
  auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
  DiskWrite write{1, 0, std::move(entries), false};
  ok_or_fail(store->apply(write));
  ok_or_fail(store->sync());
  return fs;
}

// The first batch that rolls to the next segment, in small segments.
replication::Seq first_rolling_batch() {
  auto fs = with_log(entries_through(40, 1), kSmallSegmentBytes);
  const ReadChain chain = chain_of(*fs);
  for (replication::Seq seq = 1; seq <= 40; ++seq) {
    if (chain.points[seq].segment != chain.points[seq - 1].segment) return seq;
  }
  return 0;
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
    const auto [path, offset] = place_of(*fs, 2);
    ok_or_fail(fs->corrupt_bit(path, (offset + 100) * 8));
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

  TEST_CASE("replica store: past the last whole batch, only a short run of zeros is a clean end") {
    testing::TempDir dir;
    io::PosixFileSystem fs;
    const std::string root = dir.sub("r");
    ok_or_fail(ReplicaStore::initialize(fs, root, "c", false));
    {
      StoreRecovery recovered;
      auto store = value_or_fail(ReplicaStore::open(fs, root, "c", recovered));
      ok_or_fail(store->apply({0, 0, {entry(1, 1), entry(2, 1)}, false}));
      ok_or_fail(store->sync());
    }
    const std::string segment = segment_path(root, 1);
    auto image = value_or_fail(read_chain(fs, root, "c"));
    REQUIRE(image.entries.size() == 2);
    REQUIRE_FALSE(image.damaged);
    auto original = value_or_fail(fs.open(segment, {}));
    std::vector<std::byte> bytes(value_or_fail(original->size()));
    REQUIRE(value_or_fail(original->read_at(0, bytes)) == bytes.size());
    auto with_tail = [&](std::vector<std::byte> tail) {
      auto file = value_or_fail(fs.open(segment, {.write = true}));
      ok_or_fail(file->truncate(0));
      std::vector<std::byte> whole(bytes);
      whole.insert(whole.end(), tail.begin(), tail.end());
      ok_or_fail(wal::write_fully(*file, 0, whole, io::WriteFlags::none));
      return value_or_fail(read_chain(fs, root, "c"));
    };
    // Fewer zeros than a header: an append that did not land.
    CHECK_FALSE(with_tail(std::vector<std::byte>(wal::kBatchHeaderBytes - 1)).damaged);
    // A header's worth of zeros or more: a zeroed batch, as far as anyone
    // can tell -- damage, though the batches before it are kept.
    const ReadChain zeroed = with_tail(std::vector<std::byte>(wal::kBlockBytes));
    CHECK(zeroed.damaged);
    CHECK(zeroed.entries.size() == 2);
    // Zeros, then bytes: a hole.
    std::vector<std::byte> hole(wal::kBatchHeaderBytes);
    hole.push_back(std::byte{1});
    CHECK(with_tail(hole).damaged);
    // Batch 2 again after itself, and a batch of another cluster: whole
    // batches that do not follow, which nothing writes.
    const auto second = std::vector<std::byte>(bytes.begin() + static_cast<std::ptrdiff_t>(image.points[1].offset),
                                               bytes.end());
    CHECK(with_tail(second).damaged);
    ChainPoint foreign_point = image.points[2];
    foreign_point.salt = segment_salt("other", 1);
    CHECK(with_tail(value_or_fail(encode_entry("other", foreign_point, entry(3, 7))).bytes).damaged);
    // A batch that passes its checksum but is not what a replica derives
    // from its contents (here: a life other than its view).
    {
      auto odd = value_or_fail(encode_entry("c", image.points[2], entry(3, 7))).bytes;
      wal::store_u64(odd.data() + wal::batch_header_offset::life, 99);
      wal::seal_batch(image.points[2].salt, odd, wal::load_u32(odd.data() + wal::batch_header_offset::body_length));
      CHECK(with_tail(odd).damaged);
    }
    // The next batch, encoded as every replica does: three batches.
    const ReadChain three = with_tail(value_or_fail(encode_entry("c", image.points[2], entry(3, 7))).bytes);
    CHECK_FALSE(three.damaged);
    CHECK(three.entries.size() == 3);
    CHECK(three.entries[2] == entry(3, 7));
  }

  TEST_CASE("replica store: a synced last batch that reads back as zeros makes it suspect, durably") {
    auto fs = with_log({entry(1, 1), entry(2, 1)});
    const auto [path, offset] = place_of(*fs, 2);
    ok_or_fail(fs->truncate_durable(path, offset));
    ok_or_fail(fs->truncate_durable(path, offset + wal::kBlockBytes));
    const StoreRecovery recovered = recover(*fs);
    CHECK(recovered.log.suspect);
    CHECK(recovered.log.entries.size() == 1);
    CHECK(recover(*fs->crash_image(CrashOutcome::drop_all())).log.suspect);
  }

  TEST_CASE("replica store: batches roll from segment to segment; a cut goes back across them") {
    auto fs = with_log(entries_through(40, 1), kSmallSegmentBytes);
    ReadChain chain = chain_of(*fs);
    REQUIRE(chain.entries.size() == 40);
    CHECK_FALSE(chain.damaged);
    CHECK(chain.segments.size() >= 4);
    CHECK(recover(*fs->crash_image(CrashOutcome::drop_all())).log.entries == entries_through(40, 1));

    // Back to batch 5 (in the first segment), then on in view 2.
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    std::vector<Entry> view_two;
    for (replication::Seq seq = 6; seq <= 30; ++seq) view_two.push_back(entry(seq, 2));
    ok_or_fail(store->apply({5, 5, view_two, false}));
    // Every crash that keeps the writes whole and in order recovers the old
    // chain cut somewhere, or the new one: never a mix, never damage.
    bool hole_found = false;
    for (const CrashOutcome& outcome : all_crash_outcomes(fs->pending_data_op_count(), 64)) {
      if (outcome.data == CrashOutcome::Data::tear) continue;
      CAPTURE(outcome.describe());
      auto after = recover(*fs->crash_image(outcome));
      if (outcome.data == CrashOutcome::Data::random_subset && after.log.suspect) {
        hole_found = true;
        continue;
      }
      CHECK_FALSE(after.log.suspect);
      REQUIRE(after.log.entries.size() >= 5);
      for (std::size_t i = 5; i < after.log.entries.size(); ++i) CHECK(after.log.entries[i].view == 2);
    }
    ok_or_fail(store->sync());
    store.reset();
    const auto last = recover(*fs->crash_image(CrashOutcome::drop_all())).log.entries;
    REQUIRE(last.size() == 30);
    CHECK(last[4] == entry(5, 1));
    CHECK(last[29] == entry(30, 2));
    (void)hole_found;  // whether a subset leaves a hole depends on the grouping
  }

  TEST_CASE("replica store: a durable batch reads back from its segment, across rolls and after a cut") {
    auto fs = with_log(entries_through(80, 1), kSmallSegmentBytes);
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    REQUIRE(chain_of(*fs).segments.size() >= 6);  // more than it keeps open for reading
    // Every batch, out of order too (each read opens the segment it needs).
    for (replication::Seq seq = 80; seq >= 1; --seq) CHECK(value_or_fail(store->read(seq)) == entry(seq, 1));
    for (replication::Seq seq = 1; seq <= 80; seq += 7) CHECK(value_or_fail(store->read(seq)) == entry(seq, 1));
    // Read the last segment's batch, cut back before that segment and write
    // on in view 2: the segment is removed and made again, and a read must
    // not go through the file it had open before.
    CHECK(value_or_fail(store->read(80)) == entry(80, 1));
    std::vector<Entry> view_two;
    for (replication::Seq seq = 6; seq <= 80; ++seq) view_two.push_back(entry(seq, 2));
    ok_or_fail(store->apply({5, 5, view_two, false}));
    ok_or_fail(store->sync());
    for (replication::Seq seq = 80; seq >= 6; --seq) CHECK(value_or_fail(store->read(seq)) == entry(seq, 2));
    CHECK(value_or_fail(store->read(5)) == entry(5, 1));
  }

  TEST_CASE("replica store: recovery holds the newest payloads only; the rest read back") {
    auto fs = with_log(entries_through(40, 1), kSmallSegmentBytes);
    std::uint64_t newest_ten = 0;
    for (replication::Seq seq = 31; seq <= 40; ++seq) newest_ten += entry(seq, 1).payload.size();
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered, kSmallSegmentBytes, newest_ten));
    const auto& entries = recovered.log.entries;
    REQUIRE(entries.size() == 40);
    for (replication::Seq seq = 1; seq <= 40; ++seq) {
      const Entry& got = entries[seq - 1];
      const Entry whole = entry(seq, 1);
      CHECK(got.seq == seq);
      CHECK(got.view == 1);
      CHECK(got.acked == whole.acked);
      CHECK(got.elided == (seq <= 30));
      if (got.elided) {
        CHECK(got.payload.empty());
        CHECK(got.elided_bytes == whole.payload.size());
        CHECK(value_or_fail(store->read(seq)) == whole);
      } else {
        CHECK(got == whole);
      }
    }
  }

  TEST_CASE("replica store: a batch that reads back otherwise is unreadable, not returned") {
    auto fs = with_log(entries_through(6, 1));
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    const auto [path, offset] = place_of(*fs, 3);
    // A bit of its body, then (on a fresh copy) of its header's sequence.
    ok_or_fail(fs->corrupt_bit(path, (offset + wal::kBatchHeaderBytes + 5) * 8 + 1));
    auto read = store->read(3);
    REQUIRE_FALSE(read.has_value());
    CHECK(read.error() == make_error_code(StoreErrc::unreadable_batch));
    CHECK(value_or_fail(store->read(2)) == entry(2, 1));
    CHECK(value_or_fail(store->read(4)) == entry(4, 1));
  }

  TEST_CASE("replica store: a crash during a roll leaves the new segment over, never damage") {
    // Find the batch that rolls, then crash at every point of writing it.
    const replication::Seq rolling = first_rolling_batch();
    REQUIRE(rolling > 1);
    auto fs = with_log(entries_through(rolling - 1, 1), kSmallSegmentBytes);
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    const std::uint64_t before = fs->operation_count();
    ok_or_fail(store->apply({1, rolling - 1, {entry(rolling, 1), entry(rolling + 1, 1)}, false}));
    ok_or_fail(store->sync());
    const std::uint64_t operations = fs->operation_count() - before;
    store.reset();
    for (std::uint64_t stop = 0; stop <= operations; ++stop) {
      CAPTURE(stop);
      auto base = with_log(entries_through(rolling - 1, 1), kSmallSegmentBytes);
      StoreRecovery again;
      auto writer = value_or_fail(ReplicaStore::open(*base, kDir, "c", again));
      base->set_crash_after_ops(base->operation_count() + stop);
      if (writer->apply({1, rolling - 1, {entry(rolling, 1), entry(rolling + 1, 1)}, false})) (void)writer->sync();
      writer.reset();
      for (const CrashOutcome& outcome : {CrashOutcome::drop_all(), CrashOutcome::keep_all(),
                                          CrashOutcome::drop_all(CrashOutcome::Names::keep)}) {
        auto image = base->crash_image(outcome);
        auto after = recover(*image);
        CHECK_FALSE(after.log.suspect);
        CHECK(after.log.entries.size() >= rolling - 1);
        // Recovery left a chain that reads clean, with nothing over.
        const ReadChain clean = chain_of(*image);
        CHECK_FALSE(clean.damaged);
        CHECK(clean.leftover_segments.empty());
      }
    }
  }

  TEST_CASE("replica store: a life stopped before its roll's sync leaves nothing its successor's batches depend on") {
    // A process that wrote a rolling batch and stopped before syncing it
    // leaves it in the page cache: the next life reads it as the chain's,
    // writes on in the next segment and acknowledges what it syncs. That
    // must not hang on the earlier segment's writeback (the next life makes
    // every segment of the chain durable before it serves), and what it
    // cannot have must never vanish silently.
    const replication::Seq rolling = first_rolling_batch();
    REQUIRE(rolling > 1);
    for (const testing::FaultEffect effect : {testing::FaultEffect::io_error, testing::FaultEffect::sync_loses_data}) {
      auto fs = with_log(entries_through(rolling - 1, 1), kSmallSegmentBytes);
      {
        StoreRecovery first;
        auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", first));
        // The roll's syncs: the new segment, its directory, then the
        // rolling batch's segment -- the one that fails.
        fs->inject({testing::OpKind::sync, 3, effect, false});
        CHECK_FALSE(store->apply({1, rolling - 1, {entry(rolling, 1)}, false}).has_value());
      }
      fs->clear_faults();
      StoreRecovery second;
      auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", second));
      const replication::Seq from = second.log.entries.size();
      std::vector<Entry> more;
      for (replication::Seq seq = from + 1; seq <= from + 5; ++seq) more.push_back(entry(seq, 2));
      ok_or_fail(store->apply({2, from, more, false}));
      ok_or_fail(store->sync());
      store.reset();
      // What the second life synced (and would acknowledge) survives a
      // power loss, whole.
      const auto after = recover(*fs->crash_image(CrashOutcome::drop_all()));
      CAPTURE(static_cast<int>(effect));
      CHECK_FALSE(after.log.suspect);
      REQUIRE(after.log.entries.size() == from + 5);
      CHECK(after.log.entries.back() == entry(from + 5, 2));
    }
  }

  TEST_CASE("replica store: a segment past the chain's end holding batches is damage, never left over") {
    auto fs = with_log(entries_through(40, 1), kSmallSegmentBytes);
    const ReadChain chain = chain_of(*fs);
    REQUIRE(chain.segments.size() >= 3);
    // The rolling batch at the end of the first segment reads back as zeros:
    // the chain ends there, and the next segments hold batches it lost.
    const replication::Seq rolling = first_rolling_batch();
    const auto [path, offset] = place_of(*fs, rolling);
    ok_or_fail(fs->truncate_durable(path, offset));
    const ReadChain cut = chain_of(*fs);
    CHECK(cut.damaged);
    CHECK(cut.entries.size() == rolling - 1);
    const auto recovered = recover(*fs);
    CHECK(recovered.log.suspect);
    CHECK(recover(*fs->crash_image(CrashOutcome::drop_all())).log.suspect);
  }

  TEST_CASE("replica store: replicas fed the same batches hold the same bytes, however the writes went") {
    const auto batches = entries_through(40, 3);
    auto at_once = with_log(batches, kSmallSegmentBytes);
    // The other: one write per batch, a divergent view-1 tail cut on the way.
    auto one_by_one = std::make_unique<FaultFileSystem>();
    ok_or_fail(ReplicaStore::initialize(*one_by_one, kDir, "c", false, kSmallSegmentBytes));
    {
      StoreRecovery recovered;
      auto store = value_or_fail(ReplicaStore::open(*one_by_one, kDir, "c", recovered));
      for (replication::Seq seq = 1; seq <= 25; ++seq) {
        ok_or_fail(store->apply({seq, seq - 1, {seq <= 10 ? batches[seq - 1] : entry(seq, 1)}, false}));
        ok_or_fail(store->sync());
      }
      for (replication::Seq seq = 11; seq <= 40; ++seq) {
        ok_or_fail(store->apply({seq, seq - 1, {batches[seq - 1]}, false}));
      }
      ok_or_fail(store->sync());
    }
    const auto files = at_once->list_files_recursive();
    CHECK(files == one_by_one->list_files_recursive());
    for (const std::string& path : files) {
      if (path.find("/wal/") == std::string::npos) continue;
      CAPTURE(path);
      CHECK(value_or_fail(at_once->contents(path)) == value_or_fail(one_by_one->contents(path)));
    }
  }

  TEST_CASE("replica store: the shared log's recovery reads a replica's segments (what fusee inspect runs)") {
    auto fs = with_log(entries_through(40, 2), kSmallSegmentBytes);
    const auto plan = value_or_fail(wal::plan_recovery(*fs, wal_dir_of(kDir), 1, {}, true, /*replica_files=*/true));
    // Read as a log's own files, they are refused: its segments are
    // preallocated, and one shorter than its size is damage.
    CHECK(value_or_fail(wal::plan_recovery(*fs, wal_dir_of(kDir), 1, {}, true)).refused);
    CHECK_FALSE(plan.refused);
    CHECK(plan.replicated);
    CHECK(plan.last_sequence == 40);
    CHECK(plan.chain_records == 40);
    REQUIRE(plan.shards.size() == 1);
    CHECK(plan.shards[0].first_lsn == 1);
    CHECK(plan.shards[0].last_lsn == 40);
    REQUIRE(plan.batches.size() == 40);
    for (const auto& batch : plan.batches) CHECK(batch.view == 2);
    CHECK(plan.segments.size() == chain_of(*fs).segments.size());
    CHECK(plan.tail.empty());
  }

  TEST_CASE("replica store: a lost first segment leaves the replica suspect, with an empty log") {
    auto fs = with_log({entry(1, 1), entry(2, 1)});
    ok_or_fail(fs->remove(segment_path(kDir, 1)));
    const StoreRecovery recovered = recover(*fs);
    CHECK(recovered.log.suspect);
    CHECK(recovered.log.entries.empty());
    CHECK_FALSE(recover(*fs).log.entries.size());
    CHECK(recover(*fs->crash_image(CrashOutcome::drop_all())).log.suspect);
  }

  TEST_CASE("replica store: retirement removes the oldest segments whole; the log starts after them, on reopen too") {
    auto fs = with_log(entries_through(80, 1), kSmallSegmentBytes);
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    const ReadChain before = chain_of(*fs);
    REQUIRE(before.segments.size() >= 6);
    // Below a batch of the first segment, or below 1: nothing goes.
    CHECK(value_or_fail(store->retire(1)) == 0);
    CHECK(value_or_fail(store->retire(2)) == 0);
    // Below batch 50: every segment before the one it lies in.
    const std::uint64_t kept_segment = before.point_after(49).segment;
    REQUIRE(kept_segment > 2);
    const replication::Seq retired = value_or_fail(store->retire(50));
    CHECK(retired < 50);
    CHECK(before.point_after(retired).segment == kept_segment);  // the batch that rolled into it
    CHECK(before.point_after(retired - 1).segment == kept_segment - 1);
    CHECK(store->retired_through() == retired);
    CHECK(store->end() == 80);
    for (std::uint64_t number = 1; number < kept_segment; ++number) {
      CHECK_FALSE(value_or_fail(fs->exists(segment_path(kDir, number))));
    }
    CHECK(store->read(retired).error() == make_error_code(StoreErrc::retired_batch));
    CHECK(store->read(1).error() == make_error_code(StoreErrc::retired_batch));
    for (replication::Seq seq = retired + 1; seq <= 80; ++seq) CHECK(value_or_fail(store->read(seq)) == entry(seq, 1));
    // Again, lower: nothing more goes.
    CHECK(value_or_fail(store->retire(retired)) == retired);
    // A cut down to the start, then on in view 2: the chain goes on from it.
    std::vector<Entry> view_two;
    for (replication::Seq seq = retired + 1; seq <= 90; ++seq) view_two.push_back(entry(seq, 2));
    ok_or_fail(store->apply({2, retired, view_two, false}));
    ok_or_fail(store->sync());
    store.reset();

    const ReadChain after = chain_of(*fs);
    CHECK_FALSE(after.damaged);
    CHECK(after.retired_through() == retired);
    CHECK(after.retired_segments.empty());
    CHECK(after.start == LogStart{kept_segment, retired + 1, before.point_after(retired).crc, 1});
    const StoreRecovery again = recover(*fs->crash_image(CrashOutcome::drop_all()));
    CHECK_FALSE(again.log.suspect);
    REQUIRE(again.log.entries.size() == 90 - retired);
    CHECK(again.log.entries.front() == entry(retired + 1, 2));
    CHECK(again.log.entries.back() == entry(90, 2));
    // The shared log's own recovery reads the chain from its start too --
    // when the checkpoints allow it to start there, and only then.
    const auto refused = value_or_fail(wal::plan_recovery(*fs, wal_dir_of(kDir), 1, {}, true, true));
    CHECK(refused.refused);
    CHECK(refused.refusal.find("no segment holds sequences 1 to") != std::string::npos);
    const auto plan =
        value_or_fail(wal::plan_recovery(*fs, wal_dir_of(kDir), 1, {retired + 1, {retired}, {}}, true, /*replica_files=*/true));
    CHECK_MESSAGE(!plan.refused, plan.refusal);
    CHECK(plan.first_sequence == retired + 1);
    CHECK(plan.last_sequence == 90);
    REQUIRE(plan.shards.size() == 1);
    CHECK(plan.shards[0].first_lsn == retired + 1);
  }

  TEST_CASE("replica store: a crash anywhere in a retirement leaves the old start or the new, never damage") {
    const auto retire_in = [](io::FileSystem& fs) {
      StoreRecovery recovered;
      auto store = value_or_fail(ReplicaStore::open(fs, kDir, "c", recovered));
      return store->retire(60);
    };
    std::uint64_t operations = 0;
    replication::Seq retired = 0;
    {
      auto fs = with_log(entries_through(80, 1), kSmallSegmentBytes);
      StoreRecovery recovered;
      auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
      const std::uint64_t before = fs->operation_count();
      retired = value_or_fail(store->retire(60));
      operations = fs->operation_count() - before;
    }
    REQUIRE(retired > 0);
    REQUIRE(operations >= 5);  // the start written, renamed, synced; segments removed; the directory synced
    bool old_start_seen = false;
    bool new_start_seen = false;
    for (std::uint64_t stop = 0; stop <= operations; ++stop) {
      CAPTURE(stop);
      auto fs = with_log(entries_through(80, 1), kSmallSegmentBytes);
      {
        StoreRecovery recovered;
        auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
        fs->set_crash_after_ops(fs->operation_count() + stop);
        (void)store->retire(60);
      }
      for (const CrashOutcome& outcome : {CrashOutcome::drop_all(), CrashOutcome::keep_all(),
                                          CrashOutcome::drop_all(CrashOutcome::Names::keep)}) {
        CAPTURE(outcome.describe());
        auto image = fs->crash_image(outcome);
        const StoreRecovery after = recover(*image);
        CHECK_FALSE(after.log.suspect);
        REQUIRE_FALSE(after.log.entries.empty());
        CHECK(after.log.entries.back() == entry(80, 1));
        const replication::Seq first = after.log.entries.front().seq;
        CHECK((first == 1 || first == retired + 1));
        (first == 1 ? old_start_seen : new_start_seen) = true;
        for (const Entry& got : after.log.entries) CHECK(got == entry(got.seq, 1));
        // Recovery removed what the retirement left: the chain reads clean
        // from its start, and the retirement goes on from there.
        const ReadChain clean = chain_of(*image);
        CHECK_FALSE(clean.damaged);
        CHECK(clean.retired_segments.empty());
        CHECK(value_or_fail(retire_in(*image)) == retired);
        CHECK(chain_of(*image).retired_through() == retired);
      }
    }
    CHECK(old_start_seen);
    CHECK(new_start_seen);
  }

  TEST_CASE("replica store: a log restarted at another's start holds the same bytes from there; a crash in it is never a mix") {
    auto primary = with_log(entries_through(80, 1), kSmallSegmentBytes);
    LogStart start;
    {
      StoreRecovery recovered;
      auto store = value_or_fail(ReplicaStore::open(*primary, kDir, "c", recovered));
      REQUIRE(value_or_fail(store->retire(60)) > 0);
      start = store->start();
    }
    const replication::LogAnchor anchor{start.first_seq - 1, start.prev_view, start.segment, start.prev_crc};
    std::vector<Entry> rest;
    for (replication::Seq seq = start.first_seq; seq <= 80; ++seq) rest.push_back(entry(seq, 1));
    const auto restart = [&](FaultFileSystem& fs) -> Result<void> {
      StoreRecovery recovered;
      auto store = FUSEE_TRY(ReplicaStore::open(fs, kDir, "c", recovered, kSmallSegmentBytes));
      FUSEE_TRY_VOID(store->apply({2, anchor.seq, rest, false, anchor}));
      return store->sync();
    };
    // A replica holding another log (of view 2, shorter) restarts at the
    // primary's start: its segments from there are the primary's, byte for byte.
    std::vector<Entry> other;
    for (replication::Seq seq = 1; seq <= 9; ++seq) other.push_back(entry(seq, 2));
    auto backup = with_log(other, kSmallSegmentBytes);
    ok_or_fail(restart(*backup));
    const ReadChain copied = chain_of(*backup);
    CHECK_FALSE(copied.damaged);
    CHECK(copied.start == start);
    REQUIRE(copied.segments.front() == start.segment);
    for (const std::uint64_t number : copied.segments) {
      CHECK(value_or_fail(io::read_file(*backup, segment_path(kDir, number))) ==
            value_or_fail(io::read_file(*primary, segment_path(kDir, number))));
    }
    const StoreRecovery recovered = recover(*backup->crash_image(CrashOutcome::drop_all()));
    CHECK(recovered.log.retired_through == anchor.seq);
    CHECK(recovered.log.retired_view == 1);
    REQUIRE_FALSE(recovered.log.entries.empty());
    CHECK(recovered.log.entries.front() == entry(anchor.seq + 1, 1));

    // A crash anywhere in it: the old log, the new one (maybe short), or an
    // empty suspect one -- never the old log's batches after the new start.
    std::uint64_t operations = 0;
    {
      auto fs = with_log(other, kSmallSegmentBytes);
      const std::uint64_t before = fs->operation_count();
      ok_or_fail(restart(*fs));
      operations = fs->operation_count() - before;
    }
    for (std::uint64_t stop = 0; stop <= operations; ++stop) {
      CAPTURE(stop);
      auto fs = with_log(other, kSmallSegmentBytes);
      fs->set_crash_after_ops(fs->operation_count() + stop);
      (void)restart(*fs);
      for (const CrashOutcome& outcome : {CrashOutcome::drop_all(), CrashOutcome::keep_all(),
                                          CrashOutcome::drop_all(CrashOutcome::Names::keep)}) {
        CAPTURE(outcome.describe());
        const StoreRecovery after = recover(*fs->crash_image(outcome));
        for (const Entry& got : after.log.entries) {
          CHECK(got == (got.seq <= 9 && after.log.retired_through == 0 ? entry(got.seq, 2) : entry(got.seq, 1)));
        }
        if (after.log.retired_through > 0) {
          CHECK(after.log.retired_through == anchor.seq);
        } else if (after.log.entries.empty()) {
          CHECK(after.log.suspect);
        }
      }
    }
  }

  TEST_CASE("replica store: a lost start segment, or one whose header is not the start recorded, is damage") {
    for (const bool lost : {true, false}) {
      CAPTURE(lost);
      auto fs = with_log(entries_through(80, 1), kSmallSegmentBytes);
      LogStart start;
      {
        StoreRecovery recovered;
        auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
        REQUIRE(value_or_fail(store->retire(60)) > 0);
        start = chain_of(*fs).start;
      }
      if (lost) {
        ok_or_fail(fs->remove(segment_path(kDir, start.segment)));
      } else {
        // The record says another chain: the header no longer matches it.
        ok_or_fail(write_log_start(*fs, kDir, {start.segment, start.first_seq, start.prev_crc ^ 1}));
      }
      const ReadChain chain = chain_of(*fs);
      CHECK(chain.damaged);
      CHECK(chain.damage.find(segment_path(kDir, start.segment)) != std::string::npos);
      // The replica is suspect, its log empty from the cluster's first
      // segment: only a primary's log repairs it.
      const StoreRecovery recovered = recover(*fs);
      CHECK(recovered.log.suspect);
      CHECK(recovered.log.entries.empty());
      CHECK_FALSE(value_or_fail(fs->exists(log_start_path(kDir))));
      CHECK(recover(*fs->crash_image(CrashOutcome::drop_all())).log.suspect);
      CHECK(chain_of(*fs).retired_through() == 0);
    }
    // A start record that does not parse (a bit flipped) is damage, not
    // guessed at: the replica is suspect, its log empty.
    auto fs = with_log(entries_through(3, 1));
    {
      auto file = value_or_fail(fs->open(log_start_path(kDir), {.write = true, .create = true}));
      const std::string text = "segment two\n";
      ok_or_fail(wal::write_fully(*file, 0, std::as_bytes(std::span(text)), io::WriteFlags::none));
    }
    const ReadChain unparsed = chain_of(*fs);
    CHECK(unparsed.damaged);
    CHECK(unparsed.damage.find("does not parse") != std::string::npos);
    const StoreRecovery recovered = recover(*fs);
    CHECK(recovered.log.suspect);
    CHECK(recovered.log.entries.empty());
    CHECK_FALSE(value_or_fail(fs->exists(log_start_path(kDir))));
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

  TEST_CASE("replica store: a batch's payload is a body of the shared log's sections") {
    const std::vector<std::string> records = {"one", "", std::string("\0three\xff", 7)};
    const std::string body = encode_records_body(3, 41, records);
    CHECK(records_in_body(body, 3) == records);
    CHECK(records_in_body(body, 0)->empty());
    CHECK(last_lsn_in_body(body, 3) == 43);
    CHECK(last_lsn_in_body(body, 0) == 0);
    CHECK(records_in_body("", 0)->empty());
    for (std::size_t cut = 1; cut < body.size(); ++cut) CHECK_FALSE(records_in_body(body.substr(0, cut), 3).has_value());
    CHECK_FALSE(records_in_body(body + "x", 3).has_value());
    // Two sections, as the shared log seals them for two shards.
    const std::string two = encode_records_body(0, 7, {"a"}) + encode_records_body(1, 2, {"b", "c"});
    CHECK(records_in_body(two, 1) == std::vector<std::string>{"b", "c"});
    CHECK(last_lsn_in_body(two, 0) == 7);

    // A store writes no payload that is not one, nor a blob reference.
    auto fs = with_log({entry(1, 1)});
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    std::string blob_ref = body;
    // The record prefix's low bit marks a blob reference.
    blob_ref[wal::kSectionHeaderBytes] = static_cast<char>(blob_ref[wal::kSectionHeaderBytes] | 1);
    for (const std::string& bad : {std::string("not sections"), body.substr(0, body.size() - 1), blob_ref}) {
      auto refused = store->apply({2, 1, {Entry{2, 1, 0, bad}}, false});
      REQUIRE_FALSE(refused.has_value());
      CHECK(refused.error() == make_error_code(StoreErrc::malformed_batch));
      CHECK(store->end() == 1);
    }
    ok_or_fail(store->apply({2, 1, {Entry{2, 1, 0, two}}, false}));
    ok_or_fail(store->sync());
    store.reset();
    CHECK(recover(*fs).log.entries.back().payload == two);
  }

  TEST_CASE("replica store: a batch over the bound is refused, not written") {
    auto fs = with_log({entry(1, 1)});
    StoreRecovery recovered;
    auto store = value_or_fail(ReplicaStore::open(*fs, kDir, "c", recovered));
    Entry big{2, 1, 0, std::string(payload_bytes_max(kSegmentBytesDefault) + 1, 'x')};
    auto refused = store->apply({2, 1, {big}, false});
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error() == make_error_code(StoreErrc::payload_too_large));
    CHECK(store->end() == 1);
  }
}

}  // namespace
}  // namespace fusee::replica
