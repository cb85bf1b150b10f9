// The engine's journal records: what a run's journal holds, and their one
// canonical byte encoding (docs/journal-format.md). Each record is one log
// record in its run's shard. Pure: no I/O, no clock. Thread-compatible.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace fusee::engine {

// Version 2 added at_ms, took_us and parent; version 1 records (written
// before) still decode, with them 0 and empty (not known).
inline constexpr std::uint8_t kJournalFormatVersion = 2;
inline constexpr std::uint8_t kJournalFormatVersionOldest = 1;

// Numbers are part of the format: never reuse or renumber.
enum class RecordKind : std::uint8_t {
  run_started = 1,          // name: workflow; detail: version; value: input; time_ms: start; number: deadline ms (0 none);
                            // flag: continued as new (value: {"input", "signals", "updates"}, see ContinuedFrom)
  step_completed = 2,       // position, name: step; value: result
  step_attempt_failed = 3,  // position, name; number: attempt; time_ms: retry at; detail: deadline ms or empty; value: error text
  step_failed = 4,          // position, name; number: attempts made; value: error text
  sleep_started = 5,        // position, name: timer; time_ms: due
  sleep_fired = 6,          // position, name
  signal_received = 7,      // name: signal; detail: signal id (may be empty); value
  wait_started = 8,         // position, name: signal; time_ms: timeout at (-1: none)
  wait_completed = 9,       // position, name: signal; flag: value came (false: timed out); value
  stream_chunk = 10,        // position, name: stream; number: offset; value: chunk
  stream_closed = 11,       // position, name: stream
  value_recorded = 12,      // position, name: "now" | "random"; value
  child_started = 13,       // position, name: child id; detail: workflow; value: input; number: ParentClose
  child_completed = 14,     // position, name: child id; flag: succeeded; detail: error code; value: result or message
  run_completed = 15,       // value: result
  run_failed = 16,          // detail: error code name; value: message
  run_cancelled = 17,       // value: reason
  any_resolved = 18,        // position, name: "any"; value: the candidates' positions; number: the winner's position
  cancel_requested = 19,    // detail: request id (may be empty); value: reason
  cancel_delivered = 20,    // detail: the error message; value: the cancelled commands, [[position, command, name], ...]
  patch_marked = 21,        // position, name: the patch id (Ctx::patched took the new code's path)
  run_reset = 22,           // detail: reason; number: the generation reset; time_ms; value: {"position", "started_ms" (the generation it ends began), "dropped"}
  update_accepted = 23,     // name: update; detail: update id; value: argument
  update_taken = 24,        // position, name: update; detail: update id; value: argument
  update_answered = 25,     // position, name: update; detail: update id; flag: succeeded; value: result or message
  awakeable_created = 26,   // position, name: awakeable; detail: the token's secret part
  awakeable_completed = 27, // position, name: awakeable; flag: succeeded; value: value or message
  step_started = 28,        // position, name: step; detail: the step's deadline ms or empty (written before its first attempt)
};
inline constexpr std::uint8_t kRecordKindMax = 28;

const char* record_kind_name(RecordKind kind);

// The command a positional record belongs to ("step", "sleep", "wait_for",
// "stream write", "stream close", "value", "child", "any", "patch",
// "next_update", "reply", "awakeable"; "?" for others), as docs/journal-format.md and nondeterminism messages name it.
const char* command_name(RecordKind kind);

// Whether records of this kind belong to a command position of the run.
bool is_positional(RecordKind kind);

// run_started's position (unused otherwise, as it is not positional) when
// a reset wrote it: its generation exists once its run_reset is read too
// (a crash may keep the first records of a reset and not the last).
inline constexpr std::uint32_t kResetStartMarker = 1;

// Every record carries every field (zero or empty when unused), so the
// encoding has one shape.
struct JournalRecord {
  RecordKind kind = RecordKind::run_started;
  std::string run_id;
  std::uint32_t generation = 1;
  std::uint32_t position = 0;
  std::uint64_t number = 0;
  std::int64_t time_ms = 0;
  // When the engine made the record (ms since the epoch, engine clock): the
  // times a run's timeline shows. 0: not known (a version 1 record).
  std::int64_t at_ms = 0;
  // How long the step attempt a step record ends ran (µs, monotonic clock);
  // 0 for other kinds.
  std::uint64_t took_us = 0;
  bool flag = false;
  std::string name;
  std::string detail;
  // run_started of a child run (ctx.child): the parent run's id; else empty.
  // Version 2 on.
  std::string parent;
  boost::json::value value;

  friend bool operator==(const JournalRecord&, const JournalRecord&) = default;
};

// What the run_started of a generation continued as new (Ctx::continue_as_new;
// its flag set) carries besides the input: the signals and updates the
// previous generation accepted and its code had not taken. They ride in the
// one record, so a crash keeps both or neither.
struct CarriedSignal {
  std::string name;
  std::string id;  // the signal id (may be empty)
  boost::json::value value;
};
struct CarriedUpdate {
  std::string name;
  std::string id;
  boost::json::value arg;
};
struct StartedValue {
  boost::json::value input;
  std::vector<CarriedSignal> signals;
  std::vector<CarriedUpdate> updates;
  // The ids the earlier generations were sent, a window of them
  // (engine/remembered.hpp's JSON; null: none, as before it was written).
  boost::json::value remembered;
};
// A run_started record's value from its parts (continued: the carrying
// object; else the input alone), and back. read_started fails (corrupt)
// on a continued record whose value is not the carrying object.
boost::json::value started_value(const StartedValue& started, bool continued);
Result<StartedValue> read_started(const JournalRecord& record);

// Appends the canonical encoding of record to out.
void encode_record(const JournalRecord& record, std::vector<std::byte>& out);
std::vector<std::byte> encode_record(const JournalRecord& record);

// Decodes one record; errc::corrupt (wal) on anything malformed.
Result<JournalRecord> decode_record(std::span<const std::byte> bytes);

}  // namespace fusee::engine
