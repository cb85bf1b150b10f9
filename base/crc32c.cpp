#include "base/crc32c.hpp"

#include <array>
#include <bit>
#include <cstddef>
#include <cstring>

// The CPU's CRC-32C instruction, where this build can reach it. Both compute
// the same register step as portable_register below: reflected polynomial
// 0x82F63B78, the 8-byte word taken little-endian (hence no big-endian ARM).
#if defined(__x86_64__)
#include <nmmintrin.h>
#define FUSEE_CRC32C_HARDWARE 1
// A target attribute, not -msse4.2, so the rest of the binary still runs on a
// CPU without SSE4.2; these functions run only after the runtime check.
#define FUSEE_CRC32C_TARGET __attribute__((target("sse4.2")))
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32) && defined(__ORDER_LITTLE_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
// Built for a CPU that has the instruction (-march=armv8.1-a or later, or
// armv8-a+crc, Apple's default): no runtime check needed.
#include <arm_acle.h>
#define FUSEE_CRC32C_HARDWARE 1
#define FUSEE_CRC32C_TARGET
#define FUSEE_CRC32C_ARM_ALWAYS 1
#elif defined(__aarch64__) && defined(__linux__) && defined(__ORDER_LITTLE_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
// Built for plain armv8-a, where the instruction is optional: compiled in
// through a target attribute and used only if the kernel reports it
// (HWCAP_CRC32). Clang 14's <arm_acle.h> declares __crc32cd only when the
// whole file is built with +crc, so clang calls its builtins directly; GCC's
// header declares the intrinsics under a target pragma of its own.
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)  // arch/arm64/include/uapi/asm/hwcap.h
#endif
#define FUSEE_CRC32C_HARDWARE 1
#if defined(__clang__)
#define FUSEE_CRC32C_TARGET __attribute__((target("crc")))
#else
#include <arm_acle.h>
#define FUSEE_CRC32C_TARGET __attribute__((target("+crc")))
#endif
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

#if defined(FUSEE_CRC32C_HARDWARE)

// ---------------------------------------------------------------------------
// Moving a register over zero bytes, which is what lets independent chains be
// joined.
//
// The register is a polynomial over GF(2) modulo P, reflected: bit i holds the
// coefficient of x^(31-i), so 0x80000000 is the polynomial 1. Without the
// pre- and post-inversion the CRC is linear, and a register r followed by n
// bytes of data D ends as
//   step(r, D) = r·x^(8n) mod P  xor  step(0, D),
// the first term being what r becomes over n zero bytes. So with
// D = A ‖ B ‖ C, each n bytes long,
//   step(r, D) = ((r·X xor step(0, A))·X xor step(0, B))·X xor step(0, C),
// X = x^(8n) mod P: the three step(0, ·) are independent chains the CPU runs
// side by side, joined by three multiplications by X.

constexpr std::uint32_t kPolynomialOne = 0x80000000u;

// r·x mod P: one bit step of the register, exactly as the table above builds.
constexpr std::uint32_t times_x(std::uint32_t r) {
  return (r >> 1) ^ ((r & 1u) ? kPolynomialReflected : 0u);
}

constexpr std::uint32_t multiply(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  // b runs through b·x^0, b·x^1, ... as a's bits run from x^0 upwards.
  for (std::uint32_t bit = kPolynomialOne; bit != 0; bit >>= 1) {
    if ((a & bit) != 0) product ^= b;
    b = times_x(b);
  }
  return product;
}

// x^exponent mod P, by squaring.
constexpr std::uint32_t x_to_the(std::uint64_t exponent) {
  std::uint32_t result = kPolynomialOne;
  std::uint32_t square = times_x(kPolynomialOne);
  for (; exponent != 0; exponent >>= 1) {
    if ((exponent & 1u) != 0) result = multiply(result, square);
    square = multiply(square, square);
  }
  return result;
}

// x^32 mod P is P without its leading term; and x^8 is one zero byte through
// the byte table.
static_assert(x_to_the(32) == kPolynomialReflected);
static_assert(multiply(0x12345678u, x_to_the(8)) == ((0x12345678u >> 8) ^ kTables[0][0x78u]));

// A multiplication by x^(8·zero_bytes) as four lookups, one per register
// byte: multiplication distributes over xor, so the register's four bytes
// can be multiplied apart. [k][b] is (b << 8k)·x^(8·zero_bytes) mod P.
using ShiftTable = std::array<std::array<std::uint32_t, 256>, 4>;

constexpr ShiftTable make_shift_table(std::size_t zero_bytes) {
  const std::uint32_t factor = x_to_the(8 * std::uint64_t{zero_bytes});
  ShiftTable table{};
  for (std::size_t k = 0; k < 4; ++k) {
    // Each entry is the xor of the entries of its set bits: 8 multiplications
    // per byte position instead of 256, which keeps compile-time evaluation
    // well inside the compilers' step limits.
    for (std::uint32_t bit = 0; bit < 8; ++bit) {
      table[k][1u << bit] = multiply(std::uint32_t{1} << (8 * k + bit), factor);
    }
    for (std::uint32_t byte = 1; byte < 256; ++byte) {
      std::uint32_t lowest = byte & (~byte + 1);
      table[k][byte] = table[k][byte & ~lowest] ^ table[k][lowest];
    }
  }
  return table;
}

inline std::uint32_t shift(const ShiftTable& table, std::uint32_t reg) {
  return table[0][reg & 0xffu] ^ table[1][(reg >> 8) & 0xffu] ^ table[2][(reg >> 16) & 0xffu] ^
         table[3][reg >> 24];
}

// ---------------------------------------------------------------------------
// The hardware paths.

#if defined(__x86_64__)
FUSEE_CRC32C_TARGET inline std::uint32_t crc_word(std::uint32_t reg, std::uint64_t word) {
  return static_cast<std::uint32_t>(_mm_crc32_u64(reg, word));
}
FUSEE_CRC32C_TARGET inline std::uint32_t crc_byte(std::uint32_t reg, unsigned char byte) {
  return _mm_crc32_u8(reg, byte);
}
bool cpu_has_crc32c() {
  // __builtin_cpu_init is needed if this first runs from a static
  // initializer, before the runtime has filled in the CPU model.
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#elif defined(FUSEE_CRC32C_ARM_ALWAYS) || !defined(__clang__)
FUSEE_CRC32C_TARGET inline std::uint32_t crc_word(std::uint32_t reg, std::uint64_t word) {
  return __crc32cd(reg, word);
}
FUSEE_CRC32C_TARGET inline std::uint32_t crc_byte(std::uint32_t reg, unsigned char byte) {
  return __crc32cb(reg, byte);
}
#else
FUSEE_CRC32C_TARGET inline std::uint32_t crc_word(std::uint32_t reg, std::uint64_t word) {
  return __builtin_arm_crc32cd(reg, word);
}
FUSEE_CRC32C_TARGET inline std::uint32_t crc_byte(std::uint32_t reg, unsigned char byte) {
  return __builtin_arm_crc32cb(reg, byte);
}
#endif

#if defined(__aarch64__)
bool cpu_has_crc32c() {
#if defined(FUSEE_CRC32C_ARM_ALWAYS)
  return true;
#else
  return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#endif
}
#endif

// Only little-endian builds get here (see the top), so a plain load is the
// little-endian word the instruction wants.
inline std::uint64_t load_word(const unsigned char* p) {
  std::uint64_t word;
  std::memcpy(&word, p, sizeof word);
  return word;
}

// Misaligned 8-byte loads cost extra when they cross a cache line; a few
// single-byte steps first make every wide load aligned.
FUSEE_CRC32C_TARGET inline std::uint32_t align_to_word(std::uint32_t reg, const unsigned char*& p,
                                                      std::size_t& n) {
  while (n > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0) {
    reg = crc_byte(reg, *p);
    ++p;
    --n;
  }
  return reg;
}

// One dependency chain: each instruction waits for the result of the one
// before it (three cycles on x86), though the CPU could start one or more
// every cycle.
FUSEE_CRC32C_TARGET std::uint32_t single_chain_register(std::uint32_t reg, const unsigned char* p,
                                                        std::size_t n) {
  reg = align_to_word(reg, p, n);
  while (n >= 8) {
    reg = crc_word(reg, load_word(p));
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    reg = crc_byte(reg, *p);
    ++p;
    --n;
  }
  return reg;
}

// Three chains keep the CRC unit busy on CPUs that start one instruction per
// cycle and finish it three cycles later (most x86 cores; ARM cores take two
// or three). CPUs that start more get further chains from the out-of-order
// window running the next group of short blocks ahead, since no chain waits
// for the join before it.
constexpr std::size_t kChains = 3;

// Two block sizes. Short blocks for buffers that sit in cache: a group is
// 768 bytes, so a 1 KiB batch already runs on three chains, and the CPU can
// overlap consecutive groups. Long blocks for buffers that come from memory:
// three streams 256 KiB apart, each sequential for long enough that the
// hardware prefetcher runs ahead of all three (the reason measured, not
// proven: 8 KiB blocks, two pages per stream, did worst). On the
// development machine (AMD EPYC, 11 GiB/s on one chain) 64 MiB from memory ran
// at 31 GiB/s with long blocks against 27 with short ones and 19 with 8 KiB
// ones, while 64 KiB in cache ran at 46 GiB/s on short blocks, groups
// overlapping, against 36 (three chains, no more) on 8 KiB ones. Below
// 3 × kShortBlockBytes the single chain is used: there is not enough to split.
// Each size costs a 4 KiB shift table.
constexpr std::size_t kLongBlockBytes = 256 * 1024;
constexpr std::size_t kShortBlockBytes = 256;
static_assert(kLongBlockBytes % 8 == 0 && kShortBlockBytes % 8 == 0, "blocks are whole words");

constexpr ShiftTable kLongShift = make_shift_table(kLongBlockBytes);
constexpr ShiftTable kShortShift = make_shift_table(kShortBlockBytes);

// Consumes whole groups of three kBlockBytes blocks from the front of [p, p+n).
// Each chain starts from zero, so none waits for the join of the group
// before: the joins (table lookups) run beside the chains, not in them.
template <std::size_t kBlockBytes>
FUSEE_CRC32C_TARGET inline std::uint32_t three_chains(std::uint32_t reg, const unsigned char*& p,
                                                      std::size_t& n, const ShiftTable& over_block) {
  while (n >= kChains * kBlockBytes) {
    std::uint32_t a = 0;
    std::uint32_t b = 0;
    std::uint32_t c = 0;
    for (std::size_t i = 0; i < kBlockBytes; i += 8) {
      a = crc_word(a, load_word(p + i));
      b = crc_word(b, load_word(p + kBlockBytes + i));
      c = crc_word(c, load_word(p + 2 * kBlockBytes + i));
    }
    reg = shift(over_block, shift(over_block, shift(over_block, reg) ^ a) ^ b) ^ c;
    p += kChains * kBlockBytes;
    n -= kChains * kBlockBytes;
  }
  return reg;
}

FUSEE_CRC32C_TARGET std::uint32_t hardware_register(std::uint32_t reg, const unsigned char* p, std::size_t n) {
  if (n >= kChains * kShortBlockBytes) {
    reg = align_to_word(reg, p, n);
    reg = three_chains<kLongBlockBytes>(reg, p, n, kLongShift);
    reg = three_chains<kShortBlockBytes>(reg, p, n, kShortShift);
  }
  return single_chain_register(reg, p, n);
}

#endif  // FUSEE_CRC32C_HARDWARE

bool hardware_available() {
#if defined(FUSEE_CRC32C_HARDWARE)
  // Decided once; a function-local static so it is safe from any thread and
  // from other static initializers.
  static const bool available = cpu_has_crc32c();
  return available;
#else
  return false;
#endif
}

const unsigned char* bytes_of(std::span<const std::byte> data) {
  return reinterpret_cast<const unsigned char*>(data.data());
}

}  // namespace

std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data) {
#if defined(FUSEE_CRC32C_HARDWARE)
  if (hardware_available()) return ~hardware_register(~crc, bytes_of(data), data.size());
#endif
  return ~portable_register(~crc, bytes_of(data), data.size());
}

std::uint32_t crc32c_single_chain_extend(std::uint32_t crc, std::span<const std::byte> data) {
#if defined(FUSEE_CRC32C_HARDWARE)
  if (hardware_available()) return ~single_chain_register(~crc, bytes_of(data), data.size());
#endif
  return ~portable_register(~crc, bytes_of(data), data.size());
}

std::uint32_t crc32c_portable_extend(std::uint32_t crc, std::span<const std::byte> data) {
  return ~portable_register(~crc, bytes_of(data), data.size());
}

bool crc32c_hardware_available() { return hardware_available(); }

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) {
  // The pre- and post-inversions of crc_a and of crc_b cancel in the xor
  // (both CRCs carry them), so the finished CRCs combine as registers do:
  // crc_a moved over length_b zero bytes, xor crc_b.
  return multiply(crc_a, x_to_the(8 * length_b)) ^ crc_b;
}

}  // namespace fusee
