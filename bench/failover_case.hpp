// engine_bench's failover case (docs/replication.md, "Figures"): three
// replicas as processes -- engine_bench itself, run again with
// --failover-replica -- and an etcd of the benchmark's own. Each round
// parks runs on a wait through the primary's HTTP API, SIGKILLs the
// primary, and times, from the SIGKILL:
//   - first step: until a new run's one step has completed (an execute sent
//     through a surviving replica, again until it answers: a backup sends
//     it on to whichever replica leads);
//   - all resumed: until every run parked before the kill has been
//     signalled and has finished on the new primary (each recovered as
//     after a crash: its journal replayed, its wait taken up again).
// The killed replica is then started again on its directory, as a backup,
// and the next round waits for it to hold the whole log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fusee::bench {

struct FailoverOptions {
  std::string dir;              // scratch: etcd's and the replicas' directories
  std::string self;             // this program's path, run again as each replica
  std::uint32_t kills = 20;
  std::uint32_t parked_runs = 20;  // per round
  std::uint32_t lease_ms = 1000;   // the etcd lease (whole seconds)
};

struct FailoverFigures {
  std::uint32_t lease_ms = 0;
  std::uint32_t parked_runs = 0;
  std::vector<double> first_step_ms;   // one per kill
  std::vector<double> all_resumed_ms;  // one per kill
  // Of the first: the next primary's opening, from its log's opening to its
  // engine's (fusee_replica_last_open_seconds): what a local open after a
  // crash would take over the same log and run store.
  std::vector<double> open_ms;
};

// Throws std::runtime_error (etcd missing, a replica that will not start,
// no primary within 60 s).
FailoverFigures run_failover(const FailoverOptions& options);

// The replica process: engine_bench --failover-replica DIR ID REPLICAS ETCD
// HTTP. Serves until SIGTERM (or is SIGKILLed). Returns the exit status.
int failover_replica_main(int argc, char** argv);

}  // namespace fusee::bench
