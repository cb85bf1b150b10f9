#include "wal/io/uring_write_queue.hpp"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <limits>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include "base/assert.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::io {
namespace {

std::error_code errno_code(int error_number) {
  return std::error_code(error_number, std::generic_category());
}

// user_data of the wake read. Writes carry their slot index, always below
// kWriteQueueDepthMax; liburing reserves all ones (LIBURING_UDATA_TIMEOUT).
constexpr std::uint64_t kWakeUserData = kWriteQueueDepthMax;

// EAGAIN or EBUSY from io_uring_enter: retried after this pause, at most
// this many times (about a second in all) before the error is returned.
constexpr auto kTransientPause = std::chrono::microseconds(100);
constexpr int kTransientRetriesMax = 10000;

bool transient(int rc) { return rc == -EINTR || rc == -EAGAIN || rc == -EBUSY; }

class UringWriteQueue final : public WriteQueue {
 public:
  UringWriteQueue(const PosixFileSystem& file_system, std::size_t depth, std::function<int()> enter_fault)
      : file_system_(file_system), depth_(depth), enter_fault_(std::move(enter_fault)), slots_(depth) {}
  UringWriteQueue(const UringWriteQueue&) = delete;
  UringWriteQueue& operator=(const UringWriteQueue&) = delete;

  ~UringWriteQueue() override {
    if (ring_open_ && drain() > 0) {
      // The kernel may still complete the wake read into wake_counter_ (and
      // writes from the caller's buffers, which the caller keeps): leave
      // the counter allocated. Closing the ring and the eventfd is safe:
      // the kernel keeps its own references until its requests end.
      keep_for_the_kernel(std::move(wake_counter_));
    }
    if (ring_open_) io_uring_queue_exit(&ring_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  Result<void> open() {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ < 0) return errno_code(errno);
    // Room for every write plus the wake read. The completion ring is twice
    // that (the kernel's default), so it can never overflow.
    auto entries = static_cast<unsigned>(depth_ + 1);
    int rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc == -ENOSYS || rc == -EPERM) return std::make_error_code(std::errc::function_not_supported);
    if (rc < 0) return errno_code(-rc);
    ring_open_ = true;
    // IORING_OP_WRITE and IORING_OP_READ came in Linux 5.6, a year after
    // io_uring itself; an older ring would fail every write with EINVAL.
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    bool usable = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_WRITE) &&
                  io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe != nullptr) io_uring_free_probe(probe);
    if (!usable) return std::make_error_code(std::errc::function_not_supported);
    return ok();
  }

  std::size_t depth() const override { return depth_; }

  Result<void> submit(const QueuedWrite& write) override {
    FUSEE_ASSERT(write.file != nullptr, "a queued write needs a file");
    if (busy_count_ == depth_) return std::make_error_code(std::errc::resource_unavailable_try_again);
    if (write.offset > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) {
      return errno_code(EFBIG);
    }
    // An io_uring write takes a 32-bit length.
    if (write.data.size() > std::numeric_limits<std::uint32_t>::max()) return errno_code(EINVAL);
    int fd = file_system_.descriptor_of(*write.file);
    std::size_t index = 0;
    while (slots_[index].busy) ++index;
    slots_[index] = {true, write.token, fd, write.offset, write.data};
    queued_.push_back(index);
    ++busy_count_;
    return ok();
  }

  Result<void> submit_and_wait(std::vector<WriteCompletion>& out) override {
    if (busy_count_ == 0) {
      // Nothing can complete, so nothing to wait for; only a wake may be
      // ready, and reaping it keeps the completion ring clean.
      reap(&out);
      return ok();
    }
    if (!wake_armed_) arm_wake();
    for (std::size_t index : queued_) {
      const Slot& slot = slots_[index];
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      FUSEE_ASSERT(sqe != nullptr, "the ring has room for depth writes and the wake read");
      io_uring_prep_write(sqe, slot.fd, slot.data.data(), static_cast<unsigned>(slot.data.size()),
                          slot.offset);
      // The kernel's durable write, as pwritev2 with RWF_DSYNC: the completion
      // comes only once the bytes and the metadata to read them are durable.
      sqe->rw_flags = RWF_DSYNC;
      io_uring_sqe_set_data64(sqe, index);
    }
    // From here the writes sit in the submission ring: if the system call
    // below fails, the next one submits them (liburing counts from the
    // kernel's head), so they are in flight either way.
    queued_.clear();
    int transient_failures = 0;
    for (;;) {
      int rc = enter(1);
      if (rc < 0 && !transient(rc)) return errno_code(-rc);
      // A signal can end the wait after the submission with no completion
      // (the kernel then returns the count submitted): wait again. EAGAIN
      // and EBUSY say the kernel could not take the request now; what
      // completed meanwhile is reaped first, since that frees the kernel's
      // completion queue.
      if (reap(&out) > 0) return ok();
      if (rc == -EAGAIN || rc == -EBUSY) {
        if (++transient_failures > kTransientRetriesMax) return errno_code(-rc);
        std::this_thread::sleep_for(kTransientPause);
      }
    }
  }

  void wake() override {
    std::uint64_t one = 1;
    // Fails only with EAGAIN, when the counter is near overflow: a wake is
    // then pending already.
    while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }

 private:
  struct Slot {
    bool busy = false;
    std::uint64_t token = 0;
    int fd = -1;
    std::uint64_t offset = 0;
    std::span<const std::byte> data;
  };

  // Puts a read of the eventfd in the submission ring (submitted with the
  // next writes). Reading resets the eventfd's counter, so several wakes
  // before one read end one wait.
  void arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    FUSEE_ASSERT(sqe != nullptr, "the ring has room for depth writes and the wake read");
    io_uring_prep_read(sqe, wake_fd_, wake_counter_.data(), sizeof(std::uint64_t), 0);
    io_uring_sqe_set_data64(sqe, kWakeUserData);
    wake_armed_ = true;
  }

  // Takes every completion that is ready: writes go to *out (when given), the
  // wake read is swallowed. Returns how many completions it took, the wake
  // read's included.
  std::size_t reap(std::vector<WriteCompletion>* out) {
    unsigned head = 0;
    unsigned count = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++count;
      std::uint64_t user_data = io_uring_cqe_get_data64(cqe);
      if (user_data == kWakeUserData) {
        // Its result (8, or an error such as ECANCELED) says nothing the
        // caller needs: either way the wait ended and the read is re-armed.
        wake_armed_ = false;
        continue;
      }
      FUSEE_ASSERT(user_data < depth_, "a completion for an unknown slot");
      Slot& slot = slots_[user_data];
      FUSEE_ASSERT(slot.busy, "a second completion for one write");
      WriteCompletion completion;
      completion.token = slot.token;
      if (cqe->res < 0) {
        completion.error = errno_code(-cqe->res);
      } else {
        completion.bytes_written = static_cast<std::size_t>(cqe->res);
      }
      slot = Slot{};
      --busy_count_;
      if (out != nullptr) out->push_back(completion);
    }
    io_uring_cq_advance(&ring_, count);
    return count;
  }

  // Waits until the kernel holds nothing of ours: a write still in flight
  // reads the caller's buffer and the armed read writes wake_counter_, and
  // closing the ring does not stop either. Queued writes never went in.
  // Bounded: a ring that keeps refusing (EAGAIN or EBUSY on every call) or
  // fails outright is given up on, and what it still holds is reported.
  std::size_t drain() override {
    for (std::size_t index : queued_) {
      slots_[index] = Slot{};
      --busy_count_;
    }
    queued_.clear();
    if (drained_) return busy_count_ + (wake_armed_ ? 1 : 0);
    drained_ = true;
    if (busy_count_ == 0 && !wake_armed_) return 0;
    wake();
    int transient_failures = 0;
    while (busy_count_ > 0 || wake_armed_) {
      // Completions the kernel already posted need no system call.
      if (reap(nullptr) > 0) continue;
      int rc = enter(1);
      if (rc >= 0 || rc == -EINTR) continue;
      // Any other failure of a bare wait means the ring is unusable.
      if (!transient(rc)) break;
      if (++transient_failures > kTransientRetriesMax) break;
      std::this_thread::sleep_for(kTransientPause);
    }
    reap(nullptr);
    // The wake read counts as held too: it writes into wake_counter_.
    return busy_count_ + (wake_armed_ ? 1 : 0);
  }

  // One io_uring_enter that submits what is queued and waits for wait_nr
  // completions; the test hook may stand in for it.
  int enter(unsigned wait_nr) {
    if (enter_fault_) {
      int injected = enter_fault_();
      if (injected < 0) return injected;
    }
    return io_uring_submit_and_wait(&ring_, wait_nr);
  }

  const PosixFileSystem& file_system_;
  const std::size_t depth_;
  const std::function<int()> enter_fault_;
  io_uring ring_{};
  bool ring_open_ = false;
  int wake_fd_ = -1;
  // A read of wake_fd_ is in the ring (submitted or about to be), reading
  // into wake_counter_.
  bool wake_armed_ = false;
  // On the heap so that a queue given up on while the kernel still holds
  // the read can leave it allocated.
  AlignedBuffer wake_counter_{sizeof(std::uint64_t)};
  bool drained_ = false;  // drain() ran: the ring is never waited on again
  std::vector<Slot> slots_;          // depth_ of them; a write's index is its user_data
  std::vector<std::size_t> queued_;  // slots submitted by the next submit_and_wait, in order
  std::size_t busy_count_ = 0;       // slots queued or in flight
};

}  // namespace

Result<std::unique_ptr<WriteQueue>> open_uring_write_queue(const PosixFileSystem& file_system,
                                                           std::size_t depth, std::function<int()> enter_fault) {
  FUSEE_ASSERT(depth >= 1, "a write queue holds at least one write");
  FUSEE_ASSERT(depth <= kWriteQueueDepthMax, "write queue deeper than kWriteQueueDepthMax");
  auto queue = std::make_unique<UringWriteQueue>(file_system, depth, std::move(enter_fault));
  if (auto opened = queue->open(); !opened) return opened.error();
  return std::unique_ptr<WriteQueue>(std::move(queue));
}

}  // namespace fusee::io
