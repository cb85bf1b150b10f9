// Remote mode's journal sink: a worker's shards send their records to
// `fusee server` (server/log_service.hpp) and learn back how far each
// shard's records are durable. Appends are pipelined: append() sends and
// returns the LSN at once, and durable positions arrive as the server's log
// publishes them, one flush covering every connection's records.
//
// At open the sink says hello, asks for every shard and waits until each is
// leased to it (a shard another worker holds is granted when that worker's
// connection goes: this is how a standby worker takes over). Each append
// carries the shard's lease epoch; a refusal (fenced, storage) or a lost
// connection poisons the sink, as a failed flush poisons the local log, and
// the engine is reopened to go on.
//
// Thread-safety as JournalSink: shards call it from their threads; one
// thread reads the connection.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/journal_sink.hpp"

namespace fusee::engine {

struct RemoteOptions {
  std::string address;  // "unix:PATH" or "HOST:PORT"
  std::string token;    // for TCP, when the server wants one
  std::string worker;   // a name for the server's logs
  std::function<void(const std::string&)> warn;  // the server went away, came back, or was lost for good
};

// Connects and takes every shard's lease. errc::storage (wal) style errors
// with `problem` saying why: cannot connect, refused, wrong shard count.
Result<std::unique_ptr<JournalSink>> connect_remote_sink(const RemoteOptions& options, std::uint32_t* shard_count,
                                                         std::string* problem);

}  // namespace fusee::engine
