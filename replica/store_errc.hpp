// Why a replica's directory or a write to it was refused, besides the file
// system's own errors (replica/replica_store.hpp).
#pragma once

#include <system_error>

namespace fusee::replica {

enum class StoreErrc {
  foreign_cluster = 1,  // it is a replica of another cluster
  already_initialized,  // init or rebuild of a directory that is a cluster's
  payload_too_large,    // a batch over payload_bytes_max of the segments' capacity
  malformed_batch,      // a batch whose payload is no body of the shared log's sections
  unreadable_batch,     // a durable batch that reads back other than the chain holds it (a bad sector)
  retired_batch,        // a batch below the log's start: its segment was retired
  store_behind_log,     // the run store needs batches the log retired: the replica must be rebuilt
};
const std::error_category& store_category();
inline std::error_code make_error_code(StoreErrc e) { return {static_cast<int>(e), store_category()}; }

}  // namespace fusee::replica

template <>
struct std::is_error_code_enum<fusee::replica::StoreErrc> : std::true_type {};
