// An engine over a log its caller opened: a replica's, while the replica is
// its view's primary (docs/replication.md, "The engine on a primary's
// log"). The caller claimed the data directory (engine::claim_data_dir with
// DirOwner::replicated: its lock, its run store and each shard's checkpoint)
// and opened the log over the same checkpoints (engine::set_log_base), and
// opens the engine only once the log has published every batch it recovered:
// the engine's recovery reads what the log holds durable, which is a
// quorum's part only. The engine recovers as after a crash.
//
// The log stays the caller's too: when the view ends, the caller steps it
// down (the engine's callers are told errc::unavailable: the runs go on on
// the next primary) and shuts the engine down, off the thread the log's
// publication comes on.
#pragma once

#include <memory>

#include "engine/data_dir.hpp"
#include "fusee/engine.hpp"
#include "wal/log.hpp"

namespace fusee::facade {

struct LogOver {
  engine::DataDir claimed;        // with no log of its own
  std::shared_ptr<wal::Log> log;  // over claimed's checkpoints, its recovered tail published
};

// Config::mode must be local; Config::dir names the claimed directory (in
// messages); a backup target is refused. Throws fusee::Error.
std::unique_ptr<Engine> open_engine_over_log(Config config, LogOver over);

}  // namespace fusee::facade
