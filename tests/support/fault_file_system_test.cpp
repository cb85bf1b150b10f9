// FaultFileSystem: what survives each crash outcome, directory durability, direct I/O rules, faults and freezing.
#include "tests/support/fault_file_system.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace fusee::testing {
namespace {

using io::OpenOptions;
using io::WriteFlags;
using Names = CrashOutcome::Names;

std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

std::vector<std::byte> filled(std::size_t size, char value) {
  return std::vector<std::byte>(size, static_cast<std::byte>(value));
}

std::string text_of(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

constexpr OpenOptions kCreate{.write = true, .create = true};
constexpr OpenOptions kCreateDirect{.write = true, .create = true, .direct = true};

std::unique_ptr<io::File> open_file(FaultFileSystem& fs, const std::string& path,
                                    OpenOptions options = kCreate) {
  auto file = fs.open(path, options);
  REQUIRE(file.has_value());
  return std::move(file).value();
}

void write(io::File& file, std::uint64_t offset, const std::vector<std::byte>& data,
           WriteFlags flags = WriteFlags::none) {
  auto written = file.write_at(offset, data, flags);
  REQUIRE(written.has_value());
  REQUIRE(*written == data.size());
}

void sync(io::File& file) { REQUIRE(file.sync_data().has_value()); }

// A file system with /d synced into the root, so names under it only depend on
// sync_dir("/d").
std::unique_ptr<FaultFileSystem> with_data_dir() {
  auto fs = std::make_unique<FaultFileSystem>();
  REQUIRE(fs->create_dir("/d").has_value());
  REQUIRE(fs->sync_dir("/").has_value());
  return fs;
}

// Creates /d/f with its name durable and `durable` synced into it.
std::unique_ptr<io::File> durable_file(FaultFileSystem& fs, const std::string& durable) {
  auto file = open_file(fs, "/d/f");
  REQUIRE(fs.sync_dir("/d").has_value());
  write(*file, 0, bytes_of(durable));
  sync(*file);
  return file;
}

std::string crashed_text(const FaultFileSystem& fs, const CrashOutcome& outcome,
                         const std::string& path = "/d/f") {
  auto image = fs.crash_image(outcome);
  auto data = image->contents(path);
  REQUIRE_MESSAGE(data.has_value(), outcome.describe());
  return text_of(*data);
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("an unsynced write is lost under drop_all and kept under keep_all") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "old.");
  write(*file, 4, bytes_of("new"));

  CHECK(text_of(fs->contents("/d/f").value()) == "old.new");
  CHECK(text_of(fs->durable_contents("/d/f").value()) == "old.");
  CHECK(fs->pending_data_op_count() == 1);
  CHECK(crashed_text(*fs, CrashOutcome::drop_all()) == "old.");
  CHECK(crashed_text(*fs, CrashOutcome::keep_all()) == "old.new");
}

TEST_CASE("sync_data makes every pending write, truncate and allocate durable") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "abcdef");
  write(*file, 0, bytes_of("X"));
  REQUIRE(file->truncate(3).has_value());
  REQUIRE(file->allocate(0, 5).has_value());
  CHECK(fs->pending_data_op_count() == 3);
  sync(*file);

  CHECK(fs->pending_data_op_count() == 0);
  auto expected = bytes_of("Xbc");
  expected.resize(5);  // allocate extends with zeros
  CHECK(fs->crash_image(CrashOutcome::drop_all())->contents("/d/f").value() == expected);
}

TEST_CASE("truncate and allocate stay pending until sync_data") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "abcdef");
  REQUIRE(file->allocate(4, 100).has_value());
  CHECK(file->size().value() == 104);
  REQUIRE(file->truncate(2).has_value());
  CHECK(file->size().value() == 2);

  CHECK(crashed_text(*fs, CrashOutcome::drop_all()) == "abcdef");
  CHECK(crashed_text(*fs, CrashOutcome::keep_first_k(1)).size() == 104);
  CHECK(crashed_text(*fs, CrashOutcome::keep_all()) == "ab");
}

TEST_CASE("allocate never shrinks a file") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "abcdef");
  REQUIRE(file->allocate(0, 2).has_value());
  CHECK(file->size().value() == 6);
  sync(*file);
  CHECK(text_of(fs->durable_contents("/d/f").value()) == "abcdef");
}

TEST_CASE("a dsync write survives drop_all while earlier plain writes stay pending") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "........");
  write(*file, 0, bytes_of("AA"));
  write(*file, 8, bytes_of("DD"), WriteFlags::dsync);

  CHECK(fs->pending_data_op_count() == 1);  // the dsync write is not a choice
  CHECK(text_of(fs->durable_contents("/d/f").value()) == "........DD");
  CHECK(crashed_text(*fs, CrashOutcome::drop_all()) == "........DD");
  CHECK(crashed_text(*fs, CrashOutcome::keep_all()) == "AA......DD");
}

TEST_CASE("a crash replays kept and durable writes in their real order") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "....");

  SUBCASE("a later dsync write wins over an earlier kept write") {
    write(*file, 0, bytes_of("kept"));
    write(*file, 0, bytes_of("DS"), WriteFlags::dsync);
    CHECK(crashed_text(*fs, CrashOutcome::keep_all()) == "DSpt");
    CHECK(crashed_text(*fs, CrashOutcome::drop_all()) == "DS..");
  }
  SUBCASE("a later kept write wins over an earlier dsync write") {
    write(*file, 0, bytes_of("DS"), WriteFlags::dsync);
    write(*file, 0, bytes_of("kept"));
    CHECK(crashed_text(*fs, CrashOutcome::keep_all()) == "kept");
    CHECK(crashed_text(*fs, CrashOutcome::drop_all()) == "DS..");
  }
}

TEST_CASE("a dsync write past the end makes the size growth durable") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "ab");
  write(*file, 6, bytes_of("Z"), WriteFlags::dsync);
  auto durable = fs->crash_image(CrashOutcome::drop_all())->contents("/d/f").value();
  REQUIRE(durable.size() == 7);
  CHECK(durable[2] == std::byte{0});
  CHECK(durable[6] == std::byte{'Z'});
}

TEST_CASE("keep_first_k keeps a prefix of pending data operations in global order across files") {
  auto fs = with_data_dir();
  auto a = open_file(*fs, "/d/a");
  auto b = open_file(*fs, "/d/b");
  REQUIRE(fs->sync_dir("/d").has_value());
  write(*a, 0, bytes_of("a1"));
  write(*b, 0, bytes_of("b1"));
  write(*a, 2, bytes_of("a2"));
  REQUIRE(fs->pending_data_op_count() == 3);

  const char* expected_a[] = {"", "a1", "a1", "a1a2"};
  const char* expected_b[] = {"", "", "b1", "b1"};
  for (std::size_t k = 0; k <= 3; ++k) {
    CAPTURE(k);
    auto image = fs->crash_image(CrashOutcome::keep_first_k(k));
    CHECK(text_of(image->contents("/d/a").value()) == expected_a[k]);
    CHECK(text_of(image->contents("/d/b").value()) == expected_b[k]);
  }
}

TEST_CASE("random_subset keeps some operations and drops others, the same way for the same seed") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, std::string(16, '.'));
  for (int i = 0; i < 16; ++i) write(*file, i, bytes_of("x"));

  bool saw_partial = false;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    std::string first = crashed_text(*fs, CrashOutcome::random_subset(seed));
    CHECK(first == crashed_text(*fs, CrashOutcome::random_subset(seed)));
    auto kept = std::count(first.begin(), first.end(), 'x');
    if (kept > 0 && kept < 16) saw_partial = true;
  }
  CHECK(saw_partial);
  CHECK(crashed_text(*fs, CrashOutcome::random_subset(1)) !=
        crashed_text(*fs, CrashOutcome::random_subset(2)));
}

TEST_CASE("tear keeps, drops, zeroes or garbles each 512-byte sector of a pending write") {
  auto fs = with_data_dir();
  constexpr std::size_t kSectors = 8;
  auto file = durable_file(*fs, std::string(kSectors * 512, 'o'));
  write(*file, 0, filled(kSectors * 512, 'n'));

  bool kept = false, dropped = false, zeroed = false, garbled = false;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    std::string image = crashed_text(*fs, CrashOutcome::tear(seed));
    REQUIRE(image.size() == kSectors * 512);
    for (std::size_t sector = 0; sector < kSectors; ++sector) {
      std::string bytes = image.substr(sector * 512, 512);
      if (bytes == std::string(512, 'n')) {
        kept = true;
      } else if (bytes == std::string(512, 'o')) {
        dropped = true;
      } else if (bytes == std::string(512, '\0')) {
        zeroed = true;
      } else {
        garbled = true;
        // A sector tears as a whole: garbage never mixes with the written bytes.
        CHECK(std::count(bytes.begin(), bytes.end(), 'n') < 16);
      }
    }
  }
  CHECK(kept);
  CHECK(dropped);
  CHECK(zeroed);
  CHECK(garbled);
}

TEST_CASE("tear cuts sectors on disk boundaries, not on the write's start") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, std::string(1024, 'o'));
  write(*file, 500, filled(24, 'n'));  // bytes 500..523 straddle the 512 boundary
  bool split = false;
  for (std::uint64_t seed = 0; seed < 32 && !split; ++seed) {
    std::string image = crashed_text(*fs, CrashOutcome::tear(seed));
    std::string low = image.substr(500, 12), high = image.substr(512, 12);
    split = (low == std::string(12, 'n')) != (high == std::string(12, 'n'));
  }
  CHECK(split);
}

TEST_CASE("the same seed gives byte-identical crash images") {
  auto build = [] {
    auto fs = with_data_dir();
    auto file = open_file(*fs, "/d/f");
    write(*file, 0, filled(4096, 'a'));
    write(*file, 1000, filled(3000, 'b'));
    REQUIRE(file->truncate(3500).has_value());
    return fs;
  };
  auto one = build();
  auto two = build();
  for (auto outcome : {CrashOutcome::tear(42, Names::keep), CrashOutcome::random_subset(42, Names::keep)}) {
    CAPTURE(outcome.describe());
    CHECK(one->crash_image(outcome)->contents("/d/f").value() ==
          two->crash_image(outcome)->contents("/d/f").value());
  }
}

TEST_CASE("a created but unsynced file vanishes with its data when names are reverted") {
  auto fs = with_data_dir();
  auto file = open_file(*fs, "/d/new");
  write(*file, 0, bytes_of("data"));
  sync(*file);  // the data is durable, the name is not
  CHECK(fs->pending_namespace_op_count() == 1);

  auto reverted = fs->crash_image(CrashOutcome::keep_all(Names::revert));
  CHECK_FALSE(reverted->exists("/d/new").value());
  CHECK(reverted->list_files_recursive().empty());
  auto kept = fs->crash_image(CrashOutcome::drop_all(Names::keep));
  CHECK(text_of(kept->contents("/d/new").value()) == "data");

  REQUIRE(fs->sync_dir("/d").has_value());
  CHECK(fs->pending_namespace_op_count() == 0);
  CHECK(text_of(fs->crash_image(CrashOutcome::drop_all())->contents("/d/new").value()) == "data");
}

TEST_CASE("sync_dir of one directory does not make another directory's entries durable") {
  auto fs = std::make_unique<FaultFileSystem>();
  REQUIRE(fs->create_dir("/a").has_value());
  REQUIRE(fs->create_dir("/b").has_value());
  REQUIRE(fs->sync_dir("/").has_value());
  open_file(*fs, "/a/x");
  open_file(*fs, "/b/y");
  REQUIRE(fs->sync_dir("/a").has_value());

  auto image = fs->crash_image(CrashOutcome::drop_all(Names::revert));
  CHECK(image->exists("/a/x").value());
  CHECK_FALSE(image->exists("/b/y").value());
  CHECK(image->list_files_recursive() == std::vector<std::string>{"/a/x"});
}

TEST_CASE("a synced directory's entries vanish while the directory itself is not synced into its parent") {
  auto fs = std::make_unique<FaultFileSystem>();
  REQUIRE(fs->create_dir("/a").has_value());
  open_file(*fs, "/a/x");
  REQUIRE(fs->sync_dir("/a").has_value());
  CHECK_FALSE(fs->crash_image(CrashOutcome::drop_all())->exists("/a").value());

  REQUIRE(fs->sync_dir("/").has_value());
  CHECK(fs->crash_image(CrashOutcome::drop_all())->exists("/a/x").value());
}

TEST_CASE("an unsynced rename or remove is undone when names are reverted") {
  auto fs = with_data_dir();
  durable_file(*fs, "payload");

  SUBCASE("rename") {
    REQUIRE(fs->rename("/d/f", "/d/g").has_value());
    CHECK_FALSE(fs->exists("/d/f").value());
    auto reverted = fs->crash_image(CrashOutcome::drop_all(Names::revert));
    CHECK(text_of(reverted->contents("/d/f").value()) == "payload");
    CHECK_FALSE(reverted->exists("/d/g").value());
    auto kept = fs->crash_image(CrashOutcome::drop_all(Names::keep));
    CHECK(text_of(kept->contents("/d/g").value()) == "payload");
    CHECK_FALSE(kept->exists("/d/f").value());
  }
  SUBCASE("remove") {
    REQUIRE(fs->remove("/d/f").has_value());
    CHECK(fs->list_files_recursive().empty());
    auto reverted = fs->crash_image(CrashOutcome::drop_all(Names::revert));
    CHECK(text_of(reverted->contents("/d/f").value()) == "payload");
    REQUIRE(fs->sync_dir("/d").has_value());
    CHECK_FALSE(fs->crash_image(CrashOutcome::drop_all(Names::revert))->exists("/d/f").value());
  }
}

TEST_CASE("a rename over an existing file replaces it atomically within one directory") {
  auto fs = with_data_dir();
  durable_file(*fs, "old");
  auto tmp = open_file(*fs, "/d/tmp");
  write(*tmp, 0, bytes_of("new"));
  sync(*tmp);
  REQUIRE(fs->rename("/d/tmp", "/d/f").has_value());
  CHECK(text_of(fs->contents("/d/f").value()) == "new");

  auto reverted = fs->crash_image(CrashOutcome::drop_all(Names::revert));
  CHECK(text_of(reverted->contents("/d/f").value()) == "old");
  CHECK_FALSE(reverted->exists("/d/tmp").value());
  REQUIRE(fs->sync_dir("/d").has_value());
  auto synced = fs->crash_image(CrashOutcome::drop_all(Names::revert));
  CHECK(text_of(synced->contents("/d/f").value()) == "new");
  CHECK(synced->list_files_recursive() == std::vector<std::string>{"/d/f"});
}

TEST_CASE("paths need existing parents, as on a real file system") {
  FaultFileSystem fs;
  CHECK(fs.open("/missing/f", kCreate).error() == std::errc::no_such_file_or_directory);
  CHECK(fs.open("/f", OpenOptions{.write = true}).error() == std::errc::no_such_file_or_directory);
  CHECK(fs.create_dir("/a/b").error() == std::errc::no_such_file_or_directory);
  REQUIRE(fs.create_dir("/a").has_value());
  CHECK(fs.create_dir("/a").has_value());  // already there is fine
  REQUIRE(fs.create_dir("/a/b").has_value());
  open_file(fs, "/a/z");
  open_file(fs, "/a/c");
  CHECK(fs.open("/a/c", OpenOptions{.write = true, .create = true, .exclusive = true}).error() ==
        std::errc::file_exists);
  CHECK(fs.list("/a").value() == std::vector<std::string>{"b", "c", "z"});
  CHECK(fs.exists("/").value());
  CHECK_FALSE(fs.exists("/nope/x").value());
  CHECK(fs.remove_dir("/a").error() == std::errc::directory_not_empty);
  CHECK(fs.remove("/a/b").error() == std::errc::is_a_directory);
  CHECK(fs.open("/a/b", kCreate).error() == std::errc::is_a_directory);
  CHECK(fs.create_dir("/a/c").error() == std::errc::file_exists);
  REQUIRE(fs.remove_dir("/a/b").has_value());
  CHECK(fs.list_files_recursive() == std::vector<std::string>{"/a/c", "/a/z"});
}

TEST_CASE("direct I/O refuses a misaligned offset, length or buffer with EINVAL") {
  FaultFileSystem fs;
  auto file = open_file(fs, "/f", kCreateDirect);
  CHECK(file->direct());
  io::AlignedBuffer buffer(2 * io::kDirectAlignment);
  std::span<const std::byte> whole = buffer.span();

  CHECK(file->write_at(0, whole, WriteFlags::dsync).value() == whole.size());
  CHECK(file->write_at(512, whole.first(io::kDirectAlignment), WriteFlags::none).error() ==
        std::errc::invalid_argument);
  CHECK(file->write_at(0, whole.first(512), WriteFlags::none).error() == std::errc::invalid_argument);
  CHECK(file->write_at(0, whole.subspan(1, io::kDirectAlignment), WriteFlags::none).error() ==
        std::errc::invalid_argument);
  CHECK(file->read_at(0, buffer.span().subspan(8, io::kDirectAlignment)).error() ==
        std::errc::invalid_argument);
  CHECK(file->read_at(0, buffer.span()).value() == buffer.size());
  CHECK(fs.contents("/f").value().size() == 2 * io::kDirectAlignment);

  // A buffered file takes any alignment.
  auto plain = open_file(fs, "/g");
  CHECK(plain->write_at(3, whole.subspan(1, 5), WriteFlags::none).value() == 5);
}

TEST_CASE("a file system that refuses O_DIRECT fails the open or the first write with EINVAL") {
  io::AlignedBuffer buffer(io::kDirectAlignment);
  SUBCASE("at open") {
    FaultFileSystem fs(FaultFileSystemOptions{.refuse_direct_open = true});
    CHECK(fs.open("/f", kCreateDirect).error() == std::errc::invalid_argument);
    CHECK(fs.open("/f", kCreate).has_value());
  }
  SUBCASE("at the first write") {
    FaultFileSystem fs(FaultFileSystemOptions{.refuse_direct_write = true});
    auto file = open_file(fs, "/f", kCreateDirect);
    CHECK(file->write_at(0, buffer.span(), WriteFlags::dsync).error() == std::errc::invalid_argument);
    CHECK(fs.contents("/f").value().empty());
  }
}

TEST_CASE("a short write writes and returns only a prefix") {
  SUBCASE("buffered: half") {
    FaultFileSystem fs;
    auto file = open_file(fs, "/f");
    fs.inject({.kind = OpKind::write, .nth = 1, .effect = FaultEffect::short_write});
    CHECK(file->write_at(0, bytes_of("abcdefg"), WriteFlags::none).value() == 3);
    CHECK(text_of(fs.contents("/f").value()) == "abc");
    CHECK(fs.faults_fired() == 1);
  }
  SUBCASE("direct: half, rounded down to a 512-byte sector") {
    FaultFileSystem fs;
    auto file = open_file(fs, "/f", kCreateDirect);
    io::AlignedBuffer buffer(3 * io::kDirectAlignment);
    fs.inject({.kind = OpKind::write, .nth = 1, .effect = FaultEffect::short_write});
    CHECK(file->write_at(0, buffer.span(), WriteFlags::dsync).value() == 6144);
    CHECK(fs.durable_contents("/f").value().size() == 6144);
  }
}

TEST_CASE("a failed write or allocate changes nothing") {
  FaultFileSystem fs;
  auto file = open_file(fs, "/f");
  write(*file, 0, bytes_of("keep"));
  fs.inject({.kind = OpKind::any, .nth = 1, .effect = FaultEffect::io_error, .persistent = true});
  CHECK(file->write_at(0, bytes_of("lost"), WriteFlags::dsync).error() == std::errc::io_error);
  CHECK(file->allocate(0, 1 << 20).error() == std::errc::io_error);
  CHECK(file->truncate(0).error() == std::errc::io_error);
  CHECK(text_of(fs.contents("/f").value()) == "keep");
  CHECK(fs.pending_data_op_count() == 1);
}

TEST_CASE("a persistent ENOSPC fails the nth matching operation and every later one") {
  FaultFileSystem fs;
  auto file = open_file(fs, "/f");
  fs.inject({.kind = OpKind::allocate, .nth = 2, .effect = FaultEffect::no_space, .persistent = true});
  CHECK(file->allocate(0, 4096).has_value());
  write(*file, 0, bytes_of("writes do not match the filter"));
  CHECK(file->allocate(0, 8192).error() == std::errc::no_space_on_device);
  CHECK(file->allocate(0, 8192).error() == std::errc::no_space_on_device);
  CHECK(file->size().value() == 4096);
  CHECK(fs.faults_fired() == 2);
  fs.clear_faults();
  CHECK(file->allocate(0, 8192).has_value());
}

TEST_CASE("a one-shot fault fails only the nth matching operation") {
  FaultFileSystem fs;
  auto file = open_file(fs, "/f");
  fs.inject({.kind = OpKind::sync, .nth = 2, .effect = FaultEffect::io_error});
  CHECK(file->sync_data().has_value());
  CHECK(fs.sync_dir("/").error() == std::errc::io_error);  // the second sync of either kind
  CHECK(file->sync_data().has_value());
  CHECK(fs.sync_dir("/").has_value());
  CHECK(fs.faults_fired() == 1);
  CHECK(fs.pending_namespace_op_count() == 0);  // the retried sync_dir made /f durable
}

TEST_CASE("a failed sync_dir leaves the entries pending") {
  FaultFileSystem fs;
  open_file(fs, "/f");
  fs.inject({.kind = OpKind::sync_dir, .nth = 1, .effect = FaultEffect::io_error});
  CHECK(fs.sync_dir("/").error() == std::errc::io_error);
  CHECK_FALSE(fs.crash_image(CrashOutcome::drop_all())->exists("/f").value());
}

TEST_CASE("fsync lies the second time: a failed sync drops the data and the next sync succeeds") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "acked.");
  write(*file, 6, bytes_of("lost"));
  write(*file, 10, bytes_of("DS"), WriteFlags::dsync);
  fs->inject({.kind = OpKind::sync_data, .nth = 1, .effect = FaultEffect::sync_loses_data});

  CHECK(file->sync_data().error() == std::errc::io_error);
  CHECK(file->sync_data().has_value());  // the lie: nothing left to fail on
  CHECK(fs->pending_data_op_count() == 0);
  // The dsync write had already reached the disk; the plain one is gone.
  std::string after = crashed_text(*fs, CrashOutcome::keep_all());
  CHECK(after == std::string("acked.") + std::string(4, '\0') + "DS");
  // The failed pages stay readable in the cache, marked clean, until the
  // cache is dropped: then reads show the disk.
  CHECK(text_of(fs->contents("/d/f").value()) == "acked.lostDS");
  CHECK(file->drop_cache().has_value());
  CHECK(text_of(fs->contents("/d/f").value()) == after);
}

TEST_CASE("after set_crash_after_ops(n) the nth operation completes and every later call fails with EIO") {
  auto fs = with_data_dir();  // 2 operations
  auto file = durable_file(*fs, "synced");  // 4 more: open, sync_dir, write, sync
  CHECK(fs->operation_count() == 6);
  fs->set_crash_after_ops(7);
  CHECK_FALSE(fs->crashed());
  write(*file, 0, bytes_of("SY"));  // the 7th completes
  CHECK(fs->crashed());

  CHECK(file->write_at(0, bytes_of("no"), WriteFlags::dsync).error() == std::errc::io_error);
  CHECK(file->sync_data().error() == std::errc::io_error);
  std::array<std::byte, 4> out{};
  CHECK(file->read_at(0, out).error() == std::errc::io_error);
  CHECK(file->size().error() == std::errc::io_error);
  CHECK(fs->open("/d/f", OpenOptions{}).error() == std::errc::io_error);
  CHECK(fs->create_dir("/e").error() == std::errc::io_error);
  CHECK(fs->list("/").error() == std::errc::io_error);
  CHECK(fs->operation_count() == 7);

  // Inspection and crash images still work, and show the frozen state.
  CHECK(text_of(fs->contents("/d/f").value()) == "SYnced");
  CHECK(crashed_text(*fs, CrashOutcome::drop_all()) == "synced");
  auto image = fs->crash_image(CrashOutcome::keep_all());
  CHECK_FALSE(image->crashed());
  CHECK(image->operation_count() == 0);
  CHECK(image->create_dir("/e").has_value());
}

TEST_CASE("crash points can be enumerated until the workload completes") {
  // The workload stops at its first error, as the log would.
  auto workload = [](FaultFileSystem& fs) -> bool {
    auto file = fs.open("/f", kCreate);
    if (!file) return false;
    if (!(*file)->write_at(0, bytes_of("one"), WriteFlags::none)) return false;
    if (!(*file)->sync_data()) return false;
    if (!fs.sync_dir("/")) return false;
    return (*file)->write_at(3, bytes_of("two"), WriteFlags::none).has_value();
  };
  std::vector<std::string> durable_by_point;
  for (std::uint64_t n = 0;; ++n) {
    FaultFileSystem fs;
    fs.set_crash_after_ops(n);
    bool finished = workload(fs);
    auto image = fs.crash_image(CrashOutcome::drop_all());
    auto data = image->contents("/f");
    durable_by_point.push_back(data ? text_of(*data) : "<none>");
    if (finished) {
      CHECK(n == 5);
      break;
    }
    REQUIRE(n < 10);
  }
  CHECK(durable_by_point ==
        std::vector<std::string>{"<none>", "<none>", "<none>", "<none>", "one", "one"});
}

TEST_CASE("corrupt_bit and truncate_durable damage the durable image") {
  auto fs = with_data_dir();
  durable_file(*fs, "AB");
  REQUIRE(fs->corrupt_bit("/d/f", 8).has_value());  // lowest bit of byte 1
  CHECK(text_of(fs->durable_contents("/d/f").value()) == "AC");
  CHECK(text_of(fs->contents("/d/f").value()) == "AC");
  CHECK(fs->corrupt_bit("/d/f", 16).error() == std::errc::invalid_argument);
  REQUIRE(fs->truncate_durable("/d/f", 1).has_value());
  CHECK(text_of(fs->crash_image(CrashOutcome::drop_all())->contents("/d/f").value()) == "A");
}

TEST_CASE("a clone is an independent copy, pending operations included") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "base");
  write(*file, 0, bytes_of("B"));
  auto copy = fs->clone();
  write(*file, 1, bytes_of("X"));

  CHECK(text_of(copy->contents("/d/f").value()) == "Base");
  CHECK(copy->pending_data_op_count() == 1);
  CHECK(copy->operation_count() == fs->operation_count() - 1);
  CHECK(text_of(copy->crash_image(CrashOutcome::drop_all())->contents("/d/f").value()) == "base");
}

TEST_CASE("a removed file stays usable through an open handle and is forgotten once closed") {
  auto fs = with_data_dir();
  auto file = durable_file(*fs, "x");
  REQUIRE(fs->remove("/d/f").has_value());
  REQUIRE(fs->sync_dir("/d").has_value());
  write(*file, 1, bytes_of("y"));
  std::array<std::byte, 2> out{};
  CHECK(file->read_at(0, out).value() == 2);
  CHECK(out[1] == std::byte{'y'});
  // Unreachable by any name, so no crash can show it.
  CHECK(fs->pending_data_op_count() == 0);
  file.reset();
  CHECK(fs->list_files_recursive().empty());
}

TEST_CASE("a file may outlive the file system that opened it") {
  auto fs = std::make_unique<FaultFileSystem>();
  auto file = open_file(*fs, "/f");
  fs.reset();
  write(*file, 0, bytes_of("orphan"));
  CHECK(file->size().value() == 6);
}

TEST_CASE("concurrent writers on separate files all land") {
  FaultFileSystem fs;
  constexpr int kWrites = 200;
  auto writer = [&fs](const std::string& path, char value) {
    auto file = fs.open(path, kCreate).value();
    for (int i = 0; i < kWrites; ++i) {
      auto written = file->write_at(static_cast<std::uint64_t>(i), filled(1, value),
                                    i % 2 ? WriteFlags::dsync : WriteFlags::none);
      if (!written) return;
      if (i % 50 == 0 && !file->sync_data()) return;
    }
  };
  std::thread a(writer, "/a", 'a');
  std::thread b(writer, "/b", 'b');
  a.join();
  b.join();
  CHECK(text_of(fs.contents("/a").value()) == std::string(kWrites, 'a'));
  CHECK(text_of(fs.contents("/b").value()) == std::string(kWrites, 'b'));
  CHECK(fs.operation_count() == 2 * (1 + kWrites + kWrites / 50));
}

TEST_CASE("all_crash_outcomes covers every k and both name outcomes") {
  auto outcomes = all_crash_outcomes(3, 2);
  // Per name outcome: drop_all, k = 1 and 2, keep_all, 2 seeds x (random, tear).
  CHECK(outcomes.size() == 2 * (1 + 2 + 1 + 4));
  CHECK(all_crash_outcomes(0, 5).size() == 2);
  CHECK(CrashOutcome::tear(7, Names::keep).describe() == "tear(seed=7), names=keep");
}

}  // TEST_SUITE
}  // namespace fusee::testing
