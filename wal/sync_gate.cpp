#include "wal/sync_gate.hpp"

#include "wal/segment_file.hpp"

namespace fusee::wal {

Result<void> SyncGate::write_durably(io::File& file, std::uint64_t offset, std::span<const std::byte> bytes) {
  if (file.direct()) return write_fully(file, offset, bytes, io::WriteFlags::dsync);
  FUSEE_TRY_VOID(write_fully(file, offset, bytes, io::WriteFlags::none));
  return sync(file);
}

Result<void> SyncGate::sync(io::File& file) {
  std::lock_guard lock(mu_);
  if (failed_) return failed_;
  auto synced = file.sync_data();
  if (!synced) failed_ = synced.error();
  return synced;
}

std::error_code SyncGate::failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

}  // namespace fusee::wal
