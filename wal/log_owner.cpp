// The io_uring owner thread of the shared log (LogWriterMode::owner): one
// thread seals batches, submits them through an io::WriteQueue and reaps
// completions in the same system call, publishing in order through
// Log::complete. Part of class Log (wal/log.hpp); the threads it replaces are
// in wal/log.cpp.
#include <chrono>

#include "wal/log.hpp"
#include "wal/segment_file.hpp"

namespace fusee::wal {

void Log::owner_loop() {
  std::vector<io::WriteCompletion> completions;
  std::vector<io::AlignedBuffer> spare_buffers;
  std::size_t in_ring = 0;  // writes submitted to queue_ and not yet reaped
  for (;;) {
    {
      std::unique_lock lock(mu_);
      // Idle: sleep on the condition variable, not the ring (an idle engine
      // costs no CPU and no system calls).
      if (in_ring == 0) {
        work_cv_.wait(lock, [&] { return stopping_ || poison_ || has_work_locked(); });
        give_way_to_inline_writer(lock);
      }
      // Stopping or poisoned: reap what the kernel still reads from, then go.
      if ((stopping_ || poison_) && in_ring == 0) return;
    }
    // Seal and submit while there is work and a slot.
    for (;;) {
      io::AlignedBuffer buffer;
      if (!spare_buffers.empty()) {
        buffer = std::move(spare_buffers.back());
        spare_buffers.pop_back();
      }
      std::unique_lock seal_lock(seal_mu_);
      std::shared_ptr<io::File> file;
      Write* write = nullptr;
      if (!seal_next(file, buffer, write)) {
        if (buffer.size() > 0) spare_buffers.push_back(std::move(buffer));
        break;
      }
      seal_lock.unlock();
      write->buffer = std::move(buffer);
      write->file = std::move(file);
      if (!write->file->direct() || write->offset == kSegmentHeaderBytes) {
        // Buffered from here on (O_DIRECT was refused): write + fdatasync.
        // And a batch that starts a segment goes right after its header,
        // outside the ring, like the header and the roll marker before it.
        auto started = std::chrono::steady_clock::now();
        auto result = write_batch(write->file, write->segment, write->offset,
                                  std::span<const std::byte>(write->buffer.data(), write->batch_bytes));
        if (result) note_flush(std::chrono::steady_clock::now() - started);
        if (spare_buffers.size() < kWritesInFlightMax) spare_buffers.push_back(std::move(write->buffer));
        complete(write, result);
        continue;
      }
      write->submitted = std::chrono::steady_clock::now();
      auto submitted = queue_->submit({write->file.get(), write->offset,
                                       std::span<const std::byte>(write->buffer.data(), write->batch_bytes),
                                       reinterpret_cast<std::uintptr_t>(write)});
      if (!submitted) {
        complete(write, submitted.error());
        continue;
      }
      ++in_ring;
    }
    if (in_ring == 0) continue;
    completions.clear();
    auto reaped = queue_->submit_and_wait(completions);
    if (!reaped) {
      // The ring itself failed: its writes may never complete. Poison and
      // stop; their buffers stay with in_flight_ until ~Log, after queue_
      // (destroyed first) has waited for whatever the kernel still holds.
      std::lock_guard lock(mu_);
      poison_locked(reaped.error());
      return;
    }
    for (const auto& completion : completions) {
      auto* write = reinterpret_cast<Write*>(static_cast<std::uintptr_t>(completion.token));
      --in_ring;
      // complete() may publish and free the Write: take its buffer first.
      auto buffer = std::move(write->buffer);
      auto file = std::move(write->file);
      owner_complete(write, completion, buffer, file);
      // Kept whatever their size (at most as many as can be in flight), so
      // that a steady load of large batches allocates none: a fresh buffer
      // is zero-filled on the sealing thread, O(bytes) per batch.
      if (buffer.size() > 0 && spare_buffers.size() < kWritesInFlightMax) spare_buffers.push_back(std::move(buffer));
    }
  }
}

void Log::owner_complete(Write* write, const io::WriteCompletion& completion, const io::AlignedBuffer& buffer,
                         std::shared_ptr<io::File>& file) {
  auto bytes = std::span<const std::byte>(buffer.data(), write->batch_bytes);
  if (!completion.error && completion.bytes_written == bytes.size()) {
    note_flush(std::chrono::steady_clock::now() - write->submitted, /*through_ring=*/true);
    complete(write, ok());
    return;
  }
  if (!completion.error) {
    // A short write: its first part is durable; write the rest here.
    complete(write,
             sync_gate_.write_durably(*file, write->offset + completion.bytes_written, bytes.subspan(completion.bytes_written)));
    return;
  }
  if (completion.error == std::errc::invalid_argument) {
    // The kernel refused the O_DIRECT write: rewrite it buffered and stay so.
    auto segment = write->segment;
    auto offset = write->offset;
    complete(write, write_batch(file, segment, offset, bytes));
    return;
  }
  complete(write, completion.error);
}

}  // namespace fusee::wal
