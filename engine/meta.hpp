// fusee.meta: what a data directory is fixed to (its shard count). Written
// once, atomically (temporary file, sync, rename, directory sync); read at
// every open. Pure functions over a FileSystem; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::engine {

inline constexpr const char* kMetaFileName = "fusee.meta";
inline constexpr std::uint32_t kMetaFormat = 1;

struct Meta {
  std::uint32_t format = kMetaFormat;
  std::uint32_t shards = 0;
};

// The directory's meta, or nothing if it has none yet. errc::corrupt (wal)
// when the file does not parse.
Result<std::optional<Meta>> read_meta(io::FileSystem& fs, const std::string& dir);
Result<void> write_meta(io::FileSystem& fs, const std::string& dir, const Meta& meta);

}  // namespace fusee::engine
