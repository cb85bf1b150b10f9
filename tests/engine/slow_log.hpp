// SlowLog: a disk slow to flush, for tests that look at what the engine
// does while a batch of the log is written and not yet durable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/shard.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/support/fault_file_system.hpp"

namespace fusee::testing {

// Holds a sync of the log (a disk slow to flush) while a test looks at
// what the engine does before a batch is durable: once armed, it lets
// `pass` more syncs through and holds the next until released. Every log
// sync also takes 2 ms, so that the log never writes from a shard's thread
// (it does when its flushes are fast) and a held sync holds only a log
// thread.
struct SlowLog {
  std::mutex mu;
  std::condition_variable released;
  std::optional<int> pass;  // armed: syncs still to let through
  bool holding = false;
  bool held_a_shard = false;  // a held sync came from a shard's thread: the test proves nothing
  void before(OpKind kind, const std::string& path) {
    if (kind != OpKind::sync_data || path.find("/wal/") == std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::unique_lock lock(mu);
    if (!pass) return;
    if (*pass > 0) {
      --*pass;
      return;
    }
    if (engine::Shard::on_shard_thread()) {
      held_a_shard = true;
      return;
    }
    holding = true;
    released.notify_all();
    released.wait(lock, [&] { return !pass; });
    holding = false;
  }
  void arm(int syncs_to_pass) {
    std::lock_guard lock(mu);
    pass = syncs_to_pass;
  }
  bool wait_holding() {
    std::unique_lock lock(mu);
    return released.wait_for(lock, kPatience, [&] { return holding; });
  }
  void release() {
    {
      std::lock_guard lock(mu);
      pass.reset();
    }
    released.notify_all();
  }
};

// A fault file system whose log syncs go through `slow`.
inline FaultFileSystemOptions slowed_by(SlowLog& slow) {
  FaultFileSystemOptions options;
  options.before_operation = [&slow](OpKind kind, const std::string& path, std::size_t) { slow.before(kind, path); };
  return options;
}

}  // namespace fusee::testing
