#include "queue/queue_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "fusee/error.hpp"

namespace fusee::queue {
namespace {

using std::chrono::milliseconds;

[[noreturn]] void bad(const std::string& what) { throw Error(errc::invalid_argument, "queue: " + what); }

TimePoint time_of(std::int64_t ms) { return TimePoint(std::chrono::duration_cast<TimePoint::duration>(milliseconds(ms))); }

const boost::json::object& object_of(const boost::json::value& json, const char* what) {
  if (!json.is_object()) bad(fmt::format("{} must be a JSON object, not {}", what, boost::json::serialize(json)));
  return json.get_object();
}

std::string text_field(const boost::json::object& object, const char* key) {
  const auto* found = object.if_contains(key);
  if (found == nullptr || found->is_null()) return {};
  if (!found->is_string()) bad(fmt::format("\"{}\" must be a string", key));
  return std::string(found->get_string());
}

std::int64_t int_field(const boost::json::object& object, const char* key) {
  const auto* found = object.if_contains(key);
  if (found == nullptr || found->is_null()) return 0;
  if (found->is_int64()) return found->get_int64();
  if (found->is_uint64() && found->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
    return static_cast<std::int64_t>(found->get_uint64());
  }
  bad(fmt::format("\"{}\" must be a whole number", key));
}

double number_field(const boost::json::object& object, const char* key) {
  const auto* found = object.if_contains(key);
  if (found == nullptr || found->is_null()) return 0;
  if (!found->is_number()) bad(fmt::format("\"{}\" must be a number", key));
  return found->to_number<double>();
}

// A whole number as an integer (JSON readers and people see 5, not 5E0).
boost::json::value number_json(double value) {
  if (std::floor(value) == value && std::fabs(value) < 9e15) return static_cast<std::int64_t>(value);
  return value;
}

}  // namespace

boost::json::value options_json(const QueueOptions& options) {
  return {{"concurrency", options.concurrency},
          {"partition_concurrency", options.partition_concurrency},
          {"per_second", number_json(options.per_second)}};
}

QueueOptions options_from_json(const boost::json::value& json) {
  const auto& object = object_of(json, "a queue's options");
  for (const auto& [key, value] : object) {
    if (key != "concurrency" && key != "partition_concurrency" && key != "per_second") {
      bad(fmt::format("options take concurrency, partition_concurrency and per_second, not \"{}\"",
                      std::string_view(key)));
    }
  }
  QueueOptions options;
  auto concurrency = int_field(object, "concurrency");
  auto partition = int_field(object, "partition_concurrency");
  if (concurrency < 0 || concurrency > UINT32_MAX || partition < 0 || partition > UINT32_MAX) {
    bad("concurrency and partition_concurrency are counts, 0 (no bound) or more");
  }
  options.concurrency = static_cast<std::uint32_t>(concurrency);
  options.partition_concurrency = static_cast<std::uint32_t>(partition);
  options.per_second = number_field(object, "per_second");
  if (!std::isfinite(options.per_second) || options.per_second < 0) bad("per_second must be 0 (no bound) or more");
  return options;
}

boost::json::value entry_json(const Entry& entry) {
  return {{"id", entry.id},
          {"workflow", entry.workflow},
          {"input", entry.input},
          {"priority", entry.priority},
          {"partition", entry.partition},
          {"dedup_id", entry.dedup_id},
          {"enqueued_ms", entry.enqueued_ms},
          {"started_ms", entry.started_ms},
          {"seq", entry.seq}};
}

Entry entry_from_json(const boost::json::value& json) {
  const auto& object = object_of(json, "a queued run");
  Entry entry;
  entry.id = text_field(object, "id");
  entry.workflow = text_field(object, "workflow");
  if (entry.id.empty() || entry.workflow.empty()) bad("a queued run needs an id and a workflow");
  if (const auto* input = object.if_contains("input")) entry.input = *input;
  entry.priority = int_field(object, "priority");
  entry.partition = text_field(object, "partition");
  entry.dedup_id = text_field(object, "dedup_id");
  entry.enqueued_ms = int_field(object, "enqueued_ms");
  entry.started_ms = int_field(object, "started_ms");
  entry.seq = static_cast<std::uint64_t>(int_field(object, "seq"));
  return entry;
}

boost::json::value state_json(const QueueState& state) {
  boost::json::array waiting;
  for (const auto& entry : state.waiting) waiting.push_back(entry_json(entry));
  boost::json::array running;
  for (const auto& entry : state.running) running.push_back(entry_json(entry));
  return {{"name", state.name},
          {"options", options_json(state.options)},
          {"waiting", std::move(waiting)},
          {"running", std::move(running)},
          {"next_start_ms", number_json(state.next_start_ms)},
          {"started", state.started},
          {"seq", state.seq}};
}

QueueState state_from_json(const boost::json::value& json) {
  const auto& object = object_of(json, "a queue's state");
  QueueState state;
  state.name = text_field(object, "name");
  if (state.name.empty()) bad("a queue needs a name");
  if (const auto* options = object.if_contains("options")) state.options = options_from_json(*options);
  for (const char* key : {"waiting", "running"}) {
    const auto* list = object.if_contains(key);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array()) bad(fmt::format("\"{}\" must be a list", key));
    for (const auto& entry : list->get_array()) {
      (std::string_view(key) == "waiting" ? state.waiting : state.running).push_back(entry_from_json(entry));
    }
  }
  state.next_start_ms = number_field(object, "next_start_ms");
  state.started = static_cast<std::uint64_t>(int_field(object, "started"));
  state.seq = static_cast<std::uint64_t>(int_field(object, "seq"));
  return state;
}

std::vector<const Entry*> start_order(const QueueState& state) {
  std::vector<const Entry*> order;
  for (const auto& entry : state.waiting) order.push_back(&entry);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->priority != b->priority ? a->priority < b->priority : a->seq < b->seq;
  });
  return order;
}

boost::json::value info_json(const QueueState& state) {
  auto json = state_json(state).as_object();
  boost::json::array waiting;
  for (const auto* entry : start_order(state)) waiting.push_back(entry_json(*entry));
  json["waiting"] = std::move(waiting);
  return json;
}

QueueInfo info_from_json(const boost::json::value& json) {
  auto state = state_from_json(json);
  QueueInfo info;
  info.name = state.name;
  info.options = state.options;
  auto convert = [](const Entry& entry, bool running) {
    QueuedRun run;
    run.id = entry.id;
    run.workflow = entry.workflow;
    run.input = entry.input;
    run.priority = entry.priority;
    run.partition = entry.partition;
    run.dedup_id = entry.dedup_id;
    run.enqueued_at = time_of(entry.enqueued_ms);
    if (running) run.started_at = time_of(entry.started_ms);
    return run;
  };
  for (const auto& entry : state.waiting) info.waiting.push_back(convert(entry, false));  // as info_json ordered them
  for (const auto& entry : state.running) info.running.push_back(convert(entry, true));
  info.started = state.started;
  return info;
}

}  // namespace fusee::queue
