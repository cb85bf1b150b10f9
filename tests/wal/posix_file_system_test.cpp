// PosixFileSystem against a real temporary directory: round trips, O_DIRECT
// with aligned buffers, errors that carry errno, and directory operations.
#include "tests/support/result_checks.hpp"
#include "wal/io/posix_file_system.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace {

using fusee::Result;
using fusee::io::AlignedBuffer;
using fusee::io::File;
using fusee::io::kDirectAlignment;
using fusee::io::OpenOptions;
using fusee::io::PosixFileSystem;
using fusee::io::WriteFlags;
using fusee::testing::TempDir;

using fusee::testing::ok_or_fail;
using fusee::testing::value_or_fail;
using fusee::testing::as_bytes;

std::string read_string(File& file, std::uint64_t offset, std::size_t size_bytes) {
  std::string out(size_bytes, '\0');
  auto got = value_or_fail(file.read_at(offset, std::as_writable_bytes(std::span(out))));
  out.resize(got);
  return out;
}

constexpr OpenOptions kCreate{.write = true, .create = true};

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("posix file system reads back what was written, at any offset") {
    TempDir dir;
    PosixFileSystem fs;
    auto file = value_or_fail(fs.open(dir.sub("data"), kCreate));
    CHECK_FALSE(file->direct());

    CHECK(value_or_fail(file->write_at(0, as_bytes("hello"), WriteFlags::none)) == 5);
    CHECK(value_or_fail(file->write_at(10000, as_bytes("durable"), WriteFlags::dsync)) == 7);
    ok_or_fail(file->sync_data());

    CHECK(value_or_fail(file->size()) == 10007);
    CHECK(read_string(*file, 0, 5) == "hello");
    CHECK(read_string(*file, 10000, 7) == "durable");
    // The hole between the writes reads as zeros.
    CHECK(read_string(*file, 5, 3) == std::string(3, '\0'));
    // A read across the end is short; one past the end is empty.
    CHECK(read_string(*file, 10003, 100) == "able");
    CHECK(read_string(*file, 20000, 100).empty());

    // A second open sees the same bytes: nothing was held in the File.
    auto reader = value_or_fail(fs.open(dir.sub("data"), OpenOptions{}));
    CHECK(read_string(*reader, 10000, 7) == "durable");
  }

  TEST_CASE("posix file system allocate extends the size and truncate shrinks it") {
    TempDir dir;
    PosixFileSystem fs;
    auto file = value_or_fail(fs.open(dir.sub("segment"), kCreate));
    ok_or_fail(file->allocate(0, 1 << 20));
    CHECK(value_or_fail(file->size()) == (1u << 20));
    // Preallocated space reads as zeros.
    CHECK(read_string(*file, 4096, 16) == std::string(16, '\0'));
    ok_or_fail(file->truncate(4096));
    ok_or_fail(file->sync_data());
    CHECK(value_or_fail(file->size()) == 4096);
  }

  TEST_CASE("posix file system direct writes of aligned buffers round trip") {
    TempDir dir;
    PosixFileSystem fs;
    OpenOptions direct_options = kCreate;
    direct_options.direct = true;
    auto opened = fs.open(dir.sub("direct"), direct_options);
    if (!opened && opened.error() == std::errc::invalid_argument) {
      MESSAGE("O_DIRECT refused (EINVAL) under " << dir.path() << ": direct check skipped");
      return;
    }
    auto file = value_or_fail(std::move(opened));
    CHECK(file->direct());

    AlignedBuffer out(2 * kDirectAlignment);
    for (std::size_t i = 0; i < out.size(); ++i) out.data()[i] = static_cast<std::byte>(i * 7 + 3);
    ok_or_fail(file->allocate(0, 4 * kDirectAlignment));
    CHECK(value_or_fail(file->write_at(kDirectAlignment, out.span(), WriteFlags::dsync)) ==
          out.size());

    AlignedBuffer in(2 * kDirectAlignment);
    CHECK(value_or_fail(file->read_at(kDirectAlignment, in.span())) == in.size());
    CHECK(std::equal(in.span().begin(), in.span().end(), out.span().begin()));

    // A buffered reader sees the same bytes (no stale page cache).
    auto buffered = value_or_fail(fs.open(dir.sub("direct"), OpenOptions{}));
    std::vector<std::byte> copy(out.size());
    CHECK(value_or_fail(buffered->read_at(kDirectAlignment, copy)) == copy.size());
    CHECK(std::equal(copy.begin(), copy.end(), out.span().begin()));
  }

  TEST_CASE("posix file system errors carry the errno") {
    TempDir dir;
    PosixFileSystem fs;

    auto missing = fs.open(dir.sub("missing"), OpenOptions{});
    REQUIRE_FALSE(missing.has_value());
    CHECK(missing.error() == std::errc::no_such_file_or_directory);
    CHECK(missing.error().value() == ENOENT);
    CHECK(&missing.error().category() == &std::generic_category());

    auto created = value_or_fail(fs.open(dir.sub("once"), kCreate));
    OpenOptions exclusive = kCreate;
    exclusive.exclusive = true;
    auto again = fs.open(dir.sub("once"), exclusive);
    REQUIRE_FALSE(again.has_value());
    CHECK(again.error() == std::errc::file_exists);

    // Writing through a read-only File fails rather than silently dropping.
    auto read_only = value_or_fail(fs.open(dir.sub("once"), OpenOptions{}));
    auto write = read_only->write_at(0, as_bytes("x"), WriteFlags::none);
    REQUIRE_FALSE(write.has_value());
    CHECK(write.error() == std::errc::bad_file_descriptor);

    auto rename = fs.rename(dir.sub("missing"), dir.sub("elsewhere"));
    REQUIRE_FALSE(rename.has_value());
    CHECK(rename.error() == std::errc::no_such_file_or_directory);
    auto remove = fs.remove(dir.sub("missing"));
    REQUIRE_FALSE(remove.has_value());
    CHECK(remove.error() == std::errc::no_such_file_or_directory);
    auto sync = fs.sync_dir(dir.sub("missing"));
    REQUIRE_FALSE(sync.has_value());
    CHECK(sync.error() == std::errc::no_such_file_or_directory);
    auto list = fs.list(dir.sub("missing"));
    REQUIRE_FALSE(list.has_value());
    CHECK(list.error() == std::errc::no_such_file_or_directory);
  }

  TEST_CASE("posix file system lists names sorted, without dot entries") {
    TempDir dir;
    PosixFileSystem fs;
    for (const char* name : {"segment-10", "b", "segment-2", "a", "segment-1"}) {
      (void)value_or_fail(fs.open(dir.sub(name), kCreate));
    }
    ok_or_fail(fs.create_dir(dir.sub("blobs")));
    std::vector<std::string> expected{"a", "b", "blobs", "segment-1", "segment-10", "segment-2"};
    CHECK(value_or_fail(fs.list(dir.path())) == expected);
    CHECK(value_or_fail(fs.list(dir.sub("blobs"))).empty());
  }

  TEST_CASE("posix file system renames, removes and manages directories") {
    TempDir dir;
    PosixFileSystem fs;
    (void)value_or_fail(fs.open(dir.sub("tmp"), kCreate));
    ok_or_fail(fs.rename(dir.sub("tmp"), dir.sub("final")));
    ok_or_fail(fs.sync_dir(dir.path()));
    CHECK_FALSE(value_or_fail(fs.exists(dir.sub("tmp"))));
    CHECK(value_or_fail(fs.exists(dir.sub("final"))));
    // Below a regular file nothing can exist; that is "no", not an error.
    CHECK_FALSE(value_or_fail(fs.exists(dir.sub("final") + "/child")));

    ok_or_fail(fs.create_dir(dir.sub("wal")));
    ok_or_fail(fs.create_dir(dir.sub("wal")));  // already there: still fine
    CHECK(value_or_fail(fs.exists(dir.sub("wal"))));
    auto over_file = fs.create_dir(dir.sub("final"));
    REQUIRE_FALSE(over_file.has_value());
    CHECK(over_file.error() == std::errc::not_a_directory);

    (void)value_or_fail(fs.open(dir.sub("wal/segment"), kCreate));
    auto not_empty = fs.remove_dir(dir.sub("wal"));
    REQUIRE_FALSE(not_empty.has_value());
    CHECK(not_empty.error() == std::errc::directory_not_empty);
    ok_or_fail(fs.remove(dir.sub("wal/segment")));
    ok_or_fail(fs.remove_dir(dir.sub("wal")));
    CHECK_FALSE(value_or_fail(fs.exists(dir.sub("wal"))));
    ok_or_fail(fs.sync_dir(dir.path()));
  }
}

TEST_SUITE("unit") {
TEST_CASE("a tmpfs directory is reported as memory-backed, so the log keeps its threads there") {
  PosixFileSystem fs;
  auto shm = fs.exists("/dev/shm");
  if (!shm.has_value() || !*shm) {
    MESSAGE("no /dev/shm here; nothing to check");
    return;
  }
  auto backed = fs.is_memory_backed("/dev/shm");
  REQUIRE(backed.has_value());
  CHECK(*backed);
  auto missing = fs.is_memory_backed("/no/such/dir/fusee");
  CHECK_FALSE(missing.has_value());
}
}
