// The order demo's ledger: every line the demo's children wrote (see
// order_events.hpp), by life (0 for the first child, one more after each
// SIGKILL), kept in the parent's memory, outside the data directory; and the
// checks that hold the engine to its promise:
//
//  - every acknowledged start exists after the last restart and finished;
//  - every acknowledged signal was seen: an approval acknowledged before the
//    order's wait could time out decides the order (it never expires), and
//    no order ends another way than its plan allows;
//  - every delivered chunk is in the final stream (re-read from earliest
//    after reopening) at the same offset with the same value; every life's
//    reader saw offsets in order without a gap;
//  - no step ran again after its result was durable. A step's result was
//    durable in life L if in L (or before) a later step of the run ran (a
//    step runs only once the run's earlier records are durable), a chunk
//    written after the step was delivered (chunks are released only once
//    durable), or the run's result was reported. No step ran twice in a life;
//    every run of a step used the same idempotency key;
//  - every run finished with the receipt and the progress stream that its
//    order, its approval outcome, its charge key and its item change
//    determine, and no result ever changed between lives;
//  - every acknowledged update took effect exactly once: an add_items the
//    engine answered completed shows in the receipt's items once (never
//    twice, whatever was sent again), one it refused not at all, and every
//    completed answer names the same count; a refused count is always
//    refused;
//  - the payment provider was handed one token per order, whatever the
//    charge step's repeats, and an acknowledged confirmation took effect:
//    the order finished with that payment.
//  - no wait timed out before its timeout could have passed;
//  - the second phase's patch never flips: an order whose journal the first
//    code wrote past the patch point (a life before the patch delivered its
//    awaiting_approval chunk) never runs the fraud check;
//  - the back office's checks (backoffice_ledger.hpp): the packing queue's
//    bound, every acknowledged enqueue run, each audit due time once.
//
// Times: `ran` lines carry the child's system clock; the parent stamps every
// line with its own system clock when it reads it (an upper bound on when the
// event happened). Both are the clock the engine's timers use.
//
// Not thread-safe: the parent feeds it from its one thread.
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "demo/backoffice_ledger.hpp"
#include "demo/order_events.hpp"
#include "demo/order_workflow.hpp"

namespace fusee::cli {

class OrderLedger {
 public:
  OrderLedger(std::uint64_t seed, std::uint32_t orders, std::chrono::milliseconds approval_timeout);

  // One line (without its newline) from the child of `life`, read by the
  // parent at received_ms (system clock, ms since the epoch). True when it
  // acknowledged something for the first time (a start, a signal, a chunk
  // offset, a result) or reported a step execution.
  bool feed(int life, std::string_view line, std::int64_t received_ms);

  // What the next child must know, one line each: "started ID" (its start
  // was acknowledged), "signalled ID" (its approval was), "finished ID" (its
  // result was reported).
  std::string child_state() const;

  // Whether a child wrote `complete` (the final check ran to its end).
  bool complete() const { return complete_; }

  // Before a second final check, of a directory restored from the backup
  // (fusee demo --backup): its lines replace the final life's, and are
  // held to the same checks.
  void begin_restored_check();
  // fusee demo --backup, after a kill: a restore of the backup's latest,
  // whose newest batch was published at covered_at_ms, holds `restored`
  // (run id -> finished). Every approval and result the parent received by
  // then must be in it (their batches were published before they were
  // received), the results as finished runs.
  struct BackupPrefix {
    std::uint64_t approvals = 0;  // received by covered_at_ms, and checked
    std::uint64_t results = 0;
    std::vector<std::string> missing;
  };
  BackupPrefix check_backup_prefix(const std::map<std::string, bool>& restored, std::int64_t covered_at_ms) const;

  // When a final life runs out of time: what is known of each order that
  // reported no result, and of the back office's runs, at most `max` lines
  // (the first place to look for the run that never ended).
  std::vector<std::string> unfinished(std::size_t max) const;

  // Every check above; one sentence per violation, empty when all held.
  // Without the final child's report (it never got that far) only what the
  // lives reported is checked, not the end state.
  std::vector<std::string> check(bool with_final_state) const;

  struct Counts {
    std::uint64_t starts = 0;      // starts acknowledged
    std::uint64_t steps = 0;       // step executions
    std::uint64_t chunks = 0;      // chunk deliveries (history re-reads included)
    std::uint64_t signals = 0;     // signals acknowledged
    std::uint64_t results = 0;     // results reported
  };
  // What one life reported (zero for a life that reported nothing).
  Counts life_counts(int life) const;

  struct Totals {
    std::uint64_t finished = 0;  // runs with a final result
    std::uint64_t shipped = 0, rejected = 0, expired = 0;
    std::uint64_t step_runs = 0;        // step executions, all lives
    std::uint64_t step_reruns = 0;      // executions beyond a step's first (the result was not durable yet)
    std::uint64_t chunks = 0;           // distinct chunks delivered before the final check
    std::uint64_t chunk_deliveries = 0; // chunk deliveries before the final check (re-reads included)
    std::uint64_t signals = 0;          // distinct signals acknowledged
    std::uint64_t starts = 0;           // distinct starts acknowledged
    std::uint64_t updates = 0;          // orders whose add_items was answered
    std::uint64_t updates_applied = 0;  // ... completed (it took effect)
    std::uint64_t payments = 0;         // payment confirmations acknowledged (orders)
  };
  Totals totals() const;
  // Lives from this one on run the patched code (fusee demo's second phase).
  void set_patched_from(int life) { patched_from_ = life; }
  // Orders that ran the patch's fraud check.
  std::uint64_t took_patch() const;
  // Process `pid` (a worker) was SIGKILLed at `at_us`, steady clock.
  void killed(std::int64_t pid, std::int64_t at_us) { backoffice_.killed(pid, at_us); }
  BackofficeLedger::Totals backoffice_totals() const { return backoffice_.totals(); }

 private:
  struct StepRun {
    int life = 0;
    std::int64_t at_ms = 0;
    std::string key;
  };
  struct Delivery {
    boost::json::value value;
    int life = 0;               // first life that delivered it
    std::int64_t received_ms = 0;
  };
  struct RunRecord {
    Order order;
    Plan plan = Plan::approve;
    std::optional<int> started_life;
    std::map<std::string, std::vector<StepRun>, std::less<>> steps;
    std::optional<int> signal_life;
    std::int64_t signal_received_ms = 0;
    std::optional<std::uint32_t> item_change;     // what the desk adds, if anything
    std::vector<boost::json::value> update_answers;
    std::string payment_token;  // the first one handed to the provider
    std::string payment_key;
    std::optional<int> paid_life;
    std::vector<Delivery> chunks;  // by offset
    int reading_life = -1;         // the life whose reader the next offset belongs to
    std::uint64_t next_offset = 0;
    std::optional<Delivery> result;  // the first one reported
    std::vector<boost::json::value> final_chunks;
    bool final_ended = false;
    std::optional<boost::json::value> final_result;
    std::optional<std::string> final_status;
  };

  void violation(std::string message);
  RunRecord* find(const std::string& id, std::string_view line);
  bool on_chunk(RunRecord& run, int life, const OrderEvent& event, std::int64_t received_ms);
  bool on_result(RunRecord& run, int life, const boost::json::value& value, std::int64_t received_ms,
                 std::string_view where);
  void check_steps(const RunRecord& run, std::vector<std::string>& out) const;
  void check_final(const RunRecord& run, std::vector<std::string>& out) const;
  void check_outcome(const RunRecord& run, Outcome outcome, std::vector<std::string>& out) const;
  // The earliest moment (system clock ms) the run's approval wait could time
  // out: its first charge execution plus the timeout. nullopt: charge never ran.
  std::optional<std::int64_t> earliest_timeout_ms(const RunRecord& run) const;

  std::chrono::milliseconds approval_timeout_;
  int patched_from_ = INT_MAX;
  std::vector<RunRecord> runs_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::vector<std::string> feed_violations_;
  std::vector<Counts> life_counts_;
  std::vector<std::string> unknown_runs_;  // in list_runs, never started by the demo
  bool complete_ = false;
  BackofficeLedger backoffice_;
};

}  // namespace fusee::cli
