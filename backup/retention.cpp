#include "backup/retention.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "backup/blob_pack.hpp"
#include "backup/manifest_chain.hpp"

namespace fusee::backup {

Result<Retired> retire_before(BackupTarget& target, const std::string& directory, std::int64_t horizon_ms,
                              std::map<std::string, Snapshot>& snapshots, std::set<std::string>& tables,
                              std::string* problem) {
  Retired retired;
  // The snapshots, oldest first, each description read once.
  auto names = FUSEE_TRY(target.list(kSnapshotPrefix));
  std::erase_if(snapshots, [&](const auto& entry) { return !std::binary_search(names.begin(), names.end(), entry.first); });
  for (const auto& name : names) {
    if (snapshots.contains(name)) continue;
    auto bytes = FUSEE_TRY(target.get(name));
    auto snapshot = bytes ? parse_snapshot(*bytes) : std::nullopt;
    if (!snapshot || snapshot->directory != directory) {
      if (problem) *problem = fmt::format("{}: {} does not read, or is another directory's", target.describe(), name);
      return std::make_error_code(std::errc::invalid_argument);
    }
    snapshots.emplace(name, std::move(*snapshot));
  }
  // The newest taken by the horizon: restores to a moment from the horizon
  // on start from it or a later one.
  std::size_t keep = names.size();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (snapshots.at(names[i]).covers_at_ms <= horizon_ms) keep = i;
  }
  if (keep == names.size()) return retired;
  const auto kept = snapshots.at(names[keep]);
  auto chain = FUSEE_TRY(ManifestChain::list(target, directory, problem));
  // Only once the log it needs is all on the target, so that it can serve.
  if (chain.names().empty() || chain.names().back().last_sequence < kept.covers_sequence) return retired;
  auto start = FUSEE_TRY(chain.start_of(kept.from_sequence, problem));
  if (!start) return retired;
  auto remove = [&](const std::string& name) -> Result<void> {
    FUSEE_TRY_VOID(target.remove(name));
    ++retired.objects;
    return ok();
  };
  // 1. The older snapshots: no restore finds them from here on.
  for (std::size_t i = 0; i < keep; ++i) {
    FUSEE_TRY_VOID(remove(names[i]));
    snapshots.erase(names[i]);
    ++retired.snapshots;
  }
  // 2. The manifests before the log it needs, oldest first, each before the
  // chunks and packs it names: a crash between leaves objects nobody names
  // (swept below, now or at the next retention), never a manifest naming
  // what is gone, which a verify would report as damage.
  for (std::size_t i = 0; i < start->index; ++i) {
    const auto chunks = FUSEE_TRY(chain.at(i, problem))->chunks;
    FUSEE_TRY_VOID(remove(chain.names()[i].name));
    ++retired.manifests;
    for (const auto& chunk : chunks) {
      if (chunk.segment >= start->segment) continue;
      FUSEE_TRY_VOID(remove(chunk.name));
      if (!chunk.blob_pack.empty()) FUSEE_TRY_VOID(remove(chunk.blob_pack));
    }
  }
  // What an earlier retention's crash left: chunks and packs of the
  // segments before the log it needs that no kept manifest names (only the
  // first kept ones can name such a segment: uploads go forward).
  std::set<std::string> still_named;
  for (auto i = start->index; i < chain.names().size(); ++i) {
    bool earlier = false;
    for (const auto& chunk : FUSEE_TRY(chain.at(i, problem))->chunks) {
      if (chunk.segment >= start->segment) continue;
      earlier = true;
      still_named.insert(chunk.name);
      if (!chunk.blob_pack.empty()) still_named.insert(chunk.blob_pack);
    }
    if (!earlier) break;
  }
  for (const char* prefix : {kChunkPrefix, kBlobPackPrefix}) {
    for (const auto& name : FUSEE_TRY(target.list(prefix))) {
      // <prefix><segment, 10 digits>-<offset>
      auto segment = number_of_name(name.substr(0, std::string_view(prefix).size() + 10), prefix);
      if (segment && *segment < start->segment && !still_named.contains(name)) FUSEE_TRY_VOID(remove(name));
    }
  }
  // 3. The store's files that no kept snapshot names: the older snapshots'
  // own files, and table files (those of snapshots a crash cut short too).
  std::set<std::string> named;
  for (std::size_t i = keep; i < names.size(); ++i) {
    for (const auto& file : snapshots.at(names[i]).files) named.insert(file.object);
  }
  for (const auto& name : FUSEE_TRY(target.list(kSnapshotFilePrefix))) {
    // snapfile-<covers, 20 digits>-<file>: only those of snapshots older than the kept one.
    auto covers = number_of_name(name.substr(0, std::string(kSnapshotFilePrefix).size() + 20), kSnapshotFilePrefix);
    if (covers && *covers < kept.covers_sequence && !named.contains(name)) FUSEE_TRY_VOID(remove(name));
  }
  for (const auto& name : FUSEE_TRY(target.list(kStoreTablePrefix))) {
    if (named.contains(name)) continue;
    FUSEE_TRY_VOID(remove(name));
    tables.erase(name);
  }
  return retired;
}

}  // namespace fusee::backup
