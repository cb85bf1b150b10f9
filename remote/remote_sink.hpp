// Remote mode's journal sink: a worker's shards send their records to
// `fusee server` (server/log_service.hpp) and learn back how far each
// shard's records are durable. Appends are pipelined: append() sends and
// returns the LSN at once, and durable positions arrive as the server's log
// publishes them, one flush covering every connection's records.
//
// At open the sink says hello and asks for every shard, waiting until each
// is leased to it (a shard another worker holds is granted when that
// worker's connection goes: this is how a standby worker takes over); or,
// with shards_max N, takes at most N free ones now and more as they free
// up, up to N (ShardRouter::set_handlers hears of each). Each append
// carries the shard's lease epoch; a refusal (fenced, storage) or a lost
// connection poisons the sink, as a failed flush poisons the local log, and
// the engine is reopened to go on.
//
// Thread-safety as JournalSink: shards call it from their threads; one
// thread reads the connection.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "engine/journal_sink.hpp"
#include "protocol/store_call.hpp"
#include "remote/remote_limits.hpp"
#include "remote/shard_router.hpp"

namespace fusee::remote {

// Calls on the server's run store, over the sink's connection.
class StoreChannel {
 public:
  virtual ~StoreChannel() = default;
  // Sends `call` and waits for its reply, adding its rows to `rows`. A
  // write's `epochs` name its shards; the sink fills in their lease epochs.
  // A call the connection's loss cut short is sent again after the
  // reconnect (every call is a read or a whole batch: doing it twice is
  // harmless); once the sink is poisoned, its poison.
  [[nodiscard]] virtual Result<protocol::StoreReply> store_call(protocol::StoreCall call,
                                                               std::vector<std::vector<std::byte>>* rows) = 0;
};

struct RemoteOptions {
  std::string address;  // "unix:PATH" or "HOST:PORT"
  std::string token;    // for TCP, when the server wants one
  std::string worker;   // a name for the server's logs
  // 0: take every shard, waiting for those another worker holds. N: take
  // at most N of the free ones and stand by for more (remote/shard_router.hpp
  // passes calls for the rest on).
  std::uint32_t shards_max = 0;
  // With shards_max 0, how long the first connect waits for every lease
  // (0: as long as it takes); past it, std::errc::timed_out and `problem`
  // naming the shards it could not get.
  std::chrono::milliseconds open_wait{0};
  std::function<void(const std::string&)> warn;  // the server went away, came back, or was lost for good
};

// The sink, and its other faces: the run store's channel, the router and
// the step limits' permits (all live as long as the sink).
struct RemoteConnection {
  std::unique_ptr<engine::JournalSink> sink;
  StoreChannel* store = nullptr;
  ShardRouter* router = nullptr;
  PermitChannel* permits = nullptr;
};

// Connects and takes every shard's lease. errc::storage (wal) style errors
// with `problem` saying why: cannot connect, refused, wrong shard count.
Result<RemoteConnection> connect_remote_sink(const RemoteOptions& options, std::uint32_t* shard_count,
                                             std::string* problem);

}  // namespace fusee::remote
