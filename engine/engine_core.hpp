// What shards need from the engine around them: the workflow registry, the
// injected clock and randomness, and messages to other shards. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/run_index.hpp"
#include "engine/step_limits.hpp"
#include "engine/outcome.hpp"
#include "fusee/clock.hpp"
#include "fusee/engine.hpp"

namespace fusee::engine {

struct StartRequest {
  std::string workflow;
  std::string id;
  boost::json::value input;
  StartOptions options;
  std::string parent;  // a child's parent run (journaled with its start)
};

// How a cancel request stops a run (Shard::handle_cancel).
enum class CancelMode {
  cancel,        // its waits throw errc::cancelled; a second cancel terminates
  parent_close,  // as cancel, from a parent's ParentClose policy: never
                 // escalates, so it may be sent again (after a crash)
  terminate,     // it ends at once
};

// How a parent's ParentClose reaches its child (never abandon: such a
// child is not closed at all).
inline CancelMode close_mode(ParentClose policy) {
  return policy == ParentClose::terminate ? CancelMode::terminate : CancelMode::parent_close;
}

class EngineCore {
 public:
  virtual ~EngineCore() = default;
  // The code registered for a workflow's version, or null.
  virtual std::shared_ptr<const WorkflowFn> workflow(const std::string& name, std::uint32_t version) const = 0;
  // The newest version registered under a name; nothing when none is.
  virtual std::optional<std::uint32_t> newest_version(const std::string& name) const = 0;
  // Why a signal to a run of `workflow` is refused (its declared signals);
  // empty when it is taken.
  virtual std::string check_signal(const std::string& workflow, const std::string& signal,
                                   const boost::json::value& value) const = 0;
  virtual TimePoint now() const = 0;
  virtual std::uint64_t random() = 0;
  // Runs fn on the shard that owns run id `id`. Internal messages are never
  // refused for a full queue (only external requests are).
  virtual void post_to_run_shard(const std::string& id, std::function<void()> fn) = 0;
  virtual void post_to_shard(std::uint32_t shard, std::function<void()> fn) = 0;
  // Starts (or attaches to) a child run on its shard; on_end runs on the
  // child's shard when it ends (a start that fails ends it at once).
  virtual void start_child(StartRequest request, std::function<void(const Outcome&)> on_end) = 0;
  // Cancels or terminates run `id` (a child, by its parent's ParentClose);
  // done runs (on any thread) once the request is durable, or the run had
  // ended, or it cannot be (errors are not reported: the parent goes on).
  virtual void close_child(const std::string& id, const std::string& reason, CancelMode mode,
                           std::function<void()> done) = 0;
  // The engine's named step limits (Engine::limit), shared by its shards.
  virtual StepLimits& limiter() = 0;
  // Tells the operator (Config::warn): a run got stuck, say.
  virtual void warn_operator(const std::string& message) = 0;
  // A shard's journal failed (the log was poisoned or refused a write): the
  // shard's runs cannot go on until a reopen. Tells the operator once.
  virtual void storage_failed(std::uint32_t shard, std::error_code error) = 0;
  // Why new requests are refused now (errc::busy, nothing recorded), or
  // empty: the continuous backup's backlog past its bound, say. Read on
  // every request's first record, so it must be cheap.
  virtual std::string refusing_new_requests() const = 0;
  // Every run's summary, for listing and counting (engine/run_index.hpp):
  // a shard puts a run there as it starts, ends, sticks or is reset.
  virtual RunIndex& run_index() = 0;
};

std::int64_t to_ms(TimePoint time);
TimePoint from_ms(std::int64_t ms);

}  // namespace fusee::engine
