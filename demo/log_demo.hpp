// `fusee log-demo` (hidden): the shared log's promise on its own, below the
// engine, and the log's kill -9 test (tests/kill_test.sh): a child process
// appends from several threads and reports each acknowledgement to the
// parent, the parent SIGKILLs it part-way with no clean shutdown, reopens the
// directory and checks that every acknowledged record is there, byte for
// byte, and nothing else. Not thread-safe; runs on the main thread.
#pragma once

#include <cstdint>
#include <string>

namespace fusee::cli {

struct LogDemoOptions {
  std::string dir = "./data";
  int kills = 5;
  std::uint32_t shards = 4;  // one appender thread per shard
  std::uint64_t seed = 0;    // 0: from the clock
  bool quiet = false;
  bool replicated = false;  // run demo/replicated_log_demo.hpp instead
};

// Returns the process exit code: 0 when every check held.
int run_log_demo(const LogDemoOptions& options);

}  // namespace fusee::cli
