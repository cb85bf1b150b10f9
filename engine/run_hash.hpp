// Which shard owns a run: FNV-1a (64-bit) of the run id, modulo the shard
// count. Part of the on-disk contract (a reshard moves runs by it), so it
// never changes with the compiler or library, unlike std::hash.
#pragma once

#include <cstdint>
#include <string_view>

namespace fusee::engine {

inline std::uint64_t run_hash(std::string_view id) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : id) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

inline std::uint32_t shard_of(std::string_view id, std::uint32_t shard_count) {
  return static_cast<std::uint32_t>(run_hash(id) % shard_count);
}

}  // namespace fusee::engine
