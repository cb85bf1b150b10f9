#include "wal/crc32c.hpp"

#include <array>
#include <bit>
#include <cstddef>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace fusee {
namespace {

constexpr std::uint32_t kPolynomialReflected = 0x82F63B78u;

// kTables[k][b] is the CRC register after byte b followed by k zero bytes, so
// slice-by-8 can fold eight input bytes with eight independent lookups instead
// of a chain of eight dependent ones. Built at compile time: no init order or
// thread-safety questions.
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables tables{};
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    std::uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomialReflected : 0u);
    tables[0][byte] = crc;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t byte = 0; byte < 256; ++byte) {
      std::uint32_t previous = tables[k - 1][byte];
      tables[k][byte] = (previous >> 8) ^ tables[0][previous & 0xffu];
    }
  }
  return tables;
}

constexpr Tables kTables = make_tables();

// The CRC is defined over bytes in memory order, with the first byte in the
// low bits of the register: a little-endian load puts it there.
std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t word;
  std::memcpy(&word, p, sizeof word);
  if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
  return word;
}

std::uint32_t portable_register(std::uint32_t reg, const unsigned char* p, std::size_t n) {
  while (n >= 8) {
    std::uint64_t word = load_le64(p) ^ reg;
    reg = kTables[7][word & 0xffu] ^ kTables[6][(word >> 8) & 0xffu] ^
          kTables[5][(word >> 16) & 0xffu] ^ kTables[4][(word >> 24) & 0xffu] ^
          kTables[3][(word >> 32) & 0xffu] ^ kTables[2][(word >> 40) & 0xffu] ^
          kTables[1][(word >> 48) & 0xffu] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    reg = (reg >> 8) ^ kTables[0][(reg ^ *p) & 0xffu];
    ++p;
    --n;
  }
  return reg;
}

#if defined(__x86_64__)
// Compiled for SSE4.2 through the target attribute, not -msse4.2, so the rest
// of the binary still runs on a CPU without it; only called after the
// runtime check below.
__attribute__((target("sse4.2"))) std::uint32_t hardware_register(std::uint32_t reg,
                                                                   const unsigned char* p,
                                                                   std::size_t n) {
  std::uint64_t reg64 = reg;
  // Misaligned 8-byte loads cost extra when they cross a cache line; a few
  // single-byte steps first make every wide load aligned.
  while (n > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0) {
    reg64 = _mm_crc32_u8(static_cast<std::uint32_t>(reg64), *p);
    ++p;
    --n;
  }
  while (n >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, sizeof word);
    reg64 = _mm_crc32_u64(reg64, word);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    reg64 = _mm_crc32_u8(static_cast<std::uint32_t>(reg64), *p);
    ++p;
    --n;
  }
  return static_cast<std::uint32_t>(reg64);
}
#endif

using RegisterFn = std::uint32_t (*)(std::uint32_t, const unsigned char*, std::size_t);

RegisterFn choose_register_fn() {
#if defined(__x86_64__)
  // __builtin_cpu_init is needed if this first runs from a static initializer,
  // before the runtime has filled in the CPU model.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) return &hardware_register;
#endif
  return &portable_register;
}

RegisterFn register_fn() {
  // Decided once; a function-local static so it is safe from any thread and
  // from other static initializers.
  static const RegisterFn fn = choose_register_fn();
  return fn;
}

const unsigned char* bytes_of(std::span<const std::byte> data) {
  return reinterpret_cast<const unsigned char*>(data.data());
}

}  // namespace

std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data) {
  return ~register_fn()(~crc, bytes_of(data), data.size());
}

std::uint32_t crc32c_portable_extend(std::uint32_t crc, std::span<const std::byte> data) {
  return ~portable_register(~crc, bytes_of(data), data.size());
}

bool crc32c_hardware_available() { return register_fn() != &portable_register; }

}  // namespace fusee
