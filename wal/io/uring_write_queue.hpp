// The io_uring WriteQueue behind PosixFileSystem::open_write_queue, built only
// when liburing is found (FUSEE_HAVE_LIBURING). Each write is one
// IORING_OP_WRITE with RWF_DSYNC on the File's descriptor; submit_and_wait is
// one io_uring_enter that submits and waits. wake() writes an eventfd that a
// read kept armed in the same ring is waiting on, so the wait ends; that read's
// completion is never reported, only re-armed.
//
// Thread-safety, lifetime and durability as in wal/io/write_queue.hpp: one
// owner thread submits and reaps, wake() from any thread, the PosixFileSystem
// outlives the queue, and destroying the queue waits for writes in flight (a
// write the kernel still holds reads the caller's buffer). No liburing type
// appears here, so including this header needs no liburing.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "base/result.hpp"
#include "wal/io/write_queue.hpp"

namespace fusee::io {

class PosixFileSystem;

// Opens a ring with room for `depth` writes (1 <= depth <= kWriteQueueDepthMax)
// plus the wake read. Where the kernel has no io_uring or forbids it (ENOSYS,
// or EPERM from seccomp or kernel.io_uring_disabled), or lacks the write or
// read operation (before Linux 5.6), fails with
// std::errc::function_not_supported; any other failure (ENOMEM, EMFILE) is
// returned as it is.
//
// submit_and_wait retries io_uring_enter's transient failures: EINTR at
// once; EAGAIN and EBUSY (the kernel is short of memory for the request, or
// its completion queue is backed up) after reaping what completed and a
// short pause, for about a second in all before it gives up with the
// error. Every other failure is returned at once (the log poisons).
//
// enter_fault, for tests only: called before each io_uring_enter; a
// negative errno it returns is taken as that call's result instead of
// entering the kernel.
[[nodiscard]] Result<std::unique_ptr<WriteQueue>> open_uring_write_queue(
    const PosixFileSystem& file_system, std::size_t depth, std::function<int()> enter_fault = nullptr);

}  // namespace fusee::io
