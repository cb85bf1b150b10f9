#include "engine/journal_json.hpp"

#include <algorithm>
#include <map>

namespace fusee::engine {
namespace {

// Where a command got to, from its last record.
const char* outcome_of(RecordKind last) {
  switch (last) {
    case RecordKind::step_completed:
    case RecordKind::sleep_fired:
    case RecordKind::wait_completed:
    case RecordKind::stream_chunk:
    case RecordKind::stream_closed:
    case RecordKind::value_recorded:
    case RecordKind::child_completed:
    case RecordKind::any_resolved:
    case RecordKind::patch_marked:
    case RecordKind::update_taken:
    case RecordKind::update_answered:
    case RecordKind::awakeable_completed:
      return "completed";
    case RecordKind::step_failed:
      return "failed";
    default:
      return "waiting";
  }
}

}  // namespace

boost::json::object record_json(const JournalRecord& record) {
  return {{"kind", record_kind_name(record.kind)},
          {"generation", record.generation},
          {"position", is_positional(record.kind) ? boost::json::value(record.position) : boost::json::value(nullptr)},
          {"name", record.name},
          {"detail", record.detail},
          {"parent", record.parent},
          {"number", record.number},
          {"time_ms", record.time_ms},
          {"at_ms", record.at_ms},
          {"took_us", record.took_us},
          {"flag", record.flag},
          {"value", record.value}};
}

std::optional<std::vector<JournalRecord>> records_of_journal_json(const std::string& text) {
  boost::system::error_code error;
  auto parsed = boost::json::parse(text, error);
  if (error || !parsed.is_object() || !parsed.as_object().contains("records")) return std::nullopt;
  const auto& listed = parsed.as_object().at("records");
  if (!listed.is_array()) return std::nullopt;
  std::vector<JournalRecord> records;
  try {
    for (const auto& entry : listed.as_array()) {
      const auto& object = entry.as_object();
      JournalRecord record;
      auto kind = boost::json::value_to<std::string>(object.at("kind"));
      bool known = false;
      for (std::uint8_t number = 1; number <= kRecordKindMax; ++number) {
        if (kind == record_kind_name(static_cast<RecordKind>(number))) {
          record.kind = static_cast<RecordKind>(number);
          known = true;
        }
      }
      if (!known) return std::nullopt;
      record.generation = boost::json::value_to<std::uint32_t>(object.at("generation"));
      if (!object.at("position").is_null()) record.position = boost::json::value_to<std::uint32_t>(object.at("position"));
      record.name = boost::json::value_to<std::string>(object.at("name"));
      record.detail = boost::json::value_to<std::string>(object.at("detail"));
      if (const auto* parent = object.if_contains("parent")) record.parent = boost::json::value_to<std::string>(*parent);
      record.number = boost::json::value_to<std::uint64_t>(object.at("number"));
      record.time_ms = boost::json::value_to<std::int64_t>(object.at("time_ms"));
      // Journals kept before the record format's version 2 have neither.
      if (const auto* at = object.if_contains("at_ms")) record.at_ms = boost::json::value_to<std::int64_t>(*at);
      if (const auto* took = object.if_contains("took_us")) record.took_us = boost::json::value_to<std::uint64_t>(*took);
      record.flag = object.at("flag").as_bool();
      record.value = object.at("value");
      records.push_back(std::move(record));
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return records;
}

std::string journal_json(const std::vector<JournalRecord>& records) {
  boost::json::array all;
  struct Command {
    boost::json::object entry;
    std::uint64_t attempts = 0;
    std::uint64_t took_us = 0;  // a step's attempts, summed
  };
  std::map<std::uint32_t, Command> commands;
  for (const auto& record : records) {
    all.push_back(record_json(record));
    if (record.kind == RecordKind::cancel_delivered && record.value.is_array()) {
      // One record for every command it cancelled.
      for (const auto& listed : record.value.get_array()) {
        if (!listed.is_array() || listed.get_array().size() != 3 || !listed.get_array()[0].is_number()) continue;
        auto position = listed.get_array()[0].to_number<std::uint32_t>();
        auto& command = commands[position].entry;
        if (command.empty()) {
          command = {{"position", position}, {"command", listed.get_array()[1]}, {"name", listed.get_array()[2]}};
        }
        command["outcome"] = "cancelled";
        command["message"] = record.detail;
        if (record.at_ms > 0) command["last_at_ms"] = record.at_ms;
      }
      continue;
    }
    if (!is_positional(record.kind)) continue;
    auto& command = commands[record.position];
    if (command.entry.empty()) {
      command.entry = {{"position", record.position}, {"command", command_name(record.kind)}, {"name", record.name}};
    }
    // Times where the record has one: a sleep's due time, a retry's, a wait's timeout.
    if (record.time_ms > 0) command.entry["time_ms"] = record.time_ms;
    if (record.kind == RecordKind::child_started || record.kind == RecordKind::stream_chunk) {
      command.entry["input"] = record.value;
    }
    // When it began and ended, where the records say (version 2 on): a
    // step's first record is its step_started (took_us 0), or, in a journal
    // written before that record existed, its first attempt's end -- then
    // it began that attempt's running time before.
    if (record.at_ms > 0) {
      if (!command.entry.contains("began_at_ms")) {
        command.entry["began_at_ms"] = record.at_ms - static_cast<std::int64_t>(record.took_us / 1000);
      }
      command.entry["last_at_ms"] = record.at_ms;
    }
    command.took_us += record.took_us;
    if (command.took_us > 0) command.entry["took_us"] = command.took_us;
    if (record.kind == RecordKind::step_attempt_failed) command.attempts = record.number + 1;
    if (record.kind == RecordKind::step_completed || record.kind == RecordKind::step_failed) {
      command.attempts = record.kind == RecordKind::step_failed ? record.number : std::max<std::uint64_t>(command.attempts, 1);
    }
    command.entry["outcome"] = outcome_of(record.kind);
    command.entry["last_record"] = record_kind_name(record.kind);
    if (record.kind != RecordKind::child_started && record.kind != RecordKind::sleep_started &&
        record.kind != RecordKind::wait_started) {
      command.entry["value"] = record.value;
    }
    if (command.attempts > 0) command.entry["attempts"] = command.attempts;
  }
  boost::json::array by_position;
  for (auto& [position, command] : commands) by_position.push_back(std::move(command.entry));
  return boost::json::serialize(boost::json::object{{"records", std::move(all)}, {"commands", std::move(by_position)}});
}

std::string without_secrets(const std::string& journal_text) {
  boost::system::error_code error;
  auto parsed = boost::json::parse(journal_text, error);
  if (error || !parsed.is_object()) return journal_text;
  auto* records = parsed.as_object().if_contains("records");
  if (records == nullptr || !records->is_array()) return journal_text;
  const char* created = record_kind_name(RecordKind::awakeable_created);
  for (auto& record : records->as_array()) {
    auto* object = record.if_object();
    if (object == nullptr) continue;
    const auto* kind = object->if_contains("kind");
    if (kind != nullptr && kind->is_string() && kind->as_string() == created) (*object)["detail"] = kRedactedSecret;
  }
  return boost::json::serialize(parsed);
}

}  // namespace fusee::engine
