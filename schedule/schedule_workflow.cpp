#include "schedule/schedule_workflow.hpp"

#include <fmt/format.h>

#include <optional>

#include "fusee/error.hpp"
#include "schedule/due_plan.hpp"
#include "schedule/schedule_state.hpp"
#include "fusee/limits.hpp"

namespace fusee::schedule {
namespace {

using std::chrono::milliseconds;
using Json = boost::json::value;
using Target = WorkflowRef<Json, Json>;

std::int64_t ms_of(TimePoint time) {
  return std::chrono::duration_cast<milliseconds>(time.time_since_epoch()).count();
}
TimePoint time_of(std::int64_t ms) { return TimePoint(std::chrono::duration_cast<TimePoint::duration>(milliseconds(ms))); }

// How many due times a plan counts as passed, at most (a long downtime of a
// per-second schedule would otherwise count for long).
constexpr std::size_t kMissedCountMax = 100000;
// Due times one backfill takes, at most.
constexpr std::size_t kBackfillMax = 1000;

// What the "plan" step journals: the due times to fire, how many passed,
// the next due time to wake for, and where the next plan starts from
// (`last_ms`). A due time fires only once its jitter has passed: the
// schedule may wake earlier for something else (an update, a run's end),
// and its run would start early. It and the due times after it wait; the
// next plan starts just before it.
Json plan_json(const ScheduleState& state, TimePoint now) {
  ScheduleTimes times(times_spec(state.spec));
  auto plan = plan_due(times, time_of(state.last_ms), now, state.options.catch_up);
  boost::json::array fire;
  std::optional<TimePoint> waiting;  // the first due time whose jitter has not passed
  for (auto due : plan.fire) {
    if (due + jitter_of(state.id, due, state.spec.jitter) > now) {
      waiting = due;
      break;
    }
    fire.push_back(ms_of(due));
  }
  std::size_t missed = 0;
  if (plan.missed_from && plan.missed_to) {
    missed = times.between(*plan.missed_from - milliseconds(1), *plan.missed_to, kMissedCountMax).size();
  }
  auto next = waiting ? waiting : times.next_after(now);
  return {{"fire", std::move(fire)},
          {"missed", missed},
          {"next_ms", next ? Json(ms_of(*next)) : Json(nullptr)},
          {"last_ms", waiting ? ms_of(*waiting) - 1 : ms_of(now)}};
}

class ScheduleLoop {
 public:
  ScheduleLoop(Ctx& ctx, ScheduleState state) : ctx_(ctx), state_(std::move(state)) {}

  Task<Json> run() {
    ctx_.on_query("describe", [this] { return describe(); });
    ctx_.on_update(kScheduleChange, [](const Json& change) { return check_change(change); });
    auto change = ctx_.next_update(kScheduleChange).start();
    if (state_.running) {
      // The run it started last, from an earlier generation: starting is
      // idempotent, so this attaches to it (ended or not).
      auto attach = ctx_.child(Target(state_.workflow), *state_.running, state_.input);
      running_ = std::move(attach).on_parent_close(ParentClose::abandon).start();
    }
    std::optional<Future<void>> timer;
    std::int64_t timer_ms = -1;
    for (int turn = 1;; ++turn) {
      auto now = co_await ctx_.now();
      if (state_.last_ms == 0) state_.last_ms = ms_of(now);
      if (!state_.options.paused) {
        auto plan_now = [this, now] { return plan_json(state_, now); };
        Json plan = co_await ctx_.step("plan", plan_now);
        state_.skipped += plan.at("missed").to_number<std::uint64_t>();
        // (A plan journaled before plans said where the next starts: now.)
        const auto* last = plan.as_object().if_contains("last_ms");
        state_.last_ms = last ? last->to_number<std::int64_t>() : ms_of(now);
        // The next due time is known before the due ones fire, and the last
        // one stays until then: a describe while this turn plans or fires
        // (the runs it starts may already run) never finds none. It once
        // did, reset at the top of the turn (schedules_test flaked).
        const auto& next = plan.at("next_ms");
        next_due_ = next.is_null() ? std::nullopt : std::optional<TimePoint>(time_of(next.to_number<std::int64_t>()));
        planned_ = true;
        for (const auto& due : plan.at("fire").as_array()) co_await fire(due.to_number<std::int64_t>(), state_.options.overlap, nullptr);
      } else {
        next_due_.reset();  // paused: no timer (and describe says none)
      }
      // The timer for the next due time (plus its jitter); a new one when
      // that changed (an old one left pending fires unheeded).
      std::int64_t wake_ms = next_due_ ? ms_of(*next_due_) + jitter_of(state_.id, *next_due_, state_.spec.jitter).count() : -1;
      if (wake_ms < 0) {
        timer.reset();
      } else if (!timer || wake_ms != timer_ms) {
        // At a time, not after a while: the plan step may have taken long
        // (it waits for the journal), and a replay may come much later.
        timer = ctx_.sleep_until(fmt::format("next due {}", run_id_of("", *next_due_).substr(1)),
                                 TimePoint(std::chrono::duration_cast<TimePoint::duration>(milliseconds(wake_ms))))
                    .start();
      }
      timer_ms = wake_ms;
      enum class Event { due, changed, ended } event;
      if (timer && running_) {
        auto index = co_await ctx_.any(*timer, change, *running_);
        event = index == 0 ? Event::due : index == 1 ? Event::changed : Event::ended;
      } else if (timer) {
        event = co_await ctx_.any(*timer, change) == 0 ? Event::due : Event::changed;
      } else if (running_) {
        event = co_await ctx_.any(change, *running_) == 0 ? Event::changed : Event::ended;
      } else {
        event = Event::changed;
      }
      switch (event) {
        case Event::due:
          timer.reset();
          // Here, at once after the wait, no update was taken that this
          // generation would leave unanswered: the next one plans anew.
          if (turn >= kTurnsPerGeneration) ctx_.continue_as_new_json(state_json(state_));
          break;
        case Event::ended:
          co_await ended();
          break;
        case Event::changed: {
          auto request = co_await change;
          boost::json::array runs;
          bool deleted = co_await apply(request.arg, runs);
          auto answer = describe();
          answer.as_object()["runs"] = std::move(runs);
          co_await ctx_.reply(request, answer);
          if (deleted) co_return answer;
          // No next_update waits now: updates that come meanwhile wait in
          // the mailbox, and continue-as-new carries them.
          if (turn >= kTurnsPerGeneration) ctx_.continue_as_new_json(state_json(state_));
          change = ctx_.next_update(kScheduleChange).start();
          break;
        }
      }
    }
  }

 private:
  Json describe() const {
    auto next = next_due_;
    // Before the first plan -- a describe right after the schedule is made
    // (POST /v1/schedules answers with one), or after a restart -- the next
    // due time follows from the state alone. It once said none there
    // (http_api.sh flaked).
    if (!planned_ && !next) next = ScheduleTimes(times_spec(state_.spec)).next_after(time_of(state_.last_ms));
    return info_json(state_, state_.options.paused ? std::nullopt : next);
  }

  void start(std::int64_t due_ms, boost::json::array* runs) {
    auto id = run_id_of(state_.id, time_of(due_ms));
    auto child = ctx_.child(Target(state_.workflow), id, state_.input);
    running_ = std::move(child).on_parent_close(ParentClose::abandon).start();
    state_.running = id;
    ++state_.started;
    state_.recent.push_back(id);
    if (state_.recent.size() > kRecentRuns) state_.recent.erase(state_.recent.begin());
    if (runs != nullptr) runs->push_back(boost::json::string(id));
  }

  // A due time, by the overlap policy when a run it started is running.
  Task<void> fire(std::int64_t due_ms, Overlap overlap, boost::json::array* runs) {
    if (!state_.running) {
      start(due_ms, runs);
      co_return;
    }
    auto id = run_id_of(state_.id, time_of(due_ms));
    if (id == *state_.running) co_return;  // that due time's run, already started
    auto why = fmt::format("schedule '{}': due time {} overlapped it ({})", state_.id, id, overlap_name(overlap));
    switch (overlap) {
      case Overlap::skip:
        ++state_.skipped;
        break;
      case Overlap::buffer_one:
        if (state_.buffered_ms.empty()) {
          state_.buffered_ms.push_back(due_ms);
          if (runs != nullptr) runs->push_back(boost::json::string(id));
        } else {
          ++state_.skipped;
        }
        break;
      case Overlap::buffer_all:
        state_.buffered_ms.push_back(due_ms);
        if (runs != nullptr) runs->push_back(boost::json::string(id));
        break;
      case Overlap::cancel_other:
        co_await ctx_.cancel_run(*state_.running, why);
        // It starts once the cancelled one has ended; an earlier one
        // waiting for that passes.
        state_.skipped += state_.buffered_ms.size();
        state_.buffered_ms.assign(1, due_ms);
        if (runs != nullptr) runs->push_back(boost::json::string(id));
        break;
      case Overlap::terminate_other:
        co_await ctx_.terminate_run(*state_.running, why);
        start(due_ms, runs);
        break;
      case Overlap::allow_all:
        start(due_ms, runs);
        break;
    }
  }

  // The run it started last has ended: the next buffered one starts.
  Task<void> ended() {
    try {
      (void)co_await *running_;
    } catch (const Error&) {
      // It failed or was cancelled: its own run says so; the schedule goes on.
    }
    running_.reset();
    state_.running.reset();
    if (!state_.buffered_ms.empty()) {
      auto due_ms = state_.buffered_ms.front();
      state_.buffered_ms.erase(state_.buffered_ms.begin());
      start(due_ms, nullptr);
    }
  }

  // Applies a change; true when it deletes the schedule.
  Task<bool> apply(const Json& change, boost::json::array& runs) {
    const auto& object = change.as_object();
    std::string action(object.at("action").as_string());
    if (action == "delete") co_return true;
    if (action == "pause") {
      state_.options.paused = true;
      if (const auto* note = object.if_contains("note")) state_.options.note = std::string(note->as_string());
    } else if (action == "resume") {
      // The due times while paused pass: the schedule goes on from now.
      state_.options.paused = false;
      state_.options.note.clear();
      auto now = co_await ctx_.now();
      state_.last_ms = ms_of(now);
      next_due_ = ScheduleTimes(times_spec(state_.spec)).next_after(now);  // for the answer; the loop plans anew
    } else if (action == "trigger") {
      co_await fire(ms_of(co_await ctx_.now()), state_.options.overlap, &runs);
    } else if (action == "backfill") {
      auto overlap = state_.options.overlap;
      if (const auto* given = object.if_contains("overlap")) overlap = overlap_from_name(std::string(given->as_string()));
      auto from_ms = object.at("from_ms").to_number<std::int64_t>();
      auto to_ms = object.at("to_ms").to_number<std::int64_t>();
      auto list = [this, from_ms, to_ms] {
        boost::json::array due;
        ScheduleTimes times(times_spec(state_.spec));
        for (auto time : times.between(time_of(from_ms), time_of(to_ms), kBackfillMax)) due.push_back(ms_of(time));
        return due;
      };
      Json due = co_await ctx_.step("backfill", list);
      for (const auto& ms : due.as_array()) co_await fire(ms.to_number<std::int64_t>(), overlap, &runs);
    } else if (action == "update") {
      if (const auto* spec = object.if_contains("spec")) state_.spec = spec_from_json(*spec);
      if (const auto* workflow = object.if_contains("workflow")) state_.workflow = std::string(workflow->as_string());
      if (const auto* input = object.if_contains("input")) state_.input = *input;
      if (const auto* options = object.if_contains("options")) state_.options = options_from_json(*options, state_.options);
      next_due_ = ScheduleTimes(times_spec(state_.spec)).next_after(time_of(state_.last_ms));  // for the answer
    }
    co_return false;
  }

  Ctx& ctx_;
  ScheduleState state_;
  std::optional<Future<Json>> running_;
  std::optional<TimePoint> next_due_;
  bool planned_ = false;  // a plan step has set next_due_ (describe)
};

}  // namespace

std::string check_change(const Json& change) {
  try {
    if (!change.is_object() || !change.as_object().contains("action") || !change.at("action").is_string()) {
      return "a change is a JSON object with an \"action\": pause, resume, trigger, backfill, update or delete";
    }
    const auto& object = change.as_object();
    std::string action(object.at("action").as_string());
    auto only = [&](std::initializer_list<const char*> keys) -> std::string {
      for (const auto& [key, value] : object) {
        bool known = key == "action";
        for (const char* allowed : keys) known = known || key == allowed;
        if (!known) return fmt::format("{} takes no \"{}\"", action, std::string_view(key));
      }
      return {};
    };
    if (action == "delete" || action == "resume" || action == "trigger") return only({});
    if (action == "pause") {
      if (const auto* note = object.if_contains("note"); note != nullptr && !note->is_string()) {
        return "pause: \"note\" must be a string";
      }
      return only({"note"});
    }
    if (action == "backfill") {
      for (const char* key : {"from_ms", "to_ms"}) {
        const auto* found = object.if_contains(key);
        if (found == nullptr || !(found->is_int64() || found->is_uint64())) {
          return fmt::format("backfill needs \"{}\" (ms since the epoch)", key);
        }
        if ((found->is_int64() && (found->get_int64() < 0 || found->get_int64() > kTimeMsMax)) ||
            (found->is_uint64() && found->get_uint64() > static_cast<std::uint64_t>(kTimeMsMax))) {
          return fmt::format("backfill: \"{}\" is a time from 0 to {} ms since the epoch (the year 2200)", key,
                             kTimeMsMax);
        }
      }
      if (object.at("from_ms").to_number<std::int64_t>() >= object.at("to_ms").to_number<std::int64_t>()) {
        return "backfill: from_ms must be before to_ms";
      }
      if (const auto* overlap = object.if_contains("overlap")) {
        if (!overlap->is_string()) return "backfill: \"overlap\" must be a string";
        (void)overlap_from_name(std::string(overlap->as_string()));
      }
      return only({"from_ms", "to_ms", "overlap"});
    }
    if (action == "update") {
      if (const auto* spec = object.if_contains("spec")) (void)spec_from_json(*spec);
      if (const auto* workflow = object.if_contains("workflow"); workflow != nullptr &&
                                                               (!workflow->is_string() || workflow->as_string().empty())) {
        return "update: \"workflow\" must be a workflow's name";
      }
      if (const auto* options = object.if_contains("options")) (void)options_from_json(*options);
      return only({"spec", "workflow", "input", "options"});
    }
    return fmt::format("no action \"{}\" (pause, resume, trigger, backfill, update, delete)", action);
  } catch (const Error& error) {
    return error.what();
  }
}

Task<Json> run_schedule(Ctx& ctx, Json state) {
  ScheduleLoop loop(ctx, state_from_json(state));
  co_return co_await loop.run();
}

}  // namespace fusee::schedule
