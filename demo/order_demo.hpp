// `fusee demo`: the example application behind the README's `make demo`,
// and a kill -9 test of the engine in local mode.
//
// A child process (this program again, `fusee demo --child`) runs `order`
// workflows (order_workflow.hpp) on an engine in --dir: it starts orders,
// follows their progress streams, sends the approval desk's signals, and
// reports every acknowledgement to the parent on a pipe (order_events.hpp).
// The parent keeps those acknowledgements in a ledger in its own memory,
// SIGKILLs the child at random moments (from --seed) and starts a new one,
// which reopens the engine (replaying the unfinished runs), re-reads the
// streams from the earliest chunk, and starts and signals what remains.
// After the last kill a final child runs every order to its end, reopens the
// engine once more and re-reads every stream, result and run. The ledger's
// checks (order_ledger.hpp) then decide the exit code.
//
// The parent runs on the main thread and is not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fusee::cli {

struct OrderDemoOptions {
  std::string dir = "./data";
  std::uint32_t orders = 200;
  int kills = 5;
  std::uint64_t seed = 0;  // 0: from the clock
  bool quiet = false;
  // Remote mode: the demo runs `fusee server`'s log service itself, on
  // <dir>/server.sock, and its workers are remote engines. A standby worker
  // waits for the leases while the holder runs, and takes over when the
  // holder is SIGKILLed.
  bool remote = false;
  // With remote or server: the shards split between two workers (each takes
  // at most half of 4): a partner worker, never killed, runs the orders of
  // its half and answers for them; the killed worker's standby (remote) or
  // successor (server) takes over the other half while the partner goes on.
  bool split = false;
  // The child's side (hidden options, set by the parent).
  bool child = false;
  std::uint32_t allow = 0;  // the child starts orders [0, allow)
  bool final = false;       // run everything to its end, then the final check
  std::string server;       // remote mode: the log service's address
  std::uint32_t shards_max = 0;  // remote mode: Config::server_shards_max
  bool partner = false;          // split: only run the orders of its shards and answer for them
  bool patched = false;          // the second phase's workflow code (a patch)
  // Local mode: the workers' engine backs up to this directory; after the
  // final life the parent restores the latest into <dir>-restored and a
  // last child checks it as the final life checked the original.
  std::string backup;
  bool check_only = false;  // the child: open the engine, run the final check, exit
  // Replicated mode: three replicas (Config::replicated) and an etcd of the
  // demo's own. Each child is a replica; the parent makes the primary each
  // life's driver (it hands it the ledger's state) and SIGKILLs it, then
  // starts it again as a backup (replicated_order_demo.hpp).
  bool replicated = false;
  std::uint32_t replica_id = 0;  // the child's (hidden options, set by the parent)
  std::string etcd;              // HOST:PORT
  std::vector<std::string> replicas;  // HOST:PORT each (given as one comma-separated option)
};

// Returns the process exit code: 0 when every check held, 1 on a violation,
// 2 when the demo could not run.
int run_order_demo(const OrderDemoOptions& options);

}  // namespace fusee::cli
