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
// The same text with every awakeable's secret (awakeable_created's detail)
// replaced by kRedactedSecret: what is shown (the API, fusee inspect), as a
// token completes its awakeable to whoever holds it. The store keeps the
// whole text, which a reset needs.
std::string without_secrets(const std::string& journal_text);
inline constexpr const char* kRedactedSecret = "(secret)";

}  // namespace fusee::engine
