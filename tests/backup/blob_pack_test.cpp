// A chunk's blob pack (backup/blob_pack.hpp): what it packs comes back, and a
// pack that is torn, damaged, or whose record does not match its reference
// is refused with a reason, never handed back.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "backup/blob_pack.hpp"
#include "base/crc32c.hpp"

using namespace fusee;

namespace {

backup::PackedBlob blob_of(std::uint64_t file, std::uint64_t offset, const std::string& text) {
  backup::PackedBlob blob;
  auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  blob.bytes.assign(bytes.begin(), bytes.end());
  blob.ref = wal::BlobRef{file, offset, blob.bytes.size(), crc32c(blob.bytes),
                          blob.bytes.empty() ? std::uint8_t{0} : static_cast<std::uint8_t>(blob.bytes.front())};
  return blob;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("blob pack: what it packs comes back; torn, damaged or mismatched packs are refused with a reason") {
  std::vector<backup::PackedBlob> blobs{blob_of(1, 0, std::string(5000, 'a')), blob_of(1, 8192, ""),
                                        blob_of(2, 0, "a large record")};
  auto pack = backup::encode_blob_pack(blobs);
  std::string problem;
  auto back = backup::decode_blob_pack(pack, &problem);
  REQUIRE_MESSAGE(back.has_value(), problem);
  REQUIRE(back->size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK((*back)[i].ref == blobs[i].ref);
    CHECK((*back)[i].bytes == blobs[i].bytes);
  }
  CHECK(backup::decode_blob_pack(backup::encode_blob_pack({}), &problem)->empty());

  SUBCASE("every cut is refused") {
    for (std::size_t size = 0; size < pack.size(); size += 97) {
      CHECK_FALSE(backup::decode_blob_pack(std::span(pack).first(size), &problem).has_value());
    }
  }
  SUBCASE("a flipped bit fails the pack's checksum") {
    auto damaged = pack;
    damaged[100] ^= std::byte{0x10};
    CHECK_FALSE(backup::decode_blob_pack(damaged, &problem).has_value());
    CHECK(problem == "its checksum does not match");
  }
  SUBCASE("a record that does not match its reference") {
    auto wrong = blobs;
    wrong[2].ref.crc ^= 1;
    CHECK_FALSE(backup::decode_blob_pack(backup::encode_blob_pack(wrong), &problem).has_value());
    CHECK(problem.find("does not match its reference") != std::string::npos);
  }
  SUBCASE("not a pack at all") {
    std::vector<std::byte> other(64, std::byte{7});
    CHECK_FALSE(backup::decode_blob_pack(other, &problem).has_value());
    CHECK(problem == "not a blob pack");
  }
}
}
