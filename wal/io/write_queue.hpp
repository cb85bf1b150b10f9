// WriteQueue: asynchronous durable writes behind the FileSystem seam. The
// log's owner thread queues sealed batches here, submits them and reaps their
// completions in one system call (io_uring on Linux; see
// wal/io/uring_write_queue.hpp), and the fault-injecting FileSystem implements
// the same interface so crash tests cover writes in flight.
// Opened by FileSystem::open_write_queue.
//
// Durability contract: every queued write is a durable write (RWF_DSYNC
// semantics, like File::write_at with WriteFlags::dsync). A write is durable
// once its completion reports it without an error, and then exactly for the
// bytes_written it reports. Before its completion a write may be on disk
// wholly, partly (torn at sector boundaries) or not at all, and a crash may
// leave it any of those ways; a completion with an error promises nothing about
// the bytes, so the caller must treat their range as unknown.
//
// Thread-safety: one thread at a time calls submit() and submit_and_wait()
// (the owner); wake() may be called from any thread at any time while the
// queue exists.
//
// Lifetime: the FileSystem that opened the queue must outlive it. Each
// QueuedWrite's File and data must stay alive and unchanged until its
// completion has been reaped, or until drain() has returned 0. drain()
// discards writes queued but not yet submitted (they never reach the disk)
// and waits, for a bounded time, for the writes in flight to finish (their
// completions are lost, so their durability is unknown to the caller).
// Destroying the queue drains it first; a caller that must know whether
// its buffers are free calls drain() itself before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

#include "base/result.hpp"

namespace fusee::io {

class File;

// Writes in flight (or queued) per queue at most. The log keeps
// kWritesInFlightMax (2) in flight; the bound keeps an io_uring small and
// makes a runaway caller fail at open rather than pin memory.
inline constexpr std::size_t kWriteQueueDepthMax = 64;

// One durable write. The File must come from the FileSystem that opened the
// queue. Offset, length and buffer follow the File's rules (aligned to
// kDirectAlignment on a direct File); a violation comes back as EINVAL in the
// completion, as the kernel reports it.
struct QueuedWrite {
  File* file = nullptr;
  std::uint64_t offset = 0;
  std::span<const std::byte> data;
  std::uint64_t token = 0;  // the caller's; returned unchanged in the completion
};

struct WriteCompletion {
  std::uint64_t token = 0;
  std::error_code error;          // empty on success
  std::size_t bytes_written = 0;  // 0 on error; on success possibly fewer than
                                  // asked (a short write: the first bytes_written
                                  // bytes are durable, the caller decides)
};

class WriteQueue {
 public:
  virtual ~WriteQueue() = default;

  // The most writes in flight and queued at once (as asked at open).
  virtual std::size_t depth() const = 0;

  // Queues a write; it reaches the disk at the next submit_and_wait. Fails,
  // queueing nothing, with EAGAIN (std::errc::resource_unavailable_try_again)
  // when depth() writes are already queued or in flight (reap some first), or
  // EFBIG/EINVAL for an offset or length the kernel cannot take.
  [[nodiscard]] virtual Result<void> submit(const QueuedWrite& write) = 0;

  // Submits everything queued and, in the same system call, waits until at
  // least one completion is available or wake() was called; then appends
  // every completion that is ready to `out` (possibly including writes just
  // submitted). Each write's completion is delivered exactly once, in any
  // order: match them by token. With nothing queued and nothing in flight it
  // does not wait but returns at once, so an idle owner must sleep elsewhere.
  // It returns with no completion after a wake() (several wakes before one
  // call count once), so callers loop.
  //
  // Fails when the system call fails; completions not yet reaped and writes
  // not yet submitted are kept for the next call, so nothing is lost or
  // delivered twice.
  [[nodiscard]] virtual Result<void> submit_and_wait(std::vector<WriteCompletion>& out) = 0;

  // Makes a concurrent submit_and_wait return promptly, even with writes in
  // flight and none complete; if none is running, the next one returns
  // promptly instead (a wake is remembered, not lost). Thread-safe; not
  // async-signal-safe.
  virtual void wake() = 0;

  // For shutdown, from the owner thread (or after it stopped): discards the
  // writes queued and not submitted, then waits until the writes in flight
  // are finished, retrying a refused wait (EAGAIN, EBUSY) with pauses for
  // a bounded time. Returns how many writes the kernel may still hold: 0
  // frees every buffer given to submit(); otherwise the caller must leave
  // those buffers allocated for good, since the kernel may still read them.
  // A queue that still holds writes leaves its own memory that the kernel
  // may write allocated too. Later calls return the same count.
  [[nodiscard]] virtual std::size_t drain() = 0;
};

}  // namespace fusee::io
