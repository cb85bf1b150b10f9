// The backup against a real S3-compatible server (suite "s3", run by
// tests/backup_s3_test.sh, which starts the server and sets FUSEE_TEST_S3
// to an s3:// prefix of its own and the AWS_* variables): the target's
// objects round-trip, a listing pages past 1000 keys, and a data directory
// backed up there, lost and restored resumes its waiting workflows.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "backup/open_target.hpp"
#include "backup/restore.hpp"
#include "fusee/fusee.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const WorkflowRef<int, int> kTriple{"triple"};
const Signal<int> kGo{"go"};

void register_triple(Engine& engine) {
  engine.register_workflow(kTriple, [](Ctx& ctx, int n) -> Task<int> {
    auto first = co_await ctx.step("first", [n] { return n; });
    auto go = co_await ctx.wait_for(kGo);
    co_return co_await ctx.step("second", [first, go] { return first * 3 + go.value_or(0); });
  });
}

std::string s3_prefix(const std::string& leaf) {
  const char* base = std::getenv("FUSEE_TEST_S3");
  REQUIRE_MESSAGE(base != nullptr, "FUSEE_TEST_S3 is not set: run tests/backup_s3_test.sh");
  return std::string(base) + "/" + leaf;
}

std::span<const std::byte> bytes_of(const std::string& text) { return std::as_bytes(std::span(text.data(), text.size())); }

}  // namespace

TEST_SUITE("s3") {
TEST_CASE("s3 target: objects round-trip, put_new keeps the first, a listing pages past 1000 keys") {
  io::PosixFileSystem fs;
  std::string problem;
  auto opened = backup::open_target(fs, s3_prefix("objects"), &problem);
  REQUIRE_MESSAGE(opened.has_value(), problem);
  auto& target = **opened;
  CHECK(target.get("absent").value() == std::nullopt);
  std::string binary(300'000, '\0');
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 7 % 251);
  REQUIRE(target.put("blob-1", bytes_of(binary)).has_value());
  auto back = target.get("blob-1").value();
  REQUIRE(back.has_value());
  CHECK(std::string(reinterpret_cast<const char*>(back->data()), back->size()) == binary);
  CHECK(target.put_new("identity", bytes_of("first")).value());
  CHECK_FALSE(target.put_new("identity", bytes_of("second")).value());
  auto identity = target.get("identity").value();
  CHECK(std::string(reinterpret_cast<const char*>(identity->data()), identity->size()) == "first");
  for (int k = 0; k < 1005; ++k) REQUIRE(target.put(fmt::format("many-{:05}", k), bytes_of("x")).has_value());
  auto names = target.list("many-").value();
  REQUIRE(names.size() == 1005);
  CHECK(names.front() == "many-00000");
  CHECK(names.back() == "many-01004");
  CHECK(target.list("blob").value() == std::vector<std::string>{"blob-1"});
  // Deleted, and deleting what is not there is no error (retention's).
  REQUIRE(target.remove("blob-1").has_value());
  CHECK(target.get("blob-1").value() == std::nullopt);
  CHECK(target.list("blob").value().empty());
  CHECK(target.remove("blob-1").has_value());
}

TEST_CASE("s3 target: a directory backed up, lost and restored from a snapshot resumes its workflows") {
  TempDir scratch;
  const auto address = s3_prefix("engine");
  auto config = Config::local(scratch.sub("data"));
  config.flush = FlushMethod::buffered;
  config.backup_target = address;
  config.backup_upload_interval = std::chrono::milliseconds(20);
  // A snapshot of the run store after every upload, and retention so short
  // that each one deletes what came before it.
  config.backup_snapshot_log_bytes = 1;
  config.backup_retention = std::chrono::milliseconds(1);
  config.segment_bytes = 16 * 1024;  // segments retire, on the target too
  int extra = 0;
  {
    auto engine = Engine::open(config);
    register_triple(*engine);
    for (int k = 0; k < 20; ++k) engine->start(kTriple, "t-" + std::to_string(k), k);
    // Half of them get their signal and finish before the disk is lost.
    for (int k = 0; k < 10; ++k) engine->signal("t-" + std::to_string(k), kGo, 1);
    for (int k = 0; k < 10; ++k) CHECK(engine->result(kTriple, "t-" + std::to_string(k)) == 3 * k + 1);
    engine->checkpoint();  // the run store holds the finished and the waiting runs
    // More runs, an upload and a snapshot apart, until retention has
    // deleted what the snapshots before made unneeded.
    while (extra < 200 && engine->stats().backup.retired_objects == 0) {
      const auto snapshots = engine->stats().backup.snapshots;
      engine->start(kTriple, "x-" + std::to_string(extra++), 100);
      engine->checkpoint();
      // The next upload and its snapshot (and retention after it).
      CHECK(eventually([&] { return engine->stats().backup.snapshots > snapshots; }));
    }
    CHECK(engine->stats().backup.retired_objects > 0);
    CHECK(engine->stats().backup.snapshots > 1);
    engine->shutdown();  // the last upload takes the rest
  }
  std::filesystem::remove_all(scratch.sub("data"));  // the disk is lost
  io::PosixFileSystem fs;
  std::string problem;
  auto target = backup::open_target(fs, address, &problem);
  REQUIRE_MESSAGE(target.has_value(), problem);
  auto restored = backup::restore_directory(fs, **target, scratch.sub("restored"), std::nullopt, &problem);
  REQUIRE_MESSAGE(restored.has_value(), problem);
  CHECK(restored->batches_left_out == 0);
  CHECK(restored->snapshot_sequence > 0);
  CHECK(restored->first_sequence > 1);  // the log before the snapshot was retired
  auto reopened = Config::local(scratch.sub("restored"));
  reopened.flush = FlushMethod::buffered;
  auto engine = Engine::open(reopened);
  register_triple(*engine);
  for (int k = 0; k < 10; ++k) CHECK(engine->result(kTriple, "t-" + std::to_string(k)) == 3 * k + 1);
  // The other half were waiting: they resume where they were.
  for (int k = 10; k < 20; ++k) engine->signal("t-" + std::to_string(k), kGo, 2);
  for (int k = 10; k < 20; ++k) CHECK(engine->result(kTriple, "t-" + std::to_string(k)) == 3 * k + 2);
  for (int k = 0; k < extra; ++k) engine->signal("x-" + std::to_string(k), kGo, 1);
  for (int k = 0; k < extra; ++k) CHECK(engine->result(kTriple, "x-" + std::to_string(k)) == 301);
  // The restored directory backs up to a new target, not the old one.
  engine->shutdown();
  reopened.backup_target = address;
  CHECK_THROWS_WITH_AS(Engine::open(reopened), doctest::Contains("another data directory"), Error);
}
}
