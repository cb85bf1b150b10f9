// RunIndex: every run an engine holds -- running, parked, stuck, finished
// in memory or in the run store -- as a small summary, kept as runs change
// state, so that listing, counting and metrics never scan the runs
// (issue 36: at 100,000 runs a list took seconds, and four console tabs
// polling it slowed every start).
//
// The shards put a run's summary whenever it starts, ends, sticks or is
// reset (engine/shard_lifecycle.cpp, shard_reset.cpp), and remove it when its retention expires; the
// facade fills it at open from the run store and the shards' recovery.
//
// Each run is in exactly one status's time-ordered set (started time, then
// id) and in the id-ordered map; counts by status and by workflow are kept
// beside them. A page is a walk of at most a few sets from a cursor, so its
// cost is its size plus what the filters skip, bounded by kExamineMax:
// filters that match rarely (an id prefix, a time range, a workflow prefix
// over many runs of others) give a shorter page with a cursor to go on.
//
// Memory: about 200 bytes a run (a million runs: ~200 MB). Thread-safe: a
// shared mutex, writers hold it for one run.
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "fusee/engine.hpp"

namespace fusee::engine {

struct IndexQuery {
  std::optional<RunStatus> status;
  std::string workflow_prefix;  // case-insensitive; empty: any
  std::string id_prefix;        // empty: any
  std::optional<std::int64_t> started_from_ms;  // at or after
  std::optional<std::int64_t> started_to_ms;    // before
  enum class Order { newest, oldest, id } order = Order::newest;
  std::size_t limit = 100;
  // From a page's next_cursor (onward) or previous_cursor (back); empty:
  // the first page.
  std::string cursor;
};

struct IndexPage {
  std::vector<RunInfo> runs;
  std::string next_cursor;      // empty: no more
  std::string previous_cursor;  // empty: this is the first page
  std::uint64_t total = 0;      // runs that match the query
  bool total_exact = true;      // false: at least `total` (a filter counted by walking, cut short)
};

class RunIndex {
 public:
  // A page walks past at most this many runs that the filters skip.
  static constexpr std::size_t kExamineMax = 200'000;
  // Counting a filter that no counter answers walks at most this many.
  static constexpr std::size_t kCountMax = 100'000;

  // Adds or replaces the run's summary (by id).
  void put(const RunInfo& info);
  // Adds it unless the id is there (a run the run store holds finished,
  // whose newer generation a shard loaded).
  void put_if_absent(const RunInfo& info);
  // Forgets the finished runs that finished before `before_ms` (retention).
  void expire_finished(std::int64_t before_ms);
  void remove(const std::string& id);
  // Forgets every run whose id `drop` names (a shard taken over again).
  void remove_if(const std::function<bool(const std::string& id)>& drop);
  std::optional<RunInfo> get(const std::string& id) const;

  // Throws Error(invalid_argument) for a cursor it did not give. The runs
  // have no waiting_on (it changes at every command; the facade asks the
  // shards for a page's).
  IndexPage query(const IndexQuery& query) const;

  // Filling from the run store after Engine::open returned (the finished
  // runs of a long history take seconds to read): until end_fill(), pages
  // and counts wait for it, so that none is answered without them; get()
  // and every writer go on.
  void begin_fill();
  void end_fill();
  // Readers waiting for the fill now (tests).
  std::size_t waiting_for_fill() const;

  std::array<std::uint64_t, kRunStatuses.size()> counts_by_status() const;
  std::map<std::string, std::array<std::uint64_t, kRunStatuses.size()>> counts_by_workflow() const;
  std::size_t size() const;

 private:
  struct Entry {
    std::string workflow;
    RunStatus status = RunStatus::running;
    std::uint32_t generation = 1;
    std::uint32_t version = 0;
    std::int64_t started_ms = 0;
    std::optional<std::int64_t> finished_ms;
    std::string error;
    std::optional<std::uint32_t> stuck_position;
  };
  using TimeKey = std::pair<std::int64_t, std::string>;  // started ms, id

  void put_locked(const RunInfo& info);
  RunInfo info_of(const std::string& id, const Entry& entry) const;
  bool matches(const IndexQuery& query, const std::string& id, const Entry& entry) const;
  IndexPage walk_by_time(const IndexQuery& query, bool back, const std::optional<TimeKey>& from) const;
  IndexPage walk_by_id(const IndexQuery& query, bool back, const std::optional<std::string>& from) const;
  void count(const IndexQuery& query, IndexPage& page) const;
  void forget(const std::string& id, const Entry& entry);
  void wait_filled() const;

  mutable std::mutex fill_mu_;
  mutable std::condition_variable filled_;
  bool filling_ = false;
  mutable std::size_t fill_waiters_ = 0;
  mutable std::shared_mutex mu_;
  std::map<std::string, Entry> by_id_;
  std::array<std::set<TimeKey>, kRunStatuses.size()> by_time_;  // one per status
  std::map<std::string, std::array<std::uint64_t, kRunStatuses.size()>> by_workflow_;
  std::set<TimeKey> by_finished_;  // finished ms, id: what retention expires
};

}  // namespace fusee::engine
