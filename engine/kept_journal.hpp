// A run's journal as the shard keeps it while the run is loaded and as the
// run store keeps it for a finished run (Config::keep_finished_journals):
// each record's own encoding, the bytes the log already holds, behind its
// length. Kept this way, a finished run's journal costs the shard a copy of
// bytes it has rather than a JSON rendering per record on its thread; JSON
// is made only when someone asks to see it.
//
// Stored form: kKeptJournalBinary, then per record a 4-byte little-endian
// length and the record. Builds before this form stored journal_json's text,
// which starts with '{'; records_of_kept_journal reads both.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "engine/journal_record.hpp"

namespace fusee::engine {

inline constexpr char kKeptJournalBinary = '\0';

class KeptJournal {
 public:
  // One record's encoding (encode_record's bytes), after the others.
  void add(std::span<const std::byte> record);
  bool empty() const { return bytes_.empty(); }
  std::size_t size_bytes() const { return bytes_.size(); }
  // The stored form (empty while no record was added).
  const std::string& stored() const { return bytes_; }
  // Every record, decoded; errc::corrupt if one does not decode.
  Result<std::vector<JournalRecord>> records() const;

 private:
  std::string bytes_;
};

// The records of a stored journal in either form; errc::corrupt (wal) when
// it is neither.
Result<std::vector<JournalRecord>> records_of_kept_journal(std::string_view stored);

}  // namespace fusee::engine
