#include "replica/replica_store.hpp"

#include <algorithm>
#include <cstring>

#include "base/assert.hpp"
#include "base/crc32c.hpp"
#include "wal/log_format.hpp"

namespace fusee::replica {

namespace {

constexpr std::uint32_t kRecordMagic = 0x314c5246;  // "FRL1" read little-endian

std::string replica_dir(const std::string& dir) { return io::join_path(dir, "replica"); }
std::string path_in(const std::string& dir, const char* name) { return io::join_path(replica_dir(dir), name); }

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

Result<void> write_all(io::File& file, std::uint64_t offset, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const std::size_t written = FUSEE_TRY(file.write_at(offset, bytes, io::WriteFlags::none));
    if (written == 0) return std::make_error_code(std::errc::io_error);
    offset += written;
    bytes = bytes.subspan(written);
  }
  return ok();
}

Result<std::string> read_text(io::FileSystem& fs, const std::string& path) {
  auto file = FUSEE_TRY(fs.open(path, {}));
  const std::uint64_t size = FUSEE_TRY(file->size());
  std::string text(size, '\0');
  if (size > 0) FUSEE_TRY(file->read_at(0, std::as_writable_bytes(std::span(text))));
  return text;
}

Result<void> create_marker(io::FileSystem& fs, const std::string& path, const std::string& text) {
  auto file = FUSEE_TRY(fs.open(path, {.write = true, .create = true}));
  FUSEE_TRY_VOID(file->truncate(0));
  FUSEE_TRY_VOID(write_all(*file, 0, std::as_bytes(std::span(text))));
  FUSEE_TRY_VOID(file->sync_data());
  return ok();
}

class StoreCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "fusee.replica"; }
  std::string message(int value) const override {
    switch (static_cast<StoreErrc>(value)) {
      case StoreErrc::foreign_cluster: return "the directory is a replica of another cluster";
      case StoreErrc::already_initialized: return "the directory is already a replica of a cluster";
      case StoreErrc::payload_too_large: return "a batch is larger than a replica's record may be";
    }
    return "unknown replica store error";
  }
};

}  // namespace

const std::error_category& store_category() {
  static const StoreCategory category;
  return category;
}

std::uint32_t encode_record(const replication::Entry& entry, std::uint32_t prev_crc, std::vector<std::byte>& out) {
  const std::size_t at = out.size();
  out.resize(at + kRecordHeaderBytes + entry.payload.size());
  std::byte* record = out.data() + at;
  wal::store_u32(record, kRecordMagic);
  wal::store_u64(record + 8, entry.seq);
  wal::store_u64(record + 16, entry.view);
  wal::store_u64(record + 24, entry.acked);
  wal::store_u32(record + 32, prev_crc);
  wal::store_u32(record + 36, static_cast<std::uint32_t>(entry.payload.size()));
  std::memcpy(record + kRecordHeaderBytes, entry.payload.data(), entry.payload.size());
  const std::uint32_t crc =
      crc32c(std::span<const std::byte>(record + 8, kRecordHeaderBytes - 8 + entry.payload.size()));
  wal::store_u32(record + 4, crc);
  return crc;
}

ReadChain read_chain(std::span<const std::byte> image) {
  ReadChain chain;
  std::uint64_t offset = 0;
  std::uint32_t prev_crc = 0;
  auto damaged = [&](std::string what) {
    chain.damaged = true;
    chain.damage = what + " at offset " + std::to_string(offset) + " (after batch " +
                   std::to_string(chain.entries.size()) + ")";
    return chain;
  };
  while (offset < image.size()) {
    const auto rest = image.subspan(offset);
    // Zeros shorter than a header are no record: the tail of an append
    // that did not land. Anything longer that is not the next record is
    // damage -- zeros included, since a sector that reads back as zeros
    // looks exactly like that, and a replica that took it for the log's
    // end would vouch without a batch it acknowledged.
    if (rest.size() < kRecordHeaderBytes) {
      if (all_zero(rest)) return chain;
      return damaged("a partial record header");
    }
    const auto header = rest.first(kRecordHeaderBytes);
    if (all_zero(header)) return damaged(all_zero(rest) ? "a zeroed tail" : "zeros where a record should be");
    const std::uint32_t length = wal::load_u32(&header[36]);
    if (wal::load_u32(&header[0]) != kRecordMagic || length > kRecordPayloadBytesMax ||
        rest.size() < kRecordHeaderBytes + length ||
        crc32c(rest.subspan(8, kRecordHeaderBytes - 8 + length)) != wal::load_u32(&header[4])) {
      return damaged("a record that fails its checksum or is cut short");
    }
    replication::Entry entry;
    entry.seq = wal::load_u64(&header[8]);
    entry.view = wal::load_u64(&header[16]);
    entry.acked = wal::load_u64(&header[24]);
    // A whole record that does not follow: nothing writes one (a cut is
    // durable before anything past it), so it is damage too.
    if (entry.seq != chain.entries.size() + 1 || wal::load_u32(&header[32]) != prev_crc) {
      return damaged("a record that does not follow the one before");
    }
    entry.payload.assign(reinterpret_cast<const char*>(&rest[kRecordHeaderBytes]), length);
    prev_crc = wal::load_u32(&header[4]);
    offset += kRecordHeaderBytes + length;
    chain.entries.push_back(std::move(entry));
    chain.ends.push_back(offset);
    chain.crcs.push_back(prev_crc);
  }
  return chain;
}

Result<StoreInspection> inspect_store(io::FileSystem& fs, const std::string& dir) {
  StoreInspection inspection;
  if (!FUSEE_TRY(fs.exists(path_in(dir, "cluster")))) return inspection;
  inspection.cluster = FUSEE_TRY(read_text(fs, path_in(dir, "cluster")));
  inspection.suspect_marked = FUSEE_TRY(fs.exists(path_in(dir, "suspect")));
  if (inspection.suspect_marked) inspection.suspect_note = FUSEE_TRY(read_text(fs, path_in(dir, "suspect")));
  if (!FUSEE_TRY(fs.exists(path_in(dir, "log")))) return inspection;
  auto file = FUSEE_TRY(fs.open(path_in(dir, "log"), {}));
  inspection.file_bytes = FUSEE_TRY(file->size());
  std::vector<std::byte> image(inspection.file_bytes);
  if (!image.empty()) FUSEE_TRY(file->read_at(0, image));
  inspection.chain = read_chain(image);
  return inspection;
}

Result<void> ReplicaStore::initialize(io::FileSystem& fs, const std::string& dir, const std::string& cluster,
                                      bool rebuild) {
  FUSEE_TRY_VOID(fs.create_dir(dir));
  FUSEE_TRY_VOID(fs.create_dir(replica_dir(dir)));
  auto lock = FUSEE_TRY(fs.lock_exclusive(path_in(dir, "lock")));
  if (FUSEE_TRY(fs.exists(path_in(dir, "cluster")))) return make_error_code(StoreErrc::already_initialized);
  if (rebuild) FUSEE_TRY_VOID(create_marker(fs, path_in(dir, "suspect"), "rebuilt\n"));
  auto log = FUSEE_TRY(fs.open(path_in(dir, "log"), {.write = true, .create = true}));
  FUSEE_TRY_VOID(log->truncate(0));
  FUSEE_TRY_VOID(log->sync_data());
  // Written last: until it is durable the directory is no cluster's.
  FUSEE_TRY_VOID(create_marker(fs, path_in(dir, "cluster.new"), cluster));
  FUSEE_TRY_VOID(fs.rename(path_in(dir, "cluster.new"), path_in(dir, "cluster")));
  FUSEE_TRY_VOID(fs.sync_dir(replica_dir(dir)));
  FUSEE_TRY_VOID(fs.sync_dir(dir));
  FUSEE_TRY_VOID(fs.sync_dir(io::parent_path(dir)));  // dir itself may be new
  return ok();
}

ReplicaStore::ReplicaStore(io::FileSystem& fs, std::string dir) : fs_(fs), dir_(std::move(dir)) {}

Result<std::unique_ptr<ReplicaStore>> ReplicaStore::open(io::FileSystem& fs, const std::string& dir,
                                                         const std::string& cluster, StoreRecovery& recovered) {
  recovered = {};
  std::unique_ptr<ReplicaStore> store(new ReplicaStore(fs, dir));
  FUSEE_TRY_VOID(fs.create_dir(dir));
  FUSEE_TRY_VOID(fs.create_dir(replica_dir(dir)));
  store->lock_ = FUSEE_TRY(fs.lock_exclusive(path_in(dir, "lock")));
  if (!FUSEE_TRY(fs.exists(path_in(dir, "cluster")))) {
    recovered.log.wiped = true;
    return store;
  }
  if (FUSEE_TRY(read_text(fs, path_in(dir, "cluster"))) != cluster) return make_error_code(StoreErrc::foreign_cluster);
  recovered.log.suspect = FUSEE_TRY(fs.exists(path_in(dir, "suspect")));
  store->file_ = FUSEE_TRY(fs.open(path_in(dir, "log"), {.write = true, .create = true}));
  // Pages a failed sync left clean in the cache are not on the disk.
  FUSEE_TRY_VOID(store->file_->drop_cache());
  const std::uint64_t size = FUSEE_TRY(store->file_->size());
  std::vector<std::byte> image(size);
  if (size > 0) FUSEE_TRY(store->file_->read_at(0, image));
  ReadChain chain = read_chain(image);
  if (chain.damaged && !recovered.log.suspect) {
    // Remembered before the cut makes the damage invisible: only a
    // primary's whole log repairs it.
    FUSEE_TRY_VOID(create_marker(fs, path_in(dir, "suspect"), chain.damage + "\n"));
    FUSEE_TRY_VOID(fs.sync_dir(replica_dir(dir)));
    recovered.log.suspect = true;
  }
  const std::uint64_t end_bytes = chain.ends.empty() ? 0 : chain.ends.back();
  if (end_bytes < size) FUSEE_TRY_VOID(store->file_->truncate(end_bytes));
  // What the core is handed must be durable: it may acknowledge it at once.
  FUSEE_TRY_VOID(store->file_->sync_data());
  recovered.damage = chain.damage;
  recovered.log.entries = std::move(chain.entries);
  store->ends_ = std::move(chain.ends);
  store->crcs_ = std::move(chain.crcs);
  return store;
}

Result<void> ReplicaStore::apply(const replication::DiskWrite& write) {
  if (!file_) {
    // A wiped directory the core has been told was rebuilt writes nothing
    // until it is: rebuilding is the operator's, offline.
    return std::make_error_code(std::errc::operation_not_permitted);
  }
  FUSEE_ASSERT(write.keep_through <= ends_.size(), "a cut within the log");
  for (const replication::Entry& entry : write.entries) {
    if (entry.payload.size() > kRecordPayloadBytesMax) return make_error_code(StoreErrc::payload_too_large);
  }
  if (write.keep_through < ends_.size()) {
    ends_.resize(write.keep_through);
    crcs_.resize(write.keep_through);
    // Durable before anything is written past the cut: records are of any
    // length, so a crash that kept the new ones but not the cut would leave
    // pieces of the old past their end, which read as a torn record -- and
    // a replica that finds one is suspect. Cuts are rare (a divergent tail).
    FUSEE_TRY_VOID(file_->truncate(ends_.empty() ? 0 : ends_.back()));
    FUSEE_TRY_VOID(file_->sync_data());
  }
  if (write.entries.empty()) return ok();
  std::vector<std::byte> bytes;
  const std::uint64_t at = ends_.empty() ? 0 : ends_.back();
  std::uint64_t end = at;
  for (const replication::Entry& entry : write.entries) {
    FUSEE_ASSERT(entry.seq == ends_.size() + 1, "batches follow the log");
    const std::uint32_t crc = encode_record(entry, crcs_.empty() ? 0 : crcs_.back(), bytes);
    end = at + bytes.size();
    ends_.push_back(end);
    crcs_.push_back(crc);
  }
  return write_all(*file_, at, bytes);
}

Result<void> ReplicaStore::sync() {
  if (!file_) return ok();
  return file_->sync_data();
}

Result<void> ReplicaStore::finish(const replication::DiskWrite& write) {
  if (!write.repaired || !FUSEE_TRY(fs_.exists(path_in(dir_, "suspect")))) return ok();
  FUSEE_TRY_VOID(fs_.remove(path_in(dir_, "suspect")));
  return fs_.sync_dir(replica_dir(dir_));
}

}  // namespace fusee::replica
