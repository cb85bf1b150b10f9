#include "wal/record_reader.hpp"

#include <memory>
#include <vector>

#include "wal/blob_store.hpp"
#include "wal/errc.hpp"
#include "wal/segment_file.hpp"

namespace fusee::wal {

Result<void> read_sections(io::FileSystem& fs, const std::string& wal_dir,
                           std::span<const SectionLocation> sections,
                           const std::map<std::uint64_t, std::uint64_t>& salts, ShardId shard, Lsn first, Lsn last,
                           const RecordVisitor& visit) {
  std::map<std::uint64_t, std::unique_ptr<io::File>> files;
  std::vector<SectionView> decoded;
  for (const auto& location : sections) {
    auto salt = salts.find(location.segment);
    if (salt == salts.end()) return make_error_code(errc::corrupt);
    auto& file = files[location.segment];
    if (!file) file = FUSEE_TRY(fs.open(io::join_path(wal_dir, segment_file_name(location.segment)), {}));
    auto bytes = FUSEE_TRY(read_batch(*file, salt->second, location.batch_offset, location.batch_bytes));
    auto header = decode_batch_header(bytes);
    auto body = std::span<const std::byte>(bytes).subspan(kBatchHeaderBytes, header->body_length);
    if (decode_body(body, header->section_count, decoded)) return make_error_code(errc::corrupt);
    for (const auto& section : decoded) {
      if (section.header.shard != shard || section.header.first_lsn != location.first_lsn) continue;
      for (std::size_t r = 0; r < section.records.size(); ++r) {
        auto lsn = section.header.first_lsn + r;
        if (lsn < first || lsn > last) continue;
        if (!section.blob_refs[r]) {
          visit(lsn, section.records[r]);
          continue;
        }
        auto blob = FUSEE_TRY(read_blob(fs, blob_dir_of(wal_dir), decode_blob_ref(section.records[r].data())));
        visit(lsn, blob);
      }
    }
  }
  return ok();
}

Result<void> read_planned(io::FileSystem& fs, const RecoveryPlan& plan, ShardId shard, Lsn first,
                          const RecordVisitor& visit) {
  if (plan.refused) return make_error_code(errc::corrupt);
  if (shard >= plan.shards.size()) return ok();
  std::vector<SectionLocation> sections;
  for (const auto& section : plan.sections) {
    if (section.shard == shard && section.first_lsn + section.record_count > first) sections.push_back(section);
  }
  std::map<std::uint64_t, std::uint64_t> salts;
  for (const auto& segment : plan.segments) {
    if (segment.header_status == SegmentHeaderStatus::valid) salts[segment.number] = segment.header.salt;
  }
  return read_sections(fs, plan.wal_dir, sections, salts, shard, first, plan.shards[shard].last_lsn, visit);
}

}  // namespace fusee::wal
