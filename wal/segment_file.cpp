#include "wal/segment_file.hpp"

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "wal/errc.hpp"

namespace fusee::wal {

std::string segment_file_name(std::uint64_t segment_number) {
  return fmt::format("{:010}.seg", segment_number);
}

std::optional<std::uint64_t> parse_segment_file_name(const std::string& name) {
  if (name.size() != 14 || name.compare(10, 4, ".seg") != 0) return std::nullopt;
  std::uint64_t number = 0;
  for (int i = 0; i < 10; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    number = number * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return number;
}

Result<std::unique_ptr<io::File>> open_segment_for_write(io::FileSystem& fs, const std::string& path,
                                                         bool direct, bool* direct_out) {
  if (direct) {
    auto file = fs.open(path, {.write = true, .direct = true});
    if (file) {
      *direct_out = true;
      return file;
    }
    // A filesystem that refuses O_DIRECT (tmpfs) answers EINVAL: go buffered.
    if (file.error() != std::errc::invalid_argument) return file.error();
  }
  *direct_out = false;
  return fs.open(path, {.write = true});
}

Result<void> write_fully(io::File& file, std::uint64_t offset, std::span<const std::byte> data,
                         io::WriteFlags flags) {
  std::size_t done = 0;
  while (done < data.size()) {
    auto written = FUSEE_TRY(file.write_at(offset + done, data.subspan(done), flags));
    if (written == 0) return std::make_error_code(std::errc::io_error);
    // A direct file cannot continue from an unaligned point: a short direct
    // write that is not block-aligned is an I/O error.
    if (file.direct() && written % io::kDirectAlignment != 0) return std::make_error_code(std::errc::io_error);
    done += written;
  }
  return ok();
}

Result<void> write_durably(io::File& file, std::uint64_t offset, std::span<const std::byte> data) {
  bool dsync = file.direct();
  FUSEE_TRY_VOID(write_fully(file, offset, data, dsync ? io::WriteFlags::dsync : io::WriteFlags::none));
  if (!dsync) FUSEE_TRY_VOID(file.sync_data());
  return ok();
}

namespace {

// write_durably, and where a direct file refuses the write (the open was
// taken, the write is not: EINVAL), the same write again on the file
// reopened buffered, which stays buffered; *direct_out says so.
Result<void> write_durably_or_buffered(io::FileSystem& fs, const std::string& path, std::unique_ptr<io::File>& file,
                                       std::uint64_t offset, std::span<const std::byte> data, bool* direct_out) {
  auto written = write_durably(*file, offset, data);
  if (written || !file->direct() || written.error() != std::errc::invalid_argument) return written;
  *direct_out = false;
  file = FUSEE_TRY(fs.open(path, {.write = true}));
  return write_durably(*file, offset, data);
}

}  // namespace

Result<void> prepare_segment_file(io::FileSystem& fs, const std::string& wal_dir, std::uint64_t number,
                                  std::uint64_t size_bytes, SegmentPreparation how) {
  auto path = io::join_path(wal_dir, segment_file_name(number));
  const auto* cancel = how.cancel;
  {
    auto created = FUSEE_TRY(fs.open(path, {.write = true, .create = true}));
    FUSEE_TRY_VOID(created->truncate(0));
    FUSEE_TRY_VOID(created->allocate(0, size_bytes));
    FUSEE_TRY_VOID(created->sync_data());
    if (how.allocated != nullptr) how.allocated->store(true);
    if (!how.zero_fill) return fs.sync_dir(wal_dir);
    // The zeros go in small durable steps, O_DIRECT where the file system
    // allows it: the log's own flushes share the disk, and each of them
    // waits behind at most one step, never behind the writeback of a
    // whole segment.
    bool direct = false;
    auto file = FUSEE_TRY(open_segment_for_write(fs, path, true, &direct));
    io::AlignedBuffer zeros(static_cast<std::size_t>(std::min(kPrepareStepBytes, size_bytes)));
    for (std::uint64_t offset = 0; offset < size_bytes; offset += zeros.size()) {
      if (cancel != nullptr && cancel->load(std::memory_order_relaxed))
        return std::make_error_code(std::errc::operation_canceled);
      auto length = static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), size_bytes - offset));
      FUSEE_TRY_VOID(write_durably_or_buffered(fs, path, file, offset, zeros.span().first(length), &direct));
      if (how.zeroed != nullptr) how.zeroed->store(offset + length);
    }
  }
  return fs.sync_dir(wal_dir);
}

Result<std::unique_ptr<io::File>> write_segment_header(io::FileSystem& fs, const std::string& wal_dir,
                                                       const SegmentHeader& header, bool direct, bool* direct_out) {
  auto path = io::join_path(wal_dir, segment_file_name(header.segment_number));
  auto file = FUSEE_TRY(open_segment_for_write(fs, path, direct, direct_out));
  io::AlignedBuffer block(kSegmentHeaderBytes);
  encode_segment_header(header, block.span());
  FUSEE_TRY_VOID(write_durably_or_buffered(fs, path, file, 0, block.span(), direct_out));
  return file;
}

Result<std::unique_ptr<io::File>> create_segment(io::FileSystem& fs, const std::string& wal_dir,
                                                 const SegmentHeader& header, bool direct, bool* direct_out) {
  FUSEE_TRY_VOID(prepare_segment_file(fs, wal_dir, header.segment_number, header.segment_bytes));
  return write_segment_header(fs, wal_dir, header, direct, direct_out);
}

Result<std::unique_ptr<io::File>> create_segment_unzeroed(io::FileSystem& fs, const std::string& wal_dir,
                                                          const SegmentHeader& header, bool direct,
                                                          bool* direct_out) {
  FUSEE_TRY_VOID(prepare_segment_file(fs, wal_dir, header.segment_number, header.segment_bytes, {.zero_fill = false}));
  return write_segment_header(fs, wal_dir, header, direct, direct_out);
}

Result<void> create_empty_log(io::FileSystem& fs, const std::string& parent_dir, std::uint64_t first_sequence,
                              std::uint32_t prev_crc, std::uint64_t segment_bytes, bool direct, std::uint64_t salt,
                              bool replicated) {
  auto staging_dir = io::join_path(parent_dir, "wal.new");
  FUSEE_TRY_VOID(fs.create_dir(staging_dir));
  SegmentHeader header{1, salt, first_sequence, segment_bytes, prev_crc, replicated};
  bool direct_out = false;
  FUSEE_TRY_VOID(create_segment(fs, staging_dir, header, direct, &direct_out));
  FUSEE_TRY_VOID(fs.rename(staging_dir, io::join_path(parent_dir, "wal")));
  return fs.sync_dir(parent_dir);
}

}  // namespace fusee::wal
