// CommandCursor: where a run's code stands in its journal. The commands the
// journal recorded, by position (what replay matches the code's calls
// against), the position the code's next command takes, and the command
// whose own call is under way (a command that completes within its call does
// not suspend the code). Loading files each positional record at its
// position; the code's calls then walk the positions in order.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/result.hpp"
#include "engine/journal_record.hpp"
#include "fusee/ctx.hpp"

namespace fusee::engine {

struct RecordedCommand {
  std::vector<JournalRecord> records;
};

class CommandCursor {
 public:
  // How far past the journal's last position a record may be: commands
  // started together leave gaps until they complete; farther is damage.
  static constexpr std::uint32_t kPositionsAheadMax = 1u << 20;

  // Files `record` at `position` (loading: records of one position come in
  // journal order, positions in any order). corrupt when `position` is
  // kPositionsAheadMax or more past the last one recorded.
  Result<void> file(std::uint32_t position, JournalRecord record);
  // The command recorded at `position`, or nullptr (nothing recorded there:
  // past the journal, or a gap a command still in flight left).
  const RecordedCommand* recorded(std::uint32_t position) const;
  // The first position at or after the code's next one that holds a record:
  // when the code returns, the journal still going on there is divergence.
  std::optional<std::uint32_t> recorded_from_next() const;
  // Whether the journal has positions at or past the code's next one (a gap
  // counts: a command there began, and is in flight or was cut short).
  bool journal_goes_on() const { return next_ < journal_.size(); }
  // The recorded commands are no longer needed (the run finished).
  void forget();

  // The position the code's next command takes.
  std::uint32_t next() const { return next_; }
  // A position taken by something that is not a command (a patch marker).
  void skip() { ++next_; }
  // Begins a command: gives `completion` the next position and returns it.
  // Only one command's call is under way at a time.
  std::uint32_t begin(detail::Completion& completion);
  // Ends the command's call: whether it completed within it.
  bool end();
  // Whether a command's call is under way.
  bool in_command() const { return current_ != nullptr; }
  // Called as `completion` completes: true (and noted for end()) when it is
  // the command whose call is under way.
  bool completes_in_call(const detail::Completion& completion);

 private:
  std::vector<RecordedCommand> journal_;  // by position (empty: nothing recorded there)
  std::uint32_t next_ = 0;
  const detail::Completion* current_ = nullptr;
  bool completed_in_call_ = false;
};

}  // namespace fusee::engine
