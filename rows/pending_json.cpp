#include "rows/pending_json.hpp"

#include <chrono>
#include <cstdint>

namespace fusee::rows {
namespace {

// Milliseconds since the epoch, as every row keeps its times.
std::int64_t to_ms(TimePoint time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}
TimePoint from_ms(std::int64_t ms) {
  return TimePoint{std::chrono::duration_cast<TimePoint::duration>(std::chrono::milliseconds(ms))};
}

}  // namespace

boost::json::array pending_json(const std::vector<PendingCommand>& waiting) {
  boost::json::array out;
  for (const auto& command : waiting) {
    boost::json::object object{{"position", command.position}, {"command", command.command}, {"name", command.name}};
    if (command.due) object["due_ms"] = to_ms(*command.due);
    out.push_back(std::move(object));
  }
  return out;
}

std::optional<std::vector<PendingCommand>> pending_of(const boost::json::value& value) {
  if (!value.is_array()) return std::nullopt;
  std::vector<PendingCommand> waiting;
  try {
    for (const auto& item : value.get_array()) {
      const auto& object = item.as_object();
      PendingCommand command;
      command.position = boost::json::value_to<std::uint32_t>(object.at("position"));
      command.command = boost::json::value_to<std::string>(object.at("command"));
      command.name = boost::json::value_to<std::string>(object.at("name"));
      if (const auto* due = object.if_contains("due_ms")) command.due = from_ms(boost::json::value_to<std::int64_t>(*due));
      waiting.push_back(std::move(command));
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return waiting;
}

}  // namespace fusee::rows
