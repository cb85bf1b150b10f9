// The server protocol's frames: round trips through a decoder fed in pieces
// of any size, and refusal (with a reason, and nothing returned after it) of
// oversized, short, damaged, other-version and reserved-flag frames.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/crc32c.hpp"
#include "protocol/frame.hpp"

using namespace fusee::protocol;

namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> out;
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::vector<std::byte> frame_bytes(std::uint8_t type, std::uint64_t request_id, const std::string& payload) {
  std::vector<std::byte> out;
  encode_frame(type, request_id, bytes_of(payload), out);
  return out;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("frames round trip through a decoder fed one byte, a few bytes or everything at once") {
  std::vector<std::byte> stream;
  std::vector<Frame> sent;
  for (int i = 0; i < 20; ++i) {
    Frame frame{static_cast<std::uint8_t>(i % 7 + 1), 1000u + static_cast<std::uint64_t>(i),
                bytes_of(std::string(static_cast<std::size_t>(i * 37), static_cast<char>('a' + i)))};
    encode_frame(frame.type, frame.request_id, frame.payload, stream);
    sent.push_back(frame);
  }
  for (std::size_t piece : {std::size_t{1}, std::size_t{5}, std::size_t{4096}, stream.size()}) {
    FrameDecoder decoder;
    std::vector<Frame> received;
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      decoder.feed(std::span(stream).subspan(at, std::min(piece, stream.size() - at)));
      while (auto frame = decoder.next()) received.push_back(std::move(*frame));
    }
    CHECK(decoder.error().empty());
    CHECK(received == sent);
    CHECK(decoder.buffered_bytes() == 0);
  }
}

TEST_CASE("an empty payload and the header's layout") {
  auto bytes = frame_bytes(9, 0x0102030405060708, "");
  REQUIRE(bytes.size() == kFrameHeaderBytes);
  CHECK(std::to_integer<int>(bytes[0]) == 12);  // length of what the CRC covers
  CHECK(std::to_integer<int>(bytes[8]) == kProtocolVersion);
  CHECK(std::to_integer<int>(bytes[9]) == 9);
  CHECK(std::to_integer<int>(bytes[12]) == 0x08);  // request id, little-endian
  FrameDecoder decoder;
  decoder.feed(bytes);
  auto frame = decoder.next();
  REQUIRE(frame);
  CHECK(frame->request_id == 0x0102030405060708);
  CHECK(frame->payload.empty());
}

TEST_CASE("every single-bit flip of a frame is refused or changes nothing that is returned") {
  auto good = frame_bytes(3, 42, "append: shard 1, records ...");
  for (std::size_t bit = 0; bit < good.size() * 8; ++bit) {
    auto bad = good;
    bad[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    FrameDecoder decoder(1024);
    decoder.feed(bad);
    auto frame = decoder.next();
    // A flip in the length asks for more bytes (or is refused as too long or
    // too short); anywhere else the checksum catches it.
    CHECK_FALSE(frame);
    if (bit >= 32) CHECK_FALSE(decoder.error().empty());
  }
}

TEST_CASE("oversized, short, other-version and reserved-flag frames are refused with a reason") {
  SUBCASE("a length past the maximum is refused as soon as it arrives") {
    FrameDecoder decoder(1000);
    auto big = frame_bytes(1, 1, std::string(2000, 'x'));
    decoder.feed(std::span(big).first(8));
    CHECK_FALSE(decoder.next());
    CHECK(decoder.error().find("larger than the 1000 allowed") != std::string::npos);
    decoder.feed(std::span(big).subspan(8));
    CHECK_FALSE(decoder.next());  // refused for good
  }
  SUBCASE("shorter than the header") {
    std::vector<std::byte> bytes(8, std::byte{0});
    bytes[0] = std::byte{4};
    FrameDecoder decoder;
    decoder.feed(bytes);
    CHECK_FALSE(decoder.next());
    CHECK(decoder.error().find("shorter than its 20-byte header") != std::string::npos);
  }
  // A header byte rewritten and the checksum made right again, as a peer
  // speaking something else would send it.
  auto resealed = [](std::size_t offset, std::uint8_t value) {
    auto bytes = frame_bytes(1, 7, "payload");
    bytes[offset] = static_cast<std::byte>(value);
    auto crc = fusee::crc32c(std::span<const std::byte>(bytes).subspan(kFramePrefixBytes));
    for (int i = 0; i < 4; ++i) bytes[4 + i] = static_cast<std::byte>((crc >> (8 * i)) & 0xff);
    return bytes;
  };
  SUBCASE("another protocol version") {
    FrameDecoder decoder;
    decoder.feed(resealed(8, kProtocolVersion + 1));
    CHECK_FALSE(decoder.next());
    CHECK(decoder.error().find(fmt::format("protocol version {}", kProtocolVersion + 1)) != std::string::npos);
  }
  SUBCASE("the replicas' wire has a version of its own: each decoder takes its own only") {
    static_assert(kReplicaWireVersion != kProtocolVersion);
    FrameDecoder replica_decoder(kFrameBytesMax, kReplicaWireVersion);
    replica_decoder.feed(resealed(8, kReplicaWireVersion));
    auto frame = replica_decoder.next();
    REQUIRE(frame);
    CHECK(frame->type == 1);
    replica_decoder.feed(frame_bytes(1, 7, "payload"));  // the workers' version
    CHECK_FALSE(replica_decoder.next());
    CHECK(replica_decoder.error().find(fmt::format("protocol version {}", kProtocolVersion)) != std::string::npos);
    FrameDecoder worker_decoder;
    worker_decoder.feed(resealed(8, kReplicaWireVersion));
    CHECK_FALSE(worker_decoder.next());
    std::vector<std::byte> encoded;
    encode_frame(1, 7, {}, encoded, kReplicaWireVersion);
    CHECK(std::to_integer<int>(encoded[8]) == kReplicaWireVersion);
  }
  SUBCASE("reserved flags") {
    FrameDecoder decoder;
    decoder.feed(resealed(10, 1));
    CHECK_FALSE(decoder.next());
    CHECK(decoder.error().find("reserved flags") != std::string::npos);
  }
  SUBCASE("a damaged payload") {
    auto bytes = frame_bytes(1, 7, "payload");
    bytes.back() ^= std::byte{0x20};
    FrameDecoder decoder;
    decoder.feed(bytes);
    CHECK_FALSE(decoder.next());
    CHECK(decoder.error().find("fails its checksum") != std::string::npos);
  }
}
}
