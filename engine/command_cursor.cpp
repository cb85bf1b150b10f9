#include "engine/command_cursor.hpp"

#include <utility>

#include "base/assert.hpp"
#include "wal/errc.hpp"

namespace fusee::engine {

Result<void> CommandCursor::file(std::uint32_t position, JournalRecord record) {
  // Commands started together complete in any order, so a position may have
  // records before an earlier one does (a command still in flight has none
  // yet). A position far past every recorded one is damage.
  if (position >= journal_.size() + kPositionsAheadMax) return make_error_code(wal::errc::corrupt);
  if (position >= journal_.size()) journal_.resize(position + 1);
  journal_[position].records.push_back(std::move(record));
  return ok();
}

const RecordedCommand* CommandCursor::recorded(std::uint32_t position) const {
  if (position >= journal_.size() || journal_[position].records.empty()) return nullptr;
  return &journal_[position];
}

std::optional<std::uint32_t> CommandCursor::recorded_from_next() const {
  for (std::uint32_t position = next_; position < journal_.size(); ++position) {
    if (!journal_[position].records.empty()) return position;
  }
  return std::nullopt;
}

void CommandCursor::forget() {
  journal_.clear();
  journal_.shrink_to_fit();
}

std::uint32_t CommandCursor::begin(detail::Completion& completion) {
  FUSEE_ASSERT(current_ == nullptr, "a command's own call does not start another");
  current_ = &completion;
  completed_in_call_ = false;
  completion.position = next_;
  return next_++;
}

bool CommandCursor::end() {
  current_ = nullptr;
  return std::exchange(completed_in_call_, false);
}

bool CommandCursor::completes_in_call(const detail::Completion& completion) {
  if (current_ == nullptr || &completion != current_) return false;
  completed_in_call_ = true;
  return true;
}

}  // namespace fusee::engine
