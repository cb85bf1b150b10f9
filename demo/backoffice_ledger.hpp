// The order demo's checks of its back office (backoffice.hpp), fed by the
// order ledger (order_ledger.hpp) with the lines that concern it:
//
//  - the packing queue's bound: at no moment did more than
//    kPackingConcurrency pack steps run at once, over every worker process
//    (a step begun in a process that was SIGKILLed ends at the kill);
//  - every acknowledged enqueue ran: its pack run's step ran, and it
//    finished with the order's index; list_runs shows no pack run that was
//    never enqueued;
//  - each due time once: every audit run's id is a due time of the schedule
//    (aligned to kAuditEvery), distinct, whose step never ran before that
//    time; every audit run that ran is finished in the end, every finished
//    one ran, and the schedule counted as many runs started as there are.
//
// Times: pack lines carry the writer's steady clock (CLOCK_MONOTONIC, one
// clock for every process of the machine) in µs, and its pid; audit lines
// the system clock in ms, the clock the schedule's timers go by.
//
// Not thread-safe, as the order ledger.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "demo/order_events.hpp"

namespace fusee::cli {

class BackofficeLedger {
 public:
  explicit BackofficeLedger(std::uint32_t orders);

  // Whether the event is the back office's: its own kinds, and the final
  // results and statuses of its runs (pack, audit, the queue's and the
  // schedule's own runs).
  static bool takes(const OrderEvent& event);
  // True when it acknowledged something for the first time.
  bool feed(int life, const OrderEvent& event, std::string_view line);
  // Process `pid` was SIGKILLed (or frozen) at `at_us` (steady clock): its
  // steps ended then. The earliest word about a pid counts.
  void killed(std::int64_t pid, std::int64_t at_us);
  // What the next child must know: "enqueued ID" lines.
  std::string child_state() const;
  void check(bool with_final_state, std::vector<std::string>& out) const;
  // Pack runs enqueued that never finished a pack step, at most `max` lines.
  std::vector<std::string> unfinished(std::size_t max) const;
  // Forgets the final check's results and statuses: a second one follows.
  void begin_restored_check();

  struct Totals {
    std::uint64_t packs = 0;           // pack runs finished
    std::uint64_t pack_steps = 0;      // pack step executions
    std::uint64_t most_in_flight = 0;  // pack steps at once, at the most
    std::uint64_t audits = 0;          // audit runs that ran
  };
  Totals totals() const;

 private:
  struct Span {
    std::int64_t pid = 0;
    std::int64_t begin_us = 0;
    std::optional<std::int64_t> end_us;
  };
  struct Pack {
    std::uint32_t index = 0;
    bool enqueued = false;
    std::vector<Span> spans;
    std::optional<boost::json::value> final_result;
    std::optional<std::string> final_status;
  };
  struct Audit {
    std::vector<std::int64_t> ran_ms;
    std::optional<std::string> final_status;
  };
  // The most pack steps running at one moment, and one such moment.
  std::pair<std::uint64_t, std::int64_t> most_at_once() const;

  std::map<std::string, Pack, std::less<>> packs_;
  std::map<std::string, Audit, std::less<>> audits_;
  std::map<std::int64_t, std::int64_t> killed_us_;  // by pid
  std::optional<std::uint64_t> schedule_started_;
  std::vector<std::string> violations_;
  std::vector<std::string> unknown_runs_;
};

}  // namespace fusee::cli
