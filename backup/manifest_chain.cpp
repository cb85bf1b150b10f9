#include "backup/manifest_chain.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace fusee::backup {

Result<ManifestChain> ManifestChain::list(BackupTarget& target, std::string directory, std::string* problem) {
  ManifestChain chain(target, std::move(directory));
  auto names = target.list(kManifestPrefix);
  if (!names) return Result<ManifestChain>(boost::system::in_place_error, names.error());
  for (auto& name : *names) {
    auto last = number_of_name(name, kManifestPrefix);
    if (!last) {
      if (problem) *problem = fmt::format("{}: {} is not a manifest's name", target.describe(), name);
      return Result<ManifestChain>(boost::system::in_place_error, std::make_error_code(std::errc::invalid_argument));
    }
    chain.names_.push_back(ManifestName{*last, std::move(name)});
  }
  return chain;
}

Result<const Manifest*> ManifestChain::at(std::size_t index, std::string* problem) {
  if (auto found = read_.find(index); found != read_.end()) return &found->second;
  const auto& name = names_.at(index).name;
  auto bytes = FUSEE_TRY(target_->get(name));
  auto manifest = bytes ? parse_manifest(*bytes) : std::nullopt;
  if (!manifest || manifest->directory != directory_) {
    if (problem) {
      *problem = fmt::format("{}: manifest {} does not read, or is another directory's", target_->describe(), name);
    }
    return std::make_error_code(std::errc::invalid_argument);
  }
  return &read_.emplace(index, std::move(*manifest)).first->second;
}

Result<std::optional<LogStart>> ManifestChain::start_of(std::uint64_t from, std::string* problem) {
  using Out = std::optional<LogStart>;
  // The manifest that names batch `from` (names are their last batches).
  auto at_name = std::lower_bound(names_.begin(), names_.end(), from, [](const ManifestName& name, std::uint64_t sequence) {
    return name.last_sequence < sequence;
  });
  if (at_name == names_.end()) return Out();
  LogStart start{static_cast<std::size_t>(at_name - names_.begin()), 0};
  const auto* holding = FUSEE_TRY(at(start.index, problem));
  if (holding->batches.front().sequence > from) return Out();  // a gap before it
  for (const auto& batch : holding->batches) {
    if (batch.sequence == from) start.segment = batch.segment;
  }
  // Back to where that segment's chunks begin.
  while (start.index > 0) {
    const auto* previous = FUSEE_TRY(at(start.index - 1, problem));
    bool names_it = false;
    for (const auto& chunk : previous->chunks) names_it = names_it || chunk.segment >= start.segment;
    if (!names_it) break;
    --start.index;
  }
  return Out(start);
}

}  // namespace fusee::backup
