// Group commit's planning: hand-off and batch limits, cuts at record
// boundaries, shards taking turns.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "wal/batch_builder.hpp"

using namespace fusee::wal;

namespace {
std::vector<std::byte> record_of(std::size_t size, int fill) { return std::vector<std::byte>(size, std::byte(fill)); }

std::uint32_t planned_records(const BatchPlan& plan) {
  std::uint32_t total = 0;
  for (const auto& section : plan.sections) total += section.record_count;
  return total;
}
}  // namespace

TEST_SUITE("unit") {
TEST_CASE("every shard with staged records gets a section in one batch") {
  std::vector<ShardStage> stages(8);
  for (ShardId shard = 0; shard < 8; shard += 2) stages[shard].push(record_of(100, shard));
  auto plan = plan_batch(stages, 0, 64 * 1024, 8 * 1024);
  REQUIRE(plan.sections.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(plan.sections[i].shard == 2 * i);
  CHECK(plan.body_bytes == 4 * (kSectionHeaderBytes + 2 + 100));  // varint(200) takes two bytes
}

TEST_CASE("a shard hands over at most the hand-off limit, but always one record") {
  std::vector<ShardStage> stages(2);
  for (int i = 0; i < 10; ++i) stages[0].push(record_of(1000, i));
  stages[1].push(record_of(5000, 9));
  auto plan = plan_batch(stages, 0, 1 << 20, 3000);
  REQUIRE(plan.sections.size() == 2);
  CHECK(plan.sections[0].record_count == 2);  // 2 x 1002 bytes fit 3000, 3 do not
  CHECK(plan.sections[1].record_count == 1);  // larger than the hand-off, still goes
}

TEST_CASE("a backlog larger than a batch is cut at record boundaries with shards taking turns first") {
  std::vector<ShardStage> stages(3);
  for (ShardId shard = 0; shard < 3; ++shard)
    for (int i = 0; i < 200; ++i) stages[shard].push(record_of(300, i));
  const std::size_t batch_max = 8 * kBlockBytes;
  std::vector<std::uint32_t> taken(3, 0);
  ShardId turn = 0;
  std::vector<ShardId> leaders;
  int batches = 0;
  while (std::any_of(stages.begin(), stages.end(), [](const auto& s) { return !s.empty(); })) {
    auto plan = plan_batch(stages, turn, batch_max, 1 << 20);
    REQUIRE_FALSE(plan.empty());
    CHECK(batch_total_bytes(plan.body_bytes) <= batch_max);
    leaders.push_back(plan.sections.front().shard);
    for (const auto& section : plan.sections) {
      CHECK(stages[section.shard].first_lsn() == taken[section.shard] + 1);  // in LSN order, no gap
      taken[section.shard] += section.record_count;
      stages[section.shard].pop(section.record_count);
    }
    turn = (turn + 1) % 3;
    ++batches;
  }
  CHECK(taken == std::vector<std::uint32_t>{200, 200, 200});
  CHECK(batches >= 6);  // 180 KB of records through 32 KiB batches
  // Each of the first three batches is led by a different shard.
  CHECK(leaders[0] == 0);
  CHECK(leaders[1] == 1);
  CHECK(leaders[2] == 2);
}

TEST_CASE("a record that does not fit the rest of a batch waits for the next one") {
  std::vector<ShardStage> stages(2);
  stages[0].push(record_of(5000, 1));
  stages[1].push(record_of(5000, 2));
  auto plan = plan_batch(stages, 0, 2 * kBlockBytes, 1 << 20);
  REQUIRE(plan.sections.size() == 1);
  CHECK(plan.sections[0].shard == 0);
  CHECK(planned_records(plan) == 1);
}

TEST_CASE("staging keeps LSNs and bytes straight across pops and chunks") {
  ShardStage stage(10);
  for (int i = 0; i < 100; ++i) CHECK(stage.push(record_of(i + 1, i)) == Lsn(10 + i));
  std::size_t expected_bytes = 0;
  for (int i = 0; i < 100; ++i) expected_bytes += varint_length(record_prefix(i + 1, false)) + (i + 1);
  CHECK(stage.staged_bytes() == expected_bytes);
  stage.pop(70);  // compaction happens on the way
  CHECK(stage.first_lsn() == 80);
  CHECK(stage.record_count() == 30);
  auto taken = stage.peek(1);
  REQUIRE(taken.bytes() == 73);  // 71 bytes behind a two-byte varint of 142
  std::vector<std::byte> prefix(taken.bytes());
  taken.copy_to(prefix.data());
  CHECK(prefix[0] == std::byte{0x8e});
  CHECK(prefix[1] == std::byte{0x01});
  CHECK(prefix[2] == std::byte{70});
  CHECK(stage.records_fitting(73) == 1);
  CHECK(stage.records_fitting(72) == 0);
  stage.clear();
  CHECK(stage.empty());
  CHECK(stage.next_lsn() == 110);
}

TEST_CASE("records taken from a stage copy out unchanged while more are staged and the stage is cleared") {
  ShardStage stage(1);
  // Records across many chunks, one larger than a chunk.
  std::vector<std::vector<std::byte>> records;
  for (int i = 0; i < 300; ++i) records.push_back(record_of(i == 150 ? kStageChunkBytes + 10 : 200 + i, i));
  std::vector<std::byte> expected;
  for (const auto& record : records) {
    std::byte length[kVarintBytesMax];
    auto length_bytes = encode_varint(record_prefix(record.size(), false), length);
    expected.insert(expected.end(), length, length + length_bytes);
    expected.insert(expected.end(), record.begin(), record.end());
    stage.push(record);
  }
  auto first = stage.take(120);
  auto second = stage.take(100);
  // Staging goes on into the chunk the second prefix ends in, and then the
  // stage drops everything: the taken bytes stay as they were.
  for (int i = 0; i < 50; ++i) stage.push(record_of(100, 1000 + i));
  stage.clear();
  std::vector<std::byte> copied(first.bytes() + second.bytes());
  first.copy_to(copied.data());
  second.copy_to(copied.data() + first.bytes());
  REQUIRE(copied.size() <= expected.size());
  CHECK(std::equal(copied.begin(), copied.end(), expected.begin()));
  CHECK(stage.staged_bytes() == 0);
}
}

TEST_SUITE("unit") {
TEST_CASE("a blocked blob reference holds back its shard's later records, not other shards'") {
  std::vector<ShardStage> stages(2);
  auto first = stages[0].push(record_of(10, 1));
  auto reference = stages[0].push(record_of(kBlobRefBytes, 2), /*blob_ref=*/true);
  stages[0].push(record_of(10, 3));
  stages[1].push(record_of(10, 4));
  stages[0].block(reference);
  CHECK(first == 1);
  CHECK(stages[0].sealable_count() == 1);
  auto plan = plan_batch(stages, 0, 1 << 20, 1 << 20);
  REQUIRE(plan.sections.size() == 2);
  CHECK(plan.sections[0].record_count == 1);  // only the record before the reference
  CHECK(plan.sections[1].shard == 1);
  stages[0].pop(1);
  stages[1].pop(1);
  CHECK(plan_batch(stages, 0, 1 << 20, 1 << 20).empty());  // nothing may go until the blob is durable
  stages[0].unblock(reference);
  auto after = plan_batch(stages, 0, 1 << 20, 1 << 20);
  REQUIRE(after.sections.size() == 1);
  CHECK(after.sections[0].record_count == 2);
}

TEST_CASE("an open group is not sealable; records before it and other shards' records go") {
  std::vector<ShardStage> stages(2);
  stages[0].push(record_of(10, 1));
  stages[0].begin_group();
  stages[0].push(record_of(10, 2));
  stages[0].push(record_of(10, 3));
  stages[1].push(record_of(10, 4));
  CHECK(stages[0].sealable_count() == 1);
  CHECK(stages[0].open_group_records() == 2);
  CHECK(stages[0].open_group_bytes() == 2 * 11);
  auto plan = plan_batch(stages, 0, 1 << 20, 1 << 20);
  REQUIRE(plan.sections.size() == 2);
  CHECK(plan.sections[0].record_count == 1);
  stages[0].pop(1);
  stages[1].pop(1);
  CHECK(plan_batch(stages, 0, 1 << 20, 1 << 20).empty());
  stages[0].push(record_of(10, 5));  // still in the group
  stages[0].end_group();
  CHECK(stages[0].open_group_bytes() == 0);
  auto after = plan_batch(stages, 0, 1 << 20, 1 << 20);
  REQUIRE(after.sections.size() == 1);
  CHECK(after.sections[0].record_count == 3);
}

TEST_CASE("a closed group is never cut by the hand-off: it goes whole, or leads the shard's next section") {
  std::vector<ShardStage> stages(1);
  stages[0].push(record_of(1000, 1));
  stages[0].begin_group();
  for (int i = 0; i < 3; ++i) stages[0].push(record_of(1000, 2));
  stages[0].end_group();
  // 2 records fit the hand-off; the second is inside the group, so only the first goes.
  auto plan = plan_batch(stages, 0, 1 << 20, 2500);
  REQUIRE(plan.sections.size() == 1);
  CHECK(plan.sections[0].record_count == 1);
  stages[0].pop(1);
  // The group now leads: larger than the hand-off, it still goes, whole.
  plan = plan_batch(stages, 0, 1 << 20, 2500);
  REQUIRE(plan.sections.size() == 1);
  CHECK(plan.sections[0].record_count == 3);
}

TEST_CASE("a closed group that does not fit the rest of a batch leads the next one whole") {
  std::vector<ShardStage> stages(2);
  stages[0].push(record_of(5000, 1));
  stages[1].begin_group();
  for (int i = 0; i < 3; ++i) stages[1].push(record_of(1500, 2));
  stages[1].end_group();
  stages[1].push(record_of(10, 3));
  // A batch of 8 KiB: after shard 0's 5 KB about 3 KB is left, and the
  // group (4.5 KB) does not fit, so the batch ends there.
  auto plan = plan_batch(stages, 0, 8 * 1024, 1 << 20);
  REQUIRE(plan.sections.size() == 1);
  CHECK(plan.sections[0].shard == 0);
  stages[0].pop(1);
  plan = plan_batch(stages, 1, 8 * 1024, 1 << 20);
  REQUIRE(plan.sections.size() == 1);
  CHECK(plan.sections[0].record_count == 4);
}

TEST_CASE("a blob reference still blocked inside a closed group holds back the whole group") {
  std::vector<ShardStage> stages(1);
  stages[0].push(record_of(10, 1));
  stages[0].begin_group();
  stages[0].push(record_of(10, 2));
  auto reference = stages[0].push(record_of(kBlobRefBytes, 3), /*blob_ref=*/true);
  stages[0].block(reference);
  stages[0].push(record_of(10, 4));
  stages[0].end_group();
  auto plan = plan_batch(stages, 0, 1 << 20, 1 << 20);
  REQUIRE(plan.sections.size() == 1);
  CHECK(plan.sections[0].record_count == 1);  // not the group's first record
  stages[0].pop(1);
  CHECK(plan_batch(stages, 0, 1 << 20, 1 << 20).empty());
  stages[0].unblock(reference);
  plan = plan_batch(stages, 0, 1 << 20, 1 << 20);
  REQUIRE(plan.sections.size() == 1);
  CHECK(plan.sections[0].record_count == 3);
}

TEST_CASE("random stages, groups and limits: every batch takes groups whole, and everything goes in order") {
  // The property that makes a group atomic on disk: a planned section never
  // ends inside a group. Driven with many shapes: groups of 1-6 records,
  // blocked references, open groups, hand-off and batch limits near the
  // record sizes.
  std::mt19937 random(20261206);
  for (int round = 0; round < 200; ++round) {
    const std::size_t shards = 1 + random() % 4;
    std::vector<ShardStage> stages(shards);
    struct Span {
      Lsn first, end;
    };
    std::vector<std::vector<Span>> groups(shards);
    std::vector<std::vector<Lsn>> blocked(shards);
    for (std::size_t shard = 0; shard < shards; ++shard) {
      auto units = random() % 20;
      for (std::size_t unit = 0; unit < units; ++unit) {
        bool group = random() % 2 == 0;
        if (group) stages[shard].begin_group();
        auto first = stages[shard].next_lsn();
        auto records = group ? 1 + random() % 6 : 1;
        for (std::size_t r = 0; r < records; ++r) {
          bool reference = random() % 10 == 0;
          auto lsn = stages[shard].push(record_of(reference ? kBlobRefBytes : 1 + random() % 900, 1), reference);
          if (reference) {
            stages[shard].block(lsn);
            blocked[shard].push_back(lsn);
          }
        }
        // The last unit's group may stay open a while.
        bool leave_open = group && unit + 1 == units && random() % 2 == 0;
        if (group && !leave_open) stages[shard].end_group();
        if (group) groups[shard].push_back({first, stages[shard].next_lsn()});
      }
    }
    const std::size_t batch_max = 8192 + (random() % 3) * 4096;
    const std::size_t handoff = 500 + random() % 3000;
    std::vector<Lsn> next_expected(shards, 1);
    ShardId turn = 0;
    for (int step = 0; step < 400; ++step) {
      auto plan = plan_batch(stages, turn, batch_max, handoff);
      turn = static_cast<ShardId>((turn + 1) % shards);
      for (const auto& section : plan.sections) {
        auto& stage = stages[section.shard];
        auto first = stage.first_lsn();
        auto end = first + section.record_count;
        REQUIRE(first == next_expected[section.shard]);
        for (const auto& span : groups[section.shard]) {
          INFO("round " << round << " shard " << section.shard << " section [" << first << "," << end << ")");
          CHECK_FALSE((end > span.first && end < span.end));
          CHECK_FALSE((first > span.first && first < span.end));
        }
        stage.pop(section.record_count);
        next_expected[section.shard] = end;
      }
      // Blobs become durable, and open groups end, as time goes on.
      for (std::size_t shard = 0; shard < shards; ++shard) {
        if (!blocked[shard].empty() && random() % 3 == 0) {
          stages[shard].unblock(blocked[shard].front());
          blocked[shard].erase(blocked[shard].begin());
        }
        if (stages[shard].group_open() && random() % 5 == 0) stages[shard].end_group();
      }
    }
    for (std::size_t shard = 0; shard < shards; ++shard) CHECK(stages[shard].empty());
  }
}
}
