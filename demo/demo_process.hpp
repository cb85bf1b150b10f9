// The order demo's parent side of its worker processes (order_demo.cpp,
// replicated_order_demo.cpp): starting `fusee demo --child ...`, handing it
// the ledger's state, reading its report lines into the ledger, and when to
// SIGKILL it.
//
// Not thread-safe: the parent runs on its one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "demo/order_demo.hpp"
#include "demo/order_ledger.hpp"

namespace fusee::cli {

using Clock = std::chrono::steady_clock;

// The final life must finish every order: the longest wait is one approval
// timeout, so anything near this means a run is stuck.
inline constexpr std::chrono::milliseconds kFinalLifeLimit{60'000};
inline constexpr std::size_t kViolationsShown = 20;
// Remote mode's log service: its shards, split in halves with --split.
inline constexpr std::uint32_t kSplitShards = 4;
// A directory holding this file was made by the demo and may be wiped.
inline constexpr const char* kMarker = ".fusee-demo";

std::int64_t steady_us();
std::int64_t system_ms();

// Empties `dir` if the demo made it (or the log demo did, or it is empty)
// and marks it as the demo's. False, with a message, otherwise.
bool prepare_dir(const std::string& dir);

struct Child {
  pid_t pid = -1;
  int report_fd = -1;  // the parent's read end of the child's fd 3
  int state_fd = -1;   // the write end of its stdin, while its state is still to send
};

// The ledger's view of what earlier lives did: the child reads it once its
// engine is open. Closes the child's stdin.
void send_state(Child& child, const std::string& state);

// Starts `fusee demo --child ...` (with `extra_args` after the rest);
// send_state() gives it the ledger's state on its stdin.
std::optional<Child> spawn_child(const OrderDemoOptions& options, std::uint64_t seed, std::uint32_t allow, bool final,
                                 const std::string& server, bool partner = false, bool patched = false,
                                 const std::vector<std::string>& extra_args = {});

// SIGKILLs nothing: waits for `pid` to end, and says how it did.
int wait_for_exit(pid_t pid);
std::string describe_status(int status);

// Splits what a child wrote into lines for the ledger.
class LineReader {
 public:
  // Counts the lines starting with `watched` (a verb and a space) that
  // acknowledge something new (not a re-read of history).
  LineReader(OrderLedger& ledger, int life, std::string_view watched)
      : ledger_(ledger), life_(life), watched_(watched) {}
  // A child living through several lives (the split demo's partner, a
  // replica): its lines count for the life in which they arrive.
  void set_life(int life) { life_ = life; }
  // Counts `watched` lines from now.
  void watch(std::string_view watched) {
    watched_ = watched;
    watched_lines_ = 0;
  }
  // Reads what is there; false at end of file (the child is gone).
  bool read_from(int fd);
  // A line cut short: the child died inside write(2), which a pipe write
  // below PIPE_BUF never does.
  bool has_partial() const { return !partial_.empty(); }
  bool heard() const { return heard_; }
  std::uint64_t lines() const { return lines_; }
  std::uint64_t watched_lines() const { return watched_lines_; }
  // A replica's last reported role (its "role NAME" lines); empty before one.
  const std::string& role() const { return role_; }
  // A replicated driver's calls dropped, refused unavailable ("dropped"
  // lines), and the last one's text.
  std::uint64_t dropped() const { return dropped_; }
  const std::string& last_dropped() const { return last_dropped_; }

 private:
  OrderLedger& ledger_;
  int life_;
  std::string partial_;
  std::string_view watched_;
  std::uint64_t watched_lines_ = 0;
  std::uint64_t lines_ = 0;
  bool heard_ = false;  // the child has reported something: its engine is open
  std::string role_;
  std::uint64_t dropped_ = 0;
  std::string last_dropped_;
};

// When a life ends: at a random time, or right after the child reported its
// Nth event of one kind (whichever comes first). A kill a moment after a
// step started lands where that step's result is not durable yet; after a
// start, a signal or a chunk, where an engine that acknowledged it before it
// was durable would lose it. Random times alone would rarely hit windows
// that short (a flush).
struct KillPlan {
  std::chrono::milliseconds after{0};
  std::string_view after_kind;  // "ran ", "started ", ...; empty: time only
  std::uint64_t after_count = 0;
};

// new_orders: how many orders a life starts, about.
KillPlan pick_kill(std::mt19937_64& random, std::uint64_t new_orders);

// The final life's worker (`who`: "worker", "driver") ended by itself with
// `status`: whether it ended well -- exit 0 and its check finished --, and
// if not, why, in `failures`.
bool final_life_ended_well(int status, const OrderLedger& ledger, std::string_view who,
                           std::vector<std::string>& failures);

// Prints the violations and the demo's summary line; the exit code.
int print_outcome(OrderLedger& ledger, std::vector<std::string> failures, int kills, int patch_life,
                  Clock::time_point started, std::uint64_t seed);

}  // namespace fusee::cli
