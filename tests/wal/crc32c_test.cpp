// CRC-32C: the standard vectors, the SSE4.2 and table paths agreeing, and
// extending in pieces.
#include "wal/crc32c.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace {

std::span<const std::byte> as_bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::array<std::byte, 32> filled_with(unsigned value) {
  std::array<std::byte, 32> bytes{};
  bytes.fill(static_cast<std::byte>(value));
  return bytes;
}

std::vector<std::byte> random_bytes(std::size_t size_bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> bytes(size_bytes);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xffu);
  return bytes;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("crc32c matches the RFC 3720 and check-value test vectors") {
    std::array<std::byte, 32> ascending{};
    std::array<std::byte, 32> descending{};
    for (std::size_t i = 0; i < 32; ++i) {
      ascending[i] = static_cast<std::byte>(i);
      descending[i] = static_cast<std::byte>(31 - i);
    }
    auto zeros = filled_with(0x00);
    auto ones = filled_with(0xff);

    CHECK(fusee::crc32c(zeros) == 0x8A9136AAu);
    CHECK(fusee::crc32c(ones) == 0x62A8AB43u);
    CHECK(fusee::crc32c(ascending) == 0x46DD794Eu);
    CHECK(fusee::crc32c(descending) == 0x113FDB5Cu);
    CHECK(fusee::crc32c(as_bytes("123456789")) == 0xE3069283u);
    CHECK(fusee::crc32c({}) == 0u);

    // The portable path must meet the same vectors on its own, since a CPU
    // without SSE4.2 would otherwise be the first place it is ever checked.
    CHECK(fusee::crc32c_portable_extend(0, zeros) == 0x8A9136AAu);
    CHECK(fusee::crc32c_portable_extend(0, ones) == 0x62A8AB43u);
    CHECK(fusee::crc32c_portable_extend(0, ascending) == 0x46DD794Eu);
    CHECK(fusee::crc32c_portable_extend(0, descending) == 0x113FDB5Cu);
    CHECK(fusee::crc32c_portable_extend(0, as_bytes("123456789")) == 0xE3069283u);
  }

  TEST_CASE("crc32c hardware and portable paths agree at every length and alignment") {
    if (!fusee::crc32c_hardware_available()) {
      MESSAGE("no SSE4.2 on this CPU: both calls take the portable path");
    }
    constexpr std::uint64_t kSeed = 0x5eed'c3c2'0001u;
    INFO("seed " << kSeed);
    // 8 spare bytes so every start offset 0..7 can read up to 300 bytes.
    auto buffer = random_bytes(300 + 8, kSeed);
    for (std::size_t start = 0; start < 8; ++start) {
      for (std::size_t length = 0; length <= 300; ++length) {
        auto piece = std::span<const std::byte>(buffer).subspan(start, length);
        INFO("start " << start << " length " << length);
        REQUIRE(fusee::crc32c_extend(0, piece) == fusee::crc32c_portable_extend(0, piece));
        // A non-trivial incoming CRC, too: extend must not assume it starts fresh.
        REQUIRE(fusee::crc32c_extend(0xdeadbeefu, piece) ==
                fusee::crc32c_portable_extend(0xdeadbeefu, piece));
      }
    }
  }

  TEST_CASE("crc32c extended in pieces equals the CRC of the whole") {
    constexpr std::uint64_t kSeed = 0x5eed'c3c2'0002u;
    INFO("seed " << kSeed);
    auto buffer = random_bytes(1000, kSeed);
    std::span<const std::byte> whole(buffer);
    std::uint32_t expected = fusee::crc32c(whole);

    for (std::size_t cut = 0; cut <= whole.size(); cut += 37) {
      INFO("cut " << cut);
      std::uint32_t head = fusee::crc32c(whole.first(cut));
      CHECK(fusee::crc32c_extend(head, whole.subspan(cut)) == expected);
      std::uint32_t portable_head = fusee::crc32c_portable_extend(0, whole.first(cut));
      CHECK(fusee::crc32c_portable_extend(portable_head, whole.subspan(cut)) == expected);
    }

    // Many uneven pieces, including empty ones.
    std::mt19937_64 rng(kSeed);
    std::uint32_t crc = 0;
    std::size_t at = 0;
    while (at < whole.size()) {
      std::size_t length = std::min<std::size_t>(rng() % 20, whole.size() - at);
      crc = fusee::crc32c_extend(crc, whole.subspan(at, length));
      at += length;
    }
    CHECK(crc == expected);
  }

  TEST_CASE("crc32c of one flipped bit differs") {
    auto buffer = random_bytes(64, 0x5eed'c3c2'0003u);
    std::uint32_t before = fusee::crc32c(buffer);
    buffer[17] ^= std::byte{0x04};
    CHECK(fusee::crc32c(buffer) != before);
  }
}
