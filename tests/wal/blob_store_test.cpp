// The blob area's storage (wal/blob_store.hpp): ref codec and file names, block layout, a file per open, rolls, round trips through the real and the fault-injecting file system (direct, and buffered where O_DIRECT is refused), concurrent writers, damage read_blob must name, write errors, and what survives a crash.
#include "tests/support/result_checks.hpp"
#include "wal/blob_store.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/support/fault_file_system.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/errc.hpp"
#include "wal/io/posix_file_system.hpp"

namespace {

using namespace fusee;
using namespace fusee::wal;
using fusee::testing::CrashOutcome;
using fusee::testing::FaultFileSystem;
using fusee::testing::FaultFileSystemOptions;

const std::string kBlobDir = "/wal/blobs";

using fusee::testing::ok_or_fail;
using fusee::testing::value_or_fail;

// Raw mt19937_64 output only, so a seed gives the same bytes everywhere.
std::vector<std::byte> random_bytes(std::size_t size_bytes, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::byte> bytes(size_bytes);
  for (auto& byte : bytes) byte = static_cast<std::byte>(random() >> 56);
  return bytes;
}

// A file system holding /wal, durably, and nothing else.
std::unique_ptr<FaultFileSystem> wal_fs(FaultFileSystemOptions options = {}) {
  auto fs = std::make_unique<FaultFileSystem>(options);
  ok_or_fail(fs->create_dir("/wal"));
  ok_or_fail(fs->sync_dir("/"));
  return fs;
}

std::unique_ptr<BlobWriter> open_writer(io::FileSystem& fs, const std::string& blob_dir,
                                        BlobStoreOptions options = {}) {
  return value_or_fail(BlobWriter::open(fs, blob_dir, options));
}

BlobRef put(BlobWriter& writer, const std::vector<std::byte>& bytes) {
  auto ref = value_or_fail(writer.reserve(bytes));
  ok_or_fail(writer.write(ref, bytes));
  return ref;
}

void check_reads_back(io::FileSystem& fs, const std::string& blob_dir, const BlobRef& ref,
                      const std::vector<std::byte>& bytes) {
  std::string problem;
  auto got = read_blob(fs, blob_dir, ref, &problem);
  REQUIRE_MESSAGE(got.has_value(), problem);
  CHECK(*got == bytes);
}

// read_blob must refuse ref as corrupt, naming the file and saying `what`.
void check_refused(io::FileSystem& fs, const BlobRef& ref, const std::string& what) {
  std::string problem;
  auto got = read_blob(fs, kBlobDir, ref, &problem);
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error() == make_error_code(errc::corrupt));
  CHECK_MESSAGE(problem.find(kBlobDir + "/" + blob_file_name(ref.file_number)) != std::string::npos, problem);
  CHECK_MESSAGE(problem.find(what) != std::string::npos, problem);
}

std::string blob_path(std::uint64_t file_number) { return kBlobDir + "/" + blob_file_name(file_number); }

struct FsVariant {
  const char* name;
  FaultFileSystemOptions options;
  bool stays_direct;
};

const std::vector<FsVariant>& fs_variants() {
  static const std::vector<FsVariant> variants = {
      {"direct", {}, true},
      {"refuse_direct_open", {.refuse_direct_open = true}, false},
      {"refuse_direct_write", {.refuse_direct_write = true}, false},
  };
  return variants;
}

// Sizes around the block boundaries, an empty record and a multi-block one.
const std::vector<std::size_t> kSizes = {1, 4095, 4096, 4097, 0, 100'000};

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("a blob ref encodes to 29 little-endian bytes and decodes back unchanged") {
    BlobRef ref{.file_number = 0x0102030405060708,
                .offset = 0x1112131415161000,
                .length = 0x2122232425262728,
                .crc = 0xA1A2A3A4,
                .kind = 0x7F};
    std::vector<std::byte> out(kBlobRefBytes + 1, std::byte{0xEE});
    encode_blob_ref(ref, out.data());
    CHECK(out[0] == std::byte{0x08});
    CHECK(out[7] == std::byte{0x01});
    CHECK(out[8] == std::byte{0x00});
    CHECK(out[15] == std::byte{0x11});
    CHECK(out[16] == std::byte{0x28});
    CHECK(out[24] == std::byte{0xA4});
    CHECK(out[27] == std::byte{0xA1});
    CHECK(out[28] == std::byte{0x7F});
    CHECK(out[29] == std::byte{0xEE});  // nothing past kBlobRefBytes
    CHECK(decode_blob_ref(out.data()) == ref);

    BlobRef zero;
    encode_blob_ref(zero, out.data());
    CHECK(decode_blob_ref(out.data()) == zero);
  }

  TEST_CASE("blob file names have ten digits and parse back; other names are not blob files") {
    CHECK(blob_file_name(7) == "0000000007.blob");
    CHECK(blob_file_name(kBlobFileNumberMax) == "9999999999.blob");
    CHECK(parse_blob_file_name("0000000007.blob") == 7u);
    CHECK(parse_blob_file_name(blob_file_name(1234567890)) == 1234567890u);
    CHECK_FALSE(parse_blob_file_name("0000000007.seg").has_value());
    CHECK_FALSE(parse_blob_file_name("000000007.blob").has_value());
    CHECK_FALSE(parse_blob_file_name("00000000x7.blob").has_value());
    CHECK_FALSE(parse_blob_file_name("0000000007.blobx").has_value());
    CHECK_FALSE(parse_blob_file_name("").has_value());
  }

  TEST_CASE("blobs round trip through the posix file system in a temp dir") {
    testing::TempDir dir;
    io::PosixFileSystem fs;
    auto blob_dir = dir.sub("blobs");
    std::vector<std::pair<BlobRef, std::vector<std::byte>>> written;
    {
      auto writer = open_writer(fs, blob_dir);
      for (std::size_t i = 0; i < kSizes.size(); ++i) {
        auto bytes = random_bytes(kSizes[i], i);
        written.emplace_back(put(*writer, bytes), bytes);
      }
      MESSAGE("posix blob writer direct_io after writing: " << writer->direct_io());
      for (const auto& [ref, bytes] : written) check_reads_back(fs, blob_dir, ref, bytes);
    }
    // And after the writer (and its files) closed.
    for (const auto& [ref, bytes] : written) check_reads_back(fs, blob_dir, ref, bytes);
    CHECK(value_or_fail(list_blob_files(fs, blob_dir)) == std::vector<std::uint64_t>{1});
  }

  TEST_CASE("blobs round trip through the fault file system, direct or buffered where direct is refused") {
    for (const auto& variant : fs_variants()) {
      CAPTURE(variant.name);
      auto fs = wal_fs(variant.options);
      auto writer = open_writer(*fs, kBlobDir);
      CHECK(writer->direct_io());  // nothing refused it yet: no file was opened
      std::vector<std::pair<BlobRef, std::vector<std::byte>>> written;
      for (std::size_t i = 0; i < kSizes.size(); ++i) {
        auto bytes = random_bytes(kSizes[i], 100 + i);
        written.emplace_back(put(*writer, bytes), bytes);
      }
      CHECK(writer->direct_io() == variant.stays_direct);
      for (const auto& [ref, bytes] : written) check_reads_back(*fs, kBlobDir, ref, bytes);
    }
  }

  TEST_CASE("a blob writer with direct_io off writes buffered and its blobs round trip") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir, {.direct_io = false});
    CHECK_FALSE(writer->direct_io());
    auto bytes = random_bytes(10'000, 3);
    auto ref = put(*writer, bytes);
    check_reads_back(*fs, kBlobDir, ref, bytes);
    CHECK(fs->pending_data_op_count() == 0);  // synced before write() returned
  }

  TEST_CASE("each blob starts on its own 4 KiB block, its padding zero") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir);
    std::vector<BlobRef> refs;
    for (std::size_t i = 0; i < kSizes.size(); ++i) refs.push_back(put(*writer, random_bytes(kSizes[i], i)));
    // 1 -> one block, 4095 -> one, 4096 -> one, 4097 -> two, 0 -> one, 100000 -> 25.
    std::vector<std::uint64_t> offsets;
    for (const auto& ref : refs) {
      CHECK(ref.file_number == 1);
      offsets.push_back(ref.offset);
    }
    CHECK(offsets == std::vector<std::uint64_t>{0, 4096, 8192, 12288, 20480, 24576});
    auto contents = value_or_fail(fs->contents(blob_path(1)));
    CHECK(contents.size() == 24576 + 25 * 4096);
    for (const auto& ref : refs) {
      auto region_end = ref.offset + std::max<std::uint64_t>(round_up_to_block(ref.length), kBlockBytes);
      CHECK(std::all_of(contents.begin() + static_cast<std::ptrdiff_t>(ref.offset + ref.length),
                        contents.begin() + static_cast<std::ptrdiff_t>(region_end),
                        [](std::byte b) { return b == std::byte{0}; }));
    }
  }

  TEST_CASE("each open of a blob writer starts a new blob file, one past the highest present") {
    auto fs = wal_fs();
    auto bytes = random_bytes(5000, 1);
    CHECK(put(*open_writer(*fs, kBlobDir), bytes).file_number == 1);
    CHECK(put(*open_writer(*fs, kBlobDir), bytes).file_number == 2);
    { auto unused = open_writer(*fs, kBlobDir); }  // writes nothing, so creates no file
    CHECK(value_or_fail(list_blob_files(*fs, kBlobDir)) == std::vector<std::uint64_t>{1, 2});
    CHECK(put(*open_writer(*fs, kBlobDir), bytes).file_number == 3);

    // Gaps and other names: one past the highest blob file.
    CHECK(fs->open(blob_path(41), {.write = true, .create = true}).has_value());
    CHECK(fs->open(kBlobDir + "/notes.txt", {.write = true, .create = true}).has_value());
    auto ref = put(*open_writer(*fs, kBlobDir), bytes);
    CHECK(ref.file_number == 42);
    CHECK(ref.offset == 0);
  }

  TEST_CASE("a blob writer rolls to a new blob file once a blob would pass file_bytes_max") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir, {.file_bytes_max = 16 * 1024});
    std::vector<std::tuple<std::size_t, std::uint64_t, std::uint64_t>> expected = {
        {4096, 1, 0},          // file 1: [0, 4096)
        {8192, 1, 4096},       // [4096, 12288)
        {4000, 1, 12288},      // [12288, 16384): exactly full, no roll
        {1, 2, 0},             // would pass: file 2
        {12289, 3, 0},         // 4096 + 16384 > 16384: file 3
        {16384, 4, 0},         // file 3 has 16384 already
    };
    std::vector<std::pair<BlobRef, std::vector<std::byte>>> written;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      auto [size, file_number, offset] = expected[i];
      CAPTURE(i);
      auto bytes = random_bytes(size, i);
      auto ref = put(*writer, bytes);
      CHECK(ref.file_number == file_number);
      CHECK(ref.offset == offset);
      written.emplace_back(ref, bytes);
    }
    CHECK(value_or_fail(list_blob_files(*fs, kBlobDir)) == std::vector<std::uint64_t>{1, 2, 3, 4});
    for (const auto& [ref, bytes] : written) check_reads_back(*fs, kBlobDir, ref, bytes);
  }

  TEST_CASE("a blob larger than file_bytes_max goes alone in its own file") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir, {.file_bytes_max = 8192});
    auto small = random_bytes(100, 1);
    auto large = random_bytes(20'000, 2);
    auto first = put(*writer, small);
    auto big = put(*writer, large);
    auto after = put(*writer, small);
    CHECK(first.file_number == 1);
    CHECK(big.file_number == 2);
    CHECK(big.offset == 0);
    CHECK(after.file_number == 3);
    CHECK(after.offset == 0);
    CHECK(value_or_fail(fs->contents(blob_path(2))).size() == 20'480);
    check_reads_back(*fs, kBlobDir, big, large);

    // A writer whose very first blob is oversized puts it alone in its first file.
    auto writer2 = open_writer(*fs, kBlobDir, {.file_bytes_max = 8192});
    auto big2 = put(*writer2, large);
    CHECK(big2.file_number == 4);
    CHECK(put(*writer2, small).file_number == 5);
  }

  TEST_CASE("reserving a blob does no I/O, even when it rolls to a new blob file") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir, {.file_bytes_max = 4096});
    auto before = fs->operation_count();
    auto bytes = random_bytes(4096, 1);
    auto a = value_or_fail(writer->reserve(bytes));
    auto b = value_or_fail(writer->reserve(bytes));  // rolls
    CHECK(fs->operation_count() == before);
    CHECK(b.file_number == a.file_number + 1);
    CHECK_FALSE(value_or_fail(fs->exists(blob_path(b.file_number))));
    // Written out of order: the later file first.
    ok_or_fail(writer->write(b, bytes));
    ok_or_fail(writer->write(a, bytes));
    check_reads_back(*fs, kBlobDir, a, bytes);
    check_reads_back(*fs, kBlobDir, b, bytes);
  }

  TEST_CASE("blobs from 4 concurrent writer threads all read back, in regions that never overlap") {
    constexpr int kThreads = 4;
    constexpr int kBlobsPerThread = 60;
    for (const auto& variant : fs_variants()) {
      CAPTURE(variant.name);
      auto fs = wal_fs(variant.options);
      // Small files, so threads race on rolls and on creating the same file.
      auto writer = open_writer(*fs, kBlobDir, {.file_bytes_max = 32 * 1024});
      std::vector<std::vector<std::pair<BlobRef, std::vector<std::byte>>>> written(kThreads);
      std::vector<std::string> errors(kThreads);
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937_64 sizes(static_cast<std::uint64_t>(t));
          for (int i = 0; i < kBlobsPerThread; ++i) {
            auto bytes = random_bytes(sizes() % 12'000, static_cast<std::uint64_t>(t * 1000 + i));
            auto ref = writer->reserve(bytes);
            if (!ref) {
              errors[t] = "reserve: " + ref.error().message();
              return;
            }
            if (auto done = writer->write(*ref, bytes); !done) {
              errors[t] = "write: " + done.error().message();
              return;
            }
            written[t].emplace_back(*ref, std::move(bytes));
          }
        });
      }
      for (auto& thread : threads) thread.join();
      for (const auto& error : errors) CHECK_MESSAGE(error.empty(), error);

      std::vector<BlobRef> all;
      for (const auto& per_thread : written) {
        CHECK(per_thread.size() == kBlobsPerThread);
        for (const auto& [ref, bytes] : per_thread) {
          check_reads_back(*fs, kBlobDir, ref, bytes);
          all.push_back(ref);
        }
      }
      std::sort(all.begin(), all.end(), [](const BlobRef& a, const BlobRef& b) {
        return std::tie(a.file_number, a.offset) < std::tie(b.file_number, b.offset);
      });
      for (std::size_t i = 1; i < all.size(); ++i) {
        if (all[i].file_number != all[i - 1].file_number) continue;
        CHECK(all[i - 1].offset + std::max<std::uint64_t>(round_up_to_block(all[i - 1].length), kBlockBytes) <=
              all[i].offset);
      }
      CHECK(all.back().file_number > 3);  // it did roll
      CHECK(fs->pending_data_op_count() == 0);
      CHECK(fs->pending_namespace_op_count() == 0);
    }
  }

  TEST_CASE("read_blob refuses a blob ref with the wrong length, naming the blob file") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir);
    auto ref = put(*writer, random_bytes(5000, 1));
    auto longer = ref;
    longer.length += 1;  // still inside the padded region: the CRC catches it
    check_refused(*fs, longer, "CRC-32C");
    auto shorter = ref;
    shorter.length -= 1;
    check_refused(*fs, shorter, "CRC-32C");
    auto past_end = ref;
    past_end.length = 9000;  // beyond the file
    check_refused(*fs, past_end, "too short");
  }

  TEST_CASE("read_blob refuses a blob with a flipped bit, naming the blob file") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir);
    put(*writer, random_bytes(3000, 1));
    auto ref = put(*writer, random_bytes(5000, 2));
    // Damage what a restart finds: the crash image folds the dsync writes into
    // the durable image, which corrupt_bit flips.
    auto image = fs->crash_image(CrashOutcome::drop_all());
    check_reads_back(*image, kBlobDir, ref, random_bytes(5000, 2));
    ok_or_fail(image->corrupt_bit(blob_path(ref.file_number), (ref.offset + 4321) * 8 + 5));
    check_refused(*image, ref, "CRC-32C");
  }

  TEST_CASE("read_blob refuses a blob whose kind differs from the ref, naming the blob file") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir);
    auto ref = put(*writer, random_bytes(5000, 1));
    ref.kind ^= 0x01;
    check_refused(*fs, ref, "kind");
  }

  TEST_CASE("read_blob refuses a blob whose file is missing, naming the blob file") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir);
    auto ref = put(*writer, random_bytes(5000, 1));
    writer.reset();
    ok_or_fail(fs->remove(blob_path(ref.file_number)));
    check_refused(*fs, ref, "missing");
    auto elsewhere = ref;
    elsewhere.file_number = 77;
    check_refused(*fs, elsewhere, "missing");
  }

  TEST_CASE("read_blob refuses a blob whose file was truncated, naming the blob file") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir);
    put(*writer, random_bytes(100, 1));
    auto ref = put(*writer, random_bytes(5000, 2));
    auto image = fs->crash_image(CrashOutcome::drop_all());
    ok_or_fail(image->truncate_durable(blob_path(ref.file_number), ref.offset + ref.length - 1));
    check_refused(*image, ref, "too short");
  }

  TEST_CASE("read_blob refuses a blob ref with an unaligned offset, naming the blob file") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir);
    auto ref = put(*writer, random_bytes(5000, 1));
    ref.offset += 512;
    check_refused(*fs, ref, "not block-aligned");
  }

  TEST_CASE("list_blob_files of a missing blob directory is empty and skips other names") {
    auto fs = wal_fs();
    CHECK(value_or_fail(list_blob_files(*fs, kBlobDir)).empty());
    ok_or_fail(delete_blob_files_except(*fs, kBlobDir, {}));  // nothing to delete, no error
    ok_or_fail(fs->create_dir(kBlobDir));
    for (const auto* name : {"0000000009.blob", "0000000003.blob", "notes.txt", "0000000004.seg"}) {
      CHECK(fs->open(kBlobDir + "/" + name, {.write = true, .create = true}).has_value());
    }
    CHECK(value_or_fail(list_blob_files(*fs, kBlobDir)) == std::vector<std::uint64_t>{3, 9});
  }

  TEST_CASE("delete_blob_files_except removes the other blob files durably and keeps other names") {
    auto fs = wal_fs();
    std::vector<std::pair<BlobRef, std::vector<std::byte>>> written;
    for (int i = 0; i < 4; ++i) {
      auto bytes = random_bytes(6000, static_cast<std::uint64_t>(i));
      written.emplace_back(put(*open_writer(*fs, kBlobDir), bytes), bytes);
    }
    CHECK(fs->open(kBlobDir + "/notes.txt", {.write = true, .create = true}).has_value());
    ok_or_fail(fs->sync_dir(kBlobDir));
    ok_or_fail(delete_blob_files_except(*fs, kBlobDir, {2, 4, 99}));
    CHECK(value_or_fail(list_blob_files(*fs, kBlobDir)) == std::vector<std::uint64_t>{2, 4});
    CHECK(value_or_fail(fs->exists(kBlobDir + "/notes.txt")));
    CHECK(fs->pending_namespace_op_count() == 0);

    auto image = fs->crash_image(CrashOutcome::drop_all());
    CHECK(value_or_fail(list_blob_files(*image, kBlobDir)) == std::vector<std::uint64_t>{2, 4});
    check_reads_back(*image, kBlobDir, written[1].first, written[1].second);
    check_reads_back(*image, kBlobDir, written[3].first, written[3].second);
  }

  TEST_CASE("a blob writer refuses file_bytes_max outside its limits") {
    auto fs = wal_fs();
    auto small = BlobWriter::open(*fs, kBlobDir, {.file_bytes_max = kBlobFileBytesMin - 1});
    REQUIRE_FALSE(small.has_value());
    CHECK(small.error() == make_error_code(errc::invalid_argument));
    auto large = BlobWriter::open(*fs, kBlobDir, {.file_bytes_max = kBlobFileBytesMax + 1});
    REQUIRE_FALSE(large.has_value());
    CHECK(large.error() == make_error_code(errc::invalid_argument));
  }

  TEST_CASE("a failed blob write is returned to the caller") {
    for (const auto& variant : fs_variants()) {
      CAPTURE(variant.name);
      auto fs = wal_fs(variant.options);
      auto writer = open_writer(*fs, kBlobDir);
      auto bytes = random_bytes(5000, 1);
      fs->inject({.kind = testing::OpKind::write, .nth = 1, .effect = testing::FaultEffect::io_error});
      auto ref = value_or_fail(writer->reserve(bytes));
      auto done = writer->write(ref, bytes);
      REQUIRE_FALSE(done.has_value());
      CHECK(done.error() == std::errc::io_error);
    }
  }

  TEST_CASE("a failed create of a new blob file is returned, and the file's later blob writes fail too") {
    auto fs = wal_fs();
    auto writer = open_writer(*fs, kBlobDir);
    fs->inject({.kind = testing::OpKind::sync_dir, .nth = 1, .effect = testing::FaultEffect::io_error});
    auto bytes = random_bytes(5000, 1);
    auto first = value_or_fail(writer->reserve(bytes));
    auto second = value_or_fail(writer->reserve(bytes));
    CHECK_FALSE(writer->write(first, bytes).has_value());
    // The fault fired once; the directory entry is still not known durable.
    CHECK_FALSE(writer->write(second, bytes).has_value());
  }

  TEST_CASE("after a buffered blob sync loses data, no later blob write to that file claims success") {
    // Linux marks the pages clean after a failed writeback, so the next
    // fdatasync succeeds with the data gone; the writer must not trust it.
    auto fs = wal_fs({.refuse_direct_open = true});
    auto writer = open_writer(*fs, kBlobDir);
    auto a = random_bytes(5000, 1);
    auto b = random_bytes(5000, 2);
    auto ref_a = value_or_fail(writer->reserve(a));
    auto ref_b = value_or_fail(writer->reserve(b));
    fs->inject({.kind = testing::OpKind::sync_data, .nth = 1, .effect = testing::FaultEffect::sync_loses_data});
    CHECK_FALSE(writer->write(ref_a, a).has_value());
    CHECK_FALSE(writer->write(ref_b, b).has_value());
    CHECK(fs->faults_fired() == 1);
  }
}

TEST_SUITE("crash") {
  TEST_CASE("a written blob survives a crash that drops everything not durable, its new file's name included") {
    for (const auto& variant : fs_variants()) {
      CAPTURE(variant.name);
      auto fs = std::make_unique<FaultFileSystem>(variant.options);
      ok_or_fail(fs->create_dir("/wal"));
      ok_or_fail(fs->sync_dir("/"));
      // Small files, so several brand-new files are created along the way.
      auto writer = open_writer(*fs, kBlobDir, {.file_bytes_max = 8192});
      std::vector<std::pair<BlobRef, std::vector<std::byte>>> written;
      for (std::size_t i = 0; i < kSizes.size(); ++i) {
        auto bytes = random_bytes(kSizes[i], i);
        written.emplace_back(put(*writer, bytes), bytes);
      }
      CHECK(written.back().first.file_number >= 4);
      CHECK(fs->pending_data_op_count() == 0);
      CHECK(fs->pending_namespace_op_count() == 0);

      auto image = fs->crash_image(CrashOutcome::drop_all(CrashOutcome::Names::revert));
      CHECK(value_or_fail(image->exists(kBlobDir)));
      for (const auto& [ref, bytes] : written) check_reads_back(*image, kBlobDir, ref, bytes);
      // The next open continues past every file that survived.
      auto next = put(*open_writer(*image, kBlobDir), random_bytes(10, 9));
      CHECK(next.file_number == written.back().first.file_number + 1);
    }
  }

  TEST_CASE("a crash at any point keeps every blob whose write returned, under every crash outcome") {
    std::uint64_t crash_states = 0;
    const std::vector<std::size_t> sizes = {5000, 100, 9000, 0, 4096, 20'000};
    for (const auto& variant : fs_variants()) {
      for (std::uint64_t crash_at = 0;; ++crash_at) {
        auto fs = wal_fs(variant.options);
        fs->set_crash_after_ops(fs->operation_count() + crash_at);
        std::vector<std::pair<BlobRef, std::vector<std::byte>>> acknowledged;
        if (auto writer = BlobWriter::open(*fs, kBlobDir, {.file_bytes_max = 8192})) {
          for (std::size_t i = 0; i < sizes.size(); ++i) {
            auto bytes = random_bytes(sizes[i], i);
            auto ref = (*writer)->reserve(bytes);
            REQUIRE(ref.has_value());
            if (!(*writer)->write(*ref, bytes)) break;  // the log would poison itself here
            acknowledged.emplace_back(*ref, bytes);
          }
        }
        bool crashed = fs->crashed();
        if (!crashed) CHECK(acknowledged.size() == sizes.size());
        for (const auto& outcome : testing::all_crash_outcomes(fs->pending_data_op_count(), 2)) {
          auto where = std::string(variant.name) + ", crash after " + std::to_string(crash_at) + " ops, " +
                       outcome.describe();
          INFO(where);
          auto image = fs->crash_image(outcome);
          for (const auto& [ref, bytes] : acknowledged) check_reads_back(*image, kBlobDir, ref, bytes);
          // A writer opened on what survived never reuses a file holding an acknowledged blob.
          auto writer = open_writer(*image, kBlobDir, {.file_bytes_max = 8192});
          auto extra = random_bytes(3000, 77);
          auto ref = put(*writer, extra);
          for (const auto& acked : acknowledged) CHECK(ref.file_number > acked.first.file_number);
          check_reads_back(*image, kBlobDir, ref, extra);
          ++crash_states;
        }
        if (!crashed) break;
      }
    }
    MESSAGE("blob crash states checked: " << crash_states);
    CHECK(crash_states > 100);
  }
}
