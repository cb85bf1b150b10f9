#include "hosting/replicated_run_store.hpp"

#include <chrono>
#include <thread>

#include "fusee/error.hpp"
#include "wal/errc.hpp"

namespace fusee::hosting {

Result<std::size_t> ReplicatedRunStore::submit(const std::vector<std::byte>& record) {
  std::lock_guard lock(mu_);
  // The log's stage is bounded (the engine's records wait there too while a
  // quorum is slow): a full one is waited out, for as long as the view lasts.
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(100))) {
    auto applied = applier_->submit(lead_, view_, [&] { return log_->append(store_shard_, record); });
    if (applied || applied.error() != make_error_code(wal::errc::queue_full)) {
      if (!applied && (applied.error() == make_error_code(wal::errc::closed) ||
                       applied.error() == make_error_code(wal::errc::poisoned))) {
        return make_error_code(errc::unavailable);  // the view's log stepped down
      }
      return applied;
    }
    std::this_thread::sleep_for(pause);
  }
}

Result<void> ReplicatedRunStore::write(Batch batch) {
  auto record = encode_store_batch(batch);
  // What every replica will decode, checked here first: a record no replica
  // can apply would stop every one of them at it (StoreApplier).
  if (!Batch::decode(std::span(record).subspan(1))) return make_error_code(wal::errc::corrupt);
  FUSEE_TRY(submit(record));
  return ok();
}

Result<std::size_t> ReplicatedRunStore::expire_finished(std::int64_t before_ms) {
  return submit(encode_store_expiry(before_ms));
}

}  // namespace fusee::hosting
