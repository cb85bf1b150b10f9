// Where shards' journal records go: the local shared log (wal::Log), or
// nowhere (memory mode). One sink serves every shard; each shard calls it
// from its own thread. The listener runs on a log thread whenever a shard's
// durable position advances or the log is poisoned; it must only wake the
// shard, never call back into the sink.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include "base/result.hpp"
#include "wal/log.hpp"

namespace fusee::engine {

using wal::Lsn;
using wal::ShardId;

class JournalSink {
 public:
  using Listener = std::function<void(ShardId shard)>;
  virtual ~JournalSink() = default;
  // Stages one record; errc::queue_full (wal) asks the caller to hold it and
  // try again after the next durable advance.
  [[nodiscard]] virtual Result<Lsn> append(ShardId shard, std::span<const std::byte> record) = 0;
  virtual Lsn durable_lsn(ShardId shard) const = 0;
  // Whether an append is durable as soon as it returns (memory mode).
  virtual bool durable_at_once() const = 0;
  // Atomic groups (wal::Log::begin_group): a shard's records appended between
  // begin_group and end_group reach the disk together or not at all. A sink
  // that cannot promise that keeps in_group() false, and the engine then
  // never acts on a group's atomicity (a run's first step waits for its start).
  virtual void begin_group(ShardId) {}
  virtual void end_group(ShardId) {}
  virtual bool in_group(ShardId) const { return false; }
  virtual void set_listener(Listener listener) = 0;
  virtual std::error_code poison() const = 0;
  // Waits for what was appended, then stops (a clean shutdown).
  [[nodiscard]] virtual Result<void> close() = 0;
  // Reads a shard's durable records from LSN `first` on, in order (recovery).
  [[nodiscard]] virtual Result<void> read(ShardId shard, Lsn first,
                                          const std::function<void(Lsn, std::span<const std::byte>)>& visit) = 0;
  // Retirement (wal::Log's calls of the same names); memory mode keeps no
  // log, so nothing there retires.
  virtual std::uint64_t keep_from_sequence(ShardId, Lsn) const { return 0; }
  virtual std::uint64_t oldest_segment_retires_at() const { return 0; }
  // before_retiring: as wal::Log::retire's.
  [[nodiscard]] virtual Result<wal::RetireStats> retire(std::uint64_t, const std::function<Result<void>()>&) {
    return wal::RetireStats{};
  }
  virtual void set_roll_hook(std::function<void(std::uint64_t retires_at)>) {}
  virtual wal::LogStats stats() const { return {}; }
  // A shard about to sleep while its records are on their way writes them
  // itself when that is cheaper than two thread hand-offs (Log::write_inline).
  // true: something was written (look at the durable positions again).
  virtual bool write_inline() { return false; }
  // Remote mode: tells the server where this engine's HTTP API listens, so
  // the server can pass calls for its shards on (again after a reconnect).
  virtual void announce_http(const std::string&) {}
  // Remote mode: the token the server's HTTP front wants, which this
  // engine's HTTP API then takes too (calls the front passes on carry it);
  // empty when the server has no HTTP front or no token. Thread-safe.
  virtual std::string front_http_token() const { return {}; }
  // Remote mode: the server asks for a shard's checkpoint (its log wants to
  // retire a segment, or it is stopping). Runs on the sink's reading
  // thread; it must only wake others.
  virtual void set_checkpoint_hook(std::function<void(ShardId shard)>) {}
  // Waits until everything appended is durable, keeping the sink open
  // (remote mode's shutdown checkpoints after this and before close()).
  [[nodiscard]] virtual Result<void> drain() { return ok(); }
};

// Memory mode: records are counted, not kept; every append is "durable".
std::unique_ptr<JournalSink> make_memory_sink(std::uint32_t shard_count);

// Local mode: the shared log.
std::unique_ptr<JournalSink> make_log_sink(std::unique_ptr<wal::Log> log);
// Replicated mode: the shared log a replica opened as its view's primary
// (replica/primary_log.hpp), which the replica closes too. Its step-down
// (wal::errc::closed) reads as errc::unavailable: the runs go on on the
// next primary, and a caller may try again there. The engine's `shards`
// are the log's first ones; the log may hold more (the run store's records,
// hosting/replicated_run_store.hpp), of which the engine hears nothing.
std::unique_ptr<JournalSink> make_replicated_log_sink(std::shared_ptr<wal::Log> log, std::uint32_t shards);

}  // namespace fusee::engine
