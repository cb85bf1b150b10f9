// The blob area's storage: records too large for a batch live in append-only
// files in <wal>/blobs/, and a batch carries a BlobRef to them instead of the
// bytes (DESIGN.md §3, "Blob area"). This file writes, reads, lists and
// deletes those files through the FileSystem seam; it knows nothing of
// batches, shards or the chain. The log decides what to offload, when a
// section may enter a batch, and which files are still referenced.
//
// Thread-safety: a BlobWriter's reserve() and write() may be called from
// several threads at once. The free functions keep no state. Nothing here
// locks the directory against another process: one BlobWriter per blob
// directory at a time, which the log's own exclusive open provides.
// Lifetimes: the FileSystem must outlive the BlobWriter, and every write()
// must have returned before the BlobWriter is destroyed.
//
// A blob file:  [blob, zero padding to 4 KiB][blob, padding]...
// Blobs are raw record bytes, no header: the BlobRef carries the length, the
// CRC-32C and the record's first byte, and read_blob checks all three.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "wal/io/file_system.hpp"
#include "wal/limits.hpp"
#include "wal/log_format.hpp"

namespace fusee::wal {

// --- Limits ---

// The largest blob. write() copies the record into an aligned buffer and
// read_blob allocates ref.length bytes, so one blob pins at most twice this in
// memory; it also caps what a damaged length could make read_blob allocate.
inline constexpr std::uint64_t kBlobBytesMax = 256 * kMiB;

// A blob file rolls once the next blob would take it past file_bytes_max.
// Default: large enough that rolls (one create and one directory sync each)
// are rare, small enough that retirement frees space in useful steps.
inline constexpr std::uint64_t kBlobFileBytesDefault = 256 * kMiB;
// One block: any smaller and no blob but an oversized one would fit. Tests use
// small values to get many rolls.
inline constexpr std::uint64_t kBlobFileBytesMin = kBlockBytes;
// A file is deleted only once no live batch references any blob in it, so a
// larger file keeps dead bytes on disk longer.
inline constexpr std::uint64_t kBlobFileBytesMax = 4096 * kMiB;

// File names carry ten digits, so that names sort as numbers do.
inline constexpr std::uint64_t kBlobFileNumberMax = 9'999'999'999;

// --- The reference a batch carries (part of the log format) ---

// Where a large record's bytes live. Carried in a log batch instead of the bytes.
struct BlobRef {
  std::uint64_t file_number = 0;  // blobs/<file_number as 10 digits>.blob
  std::uint64_t offset = 0;       // multiple of kBlockBytes
  std::uint64_t length = 0;       // bytes of the record
  std::uint32_t crc = 0;          // CRC-32C of the record's bytes
  std::uint8_t kind = 0;          // the record's first byte (0 for an empty record): a cheap cross-check
  friend bool operator==(const BlobRef&, const BlobRef&) = default;
};

// Encoded BlobRef, little-endian, no padding.
namespace blob_ref_offset {
inline constexpr std::size_t file_number = 0;  // u64
inline constexpr std::size_t offset = 8;       // u64
inline constexpr std::size_t length = 16;      // u64
inline constexpr std::size_t crc = 24;         // u32
inline constexpr std::size_t kind = 28;        // u8
}  // namespace blob_ref_offset
// kBlobRefBytes (wal/log_format.hpp) is the encoded size.
static_assert(blob_ref_offset::kind + 1 == kBlobRefBytes);

// Writes kBlobRefBytes at out.
void encode_blob_ref(const BlobRef& ref, std::byte* out);
// Reads kBlobRefBytes at in. Any bytes decode; read_blob judges the result.
BlobRef decode_blob_ref(const std::byte* in);

// "0000000007.blob" for file 7.
std::string blob_file_name(std::uint64_t file_number);
// The number in a blob file name, or nullopt for any other name.
std::optional<std::uint64_t> parse_blob_file_name(const std::string& name);

// --- Writing ---

struct BlobStoreOptions {
  // Roll to a new file once a file would pass this. A blob larger than it
  // still gets written, alone in its file. In [kBlobFileBytesMin, kBlobFileBytesMax].
  std::uint64_t file_bytes_max = kBlobFileBytesDefault;
  // O_DIRECT + RWF_DSYNC writes where the file system allows them; else
  // buffered writes + fdatasync. The first EINVAL (at open or at a write)
  // switches the writer to buffered for good, and the refused write is redone.
  bool direct_io = true;
  // Checksums each blob again in write() against its reservation: O(bytes),
  // for tests (LogOptions::verify_writes).
  bool verify_writes = false;
};

// Appends blobs to numbered files in a blob directory. Each open starts a new
// file, numbered one past the highest file present; a file rolls past
// options.file_bytes_max; a file is never appended to by a later open.
//
// Durability contract: once write(ref, ...) returns ok, the blob's bytes and
// the directory entry of its file are durable, so a batch may reference ref.
// Until then a crash may lose the blob, its file, or leave an empty or partly
// written file; no batch references those, and the log deletes them.
// A failed write() is returned to the caller (the log poisons itself); after a
// failed sync or create, every later write() to that file fails too, because a
// failed fdatasync may have dropped other writers' data and the next one would
// not say so.
class BlobWriter {
 public:
  // Creates blob_dir if missing and syncs its parent (on every open, so a
  // directory left unsynced by a failed open is made durable too), and picks
  // the first file number. No file is created until the first write(). errc::invalid_argument
  // for options out of range.
  static Result<std::unique_ptr<BlobWriter>> open(io::FileSystem& fs, std::string blob_dir,
                                                  BlobStoreOptions options);

  BlobWriter(const BlobWriter&) = delete;
  BlobWriter& operator=(const BlobWriter&) = delete;
  ~BlobWriter();

  // Reserves the place for a record: its own 4 KiB-aligned region of the
  // current file (rolling first if the region would pass file_bytes_max; an
  // empty record still takes one block). No I/O: a new file is created by
  // the first write() into it. Returns the ref, with crc and kind computed
  // from bytes. errc::record_too_large past kBlobBytesMax.
  Result<BlobRef> reserve(std::span<const std::byte> bytes);

  // Writes a reserved blob's bytes (the same bytes given to reserve) and makes
  // them durable, with the directory entry of its file when the file is new.
  // Call once per reserved ref. Writes to different refs may run at once.
  Result<void> write(const BlobRef& ref, std::span<const std::byte> bytes);

  // Gives back a reservation that will never be written (its append was
  // refused, or the log poisoned before the write): without it the file
  // would wait for the write forever, keeping its descriptor open past its
  // retirement. Call at most once per ref, and never after write(ref).
  void release(const BlobRef& ref);

  // Whether a file may still receive a blob: it is the file reserve()
  // places blobs in now (or a later one), or it holds a reservation not yet
  // written or released. Retirement must keep such a file: a reservation
  // is made before the log records its reference under its own lock, and
  // this is what makes it visible to retirement in that gap.
  bool in_use(std::uint64_t file_number) const {
    std::lock_guard lock(mutex_);
    return file_number >= file_number_ || files_.contains(file_number);
  }

  // Whether writes still go O_DIRECT (false once the file system refused it),
  // so the log can say once that it fell back.
  bool direct_io() const { return direct_.load(std::memory_order_relaxed); }

 private:
  struct BlobFile;

  BlobWriter(io::FileSystem& fs, std::string blob_dir, BlobStoreOptions options,
             std::uint64_t first_file_number);

  Result<void> write_region(BlobFile& file, const BlobRef& ref, std::span<const std::byte> bytes);
  Result<std::shared_ptr<io::File>> file_for_write(BlobFile& file);
  Result<std::shared_ptr<io::File>> create_file(const std::string& path);
  Result<std::shared_ptr<io::File>> reopen_buffered(BlobFile& file,
                                                    const std::shared_ptr<io::File>& refused);
  Result<void> sync_file(BlobFile& file, io::File& handle);
  std::shared_ptr<BlobFile> make_file(std::uint64_t file_number) const;

  io::FileSystem& fs_;
  const std::string blob_dir_;
  const BlobStoreOptions options_;
  std::atomic<bool> direct_;

  mutable std::mutex mutex_;  // guards the members below
  std::uint64_t file_number_;  // the current file, where reserve() places blobs
  std::uint64_t next_offset_ = 0;
  // The current file, and older ones with reserved blobs not yet written.
  std::map<std::uint64_t, std::shared_ptr<BlobFile>> files_;
};

// --- Reading, listing, deleting ---

// Reads and checks a blob: the file exists and is long enough, the offset is
// block-aligned, the CRC and kind match. errc::corrupt (or the I/O error)
// otherwise; `problem` (if given) gets a description naming the file and what
// is wrong.
Result<std::vector<std::byte>> read_blob(io::FileSystem& fs, const std::string& blob_dir,
                                         const BlobRef& ref, std::string* problem = nullptr);

// The numbers of the blob files present, sorted (other names are ignored). A
// missing blob_dir has none.
Result<std::vector<std::uint64_t>> list_blob_files(io::FileSystem& fs, const std::string& blob_dir);

// Deletes the blob files whose numbers are not in `keep`, then syncs the
// directory so the deletions are durable. A missing blob_dir has none to delete.
Result<void> delete_blob_files_except(io::FileSystem& fs, const std::string& blob_dir,
                                      const std::vector<std::uint64_t>& keep);

}  // namespace fusee::wal
