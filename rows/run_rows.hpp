// The run store's rows as plain data: a finished run, a shard's checkpoint,
// a parked run, where a run's journal is kept, a page query of finished
// runs, and a finished run's text. Below engine/, so that the wire
// (protocol/) carries them without depending on the engine; engine/
// run_store.hpp stores them (RocksDB), and names them as its own.
#pragma once

#include <boost/json.hpp>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusee/engine.hpp"

namespace fusee::rows {

struct FinishedRun {
  std::string id;
  std::uint32_t generation = 1;
  std::string workflow;
  std::uint32_t version = 1;  // the workflow version it ran
  boost::json::value input;
  RunStatus status = RunStatus::completed;
  boost::json::value result;  // completed
  std::string error_code;     // otherwise: errc_name of why
  std::string message;
  std::int64_t started_ms = 0;
  std::int64_t finished_ms = 0;
  // Signal ids delivered to the run: a repeat is acknowledged, not refused.
  std::vector<std::string> signal_ids;
  // Update ids the run accepted, and their answers: {id: {"ok": true,
  // "value": ...} or {"ok": false, "code": errc name, "message": ...}}, so a
  // repeat gets the same answer after the run ended.
  boost::json::object update_answers;
  // Awakeables completed, by the token's secret, in the same form: a
  // repeated completion is acknowledged (or already_exists) after the run
  // ended, as an update's repeat is.
  boost::json::object awakeable_answers;

  friend bool operator==(const FinishedRun&, const FinishedRun&) = default;
};

// A shard's state at an LSN. Recovery replays the shard's log from
// `replay_from` (records up to `lsn` only for runs the store does not hold),
// and the log must keep every batch from `keep_from_sequence` (the one
// holding record replay_from).
struct Checkpoint {
  std::uint32_t shard = 0;
  std::uint64_t lsn = 0;
  std::uint64_t keep_from_sequence = 0;
  std::string state;  // the shard's encoded state (opaque here)
  std::uint64_t replay_from = 0;  // 0: lsn + 1

  friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
};

// Where a run's journal records are kept between checkpoints.
enum class JournalPlace : char { live = 'j', parked = 'k' };

// A run that was unloaded while it waited (parking).
struct ParkedRun {
  std::string id;
  std::string workflow;
  std::uint32_t generation = 1;
  std::int64_t started_ms = 0;
  std::optional<std::int64_t> wake_ms;  // its timer (sleep, wait timeout, deadline), if any
  // What list_runs and get_run show of it (rows written before these were
  // kept read as version 0 and nothing waited on).
  std::uint32_t version = 0;
  std::vector<PendingCommand> waiting;

  friend bool operator==(const ParkedRun&, const ParkedRun&) = default;
};

struct RunQuery {
  std::optional<std::string> workflow;
  std::optional<RunStatus> status;
  std::int64_t finished_from_ms = INT64_MIN;  // inclusive
  std::int64_t finished_to_ms = INT64_MAX;    // exclusive
  std::size_t limit = 100;
  std::string cursor;  // from the previous page; empty for the first
};

struct RunPage {
  std::vector<FinishedRun> runs;  // oldest finish first
  std::string next_cursor;        // empty: no more
};

// A finished run as the store keeps it (JSON text), and back (nothing: not one).
std::string encode_finished_run(const FinishedRun& run);
std::optional<FinishedRun> decode_finished_run(std::string_view text);

}  // namespace fusee::rows
