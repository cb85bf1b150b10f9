#include "wal/blob_store.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "base/assert.hpp"
#include "base/crc32c.hpp"
#include "wal/errc.hpp"
#include "wal/segment_file.hpp"

namespace fusee::wal {

namespace {

// The bytes a blob occupies in its file: whole blocks, at least one, so every
// blob (even an empty one) has its own block and its own offset.
std::uint64_t region_bytes(std::uint64_t length) {
  return std::max<std::uint64_t>(round_up_to_block(length), kBlockBytes);
}

// Writes all of data at offset: RWF_DSYNC on a direct file (durable on
// return), plain on a buffered one (the caller syncs, under the file's lock).
Result<void> write_all(io::File& file, std::uint64_t offset, std::span<const std::byte> data) {
  return write_fully(file, offset, data, file.direct() ? io::WriteFlags::dsync : io::WriteFlags::none);
}

std::string describe(const BlobRef& ref) {
  return fmt::format("blob at offset {}, length {}", ref.offset, ref.length);
}

Result<std::vector<std::byte>> refuse(std::string* problem, std::string text) {
  if (problem) *problem = std::move(text);
  return make_error_code(errc::corrupt);
}

}  // namespace

// --- BlobRef ---

void encode_blob_ref(const BlobRef& ref, std::byte* out) {
  namespace off = blob_ref_offset;
  store_u64(out + off::file_number, ref.file_number);
  store_u64(out + off::offset, ref.offset);
  store_u64(out + off::length, ref.length);
  store_u32(out + off::crc, ref.crc);
  out[off::kind] = static_cast<std::byte>(ref.kind);
}

BlobRef decode_blob_ref(const std::byte* in) {
  namespace off = blob_ref_offset;
  BlobRef ref;
  ref.file_number = load_u64(in + off::file_number);
  ref.offset = load_u64(in + off::offset);
  ref.length = load_u64(in + off::length);
  ref.crc = load_u32(in + off::crc);
  ref.kind = std::to_integer<std::uint8_t>(in[off::kind]);
  return ref;
}

std::string blob_file_name(std::uint64_t file_number) {
  FUSEE_ASSERT(file_number <= kBlobFileNumberMax, "blob file number has more than ten digits");
  return fmt::format("{:010}.blob", file_number);
}

std::optional<std::uint64_t> parse_blob_file_name(const std::string& name) {
  if (name.size() != 15 || name.compare(10, 5, ".blob") != 0) return std::nullopt;
  std::uint64_t number = 0;
  for (int i = 0; i < 10; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    number = number * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return number;
}

// --- BlobWriter ---

// One blob file of the writer. Created by the first write() into it.
struct BlobWriter::BlobFile {
  std::uint64_t number = 0;
  std::string path;
  // Reserved blobs whose write() has not finished. Guarded by the writer's mutex_.
  std::size_t unwritten = 0;

  // Guards the members below. Held while the file is created (so a second
  // writer cannot return before the directory entry is durable) and around
  // every data sync: after a failed sync, which may have dropped other
  // writers' pages, no later sync may report success over the loss.
  std::mutex mutex;
  std::shared_ptr<io::File> handle;  // shared: a writer keeps it while a reopen replaces it
  std::error_code failed;            // sticky: the first failed create or sync
};

BlobWriter::BlobWriter(io::FileSystem& fs, std::string blob_dir, BlobStoreOptions options,
                       std::uint64_t first_file_number)
    : fs_(fs),
      blob_dir_(std::move(blob_dir)),
      options_(options),
      direct_(options.direct_io),
      file_number_(first_file_number) {
  files_.emplace(file_number_, make_file(file_number_));
}

BlobWriter::~BlobWriter() = default;

std::shared_ptr<BlobWriter::BlobFile> BlobWriter::make_file(std::uint64_t file_number) const {
  auto file = std::make_shared<BlobFile>();
  file->number = file_number;
  file->path = io::join_path(blob_dir_, blob_file_name(file_number));
  return file;
}

Result<std::unique_ptr<BlobWriter>> BlobWriter::open(io::FileSystem& fs, std::string blob_dir,
                                                     BlobStoreOptions options) {
  if (options.file_bytes_max < kBlobFileBytesMin || options.file_bytes_max > kBlobFileBytesMax) {
    return make_error_code(errc::invalid_argument);
  }
  // The parent is synced even when the directory already exists: an earlier
  // open may have created it and failed before its sync, leaving a name that
  // a crash would still undo, blobs and all. One directory sync per open.
  FUSEE_TRY_VOID(fs.create_dir(blob_dir));
  FUSEE_TRY_VOID(fs.sync_dir(io::parent_path(blob_dir)));
  auto numbers = FUSEE_TRY(list_blob_files(fs, blob_dir));
  std::uint64_t first = numbers.empty() ? 1 : numbers.back() + 1;
  if (first > kBlobFileNumberMax) return std::make_error_code(std::errc::value_too_large);
  return std::unique_ptr<BlobWriter>(new BlobWriter(fs, std::move(blob_dir), options, first));
}

Result<BlobRef> BlobWriter::reserve(std::span<const std::byte> bytes) {
  if (bytes.size() > kBlobBytesMax) return make_error_code(errc::record_too_large);
  BlobRef ref;
  ref.length = bytes.size();
  ref.crc = crc32c(bytes);
  ref.kind = bytes.empty() ? 0 : std::to_integer<std::uint8_t>(bytes[0]);
  auto region = region_bytes(ref.length);

  std::lock_guard lock(mutex_);
  // A file that holds nothing yet takes any blob, however large: that is how a
  // blob larger than file_bytes_max ends up alone in its file.
  if (next_offset_ > 0 && next_offset_ + region > options_.file_bytes_max) {
    if (file_number_ >= kBlobFileNumberMax) return std::make_error_code(std::errc::value_too_large);
    auto current = files_.find(file_number_);
    if (current->second->unwritten == 0) files_.erase(current);
    ++file_number_;
    next_offset_ = 0;
    files_.emplace(file_number_, make_file(file_number_));
  }
  ref.file_number = file_number_;
  ref.offset = next_offset_;
  next_offset_ += region;
  ++files_.at(file_number_)->unwritten;
  return ref;
}

Result<void> BlobWriter::write(const BlobRef& ref, std::span<const std::byte> bytes) {
  FUSEE_ASSERT(bytes.size() == ref.length, "blob bytes differ in length from their reservation");
  FUSEE_ASSERT(ref.offset % kBlockBytes == 0, "blob offset is not block-aligned");
  if (options_.verify_writes) FUSEE_ASSERT(crc32c(bytes) == ref.crc, "blob bytes differ from their reservation");
  std::shared_ptr<BlobFile> file;
  {
    std::lock_guard lock(mutex_);
    auto found = files_.find(ref.file_number);
    FUSEE_ASSERT(found != files_.end(), "write of a blob this writer did not reserve");
    file = found->second;
    FUSEE_ASSERT(file->unwritten > 0, "a reserved blob written twice");
  }
  auto result = write_region(*file, ref, bytes);
  {
    std::lock_guard lock(mutex_);
    // The file closes once no reserved blob still needs it.
    if (--file->unwritten == 0 && file->number != file_number_) files_.erase(file->number);
  }
  return result;
}

void BlobWriter::release(const BlobRef& ref) {
  std::lock_guard lock(mutex_);
  auto found = files_.find(ref.file_number);
  FUSEE_ASSERT(found != files_.end(), "release of a blob this writer did not reserve");
  auto& file = found->second;
  FUSEE_ASSERT(file->unwritten > 0, "a reserved blob released twice");
  if (--file->unwritten == 0 && file->number != file_number_) files_.erase(found);
}

Result<void> BlobWriter::write_region(BlobFile& file, const BlobRef& ref,
                                      std::span<const std::byte> bytes) {
  // O_DIRECT needs an aligned buffer of whole blocks; buffered writes take the
  // same padded copy so the file looks the same either way.
  io::AlignedBuffer buffer(static_cast<std::size_t>(region_bytes(ref.length)));
  if (!bytes.empty()) std::memcpy(buffer.data(), bytes.data(), bytes.size());

  auto handle = FUSEE_TRY(file_for_write(file));
  auto written = write_all(*handle, ref.offset, buffer.span());
  if (!written && handle->direct() && written.error() == std::errc::invalid_argument) {
    // Took the open, refused the write: buffered from here on, this write redone.
    handle = FUSEE_TRY(reopen_buffered(file, handle));
    written = write_all(*handle, ref.offset, buffer.span());
  }
  if (!written) return written.error();
  if (!handle->direct()) FUSEE_TRY_VOID(sync_file(file, *handle));
  return ok();
}

Result<std::shared_ptr<io::File>> BlobWriter::file_for_write(BlobFile& file) {
  std::lock_guard lock(file.mutex);
  if (file.failed) return file.failed;
  if (file.handle) return file.handle;
  auto created = create_file(file.path);
  if (!created) {
    file.failed = created.error();
    return created.error();
  }
  file.handle = std::move(created).value();
  return file.handle;
}

Result<std::shared_ptr<io::File>> BlobWriter::create_file(const std::string& path) {
  // Created buffered, then reopened direct: a file system that refuses
  // O_DIRECT may do so only after creating the file, and exclusive (a number
  // no file has, or a bug) would then refuse the buffered retry.
  auto created = FUSEE_TRY(fs_.open(path, {.write = true, .create = true, .exclusive = true}));
  std::unique_ptr<io::File> handle;
  if (direct_.load(std::memory_order_relaxed)) {
    bool direct = false;
    handle = FUSEE_TRY(open_segment_for_write(fs_, path, true, &direct));
    if (!direct) direct_.store(false, std::memory_order_relaxed);
  } else {
    handle = std::move(created);
  }
  FUSEE_TRY_VOID(fs_.sync_dir(blob_dir_));
  return std::shared_ptr<io::File>(std::move(handle));
}

Result<std::shared_ptr<io::File>> BlobWriter::reopen_buffered(
    BlobFile& file, const std::shared_ptr<io::File>& refused) {
  std::lock_guard lock(file.mutex);
  direct_.store(false, std::memory_order_relaxed);
  if (file.failed) return file.failed;
  if (file.handle != refused) return file.handle;  // another writer reopened it first
  auto handle = FUSEE_TRY(fs_.open(file.path, {.write = true}));
  file.handle = std::shared_ptr<io::File>(std::move(handle));
  return file.handle;
}

Result<void> BlobWriter::sync_file(BlobFile& file, io::File& handle) {
  std::lock_guard lock(file.mutex);
  if (file.failed) return file.failed;
  auto synced = handle.sync_data();
  if (!synced) file.failed = synced.error();
  return synced;
}

// --- Reading, listing, deleting ---

Result<std::vector<std::byte>> read_blob(io::FileSystem& fs, const std::string& blob_dir,
                                         const BlobRef& ref, std::string* problem) {
  if (ref.file_number > kBlobFileNumberMax) {
    return refuse(problem, fmt::format("blob file number {} in {} cannot exist: names have ten digits ({})",
                                       ref.file_number, blob_dir, describe(ref)));
  }
  auto path = io::join_path(blob_dir, blob_file_name(ref.file_number));
  if (ref.offset % kBlockBytes != 0) {
    return refuse(problem, fmt::format("blob file {}: the {} is not block-aligned", path, describe(ref)));
  }
  if (ref.length > kBlobBytesMax) {
    return refuse(problem, fmt::format("blob file {}: the {} is longer than the largest blob ({} bytes)",
                                       path, describe(ref), kBlobBytesMax));
  }
  auto opened = fs.open(path, {});
  if (!opened) {
    if (opened.error() == std::errc::no_such_file_or_directory) {
      return refuse(problem, fmt::format("blob file {} is missing ({})", path, describe(ref)));
    }
    if (problem) *problem = fmt::format("blob file {}: cannot open: {}", path, opened.error().message());
    return opened.error();
  }
  auto& file = **opened;
  auto size = file.size();
  if (!size) {
    if (problem) *problem = fmt::format("blob file {}: cannot stat: {}", path, size.error().message());
    return size.error();
  }
  if (*size < ref.offset || *size - ref.offset < ref.length) {
    return refuse(problem, fmt::format("blob file {} is {} bytes, too short for the {}", path, *size,
                                       describe(ref)));
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(ref.length));
  std::size_t done = 0;
  while (done < bytes.size()) {
    auto got = file.read_at(ref.offset + done, std::span(bytes).subspan(done));
    if (!got) {
      if (problem) *problem = fmt::format("blob file {}: cannot read the {}: {}", path, describe(ref),
                                          got.error().message());
      return got.error();
    }
    if (*got == 0) {
      return refuse(problem, fmt::format("blob file {} ended after {} bytes of the {}", path, done,
                                         describe(ref)));
    }
    done += *got;
  }
  auto crc = crc32c(bytes);
  if (crc != ref.crc) {
    return refuse(problem, fmt::format("blob file {}: the {} has CRC-32C {:#010x}, the reference says {:#010x}",
                                       path, describe(ref), crc, ref.crc));
  }
  std::uint8_t kind = bytes.empty() ? 0 : std::to_integer<std::uint8_t>(bytes[0]);
  if (kind != ref.kind) {
    return refuse(problem, fmt::format("blob file {}: the {} is of kind {}, the reference says {}", path,
                                       describe(ref), kind, ref.kind));
  }
  return bytes;
}

Result<std::vector<std::uint64_t>> list_blob_files(io::FileSystem& fs, const std::string& blob_dir) {
  auto names = fs.list(blob_dir);
  if (!names) {
    if (names.error() == std::errc::no_such_file_or_directory) return std::vector<std::uint64_t>{};
    return names.error();
  }
  std::vector<std::uint64_t> numbers;
  for (const auto& name : *names) {
    if (auto number = parse_blob_file_name(name)) numbers.push_back(*number);
  }
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

Result<void> delete_blob_files_except(io::FileSystem& fs, const std::string& blob_dir,
                                      const std::vector<std::uint64_t>& keep) {
  auto names = fs.list(blob_dir);
  if (!names) {
    if (names.error() == std::errc::no_such_file_or_directory) return ok();
    return names.error();
  }
  for (const auto& name : *names) {
    auto number = parse_blob_file_name(name);
    if (!number || std::find(keep.begin(), keep.end(), *number) != keep.end()) continue;
    FUSEE_TRY_VOID(fs.remove(io::join_path(blob_dir, name)));
  }
  // Synced even when nothing was removed here: an earlier call may have
  // removed files and failed before its sync.
  FUSEE_TRY_VOID(fs.sync_dir(blob_dir));
  return ok();
}

}  // namespace fusee::wal
