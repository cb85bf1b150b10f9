// `fusee restore --from TARGET --to TIME|latest --dir NEW_DIR`: rebuilds a
// data directory from a backup target as of a moment (backup/restore.hpp,
// docs/backup.md). TIME: UTC ISO 8601 ("2026-12-02T04:00:00Z", optional
// fraction of a second) or milliseconds since the epoch. With --check, a
// restore drill: the same restore into a scratch directory, proven to open,
// then removed (docs/backup.md, "Restore drills").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fusee::cli {

struct RestoreCommandOptions {
  std::string from;  // the target directory
  std::string to = "latest";
  std::string dir;  // with check: where the drill restores (default: a new temporary directory)
  // A restore drill: restore, open the result read-only and assemble every
  // run's journal, count the runs, then remove what it wrote.
  bool check = false;
};

// The moment `text` names, in ms since the epoch; nothing for "latest";
// an error message in `why` when it is neither.
std::optional<std::int64_t> parse_restore_time(const std::string& text, std::string& why);

// A moment in ms since the epoch as UTC ISO 8601 ("2026-12-02T04:00:00Z").
std::string utc_text(std::int64_t ms);

// 0 when restored, 1 when refused or failed (why is printed).
int run_restore(const RestoreCommandOptions& options);

}  // namespace fusee::cli
