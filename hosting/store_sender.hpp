// StoreSender: the primary's side of the run store's transfer to a replica
// being rebuilt (replica/store_transfer.hpp; docs/replication.md,
// "Rebuilding a replica's run store"). An open takes a consistent copy of
// the store (RunStore::live_copy: its files as of now, kept from deletion
// while the copy lives) and reads where the store stood in the log just
// before; reads send a chunk of one of its files at a time; a close, or a
// minute without a call, lets the copy go. One copy at a time: a new open
// replaces the last (a rebuild that was given up on holds nothing).
//
// Thread-safety: every method from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/run_store.hpp"
#include "replica/store_transfer.hpp"
#include "wal/io/file_system.hpp"

namespace fusee::hosting {

class StoreSender {
 public:
  StoreSender(io::FileSystem& fs, std::shared_ptr<engine::RunStore> store, std::string cluster);

  // The answer to one transfer call's body (encode_transfer_answer's bytes).
  std::vector<std::byte> answer(std::span<const std::byte> request);
  // Lets a copy no call has used for kIdle go.
  void expire_idle();
  static constexpr std::chrono::seconds kIdle{60};
  // The log must not retire past the store last sent (the rebuilt
  // replica's log restarts at this one's start) until kHold after the last
  // call of that transfer: UINT64_MAX when none is that recent.
  std::uint64_t hold_below();
  static constexpr std::chrono::minutes kHold{10};

 private:
  replica::TransferAnswer open(const replica::TransferRequest& request);
  replica::TransferAnswer read(const replica::TransferRequest& request);

  io::FileSystem& fs_;
  std::shared_ptr<engine::RunStore> store_;
  std::string cluster_;
  std::mutex mu_;
  struct Session {
    std::uint64_t id = 0;
    std::unique_ptr<engine::StoreCopy> copy;
    std::map<std::string, const engine::StoreFile*> files;  // into copy
    std::chrono::steady_clock::time_point used;
  };
  std::unique_ptr<Session> session_;
  std::uint64_t held_applied_ = 0;  // the last manifest's applied batch
  std::chrono::steady_clock::time_point held_until_{};
  std::uint64_t next_id_;
};

}  // namespace fusee::hosting
