// fusee.meta: what a data directory is fixed to (its shard count) and which
// layout of it is current. Written atomically (temporary file, sync, rename,
// directory sync) when the directory is made and by `fusee reshard`, whose
// one atomic step is replacing it; read at every open. Pure functions over a
// FileSystem; not thread-safe.
//
// Layouts: layout 0 keeps the log and the run store in DIR/wal and DIR/runs;
// layout g > 0 in DIR/layout-g/wal and DIR/layout-g/runs. A reshard writes
// the next layout beside the current one, then switches fusee.meta to it, so
// a crash leaves either layout whole. What a crash leaves of the other is a
// leftover, removed by the next open.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::engine {

inline constexpr const char* kMetaFileName = "fusee.meta";
inline constexpr std::uint32_t kMetaFormat = 1;

struct Meta {
  std::uint32_t format = kMetaFormat;
  std::uint32_t shards = 0;
  std::uint32_t layout = 0;
};

// The directory holding the current layout's wal/ and runs/.
std::string layout_root(const std::string& dir, std::uint32_t layout);
std::string layout_dir_name(std::uint32_t layout);  // "layout-g"; "" for 0

// Entries of DIR that belong to no current layout: the other layouts'
// directories, and DIR/wal and DIR/runs when the current layout is not 0.
Result<std::vector<std::string>> leftover_layouts(io::FileSystem& fs, const std::string& dir, const Meta& meta);


// The directory's meta, or nothing if it has none yet. errc::corrupt (wal)
// when the file does not parse.
Result<std::optional<Meta>> read_meta(io::FileSystem& fs, const std::string& dir);
Result<void> write_meta(io::FileSystem& fs, const std::string& dir, const Meta& meta);

// A replica's directory (replica/replica_store.hpp) holds this beside its
// log from `fusee replica init` on: the directory is the replica's, its
// engine's log the replicated one, so a local open and `fusee reshard`
// refuse it.
inline constexpr const char* kReplicaMarker = "replica/cluster";
Result<bool> is_replica_dir(io::FileSystem& fs, const std::string& dir);
// A replica's log carries its engine's run store too, as records of the
// shard after the engine's (hosting/store_applier.hpp): its log has one
// shard more than the engine.
inline std::uint32_t replica_store_shard(std::uint32_t engine_shards) { return engine_shards; }
inline std::uint32_t replica_log_shards(std::uint32_t engine_shards) { return engine_shards + 1; }

}  // namespace fusee::engine
