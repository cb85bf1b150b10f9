// CRC-32C: the standard vectors, the three-chain, single-chain and table paths
// agreeing at every length, alignment and block boundary, and extending in
// pieces.
#include "base/crc32c.hpp"

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

// The block sizes of base/crc32c.cpp: inputs of at least three short blocks
// run on three chains, and of at least three long blocks on three far-apart
// chains. Named here so the boundaries get checked; if the sizes there move,
// these tests still pass but should move with them.
constexpr std::size_t kShortGroupBytes = 3 * 256;
constexpr std::size_t kLongGroupBytes = 3 * 256 * 1024;

// Every path against the portable one, from a fresh start and from a
// non-trivial incoming CRC (extend must not assume it starts fresh).
void require_paths_agree(std::span<const std::byte> piece) {
  for (std::uint32_t crc : {0u, 0xdeadbeefu}) {
    std::uint32_t expected = fusee::crc32c_portable_extend(crc, piece);
    REQUIRE(fusee::crc32c_extend(crc, piece) == expected);
    REQUIRE(fusee::crc32c_single_chain_extend(crc, piece) == expected);
  }
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
    CHECK(fusee::crc32c_single_chain_extend(0, as_bytes("123456789")) == 0xE3069283u);
    CHECK(fusee::crc32c_single_chain_extend(0, ascending) == 0x46DD794Eu);
  }

  TEST_CASE("crc32c hardware and portable paths agree at every length and alignment") {
    if (!fusee::crc32c_hardware_available()) {
      MESSAGE("no CRC-32C instruction on this CPU: every call takes the portable path");
    }
    constexpr std::uint64_t kSeed = 0x5eed'c3c2'0001u;
    INFO("seed " << kSeed);
    // Through the single-chain lengths, the first groups of short blocks and
    // the tails after them; 16 start offsets cover every misalignment of the
    // 8-byte loads, twice.
    constexpr std::size_t kLengthMax = 2 * kShortGroupBytes + 600;
    constexpr std::size_t kStarts = 16;
    auto buffer = random_bytes(kLengthMax + kStarts, kSeed);
    for (std::size_t start = 0; start < kStarts; ++start) {
      for (std::size_t length = 0; length <= kLengthMax; ++length) {
        INFO("start " << start << " length " << length);
        require_paths_agree(std::span<const std::byte>(buffer).subspan(start, length));
      }
    }
    MESSAGE((kLengthMax + 1) << " lengths x " << kStarts << " alignments checked");
  }

  TEST_CASE("crc32c agrees with the portable path around every block boundary of long inputs") {
    constexpr std::uint64_t kSeed = 0x5eed'c3c2'0004u;
    INFO("seed " << kSeed);
    // Room for the longest length below (3 long groups, 2 short ones and 767
    // bytes) from either start.
    auto buffer = random_bytes(3 * kLongGroupBytes + 3 * kShortGroupBytes + 16, kSeed);
    std::size_t checked = 0;
    for (std::size_t groups : {1u, 2u, 3u}) {
      for (std::size_t short_groups : {0u, 1u, 2u}) {
        std::size_t base = groups * kLongGroupBytes + short_groups * kShortGroupBytes;
        for (std::size_t extra : {0u, 1u, 7u, 8u, 9u, 255u, 256u, 257u, 767u}) {
          for (std::size_t start : {0u, 3u}) {
            INFO("start " << start << " length " << base + extra);
            require_paths_agree(std::span<const std::byte>(buffer).subspan(start, base + extra));
            ++checked;
          }
        }
      }
    }
    // Just below one long group: all of it on short blocks.
    for (std::size_t below : {1u, 8u, 767u, 768u}) {
      require_paths_agree(std::span<const std::byte>(buffer).first(kLongGroupBytes - below));
      ++checked;
    }
    MESSAGE(checked << " lengths around block boundaries checked");
  }

  TEST_CASE("crc32c agrees with the portable path on random large buffers") {
    constexpr std::uint64_t kSeed = 0x5eed'c3c2'0005u;
    INFO("seed " << kSeed);
    constexpr std::size_t kSizeMax = 3 * kLongGroupBytes;
    auto buffer = random_bytes(kSizeMax + 64, kSeed);
    std::mt19937_64 rng(kSeed);
    constexpr int kBuffers = 24;
    for (int i = 0; i < kBuffers; ++i) {
      std::size_t start = rng() % 64;
      std::size_t length = rng() % (kSizeMax + 1);
      INFO("start " << start << " length " << length);
      require_paths_agree(std::span<const std::byte>(buffer).subspan(start, length));
    }
    // Uniform bytes: zeros keep every chain's register at zero, so a join
    // that dropped a chain would go unseen with random data but not here.
    for (unsigned value : {0x00u, 0xffu}) {
      std::vector<std::byte> uniform(kLongGroupBytes + kShortGroupBytes + 5, static_cast<std::byte>(value));
      INFO("all bytes " << value);
      require_paths_agree(uniform);
    }
    MESSAGE(kBuffers << " random buffers up to " << kSizeMax << " bytes checked");
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

  TEST_CASE("crc32c of a long buffer extended in pieces cut anywhere equals the CRC of the whole") {
    constexpr std::uint64_t kSeed = 0x5eed'c3c2'0006u;
    INFO("seed " << kSeed);
    auto buffer = random_bytes(2 * kLongGroupBytes + 1234, kSeed);
    std::span<const std::byte> whole(buffer);
    std::uint32_t expected = fusee::crc32c_portable_extend(0, whole);
    REQUIRE(fusee::crc32c(whole) == expected);

    // Cuts that leave each side on the long blocks, the short ones or the
    // single chain, and cuts at random.
    std::mt19937_64 rng(kSeed);
    std::vector<std::size_t> cuts = {1, 100, kShortGroupBytes - 1, kShortGroupBytes + 3, kLongGroupBytes - 1,
                                     kLongGroupBytes, kLongGroupBytes + 5, whole.size() - kShortGroupBytes,
                                     whole.size() - 1};
    for (int i = 0; i < 16; ++i) cuts.push_back(rng() % whole.size());
    for (std::size_t cut : cuts) {
      INFO("cut " << cut);
      std::uint32_t head = fusee::crc32c(whole.first(cut));
      CHECK(fusee::crc32c_extend(head, whole.subspan(cut)) == expected);
      CHECK(fusee::crc32c_single_chain_extend(fusee::crc32c_single_chain_extend(0, whole.first(cut)),
                                              whole.subspan(cut)) == expected);
    }

    // Uneven pieces from a few bytes to a few long groups.
    std::uint32_t crc = 0;
    std::size_t at = 0;
    std::size_t pieces = 0;
    while (at < whole.size()) {
      std::size_t length = std::min<std::size_t>(rng() % (kLongGroupBytes / 2), whole.size() - at);
      if (rng() % 2 == 0) length %= 3000;
      crc = fusee::crc32c_extend(crc, whole.subspan(at, length));
      at += length;
      ++pieces;
    }
    INFO(pieces << " pieces");
    CHECK(crc == expected);
  }

  TEST_CASE("crc32c of one flipped bit differs") {
    auto buffer = random_bytes(64, 0x5eed'c3c2'0003u);
    std::uint32_t before = fusee::crc32c(buffer);
    buffer[17] ^= std::byte{0x04};
    CHECK(fusee::crc32c(buffer) != before);
  }

  TEST_CASE("crc32c_combine joins two CRCs, and gives any range's CRC from two prefix CRCs") {
    auto data = random_bytes(20000, 5);
    auto span = std::span<const std::byte>(data);
    for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{4096}, std::size_t{12345},
                            std::size_t{20000}}) {
      CAPTURE(cut);
      auto a = span.first(cut);
      auto b = span.subspan(cut);
      CHECK(fusee::crc32c_combine(fusee::crc32c(a), fusee::crc32c(b), b.size()) == fusee::crc32c(span));
    }
    for (auto range : {std::pair<std::size_t, std::size_t>{0, 100}, {64, 4096}, {4096, 8192}, {5000, 19999},
                       {777, 777}}) {
      std::size_t begin = range.first;
      std::size_t end = range.second;
      CAPTURE(begin);
      CAPTURE(end);
      auto prefix_begin = fusee::crc32c(span.first(begin));
      auto prefix_end = fusee::crc32c(span.first(end));
      CHECK((prefix_end ^ fusee::crc32c_combine(prefix_begin, 0, end - begin)) ==
            fusee::crc32c(span.subspan(begin, end - begin)));
    }
  }
}
