#include "rows/run_rows.hpp"

#include <exception>

namespace fusee::rows {
namespace {

RunStatus status_from_name(std::string_view name) {
  for (auto status : kRunStatuses) {
    if (name == run_status_name(status)) return status;
  }
  return RunStatus::failed;
}

}  // namespace

std::string encode_finished_run(const FinishedRun& run) {
  boost::json::object object;
  object["id"] = run.id;
  object["generation"] = run.generation;
  object["workflow"] = run.workflow;
  object["version"] = run.version;
  object["input"] = run.input;
  object["status"] = run_status_name(run.status);
  object["result"] = run.result;
  object["error_code"] = run.error_code;
  object["message"] = run.message;
  object["started_ms"] = run.started_ms;
  object["finished_ms"] = run.finished_ms;
  boost::json::array signal_ids;
  for (const auto& id : run.signal_ids) signal_ids.push_back(boost::json::string(id));
  object["signal_ids"] = std::move(signal_ids);
  if (!run.update_answers.empty()) object["update_answers"] = run.update_answers;
  if (!run.awakeable_answers.empty()) object["awakeable_answers"] = run.awakeable_answers;
  return boost::json::serialize(object);
}

std::optional<FinishedRun> decode_finished_run(std::string_view text) {
  boost::system::error_code error;
  auto value = boost::json::parse(text, error);
  if (error || !value.is_object()) return std::nullopt;
  const auto& object = value.get_object();
  try {
    FinishedRun run;
    run.id = boost::json::value_to<std::string>(object.at("id"));
    run.generation = boost::json::value_to<std::uint32_t>(object.at("generation"));
    run.workflow = boost::json::value_to<std::string>(object.at("workflow"));
    if (const auto* version = object.if_contains("version")) run.version = boost::json::value_to<std::uint32_t>(*version);
    run.input = object.at("input");
    run.status = status_from_name(object.at("status").as_string());
    run.result = object.at("result");
    run.error_code = boost::json::value_to<std::string>(object.at("error_code"));
    run.message = boost::json::value_to<std::string>(object.at("message"));
    run.started_ms = boost::json::value_to<std::int64_t>(object.at("started_ms"));
    run.finished_ms = boost::json::value_to<std::int64_t>(object.at("finished_ms"));
    if (const auto* ids = object.if_contains("signal_ids")) {
      run.signal_ids = boost::json::value_to<std::vector<std::string>>(*ids);
    }
    if (const auto* answers = object.if_contains("update_answers")) run.update_answers = answers->as_object();
    if (const auto* answers = object.if_contains("awakeable_answers")) run.awakeable_answers = answers->as_object();
    return run;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace fusee::rows
