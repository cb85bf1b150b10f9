#include "queue/queue_workflow.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "fusee/error.hpp"

namespace fusee::queue {
namespace {

using std::chrono::milliseconds;
using Json = boost::json::value;
using Target = WorkflowRef<Json, Json>;

std::int64_t ms_of(TimePoint time) {
  return std::chrono::duration_cast<milliseconds>(time.time_since_epoch()).count();
}

class QueueLoop {
 public:
  QueueLoop(Ctx& ctx, QueueState state) : ctx_(ctx), state_(std::move(state)) {}

  Task<Json> run() {
    ctx_.on_query("describe", [this] { return info_json(state_); });
    ctx_.on_update(kQueueChange, [this](const Json& change) { return check_change(change, state_, bytes_); });
    bytes_ = boost::json::serialize(state_json(state_)).size();
    auto change = ctx_.next_update(kQueueChange).start();
    // The runs it started in an earlier generation: starting is
    // idempotent, so this attaches to each (ended or not).
    for (const auto& entry : state_.running) attach(entry);
    std::optional<Future<std::size_t>> ended;  // Ctx::any over the runs it started
    std::vector<std::string> ended_ids;        // ... their ids, in that any's order
    bool children_changed = true;
    std::optional<Future<void>> timer;
    double timer_ms = -1;
    for (int turn = 1;; ++turn) {
      auto now = co_await ctx_.now();
      auto wake_ms = admit(ms_of(now), children_changed);
      if (children_changed) {
        ended.reset();
        ended_ids.clear();
        if (!children_.empty()) {
          std::vector<Future<Json>> futures;
          for (const auto& entry : state_.running) {
            futures.push_back(children_.at(entry.id));
            ended_ids.push_back(entry.id);
          }
          ended = ctx_.any(futures).start();
        }
        children_changed = false;
      }
      if (!wake_ms) {
        timer.reset();
      } else if (!timer || *wake_ms != timer_ms) {
        auto at = milliseconds(static_cast<std::int64_t>(std::ceil(*wake_ms)));
        timer = ctx_.sleep_until("next start", TimePoint(std::chrono::duration_cast<TimePoint::duration>(at))).start();
      }
      timer_ms = wake_ms.value_or(-1);
      enum class Event { changed, ended, time } event;
      if (ended && timer) {
        auto index = co_await ctx_.any(change, *ended, *timer);
        event = index == 0 ? Event::changed : index == 1 ? Event::ended : Event::time;
      } else if (ended) {
        event = co_await ctx_.any(change, *ended) == 0 ? Event::changed : Event::ended;
      } else if (timer) {
        event = co_await ctx_.any(change, *timer) == 0 ? Event::changed : Event::time;
      } else {
        event = Event::changed;
      }
      switch (event) {
        case Event::ended: {
          auto id = ended_ids.at(co_await *ended);
          try {
            (void)co_await children_.at(id);
          } catch (const Error&) {
            // It failed or was cancelled: its own run says so.
          }
          children_.erase(id);
          std::erase_if(state_.running, [&](const Entry& entry) {
            if (entry.id != id) return false;
            bytes_ -= std::min(bytes_, entry_bytes(entry));
            return true;
          });
          children_changed = true;
          // At once after the wait: no update was taken that this
          // generation would leave unanswered.
          if (turn >= kTurnsPerGeneration) ctx_.continue_as_new_json(state_json(state_));
          break;
        }
        case Event::time:
          timer.reset();
          if (turn >= kTurnsPerGeneration) ctx_.continue_as_new_json(state_json(state_));
          break;
        case Event::changed: {
          auto request = co_await change;
          auto answer = apply(request.arg, ms_of(now));
          co_await ctx_.reply(request, answer);
          // No next_update waits now: updates that come meanwhile wait in
          // the mailbox, and continue-as-new carries them.
          if (turn >= kTurnsPerGeneration) ctx_.continue_as_new_json(state_json(state_));
          change = ctx_.next_update(kQueueChange).start();
          break;
        }
      }
    }
  }

 private:
  void attach(const Entry& entry) {
    auto child = ctx_.child(Target(entry.workflow), entry.id, entry.input);
    children_.insert_or_assign(entry.id, std::move(child).on_parent_close(ParentClose::abandon).start());
  }

  // Starts what the limits allow now; when the rate holds the next one
  // back, when it may start.
  std::optional<double> admit(std::int64_t now_ms, bool& children_changed) {
    const auto& options = state_.options;
    const bool paced = options.per_second > 0;
    const double interval_ms = paced ? 1000.0 / options.per_second : 0;
    std::map<std::string, std::uint32_t> by_partition;
    for (const auto& entry : state_.running) by_partition[entry.partition]++;
    std::vector<std::string> start_ids;
    std::optional<double> wake_ms;
    for (const auto* entry : start_order(state_)) {
      if (options.concurrency > 0 && state_.running.size() + start_ids.size() >= options.concurrency) break;
      if (options.partition_concurrency > 0 && by_partition[entry->partition] >= options.partition_concurrency) {
        continue;  // its partition is full: the next one may start
      }
      if (paced && state_.next_start_ms > static_cast<double>(now_ms)) {
        wake_ms = state_.next_start_ms;
        break;
      }
      if (paced) {
        state_.next_start_ms = std::max(state_.next_start_ms, static_cast<double>(now_ms) - interval_ms) + interval_ms;
      }
      by_partition[entry->partition]++;
      start_ids.push_back(entry->id);
    }
    for (const auto& id : start_ids) {
      auto found = std::find_if(state_.waiting.begin(), state_.waiting.end(),
                                [&](const Entry& entry) { return entry.id == id; });
      Entry entry = std::move(*found);
      state_.waiting.erase(found);
      entry.started_ms = now_ms;
      attach(entry);
      state_.running.push_back(std::move(entry));
      ++state_.started;
      children_changed = true;
    }
    return wake_ms;
  }

  Json apply(const Json& change, std::int64_t now_ms) {
    const auto& object = change.as_object();
    std::string action(object.at("action").as_string());
    if (action == "configure") {
      state_.options = options_from_json(object.at("options"));
      return info_json(state_);
    }
    auto entry = entry_from_json(change);
    auto known = [&](const std::vector<Entry>& list) {
      return std::any_of(list.begin(), list.end(), [&](const Entry& other) { return other.id == entry.id; });
    };
    if (known(state_.waiting) || known(state_.running)) {
      return boost::json::object{{"id", entry.id}, {"outcome", "already_queued"}};
    }
    entry.enqueued_ms = now_ms;
    entry.started_ms = 0;
    entry.seq = ++state_.seq;
    bytes_ += entry_bytes(entry);
    state_.waiting.push_back(std::move(entry));
    return boost::json::object{{"id", state_.waiting.back().id}, {"outcome", "queued"}};
  }

  static std::size_t entry_bytes(const Entry& entry) { return boost::json::serialize(entry_json(entry)).size(); }

  Ctx& ctx_;
  QueueState state_;
  std::size_t bytes_ = 0;  // state_'s JSON, roughly (kQueueBytesMax)
  std::map<std::string, Future<Json>> children_;  // the runs it started, by id
};

}  // namespace

std::string check_change(const Json& change, const QueueState& state, std::size_t state_bytes) {
  try {
    if (!change.is_object() || !change.as_object().contains("action") || !change.at("action").is_string()) {
      return "a change is a JSON object with an \"action\": enqueue or configure";
    }
    const auto& object = change.as_object();
    std::string action(object.at("action").as_string());
    if (action == "configure") {
      if (!object.contains("options")) return "configure needs \"options\"";
      (void)options_from_json(object.at("options"));
      return {};
    }
    if (action != "enqueue") return fmt::format("no action \"{}\" (enqueue, configure)", action);
    for (const auto& [key, value] : object) {
      if (key != "action" && key != "id" && key != "workflow" && key != "input" && key != "priority" &&
          key != "partition" && key != "dedup_id") {
        return fmt::format("enqueue takes no \"{}\"", std::string_view(key));
      }
    }
    auto entry = entry_from_json(change);
    if (state_bytes + boost::json::serialize(change).size() > kQueueBytesMax) {
      return fmt::format("queue '{}' holds {} KiB of runs, at most {} KiB: enqueue again once some have run",
                         state.name, state_bytes >> 10, kQueueBytesMax >> 10);
    }
    if (!entry.dedup_id.empty()) {
      for (const auto* list : {&state.waiting, &state.running}) {
        for (const auto& other : *list) {
          if (other.dedup_id == entry.dedup_id && other.id != entry.id) {
            return fmt::format("dedup id '{}' is taken by run '{}', {} in queue '{}'", entry.dedup_id, other.id,
                               list == &state.waiting ? "waiting" : "running", state.name);
          }
        }
      }
    }
    return {};
  } catch (const Error& error) {
    return error.what();
  }
}

Task<Json> run_queue(Ctx& ctx, Json state) {
  QueueLoop loop(ctx, state_from_json(state));
  co_return co_await loop.run();
}

}  // namespace fusee::queue
