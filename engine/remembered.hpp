// What a run remembers of the ids it was sent, so a repeat is answered as
// the first was (docs/engine.md, "Sending again"): signal ids, update
// answers and awakeable completions. Within a generation the run keeps all
// of them (its journal does); into the next generation -- continue-as-new,
// reset -- a window goes: the newest kRememberedPerKindMax of each kind,
// made within kRememberedAge, within kRememberedBytesMax encoded. It rides
// in the record that starts the generation (run_started's "remembered",
// run_reset's), so a crash keeps the window and the generation together.
// Pure: no I/O, no clock (callers pass the time). Thread-compatible.
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "engine/journal_record.hpp"

namespace fusee::engine {

// Client retries come within minutes; a day of them, a thousand of each
// kind, is generous and keeps a looping run's start record small.
inline constexpr std::size_t kRememberedPerKindMax = 1000;
inline constexpr std::chrono::hours kRememberedAge{24};
inline constexpr std::size_t kRememberedBytesMax = 1u << 20;

struct Remembered {
  struct Signal {
    std::string id;
    std::int64_t at_ms = 0;
  };
  // An update's answer, or an awakeable's completion, as a repeat gets it:
  // {"ok": true, "value": v} or {"ok": false, "code": errc name, "message": m}
  // (FinishedRun::update_answers' form).
  struct Answer {
    std::string key;   // the update id; the awakeable token's secret
    std::string name;  // the update's, the awakeable's
    boost::json::object answer;
    std::int64_t at_ms = 0;
  };
  std::vector<Signal> signals;
  std::vector<Answer> updates;
  std::vector<Answer> awakeables;

  bool empty() const { return signals.empty() && updates.empty() && awakeables.empty(); }
  // Keeps what the window allows at `now_ms`: the newest of each kind, by
  // count and age, then drops the oldest answers until the encoding fits.
  void bound(std::int64_t now_ms);
  boost::json::value to_json() const;
  // errc::corrupt (wal) for a value not written by to_json.
  static Result<Remembered> from_json(const boost::json::value& value);
};

// What a reset's new generation remembers of the records of the one it
// replaces (in journal order): the window those records' own generation
// carried, every signal id, and the updates answered and awakeables
// completed at or past `cut` (those before it are kept as records).
Remembered remembered_of_records(const std::vector<JournalRecord>& records, std::uint32_t cut);

// The {"ok", ...} form of an answer, and back.
boost::json::object answer_json(bool succeeded, const boost::json::value& value, const std::string& code,
                                const std::string& message);

}  // namespace fusee::engine
