// SyncGate: the log's durable writes of buffered segment files go through
// one gate, so that an fdatasync failure cannot be missed.
//
// Why. Linux reports a failed writeback once per open file description
// (errseq_t). The log's threads and inline writers share one descriptor per
// segment; had two of them called fdatasync on it at once, the error would
// reach only one, and the other would return 0 and publish a batch whose
// pages were never written (those pages were marked clean, so no later sync
// writes them either). The gate runs one fdatasync at a time and keeps the
// first failure: every later sync through the gate fails with it, whatever
// descriptor it is on, so nothing is published after a lost write.
//
// Direct files (O_DIRECT + RWF_DSYNC) report each write's own error and do
// not pass through the gate's lock.
//
// Thread-safety: every member may be called from any thread at once.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <system_error>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::wal {

class SyncGate {
 public:
  // Writes bytes at offset and makes them durable: one RWF_DSYNC write on a
  // direct file; a plain write and then sync(file) on a buffered one.
  [[nodiscard]] Result<void> write_durably(io::File& file, std::uint64_t offset,
                                           std::span<const std::byte> bytes);
  // fdatasync, one at a time; fails at once, without syncing, once any sync
  // through this gate has failed.
  [[nodiscard]] Result<void> sync(io::File& file);
  // The first failed sync's error, or an empty code.
  std::error_code failed() const;

 private:
  mutable std::mutex mu_;  // held across each fdatasync
  std::error_code failed_;
};

}  // namespace fusee::wal
