// A run's journal as JSON, for people and tools (GET /v1/runs/{id}/journal,
// Engine::journal_json, the run store's kept journals of finished runs):
// {"records": [every record in journal order], "commands": [one entry per
// command position: its command, name, outcome, attempts and times]}. Pure.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/journal_record.hpp"

namespace fusee::engine {

boost::json::object record_json(const JournalRecord& record);
// The records of a journal_json text; nothing when it is not one.
std::optional<std::vector<JournalRecord>> records_of_journal_json(const std::string& text);
std::string journal_json(const std::vector<JournalRecord>& records);

}  // namespace fusee::engine
