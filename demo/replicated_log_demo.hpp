// `fusee log-demo --replicated` (hidden): the replicated log's promise, below
// the engine (docs/replication.md, "The log demo"). Three (or five) `fusee replica`
// processes and an etcd of its own, all local; appender threads with a
// ledger of every append a replica published; and the faults a cluster
// meets: the primary SIGKILLed again and again and a backup now and then
// (each restarted), the primary stopped (SIGSTOP) past its lease and
// resumed -- an append it took while stopped must not be published -- etcd
// stopped while appends go on, and a backup's directory wiped, found wiped,
// and rebuilt. At the end every replica's directory is read offline: each
// holds the same log, and every published append is in it, byte for byte,
// at its sequence. Not thread-safe; runs on the main thread.
#pragma once

#include <cstdint>
#include <string>

namespace fusee::cli {

struct ReplicatedLogDemoOptions {
  std::string dir = "./data";
  int primary_kills = 30;
  int backup_kills = 10;
  std::uint32_t appenders = 4;
  std::uint32_t replicas = 3;  // 3 or 5: one replica at a time is killed, stopped or wiped
  std::uint64_t seed = 0;  // 0: from the clock
  bool quiet = false;
};

// Returns the process exit code: 0 when every check held.
int run_replicated_log_demo(const ReplicatedLogDemoOptions& options);

}  // namespace fusee::cli
