// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of every
// log batch, segment header and blob. Standard conventions (initial value ~0,
// final xor ~0), so crc32c("123456789") == 0xE3069283 and values match other
// implementations (iSCSI, ext4, RocksDB, LevelDB before masking).
//
// On x86-64 CPUs with SSE4.2 and on ARMv8 CPUs with the CRC32 extension the
// CPU's CRC-32C instruction computes it, on three independent chains joined by
// shifting each partial CRC over the bytes after it (see crc32c.cpp); elsewhere
// a portable slice-by-8 table does. The choice is made once, at the first call.
//
// Thread-safety: pure functions; call from any thread.
#pragma once

#include <cstdint>
#include <span>

namespace fusee {

// Continues a CRC: crc32c_extend(crc32c(a), b) == crc32c(a followed by b).
// crc is a finished CRC (as returned by crc32c), not the raw register.
[[nodiscard]] std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data);

// The CRC-32C of data; crc32c of nothing is 0.
[[nodiscard]] inline std::uint32_t crc32c(std::span<const std::byte> data) {
  return crc32c_extend(0, data);
}

// The table-driven path, always available. crc32c_extend uses it when the CPU
// lacks the instruction; tests call it directly to check both paths agree.
[[nodiscard]] std::uint32_t crc32c_portable_extend(std::uint32_t crc,
                                                   std::span<const std::byte> data);

// The hardware instruction on one dependency chain, the loop crc32c_extend
// used before it split long inputs into three; kept so log_bench can set the
// two side by side in one run. The portable path where crc32c_extend takes it.
[[nodiscard]] std::uint32_t crc32c_single_chain_extend(std::uint32_t crc,
                                                       std::span<const std::byte> data);

// The CRC of a followed by b, from crc32c(a), crc32c(b) and b's length, in
// O(log length_b) steps: crc32c_combine(crc32c(a), crc32c(b), b.size()) ==
// crc32c(a ‖ b). So the CRC of any range follows from the CRCs of two
// prefixes: crc32c(b) == crc32c(a ‖ b) ^ crc32c_combine(crc32c(a), 0, b.size()).
[[nodiscard]] std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b);

// Whether crc32c_extend runs on the CPU's CRC-32C instruction.
[[nodiscard]] bool crc32c_hardware_available();

}  // namespace fusee
