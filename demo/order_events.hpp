// The lines the order demo's child writes to its parent, one per event, each
// with a single write(2) to a pipe, so a line is either whole or absent
// after a SIGKILL and lines from several threads never interleave. Fields
// are separated by one space; the last field takes the rest of the line.
//
//   started ID                  engine.start returned (the run is durable)
//   ran ID STEP AT_MS KEY       a step function is about to do its work (an
//                               execution log, not an acknowledgement);
//                               AT_MS: system clock, ms since the epoch
//   signalled ID SIGID VALUE    engine.signal returned (SIGID: the
//                               deduplication id; VALUE: the JSON sent)
//   pay ID TOKEN KEY            the charge step handed the payment provider
//                               this awakeable token for the charge KEY
//   paid ID KEY                 the provider's complete_awakeable(token, KEY)
//                               returned (the completion is durable)
//   updated ID UPDID ANSWER     engine.update (add_items, id UPDID) answered:
//                               {"status":"completed","items":N}, or
//                               {"status":"rejected"|"failed"|"not_found"}
//   chunk ID OFFSET VALUE       a StreamReader delivered this chunk of the
//                               run's "progress" stream
//   result ID VALUE             engine.result_json returned this JSON
//   failed ID MESSAGE           the run or a call about it failed
//   final-chunk ID OFFSET VALUE the final check's re-read (after reopening)
//   final-end ID                ... reached the end of the stream
//   final-result ID VALUE       the final check's result, after reopening
//   run ID STATUS               list_runs after reopening
//   complete                    the final check is done
//
// The back office (backoffice.hpp):
//   enqueued ID                 engine.enqueue of pack run ID returned
//   pack-begin ID PID AT_US     its pack step starts its work, in process
//   pack-end ID PID AT_US       PID; ... has done it (AT_US: steady clock, µs)
//   audit ID AT_MS              audit run ID's step runs (system clock, ms)
//   audit-schedule ID STARTED   the final life paused schedule ID: it had
//                               started STARTED runs (then deleted it)
//
// Pure functions; thread-safe.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fusee::cli {

struct OrderEvent {
  enum class Kind {
    started,
    ran,
    signalled,
    pay,
    paid,
    updated,
    chunk,
    result,
    failed,
    final_chunk,
    final_end,
    final_result,
    run,
    complete,
    enqueued,
    pack_begin,
    pack_end,
    audit,
    audit_schedule,
  };
  Kind kind = Kind::complete;
  std::string id;
  std::string step;       // ran
  std::int64_t at_ms = 0; // ran
  std::string text;       // ran, paid: key; signalled, updated: signal or update id; failed: message; run: status
  std::string token;      // pay: the awakeable token (text: the key)
  std::uint64_t offset = 0;  // chunks; audit-schedule: runs started
  std::int64_t pid = 0;      // pack-begin, pack-end
  std::int64_t at_us = 0;    // pack-begin, pack-end
  boost::json::value value;  // signalled, updated, chunk, result, final-chunk, final-result
};

std::string started_line(std::string_view id);
std::string ran_line(std::string_view id, std::string_view step, std::int64_t at_ms, std::string_view key);
std::string signalled_line(std::string_view id, std::string_view signal_id, const boost::json::value& value);
std::string pay_line(std::string_view id, std::string_view token, std::string_view key);
std::string paid_line(std::string_view id, std::string_view key);
std::string updated_line(std::string_view id, std::string_view update_id, const boost::json::value& answer);
std::string chunk_line(std::string_view id, std::uint64_t offset, const boost::json::value& value);
std::string result_line(std::string_view id, const boost::json::value& value);
std::string failed_line(std::string_view id, std::string_view message);
std::string final_chunk_line(std::string_view id, std::uint64_t offset, const boost::json::value& value);
std::string final_end_line(std::string_view id);
std::string final_result_line(std::string_view id, const boost::json::value& value);
std::string run_line(std::string_view id, std::string_view status);
std::string complete_line();
std::string dropped_line(std::string_view what, std::string_view why);
std::string enqueued_line(std::string_view id);
std::string pack_line(std::string_view id, bool done, std::int64_t pid, std::int64_t at_us);
std::string audit_line(std::string_view id, std::int64_t at_ms);
std::string audit_schedule_line(std::string_view id, std::uint64_t started);
// The split demo's partner: its engine is open (not an event of the ledger's).
inline constexpr std::string_view kReadyLine = "ready";
// A replica of the replicated demo: "role NAME" whenever its role changes
// (primary, backup, ...; not an event of the ledger's either). The state
// the parent hands the replica it makes a life's driver starts with
// "allow N" and, in the final life, "final".
inline constexpr std::string_view kRoleLinePrefix = "role ";
// A call a replicated driver dropped, refused unavailable (its replica no
// longer leads): "dropped ID: WHY". Not an event of the ledger's.
inline constexpr std::string_view kDroppedLinePrefix = "dropped ";
inline constexpr std::string_view kAllowStatePrefix = "allow ";
inline constexpr std::string_view kFinalStateLine = "final";

// One line without its newline; nullopt if it is not well formed.
std::optional<OrderEvent> parse_order_event(std::string_view line);

}  // namespace fusee::cli
