// `fusee demo --replicated`: the order demo on three replicas
// (Config::replicated, docs/replication.md) and an etcd of the demo's own,
// the primary SIGKILLed each life.
//
// Each replica is a child process (`fusee demo --child --replica-id N ...`)
// in <dir>/replica-N. A replica opens its engine and reports its role; the
// parent makes the primary the life's driver by handing it the ledger's
// state (the orders it may start, and whether the life is the last): it
// starts orders, follows their streams and sends the desk's signals and
// updates, as the local demo's one child does. Every replica reports the
// steps, packs and audits its engine runs (only a primary runs any), and the
// ledger reads every replica's lines, each counted for the life in which it
// arrives. At the end of each life but the last the parent SIGKILLs the
// driver, waits for another replica to lead, and starts the killed one
// again as a backup. In every other life a backup is SIGKILLed too, early,
// and started again at once. Once, the primary hangs instead (SIGSTOPped
// until another leads, then SIGKILLed); a driver another replica replaced
// by itself (a slow machine) ends its life there. Halfway, the backups are
// restarted with the patched code before the primary's kill (a rolling
// deploy), so every life from then on has the patch's primary. The final
// driver runs every order to its end, closes its engine (a failover), opens
// it again as a backup and re-reads every stream, result and run through
// the new primary. The ledger checks what it checks for the local demo.
#pragma once

#include <cstdint>
#include <string_view>

#include "demo/order_demo.hpp"

namespace fusee::cli {

inline constexpr std::string_view kDemoCluster = "demo";
inline constexpr std::uint32_t kDemoReplicas = 3;
inline constexpr std::uint32_t kDemoShards = 4;
// Small segments, as the local demo's: rolls and retirement under the kills.
inline constexpr std::uint64_t kReplicaSegmentBytes = 1u << 20;

int run_replicated_order_demo(const OrderDemoOptions& options);

}  // namespace fusee::cli
