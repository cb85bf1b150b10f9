#include "schedule/schedule_state.hpp"

#include <fmt/format.h>

#include "fusee/error.hpp"
#include "schedule/due_plan.hpp"
#include "fusee/limits.hpp"

namespace fusee::schedule {
namespace {

using std::chrono::milliseconds;

std::int64_t ms_of(TimePoint time) {
  return std::chrono::duration_cast<milliseconds>(time.time_since_epoch()).count();
}
TimePoint time_of(std::int64_t ms) { return TimePoint(std::chrono::duration_cast<TimePoint::duration>(milliseconds(ms))); }

[[noreturn]] void bad(const std::string& what) { throw Error(errc::invalid_argument, "schedule: " + what); }

const boost::json::object& object_of(const boost::json::value& json, const char* what) {
  if (!json.is_object()) bad(fmt::format("{} must be a JSON object, not {}", what, boost::json::serialize(json)));
  return json.get_object();
}

std::string text_field(const boost::json::object& object, const char* key, std::string fallback = {}) {
  const auto* found = object.if_contains(key);
  if (found == nullptr || found->is_null()) return fallback;
  if (!found->is_string()) bad(fmt::format("\"{}\" must be a string", key));
  return std::string(found->get_string());
}

std::int64_t int_field(const boost::json::object& object, const char* key, std::int64_t fallback = 0) {
  const auto* found = object.if_contains(key);
  if (found == nullptr || found->is_null()) return fallback;
  if (found->is_int64()) return found->get_int64();
  if (found->is_uint64() && found->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
    return static_cast<std::int64_t>(found->get_uint64());
  }
  bad(fmt::format("\"{}\" must be a whole number", key));
}

bool bool_field(const boost::json::object& object, const char* key, bool fallback) {
  const auto* found = object.if_contains(key);
  if (found == nullptr || found->is_null()) return fallback;
  if (!found->is_bool()) bad(fmt::format("\"{}\" must be true or false", key));
  return found->get_bool();
}

template <typename T>
std::vector<T> list_field(const boost::json::object& object, const char* key) {
  const auto* found = object.if_contains(key);
  if (found == nullptr || found->is_null()) return {};
  auto converted = boost::json::try_value_to<std::vector<T>>(*found);
  if (!converted) bad(fmt::format("\"{}\" is not a list of the right kind", key));
  return *converted;
}

constexpr const char* kOverlapNames[] = {"skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other",
                                         "allow_all"};

}  // namespace

boost::json::value spec_json(const ScheduleSpec& spec) {
  boost::json::object json{{"cron", spec.cron},
                           {"every_ms", spec.every.count()},
                           {"offset_ms", spec.offset.count()},
                           {"time_zone", spec.time_zone},
                           {"jitter_ms", spec.jitter.count()}};
  json["end_ms"] = spec.end ? boost::json::value(ms_of(*spec.end)) : boost::json::value(nullptr);
  return json;
}

ScheduleSpec spec_from_json(const boost::json::value& json) {
  const auto& object = object_of(json, "a schedule's spec");
  for (const auto& [key, value] : object) {
    if (key != "cron" && key != "every_ms" && key != "offset_ms" && key != "time_zone" && key != "jitter_ms" &&
        key != "end_ms") {
      bad(fmt::format("a spec takes cron, every_ms, offset_ms, time_zone, jitter_ms and end_ms, not \"{}\"",
                      std::string_view(key)));
    }
  }
  ScheduleSpec spec;
  spec.cron = text_field(object, "cron");
  // Past these bounds the due-time arithmetic would overflow TimePoint
  // (fusee/limits.hpp): refused, naming the field.
  auto duration = [&](const char* key) {
    auto ms = int_field(object, key);
    if (ms > kDurationMax.count() || ms < -kDurationMax.count()) {
      bad(fmt::format("\"{}\" is at most {} ms (100 years) either way", key, kDurationMax.count()));
    }
    return milliseconds(ms);
  };
  spec.every = duration("every_ms");
  spec.offset = duration("offset_ms");
  spec.time_zone = text_field(object, "time_zone", "UTC");
  spec.jitter = duration("jitter_ms");
  if (spec.jitter.count() < 0) bad("jitter_ms must not be negative");
  if (const auto* end = object.if_contains("end_ms"); end != nullptr && !end->is_null()) {
    auto ms = int_field(object, "end_ms");
    if (ms < 0 || ms > kTimeMsMax) bad(fmt::format("\"end_ms\" is a time from 0 to {} (the year 2200)", kTimeMsMax));
    spec.end = time_of(ms);
  }
  (void)ScheduleTimes(times_spec(spec));  // throws for what is not a spec
  return spec;
}

const char* overlap_name_of(Overlap overlap) { return kOverlapNames[static_cast<int>(overlap)]; }

Overlap overlap_from_name(const std::string& name) {
  for (int i = 0; i < 6; ++i) {
    if (name == kOverlapNames[i]) return static_cast<Overlap>(i);
  }
  bad(fmt::format("no overlap policy \"{}\" (skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all)",
                  name));
}

boost::json::value options_json(const ScheduleOptions& options) {
  return {{"overlap", overlap_name_of(options.overlap)},
          {"catch_up", options.catch_up},
          {"paused", options.paused},
          {"note", options.note}};
}

ScheduleOptions options_from_json(const boost::json::value& json, ScheduleOptions base) {
  const auto& object = object_of(json, "a schedule's options");
  for (const auto& [key, value] : object) {
    if (key != "overlap" && key != "catch_up" && key != "paused" && key != "note") {
      bad(fmt::format("options take overlap, catch_up, paused and note, not \"{}\"", std::string_view(key)));
    }
  }
  if (object.contains("overlap")) base.overlap = overlap_from_name(text_field(object, "overlap"));
  auto catch_up = int_field(object, "catch_up", base.catch_up);
  // 1: the due time it woke for (an on-time one), or the latest missed.
  if (catch_up < 1 || catch_up > 1000) bad("catch_up must be between 1 and 1000");
  base.catch_up = static_cast<std::uint32_t>(catch_up);
  base.paused = bool_field(object, "paused", base.paused);
  base.note = text_field(object, "note", base.note);
  return base;
}

TimesSpec times_spec(const ScheduleSpec& spec) {
  TimesSpec times;
  times.cron = spec.cron;
  times.every = spec.every;
  times.offset = spec.offset;
  times.time_zone = spec.time_zone;
  times.end = spec.end;
  return times;
}

boost::json::value state_json(const ScheduleState& state) {
  boost::json::array buffered;
  for (auto ms : state.buffered_ms) buffered.push_back(ms);
  boost::json::array recent;
  for (const auto& id : state.recent) recent.push_back(boost::json::string(id));
  return {{"id", state.id},
          {"workflow", state.workflow},
          {"input", state.input},
          {"spec", spec_json(state.spec)},
          {"options", options_json(state.options)},
          {"last_ms", state.last_ms},
          {"running", state.running ? boost::json::value(*state.running) : boost::json::value(nullptr)},
          {"buffered_ms", std::move(buffered)},
          {"recent", std::move(recent)},
          {"started", state.started},
          {"skipped", state.skipped}};
}

ScheduleState state_from_json(const boost::json::value& json) {
  const auto& object = object_of(json, "a schedule's state");
  ScheduleState state;
  state.id = text_field(object, "id");
  state.workflow = text_field(object, "workflow");
  if (state.id.empty() || state.workflow.empty()) bad("a schedule needs an id and a workflow");
  if (const auto* input = object.if_contains("input")) state.input = *input;
  if (!object.contains("spec")) bad("a schedule needs a spec");
  state.spec = spec_from_json(object.at("spec"));
  if (const auto* options = object.if_contains("options")) state.options = options_from_json(*options);
  state.last_ms = int_field(object, "last_ms");
  auto running = text_field(object, "running");
  if (!running.empty()) state.running = running;
  state.buffered_ms = list_field<std::int64_t>(object, "buffered_ms");
  state.recent = list_field<std::string>(object, "recent");
  state.started = static_cast<std::uint64_t>(int_field(object, "started"));
  state.skipped = static_cast<std::uint64_t>(int_field(object, "skipped"));
  return state;
}

boost::json::value info_json(const ScheduleState& state, std::optional<TimePoint> next_due) {
  auto json = state_json(state).as_object();
  json["next_due_ms"] = next_due ? boost::json::value(ms_of(*next_due)) : boost::json::value(nullptr);
  return json;
}

ScheduleInfo info_from_json(const boost::json::value& json) {
  auto state = state_from_json(json);
  ScheduleInfo info;
  info.id = state.id;
  info.spec = state.spec;
  info.workflow = state.workflow;
  info.input = state.input;
  info.options = state.options;
  const auto& object = json.get_object();
  if (const auto* next = object.if_contains("next_due_ms"); next != nullptr && !next->is_null()) {
    info.next_due = time_of(int_field(object, "next_due_ms"));
  }
  if (state.running) info.running.push_back(*state.running);
  for (auto ms : state.buffered_ms) info.buffered.push_back(run_id_of(state.id, time_of(ms)));
  info.recent = state.recent;
  info.started = state.started;
  info.skipped = state.skipped;
  return info;
}

}  // namespace fusee::schedule

namespace fusee {
const char* overlap_name(Overlap overlap) noexcept { return schedule::overlap_name_of(overlap); }
}  // namespace fusee
