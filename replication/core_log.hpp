// The replica core's log: its batches by sequence, from the first it still
// holds to its end, with the running sum of their payload sizes (held or
// released). Batches below the first were retired (ReplicaCore::retire): they
// are published, the same on every replica, and no longer needed by anyone,
// so the core keeps nothing of them -- a long-lived log costs memory in
// proportion to what it holds, not to all it ever held.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/assert.hpp"
#include "replication/replica_messages.hpp"

namespace fusee::replication {

class CoreLog {
 public:
  // Its last batch's sequence (0: none ever).
  Seq end() const { return retired_ + held(); }
  // The last batch retired (0: none); it holds the batches after it.
  Seq retired_through() const { return retired_; }
  bool holds(Seq seq) const { return seq > retired_ && seq <= end(); }
  bool empty() const { return held() == 0; }

  const Entry& at(Seq seq) const {
    FUSEE_ASSERT(holds(seq), "a batch the log holds");
    return entries_[front_ + (seq - retired_ - 1)];
  }
  Entry& at(Seq seq) {
    FUSEE_ASSERT(holds(seq), "a batch the log holds");
    return entries_[front_ + (seq - retired_ - 1)];
  }
  const Entry& back() const {
    FUSEE_ASSERT(!empty(), "a log holding a batch");
    return entries_.back();
  }
  // The view of batch `seq`: one it holds, or the last retired (0 for
  // sequence 0).
  View view_at(Seq seq) const {
    if (seq == retired_) return retired_view_;
    return at(seq).view;
  }
  // The batches it holds, oldest first.
  std::span<const Entry> entries() const { return std::span(entries_).subspan(front_); }

  // The payload bytes of batches retired_through()+1 .. seq.
  std::uint64_t bytes_through(Seq seq) const {
    FUSEE_ASSERT(seq >= retired_ && seq <= end(), "a sum within the log");
    return bytes_through_[front_ + (seq - retired_)];
  }
  std::uint64_t payload_bytes(Seq seq) const { return bytes_through(seq) - bytes_through(seq - 1); }

  // Appends the batch after the end; `bytes` its payload's size (it may come
  // released already, at recovery).
  void push(Entry entry, std::uint64_t bytes) {
    FUSEE_ASSERT(entry.seq == end() + 1, "a batch follows the log");
    bytes_through_.push_back(bytes_through_.back() + bytes);
    entries_.push_back(std::move(entry));
  }
  // Keeps the batches through `keep_through`; never cuts a retired one.
  void cut(Seq keep_through) {
    FUSEE_ASSERT(keep_through >= retired_ && keep_through <= end(), "a cut within the held log");
    entries_.resize(front_ + (keep_through - retired_));
    bytes_through_.resize(front_ + (keep_through - retired_) + 1);
  }
  // Forgets the batches through `seq` (at most its end).
  void retire_through(Seq seq) {
    FUSEE_ASSERT(seq <= end(), "a retirement within the log");
    if (seq <= retired_) return;
    retired_view_ = at(seq).view;
    front_ += seq - retired_;
    retired_ = seq;
    // The retired ones' room is given back once they are half the vector
    // (amortised: each batch is moved once per halving).
    if (front_ > entries_.size() / 2) {
      entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(front_));
      bytes_through_.erase(bytes_through_.begin(), bytes_through_.begin() + static_cast<std::ptrdiff_t>(front_));
      front_ = 0;
    }
  }
  // Empty, from the start: a rebuilt directory's.
  void clear() {
    entries_.clear();
    bytes_through_.assign(1, 0);
    front_ = 0;
    retired_ = 0;
    retired_view_ = 0;
  }
  // Starts after batch `retired` of view `view` (recovery found the log
  // starting there).
  void start_after(Seq retired, View view) {
    FUSEE_ASSERT(entries_.empty(), "a log starts before its first batch");
    retired_ = retired;
    retired_view_ = view;
  }

 private:
  Seq retired_ = 0;
  View retired_view_ = 0;  // the last retired batch's
  // entries_[front_ + k]: batch retired_ + 1 + k; those before front_ are
  // retired ones not yet erased.
  std::vector<Entry> entries_;
  // bytes_through_[front_ + k]: payload bytes through batch retired_ + k
  // (a running sum: only differences mean anything).
  std::vector<std::uint64_t> bytes_through_{0};
  std::size_t front_ = 0;
  std::size_t held() const { return entries_.size() - front_; }
};

}  // namespace fusee::replication
