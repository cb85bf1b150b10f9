#include "engine/run_index.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <mutex>

#include "fusee/error.hpp"

namespace fusee::engine {
namespace {

std::size_t slot(RunStatus status) { return static_cast<std::size_t>(status); }

std::int64_t ms_of(TimePoint time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}

TimePoint time_of(std::int64_t ms) {
  return TimePoint(std::chrono::duration_cast<TimePoint::duration>(std::chrono::milliseconds(ms)));
}

bool starts_with_folded(const std::string& text, const std::string& prefix) {
  if (prefix.size() > text.size()) return false;
  for (std::size_t k = 0; k < prefix.size(); ++k) {
    if (std::tolower(static_cast<unsigned char>(text[k])) != std::tolower(static_cast<unsigned char>(prefix[k]))) {
      return false;
    }
  }
  return true;
}

// A cursor: where a page walks on from, and which way. "a" (after: the
// next page) or "b" (before: the previous one), then "t<ms>:<id>" in a
// time order or "i<id>" in id order.
struct Cursor {
  bool back = false;
  bool by_time = true;
  std::int64_t ms = 0;
  std::string id;
};

std::string cursor_text(bool back, const std::pair<std::int64_t, std::string>& key) {
  return fmt::format("{}t{}:{}", back ? 'b' : 'a', key.first, key.second);
}
std::string cursor_text(bool back, const std::string& id) { return fmt::format("{}i{}", back ? 'b' : 'a', id); }

Cursor parse_cursor(const std::string& text, bool by_time) {
  auto refuse = [&] {
    throw Error(errc::invalid_argument, fmt::format("'{}' is not a cursor this listing gave (its order may differ)", text));
  };
  if (text.size() < 2 || (text[0] != 'a' && text[0] != 'b')) refuse();
  Cursor cursor;
  cursor.back = text[0] == 'b';
  cursor.by_time = text[1] == 't';
  if ((text[1] != 't' && text[1] != 'i') || cursor.by_time != by_time) refuse();
  if (!cursor.by_time) {
    cursor.id = text.substr(2);
    return cursor;
  }
  auto colon = text.find(':', 2);
  if (colon == std::string::npos) refuse();
  auto [end, error] = std::from_chars(text.data() + 2, text.data() + colon, cursor.ms);
  if (error != std::errc() || end != text.data() + colon) refuse();
  cursor.id = text.substr(colon + 1);
  return cursor;
}

}  // namespace

void RunIndex::put(const RunInfo& info) {
  std::unique_lock lock(mu_);
  put_locked(info);
}

void RunIndex::put_locked(const RunInfo& info) {
  if (auto found = by_id_.find(info.id); found != by_id_.end()) forget(info.id, found->second);
  Entry entry;
  entry.workflow = info.workflow;
  entry.status = info.status;
  entry.generation = info.generation;
  entry.version = info.version;
  entry.started_ms = ms_of(info.started_at);
  if (info.finished_at) entry.finished_ms = ms_of(*info.finished_at);
  entry.error = info.error;
  entry.stuck_position = info.stuck_position;
  by_time_[slot(entry.status)].emplace(entry.started_ms, info.id);
  if (entry.finished_ms) by_finished_.emplace(*entry.finished_ms, info.id);
  ++by_workflow_[entry.workflow][slot(entry.status)];
  by_id_.insert_or_assign(info.id, std::move(entry));
}

void RunIndex::put_if_absent(const RunInfo& info) {
  std::unique_lock lock(mu_);
  if (!by_id_.contains(info.id)) put_locked(info);
}

void RunIndex::expire_finished(std::int64_t before_ms) {
  std::unique_lock lock(mu_);
  while (!by_finished_.empty() && by_finished_.begin()->first < before_ms) {
    auto id = by_finished_.begin()->second;
    auto found = by_id_.find(id);
    if (found != by_id_.end()) {
      forget(id, found->second);
      by_id_.erase(found);
    } else {
      by_finished_.erase(by_finished_.begin());
    }
  }
}

void RunIndex::remove_if(const std::function<bool(const std::string& id)>& drop) {
  std::unique_lock lock(mu_);
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    if (!drop(it->first)) {
      ++it;
      continue;
    }
    forget(it->first, it->second);
    it = by_id_.erase(it);
  }
}

void RunIndex::remove(const std::string& id) {
  std::unique_lock lock(mu_);
  auto found = by_id_.find(id);
  if (found == by_id_.end()) return;
  forget(id, found->second);
  by_id_.erase(found);
}

void RunIndex::forget(const std::string& id, const Entry& entry) {
  by_time_[slot(entry.status)].erase({entry.started_ms, id});
  if (entry.finished_ms) by_finished_.erase({*entry.finished_ms, id});
  auto counts = by_workflow_.find(entry.workflow);
  if (counts == by_workflow_.end()) return;
  --counts->second[slot(entry.status)];
  if (std::all_of(counts->second.begin(), counts->second.end(), [](std::uint64_t n) { return n == 0; })) {
    by_workflow_.erase(counts);
  }
}

std::optional<RunInfo> RunIndex::get(const std::string& id) const {
  std::shared_lock lock(mu_);
  auto found = by_id_.find(id);
  if (found == by_id_.end()) return std::nullopt;
  return info_of(found->first, found->second);
}

RunInfo RunIndex::info_of(const std::string& id, const Entry& entry) const {
  RunInfo info;
  info.id = id;
  info.workflow = entry.workflow;
  info.status = entry.status;
  info.generation = entry.generation;
  info.version = entry.version;
  info.started_at = time_of(entry.started_ms);
  if (entry.finished_ms) info.finished_at = time_of(*entry.finished_ms);
  info.error = entry.error;
  info.stuck_position = entry.stuck_position;
  return info;
}

bool RunIndex::matches(const IndexQuery& query, const std::string& id, const Entry& entry) const {
  if (query.status && entry.status != *query.status) return false;
  if (!query.workflow_prefix.empty() && !starts_with_folded(entry.workflow, query.workflow_prefix)) return false;
  if (!query.id_prefix.empty() && !id.starts_with(query.id_prefix)) return false;
  if (query.started_from_ms && entry.started_ms < *query.started_from_ms) return false;
  if (query.started_to_ms && entry.started_ms >= *query.started_to_ms) return false;
  return true;
}

void RunIndex::begin_fill() {
  std::lock_guard lock(fill_mu_);
  filling_ = true;
}

void RunIndex::end_fill() {
  {
    std::lock_guard lock(fill_mu_);
    filling_ = false;
  }
  filled_.notify_all();
}

void RunIndex::wait_filled() const {
  std::unique_lock lock(fill_mu_);
  if (!filling_) return;
  ++fill_waiters_;
  filled_.wait(lock, [&] { return !filling_; });
  --fill_waiters_;
}

std::size_t RunIndex::waiting_for_fill() const {
  std::lock_guard lock(fill_mu_);
  return fill_waiters_;
}

IndexPage RunIndex::query(const IndexQuery& query) const {
  wait_filled();
  const bool by_time = query.order != IndexQuery::Order::id;
  std::optional<Cursor> cursor;
  if (!query.cursor.empty()) cursor = parse_cursor(query.cursor, by_time);
  std::shared_lock lock(mu_);
  IndexPage page;
  bool back = cursor && cursor->back;
  if (by_time) {
    page = walk_by_time(query, back, cursor ? std::optional<TimeKey>(TimeKey{cursor->ms, cursor->id}) : std::nullopt);
  } else {
    page = walk_by_id(query, back, cursor ? std::optional<std::string>(cursor->id) : std::nullopt);
  }
  count(query, page);
  return page;
}

// Newest first walks each status's set downward and takes the greatest
// head each time (a merge of at most five sets); oldest first, upward. A
// walk back (the previous page) goes the other way from the cursor, and its
// runs are then shown in the query's order.
IndexPage RunIndex::walk_by_time(const IndexQuery& query, bool back, const std::optional<TimeKey>& from) const {
  const bool down = (query.order == IndexQuery::Order::newest) != back;
  // Each set's walk, as [next, end) in walking order.
  struct Walk {
    std::set<TimeKey>::const_iterator up;                  // walking up: the next key
    std::set<TimeKey>::const_iterator up_end;
    std::set<TimeKey>::const_reverse_iterator down;        // walking down: the next key
    std::set<TimeKey>::const_reverse_iterator down_end;
  };
  std::vector<Walk> walks;
  for (auto status : kRunStatuses) {
    if (query.status && status != *query.status) continue;
    const auto& set = by_time_[slot(status)];
    Walk walk;
    if (down) {
      // Below the cursor, and below the range's end.
      TimeKey top = from ? *from : TimeKey{INT64_MAX, {}};
      if (query.started_to_ms && TimeKey{*query.started_to_ms, {}} < top) top = TimeKey{*query.started_to_ms, {}};
      walk.down = std::set<TimeKey>::const_reverse_iterator(set.lower_bound(top));
      walk.down_end = set.rend();
    } else {
      // Past the cursor, and from the range's start: the later of the two.
      auto bottom = query.started_from_ms ? set.lower_bound(TimeKey{*query.started_from_ms, {}}) : set.begin();
      if (from) {
        auto after = set.upper_bound(*from);
        if (bottom != set.end() && (after == set.end() || *bottom < *after)) bottom = after;
      }
      walk.up = bottom;
      walk.up_end = set.end();
    }
    walks.push_back(walk);
  }
  auto head = [&](const Walk& walk) -> const TimeKey* {
    if (down) return walk.down == walk.down_end ? nullptr : &*walk.down;
    return walk.up == walk.up_end ? nullptr : &*walk.up;
  };
  auto in_range = [&](const TimeKey& key) {
    if (down) return !query.started_from_ms || key.first >= *query.started_from_ms;
    return !query.started_to_ms || key.first < *query.started_to_ms;
  };
  IndexPage page;
  std::vector<TimeKey> keys;
  std::optional<TimeKey> last_examined;
  bool more = false;
  for (std::size_t examined = 0;; ++examined) {
    Walk* best = nullptr;
    for (auto& walk : walks) {
      const auto* key = head(walk);
      if (key == nullptr || !in_range(*key)) continue;
      if (best == nullptr || (down ? *head(*best) < *key : *key < *head(*best))) best = &walk;
    }
    if (best == nullptr) break;
    if (examined >= kExamineMax) {
      more = true;
      break;
    }
    TimeKey key = *head(*best);
    if (down) {
      ++best->down;
    } else {
      ++best->up;
    }
    const auto& entry = by_id_.at(key.second);
    if (!matches(query, key.second, entry)) {
      if (page.runs.size() < query.limit) last_examined = key;
      continue;
    }
    // Full: this match says there is more (no cursor to an empty page).
    if (page.runs.size() >= query.limit) {
      more = true;
      break;
    }
    last_examined = key;
    keys.push_back(key);
    page.runs.push_back(info_of(key.second, entry));
  }
  // A page cut short by kExamineMax goes on from the last run it looked at.
  auto onward = more && last_examined ? std::optional<TimeKey>(last_examined) : std::nullopt;
  if (!back) {
    if (onward) page.next_cursor = cursor_text(false, *onward);
    if (from && !keys.empty()) page.previous_cursor = cursor_text(true, keys.front());
    if (from && keys.empty()) page.previous_cursor = cursor_text(true, *from);
  } else {
    std::reverse(page.runs.begin(), page.runs.end());
    std::reverse(keys.begin(), keys.end());
    if (onward) page.previous_cursor = cursor_text(true, keys.empty() ? *onward : keys.front());
    if (!keys.empty()) page.next_cursor = cursor_text(false, keys.back());
    else if (from) page.next_cursor = cursor_text(false, *from);
  }
  return page;
}

IndexPage RunIndex::walk_by_id(const IndexQuery& query, bool back, const std::optional<std::string>& from) const {
  IndexPage page;
  std::vector<std::string> ids;
  std::optional<std::string> last_examined;
  bool more = false;
  auto within = [&](const std::string& id) { return query.id_prefix.empty() || id.starts_with(query.id_prefix); };
  auto visit = [&](auto it, auto end, std::size_t& examined) {
    for (; it != end; ++it, ++examined) {
      if (!within(it->first)) break;
      if (examined >= kExamineMax) {
        more = true;
        break;
      }
      if (!matches(query, it->first, it->second)) {
        if (page.runs.size() < query.limit) last_examined = it->first;
        continue;
      }
      // Full: this match says there is more (no cursor to an empty page).
      if (page.runs.size() >= query.limit) {
        more = true;
        break;
      }
      last_examined = it->first;
      ids.push_back(it->first);
      page.runs.push_back(info_of(it->first, it->second));
    }
  };
  std::size_t examined = 0;
  if (!back) {
    auto start = from ? by_id_.upper_bound(*from) : by_id_.lower_bound(query.id_prefix);
    if (from && !query.id_prefix.empty() && *from < query.id_prefix) start = by_id_.lower_bound(query.id_prefix);
    visit(start, by_id_.end(), examined);
    if (more && last_examined) page.next_cursor = cursor_text(false, *last_examined);
    if (from) page.previous_cursor = cursor_text(true, ids.empty() ? *from : ids.front());
  } else {
    auto start = std::make_reverse_iterator(by_id_.lower_bound(*from));
    visit(start, by_id_.rend(), examined);
    std::reverse(page.runs.begin(), page.runs.end());
    std::reverse(ids.begin(), ids.end());
    if (more && last_examined) page.previous_cursor = cursor_text(true, ids.empty() ? *last_examined : ids.front());
    page.next_cursor = cursor_text(false, ids.empty() ? *from : ids.back());
  }
  return page;
}

// From the counters when the filters are a status and a workflow prefix;
// by walking otherwise (an id prefix, a time range), cut at kCountMax.
void RunIndex::count(const IndexQuery& query, IndexPage& page) const {
  const bool counted = query.id_prefix.empty() && !query.started_from_ms && !query.started_to_ms;
  page.total = 0;
  page.total_exact = true;
  if (counted) {
    for (const auto& [workflow, counts] : by_workflow_) {
      if (!query.workflow_prefix.empty() && !starts_with_folded(workflow, query.workflow_prefix)) continue;
      if (query.status) {
        page.total += counts[slot(*query.status)];
      } else {
        for (auto n : counts) page.total += n;
      }
    }
    return;
  }
  std::size_t walked = 0;
  if (!query.id_prefix.empty()) {
    for (auto it = by_id_.lower_bound(query.id_prefix); it != by_id_.end() && it->first.starts_with(query.id_prefix);
         ++it) {
      if (++walked > kCountMax) {
        page.total_exact = false;
        return;
      }
      if (matches(query, it->first, it->second)) ++page.total;
    }
    return;
  }
  for (auto status : kRunStatuses) {
    if (query.status && status != *query.status) continue;
    const auto& set = by_time_[slot(status)];
    auto it = query.started_from_ms ? set.lower_bound(TimeKey{*query.started_from_ms, {}}) : set.begin();
    for (; it != set.end() && (!query.started_to_ms || it->first < *query.started_to_ms); ++it) {
      if (++walked > kCountMax) {
        page.total_exact = false;
        return;
      }
      if (matches(query, it->second, by_id_.at(it->second))) ++page.total;
    }
  }
}

std::array<std::uint64_t, kRunStatuses.size()> RunIndex::counts_by_status() const {
  wait_filled();
  std::shared_lock lock(mu_);
  std::array<std::uint64_t, kRunStatuses.size()> out{};
  for (std::size_t k = 0; k < out.size(); ++k) out[k] = by_time_[k].size();
  return out;
}

std::map<std::string, std::array<std::uint64_t, kRunStatuses.size()>> RunIndex::counts_by_workflow() const {
  wait_filled();
  std::shared_lock lock(mu_);
  return by_workflow_;
}

std::size_t RunIndex::size() const {
  wait_filled();
  std::shared_lock lock(mu_);
  return by_id_.size();
}

}  // namespace fusee::engine
