// The shared log's error codes (category "fusee.wal"). Operating errors only;
// programmer errors are assertions.
#pragma once

#include <system_error>

namespace fusee::wal {

enum class errc {
  poisoned = 1,        // an earlier flush failed; nothing more is acknowledged until reopen
  queue_full,          // the staging queue is at its bound; retry later
  record_too_large,    // the record exceeds kRecordBytesMax
  recovery_refused,    // acknowledged data is damaged; the plan names where
  closed,              // the log was closed or is shutting down
  invalid_argument,    // a bad shard, LSN or option
  corrupt,             // bytes that do not decode (a record, section or header)
};

const std::error_category& wal_category();
std::error_code make_error_code(errc code);

}  // namespace fusee::wal

template <>
struct std::is_error_code_enum<fusee::wal::errc> : std::true_type {};
