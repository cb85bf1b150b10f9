// An engine over a log its caller opened: a replica's, while the replica is
// its view's primary (docs/replication.md, "The engine on a primary's
// log"). The caller holds the data directory (engine::claim_data_dir with
// DirOwner::replicated: its lock and its run store) for as long as the
// replica runs, and lends the run store to each view's engine. For each
// view it leads, it reads the checkpoints (engine::read_checkpoints, with no
// engine open), opens the log over them (engine::set_log_base), and opens
// the engine only once the log has published every batch it recovered: the
// engine's recovery reads what the log holds durable, which is a quorum's
// part only. The engine recovers as after a crash.
//
// The log stays the caller's too: when the view ends, the caller steps it
// down (the engine's callers are told errc::unavailable: the runs go on on
// the next primary) and shuts the engine down, off the thread the log's
// publication comes on.
#pragma once

#include <memory>
#include <string>

#include "engine/data_dir.hpp"
#include "fusee/engine.hpp"
#include "remote/shard_router.hpp"
#include "wal/log.hpp"

namespace fusee::facade {

struct LogOver {
  std::shared_ptr<engine::RunStore> store;  // the claimed directory's, lent
  std::uint32_t shards = 0;
  std::string root;           // the claimed directory (layout 0)
  engine::ShardBases bases;   // read from `store` for this view
  std::shared_ptr<wal::Log> log;  // over `bases`, its recovered tail published
};

// Config::mode must be local; Config::dir names the claimed directory (in
// messages); a backup target is refused. Throws fusee::Error.
std::unique_ptr<Engine> open_engine_over_log(Config config, LogOver over);

// A call another replica's application forwarded to this view's engine
// (sdk/facade/primary_router.hpp): served as a split worker serves one for
// a shard it holds (remote::RemoteCalls::serve). Only hands the call on.
void serve_forwarded(Engine& engine, remote::ShardRouter::Call call);

}  // namespace fusee::facade
