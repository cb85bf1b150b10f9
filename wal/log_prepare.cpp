// The log's segment preparer: creating, preallocating, zero-filling and
// syncing the next segment takes hundreds of milliseconds for a large
// segment (252 ms for 128 MiB, 549 ms for 256 MiB were measured), and done
// at the roll it stalled every writer behind the seal lock. A thread of its
// own prepares segment N+1 while the log writes into N, so the roll on the
// write path costs the new segment's header and the roll marker: two
// durable block writes. Part of class Log (wal/log.hpp); the roll itself is
// Log::roll_segment in wal/log.cpp, the file steps prepare_segment_file in
// wal/segment_file.cpp.
//
// Crash safety: a prepared file carries the next number and an all-zero
// header, so until the roll writes its header it is a zeroed segment past
// the chain's end, which recovery deletes (and the next life prepares
// again). A clean close removes it, so that a closed log holds only its
// chain.
#include <bit>
#include <chrono>

#include <fmt/format.h>

#include "wal/log.hpp"
#include "wal/segment_file.hpp"

namespace fusee::wal {

void Log::want_prepared(std::uint64_t number, std::uint64_t size_bytes) {
  {
    std::lock_guard lock(prepare_mu_);
    prepared_ = {number, size_bytes, PreparedSegment::State::wanted};
  }
  prepare_cv_.notify_all();
}

Log::TakenSegment Log::take_prepared(std::uint64_t number, std::uint64_t needed_bytes) {
  std::unique_lock lock(prepare_mu_);
  if (prepared_.number != number) return {};
  TakenSegment taken;
  auto under_way = [&] {
    return prepared_.state == PreparedSegment::State::wanted || prepared_.state == PreparedSegment::State::preparing;
  };
  auto zeroed = prepared_.state == PreparedSegment::State::preparing ? prepare_zeroed_bytes_.load() : 0;
  if (under_way() && prepared_.size_bytes - std::min(prepared_.size_bytes, zeroed) <= kPrepareStepBytes) {
    // At most one step of zeros left: waiting for it costs what cutting it
    // short would (a step in progress ends before the cut).
    prepare_cv_.wait(lock, [&] { return prepare_stop_ || !under_way(); });
  } else if (prepared_.state == PreparedSegment::State::wanted) {
    // Asked for, not begun: the roll creates the file itself.
    prepared_.state = PreparedSegment::State::none;
    taken.late = true;
    return taken;
  } else if (prepared_.state == PreparedSegment::State::preparing) {
    // Late. The roll holds seal_mu_, so every writer waits with it: cut the
    // preparation short (it stops within one step) rather than wait for
    // the rest of the zeros, and take the file as far as it got.
    taken.late = true;
    prepare_cancel_ = true;
    if (options_.on_preparation_cut) {
      lock.unlock();
      options_.on_preparation_cut(number);
      lock.lock();
    }
    prepare_cv_.wait(lock, [&] { return prepare_stop_ || !under_way(); });
    if (!prepare_stop_) prepare_cancel_ = false;
  }
  if (prepared_.size_bytes < needed_bytes) return taken;
  if (prepared_.state == PreparedSegment::State::ready) {
    prepared_.state = PreparedSegment::State::taken;
    taken.size_bytes = prepared_.size_bytes;
    return taken;
  }
  if (prepared_.state == PreparedSegment::State::partial) {
    prepared_.state = PreparedSegment::State::taken;
    taken.size_bytes = prepared_.size_bytes;
    taken.partial = true;
  }
  return taken;
}

void Log::preparer_loop() {
  for (;;) {
    std::uint64_t number = 0;
    std::uint64_t size_bytes = 0;
    {
      std::unique_lock lock(prepare_mu_);
      prepare_cv_.wait(lock, [&] { return prepare_stop_ || prepared_.state == PreparedSegment::State::wanted; });
      if (prepare_stop_) return;
      prepared_.state = PreparedSegment::State::preparing;
      prepare_zeroed_bytes_ = 0;
      number = prepared_.number;
      size_bytes = prepared_.size_bytes;
    }
    std::atomic<bool> allocated{false};
    // The steady clock, not LogOptions::now_us: this only decides how early
    // the next preparation starts (Log::prepare_due), never what is written,
    // and a test's injected clock must not be read from this thread.
    auto started = std::chrono::steady_clock::now();
    auto prepared = prepare_segment_file(fs_, wal_dir_, number, size_bytes,
                                         {.cancel = &prepare_cancel_, .allocated = &allocated, .zeroed = &prepare_zeroed_bytes_});
    auto took_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
    std::string failure;
    {
      std::lock_guard lock(prepare_mu_);
      // A roll waits for a preparation under way before it asks for the
      // next, so the request is still this one; should that ever change, a
      // newer request must not be taken for done.
      if (prepared_.number != number || prepared_.size_bytes != size_bytes ||
          prepared_.state != PreparedSegment::State::preparing) {
        prepare_cv_.notify_all();
        continue;
      }
      if (prepared) {
        prepared_.state = PreparedSegment::State::ready;
        ++segments_prepared_;
        if (took_us.count() > 0)
          prepare_bytes_per_s_ = size_bytes * 1'000'000 / static_cast<std::uint64_t>(took_us.count());
      } else if (prepared.error() == std::errc::operation_canceled && allocated) {
        // Cut short by a late roll: full size, durably; zeros in part.
        prepared_.state = PreparedSegment::State::partial;
      } else {
        // The roll creates the segment itself and meets the error there
        // if it lasts (then the log poisons).
        prepared_.state = PreparedSegment::State::failed;
        if (prepared.error() != std::errc::operation_canceled) {
          ++preparations_failed_;
          if (std::has_single_bit(preparations_failed_))  // the 1st, 2nd, 4th, ...: said, not flooded
            failure = fmt::format("{}: preparing segment {} failed ({}; {} so far); the roll creates it instead",
                                  wal_dir_, number, prepared.error().message(), preparations_failed_);
        }
      }
    }
    prepare_cv_.notify_all();
    if (!failure.empty()) options_.warn(failure);
  }
}

void Log::stop_preparer() {
  {
    std::lock_guard lock(prepare_mu_);
    prepare_stop_ = true;
  }
  prepare_cancel_ = true;
  prepare_cv_.notify_all();
  if (preparer_thread_.joinable()) preparer_thread_.join();
}

Result<void> Log::remove_prepared_segment() {
  std::uint64_t number = 0;
  {
    std::lock_guard lock(prepare_mu_);
    if (prepared_.state == PreparedSegment::State::none || prepared_.state == PreparedSegment::State::taken)
      return ok();
    number = prepared_.number;
    prepared_.state = PreparedSegment::State::none;
  }
  // Never the segment being written: the writers are stopped, and a roll
  // into `number` would have taken it.
  if (number <= segment_.number) return ok();
  auto path = io::join_path(wal_dir_, segment_file_name(number));
  if (!FUSEE_TRY(fs_.exists(path))) return ok();
  FUSEE_TRY_VOID(fs_.remove(path));
  return fs_.sync_dir(wal_dir_);
}

// When to prepare, and how large: from how fast the segment being written fills.
bool Log::prepare_due(std::uint64_t written_bytes) const {
  // A quarter written: late enough that a log that will not roll soon
  // (opened to be read, or lightly used) spends no disk time on a segment
  // it may never use.
  if (written_bytes * kPrepareAtFillDivisor >= segment_.size_bytes) return true;
  auto elapsed_us = options_.now_us() - segment_started_us_;
  if (elapsed_us < kPrepareRateWindowUs || written_bytes <= kSegmentHeaderBytes) return false;
  std::uint64_t prepare_rate = kPrepareBytesPerSecondAssumed;
  {
    std::lock_guard lock(prepare_mu_);
    if (prepare_bytes_per_s_ > 0) prepare_rate = prepare_bytes_per_s_;
  }
  // Microseconds until this segment is full, at the rate it has filled, and
  // what the next preparation should take; no floating point, no overflow
  // for segments below 2^32 bytes and rates below 2^32 bytes/s.
  auto filled = written_bytes - kSegmentHeaderBytes;
  auto left = segment_.size_bytes - std::min(segment_.size_bytes, written_bytes);
  auto until_full_us = left * elapsed_us / filled;
  auto prepare_us = prepare_next_bytes_ * 1'000'000 / std::max<std::uint64_t>(prepare_rate, 1);
  return until_full_us <= kPrepareLeadFactor * prepare_us;
}

std::uint64_t Log::next_segment_bytes(std::uint64_t base_bytes) {
  auto elapsed_us = std::max<std::uint64_t>(1, options_.now_us() - segment_started_us_);
  auto filled_bytes = write_offset_;
  // bytes/us * 1e6 > rate, without overflow or floating point.
  bool fast = filled_bytes * 1'000'000 / elapsed_us > kSegmentGrowthRateBytesPerSecond;
  if (!fast) return options_.segment_bytes;
  // Growth goes on when the preparer is late: the part of a segment it
  // zeroes in time depends on its speed against the fill rate, not on the
  // size, and a larger segment rolls less often (measured: with growth held
  // at 64 MiB, 1.5% of 1 MiB appends waited behind a roll, p99 1.7x).
  auto grown = std::max(options_.segment_bytes, std::min(base_bytes * 2, kSegmentGrowthBytesMax));
  return std::max(grown, options_.segment_bytes);
}

}  // namespace fusee::wal
