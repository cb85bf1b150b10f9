#include "backup/snapshot.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/crc32c.hpp"
#include "wal/segment_file.hpp"

namespace fusee::backup {
namespace {

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

}  // namespace

Result<std::vector<std::byte>> read_range(io::FileSystem& fs, const std::string& path, std::uint64_t offset,
                                          std::uint64_t bytes) {
  auto file = FUSEE_TRY(fs.open(path, {}));
  std::vector<std::byte> out(bytes);
  std::size_t done = 0;
  while (done < out.size()) {
    auto got = FUSEE_TRY(file->read_at(offset + done, std::span(out).subspan(done)));
    if (got == 0) return std::make_error_code(std::errc::io_error);  // shorter than said
    done += got;
  }
  return out;
}

Result<std::optional<SnapshotTaken>> take_snapshot(io::FileSystem& fs, SnapshotSource source, BackupTarget& target,
                                                   const std::string& directory, std::set<std::string>& tables,
                                                   std::map<std::string, std::uint32_t>& table_crcs,
                                                   std::string* problem) {
  // The oldest batch any checkpoint needs, read before the copy: a later
  // checkpoint only moves it forward, so the log from here serves the copy.
  std::uint64_t from = UINT64_MAX;
  for (std::uint32_t shard = 0; shard < source.shards; ++shard) {
    auto checkpoint = FUSEE_TRY(source.store.checkpoint(shard));
    from = std::min<std::uint64_t>(from, checkpoint ? std::max<std::uint64_t>(1, checkpoint->keep_from_sequence) : 1);
  }
  auto copy = FUSEE_TRY(source.store.live_copy());
  // Read after the copy: every checkpoint in it was durable, so its batch
  // was published by now.
  const auto covers = source.published_sequence();
  const auto at_ms = source.now_ms();
  if (covers == 0) return std::optional<SnapshotTaken>();
  SnapshotTaken taken;
  taken.snapshot.directory = directory;
  taken.snapshot.covers_sequence = covers;
  taken.snapshot.covers_at_ms = at_ms;
  // A checkpoint taken when its shard had nothing pending needs the next
  // batch, which may not exist yet: the restore then keeps the last one.
  taken.snapshot.from_sequence = std::min(from, covers);
  for (const auto& file : copy->files) {
    SnapshotFile out{file.name, "", file.bytes};
    if (file.immutable) {
      out.object = store_table_name(copy->store_id, file.number, file.bytes);
      if (!tables.contains(out.object)) {
        auto bytes = FUSEE_TRY(read_range(fs, file.path, 0, file.bytes));
        FUSEE_TRY_VOID(target.put(out.object, bytes));
        tables.insert(out.object);
        table_crcs[out.object] = crc32c(bytes);
        taken.bytes += bytes.size();
      } else if (!table_crcs.contains(out.object)) {
        // On the target since before this process: its CRC from the local
        // file, which is the same bytes (a table file is never rewritten),
        // once.
        auto bytes = FUSEE_TRY(read_range(fs, file.path, 0, file.bytes));
        table_crcs[out.object] = crc32c(bytes);
      }
      out.crc32c = table_crcs[out.object];
    } else {
      out.object = snapshot_file_name(covers, file.name);
      if (file.contents) {
        out.bytes = file.contents->size();
        out.crc32c = crc32c(bytes_of(*file.contents));
        FUSEE_TRY_VOID(target.put(out.object, bytes_of(*file.contents)));
      } else {
        // The copy ends where the store said; it may have appended since.
        auto bytes = FUSEE_TRY(read_range(fs, file.path, 0, file.bytes));
        out.crc32c = crc32c(bytes);
        FUSEE_TRY_VOID(target.put(out.object, bytes));
      }
      taken.bytes += out.bytes;
    }
    taken.snapshot.files.push_back(std::move(out));
  }
  copy.reset();  // the store may delete its old files again
  // The description last: a restore finds only snapshots whose files are all there.
  taken.name = snapshot_name(covers);
  auto json = snapshot_json(taken.snapshot);
  if (!FUSEE_TRY(target.put_new(taken.name, bytes_of(json)))) {
    // Ours from an upload whose answer was lost, or another directory's.
    auto there = FUSEE_TRY(target.get(taken.name));
    auto theirs = there ? parse_snapshot(*there) : std::nullopt;
    if (!theirs || theirs->directory != directory) {
      if (problem) {
        *problem = fmt::format("{} holds {} written by another data directory ({}): two directories write one target",
                               target.describe(), taken.name, theirs ? theirs->directory : "unreadable");
      }
      return std::make_error_code(std::errc::operation_not_permitted);
    }
    FUSEE_TRY_VOID(target.put(taken.name, bytes_of(json)));
  }
  taken.bytes += json.size();
  return std::optional<SnapshotTaken>(std::move(taken));
}

Result<void> restore_snapshot(io::FileSystem& fs, BackupTarget& target, const Snapshot& snapshot,
                              const std::string& runs_dir, std::string* problem, bool write,
                              std::uint64_t* bytes_read) {
  if (write && !FUSEE_TRY(fs.exists(runs_dir))) FUSEE_TRY_VOID(fs.create_dir(runs_dir));
  for (const auto& file : snapshot.files) {
    auto bytes = FUSEE_TRY(target.get(file.object));
    if (!bytes || bytes->size() != file.bytes) {
      if (problem) {
        *problem = fmt::format("{}: {} of snapshot {} is missing or not {} bytes", target.describe(), file.object,
                               snapshot.covers_sequence, file.bytes);
      }
      return std::make_error_code(std::errc::invalid_argument);
    }
    if (bytes_read) *bytes_read += bytes->size();
    if (file.crc32c && crc32c(*bytes) != *file.crc32c) {
      if (problem) {
        *problem = fmt::format("{}: {} of snapshot {} is damaged: its CRC-32C is {:08x}, the snapshot says {:08x}",
                               target.describe(), file.object, snapshot.covers_sequence, crc32c(*bytes), *file.crc32c);
      }
      return std::make_error_code(std::errc::invalid_argument);
    }
    if (!write) continue;
    auto out = FUSEE_TRY(
        fs.open(io::join_path(runs_dir, file.name), {.write = true, .create = true, .exclusive = true}));
    FUSEE_TRY_VOID(wal::write_durably(*out, 0, *bytes));
  }
  return write ? fs.sync_dir(runs_dir) : ok();
}

}  // namespace fusee::backup
