// Engine's schedule calls: each is a start, an update or a query of the
// schedule's run ("schedule:<id>", schedule/schedule_workflow.hpp).
#include <fmt/format.h>

#include "fusee/engine.hpp"
#include "fusee/limits.hpp"
#include "schedule/due_plan.hpp"
#include "schedule/schedule_state.hpp"
#include "schedule/schedule_workflow.hpp"

namespace fusee {
namespace {

std::string run_of(const std::string& id) { return schedule::kScheduleRunPrefix + id; }

std::int64_t ms_of(TimePoint time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}

// A schedule's run that is not running is no schedule (any more); a change
// its run refuses is the schedule's refusal.
template <typename F>
auto on_schedule(const std::string& id, F call) {
  try {
    return call();
  } catch (const Error& error) {
    if (error.error() == errc::not_found) {
      throw Error(errc::not_found, fmt::format("no schedule '{}' (never made, or deleted)", id));
    }
    if (error.error() == errc::rejected) {
      std::string why = error.what();
      const std::string said = "update 'schedule': schedule: ";
      const std::string said_short = "update 'schedule': ";
      if (auto at = why.find(said); at != std::string::npos) {
        why = why.substr(at + said.size());
      } else if (auto at_short = why.find(said_short); at_short != std::string::npos) {
        why = why.substr(at_short + said_short.size());
      }
      throw Error(errc::rejected, fmt::format("schedule '{}' refused the change: {}", id, why));
    }
    throw;
  }
}

std::vector<std::string> runs_of(const boost::json::value& answer) {
  std::vector<std::string> runs;
  for (const auto& run : answer.at("runs").as_array()) runs.emplace_back(run.as_string());
  return runs;
}

}  // namespace

void Engine::schedule_json(const std::string& id, const ScheduleSpec& spec, const std::string& workflow,
                           boost::json::value input, const ScheduleOptions& options) {
  if (id.empty()) throw Error(errc::invalid_argument, "schedule: an id is needed");
  // The schedule is the run "schedule:<id>", and what it starts are runs
  // "<id>@<due time>" (24 bytes of time).
  if (auto why = run_id_problem(id, "schedule id")) throw Error(errc::invalid_argument, fmt::format("schedule: {}", *why));
  for (const auto& run : {schedule::kScheduleRunPrefix + id, id + "@2026-01-01T00:00:00.000Z"}) {
    if (auto why = run_id_problem(run, "schedule's run id")) {
      throw Error(errc::invalid_argument, fmt::format("schedule '{}': {}", id, *why));
    }
  }
  if (!has_workflow(workflow)) {
    throw Error(errc::unknown_workflow,
                fmt::format("schedule '{}': no workflow named '{}' is registered", id, workflow));
  }
  schedule::ScheduleState state;
  state.id = id;
  state.workflow = workflow;
  state.input = std::move(input);
  state.spec = schedule::spec_from_json(schedule::spec_json(spec));  // checks it
  state.options = schedule::options_from_json(schedule::options_json(options));
  // Due from now on: the first due time is the first after the schedule was
  // made, however late its run gets to it (a crash, a restart).
  state.last_ms = ms_of(now());
  StartOptions start;
  start.if_running = IfRunning::reject;
  start.if_finished = IfFinished::start_anew;  // a deleted schedule made anew
  try {
    (void)start_json(schedule::kScheduleWorkflow, run_of(id), schedule::state_json(state), start);
  } catch (const Error& error) {
    if (error.error() == errc::already_exists) {
      throw Error(errc::already_exists, fmt::format("schedule '{}' already exists", id));
    }
    throw;
  }
}

boost::json::value Engine::describe_schedule_json(const std::string& id) {
  return on_schedule(id, [&] { return query_json(run_of(id), "describe", nullptr); });
}

ScheduleInfo Engine::describe_schedule(const std::string& id) {
  return schedule::info_from_json(describe_schedule_json(id));
}

std::vector<ScheduleInfo> Engine::list_schedules() {
  RunFilter filter;
  filter.workflow = schedule::kScheduleWorkflow;
  filter.status = RunStatus::running;
  std::vector<ScheduleInfo> schedules;
  for (const auto& run : list_runs(filter)) {
    try {
      schedules.push_back(schedule::info_from_json(query_json(run.id, "describe", nullptr)));
    } catch (const Error& error) {
      if (error.error() != errc::not_found) throw;  // deleted meanwhile
    }
  }
  return schedules;
}

boost::json::value Engine::change_schedule_json(const std::string& id, boost::json::value change) {
  if (const auto* object = change.if_object()) {
    if (const auto* workflow = object->if_contains("workflow"); workflow != nullptr && workflow->is_string() &&
                                                                  !has_workflow(std::string(workflow->as_string()))) {
      throw Error(errc::unknown_workflow, fmt::format("schedule '{}': no workflow named '{}' is registered", id,
                                                      std::string_view(workflow->as_string())));
    }
  }
  return on_schedule(id, [&] { return update_json(UpdateCall{run_of(id), schedule::kScheduleChange.name, std::move(change), {}, {}}); });
}

ScheduleInfo Engine::pause_schedule(const std::string& id, const std::string& note) {
  return schedule::info_from_json(change_schedule_json(id, {{"action", "pause"}, {"note", note}}));
}

ScheduleInfo Engine::resume_schedule(const std::string& id) {
  return schedule::info_from_json(change_schedule_json(id, {{"action", "resume"}}));
}

std::vector<std::string> Engine::trigger_schedule(const std::string& id) {
  return runs_of(change_schedule_json(id, {{"action", "trigger"}}));
}

std::vector<std::string> Engine::backfill_schedule(const std::string& id, TimePoint from, TimePoint to,
                                                   std::optional<Overlap> overlap) {
  boost::json::object change{{"action", "backfill"}, {"from_ms", ms_of(from)}, {"to_ms", ms_of(to)}};
  if (overlap) change["overlap"] = overlap_name(*overlap);
  return runs_of(change_schedule_json(id, std::move(change)));
}

ScheduleInfo Engine::update_schedule(const std::string& id, const ScheduleSpec& spec, const std::string& workflow,
                                     boost::json::value input, const ScheduleOptions& options) {
  return schedule::info_from_json(change_schedule_json(id, {{"action", "update"},
                                                            {"spec", schedule::spec_json(spec)},
                                                            {"workflow", workflow},
                                                            {"input", std::move(input)},
                                                            {"options", schedule::options_json(options)}}));
}

void Engine::delete_schedule(const std::string& id) {
  (void)change_schedule_json(id, {{"action", "delete"}});
  // Its run ends just after it answers: once it has, the id is free again.
  (void)result_json(run_of(id));
}

}  // namespace fusee
