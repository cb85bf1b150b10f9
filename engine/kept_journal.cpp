#include "engine/kept_journal.hpp"

#include <cstdint>
#include <cstring>

#include "engine/journal_json.hpp"
#include "wal/errc.hpp"

namespace fusee::engine {

void KeptJournal::add(std::span<const std::byte> record) {
  if (bytes_.empty()) bytes_.push_back(kKeptJournalBinary);
  const auto length = static_cast<std::uint32_t>(record.size());  // a record is far under 4 GiB (wal::kRecordBytesMax)
  char prefix[4];
  for (int i = 0; i < 4; ++i) prefix[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  bytes_.append(prefix, sizeof prefix);
  bytes_.append(reinterpret_cast<const char*>(record.data()), record.size());
}

Result<std::vector<JournalRecord>> KeptJournal::records() const { return records_of_kept_journal(bytes_); }

Result<std::vector<JournalRecord>> records_of_kept_journal(std::string_view stored) {
  const auto corrupt = make_error_code(wal::errc::corrupt);
  std::vector<JournalRecord> records;
  if (stored.empty()) return records;
  if (stored.front() != kKeptJournalBinary) {
    auto parsed = records_of_journal_json(std::string(stored));
    if (!parsed) return corrupt;
    return std::move(*parsed);
  }
  std::size_t at = 1;
  while (at < stored.size()) {
    if (stored.size() - at < 4) return corrupt;
    std::uint32_t length = 0;
    for (int i = 0; i < 4; ++i) length |= static_cast<std::uint32_t>(static_cast<unsigned char>(stored[at + i])) << (8 * i);
    at += 4;
    if (stored.size() - at < length) return corrupt;
    auto record = decode_record(std::as_bytes(std::span(stored.data() + at, length)));
    if (!record) return corrupt;
    records.push_back(std::move(*record));
    at += length;
  }
  return records;
}

}  // namespace fusee::engine
