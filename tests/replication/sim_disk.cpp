#include "tests/replication/sim_disk.hpp"

#include <algorithm>
#include <cstring>

#include "base/assert.hpp"
#include "base/crc32c.hpp"
#include "wal/log_format.hpp"

namespace fusee::testing::replication_sim {

namespace {

constexpr std::uint32_t kSlotMagic = 0x31535246;  // "FRS1" read little-endian

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

std::span<const std::byte> as_bytes(const std::string& text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

}  // namespace

std::vector<std::byte> encode_slot(const replication::Entry& entry, std::uint32_t prev_crc,
                                   std::uint32_t& crc_out) {
  FUSEE_ASSERT(entry.payload.size() <= kPayloadBytesMax, "a simulated batch fits a slot");
  std::vector<std::byte> slot(kSlotBytes);
  wal::store_u32(&slot[0], kSlotMagic);
  wal::store_u64(&slot[8], entry.seq);
  wal::store_u64(&slot[16], entry.view);
  wal::store_u64(&slot[24], entry.acked);
  wal::store_u32(&slot[32], prev_crc);
  wal::store_u32(&slot[36], static_cast<std::uint32_t>(entry.payload.size()));
  std::memcpy(&slot[kSlotHeaderBytes], entry.payload.data(), entry.payload.size());
  crc_out = crc32c(std::span<const std::byte>(slot).subspan(8, kSlotHeaderBytes - 8 + entry.payload.size()));
  wal::store_u32(&slot[4], crc_out);
  return slot;
}

Chain read_chain(std::span<const std::byte> image) {
  Chain chain;
  std::uint32_t prev_crc = 0;
  for (std::uint64_t index = 0;; ++index) {
    const std::uint64_t offset = index * kSlotBytes;
    if (offset + kSlotBytes > image.size()) {
      if (offset < image.size() && !all_zero(image.subspan(offset))) {
        chain.damaged = true;
        chain.damage = "a partial slot at offset " + std::to_string(offset);
      }
      return chain;
    }
    const auto slot = image.subspan(offset, kSlotBytes);
    if (all_zero(slot)) return chain;
    const std::uint32_t length = wal::load_u32(&slot[36]);
    const bool framed = wal::load_u32(&slot[0]) == kSlotMagic && length <= kPayloadBytesMax;
    const std::uint32_t crc =
        framed ? crc32c(slot.subspan(8, kSlotHeaderBytes - 8 + length)) : 0;
    if (!framed || crc != wal::load_u32(&slot[4])) {
      chain.damaged = true;
      chain.damage = "slot " + std::to_string(index) + " fails its checksum";
      return chain;
    }
    replication::Entry entry;
    entry.seq = wal::load_u64(&slot[8]);
    entry.view = wal::load_u64(&slot[16]);
    entry.acked = wal::load_u64(&slot[24]);
    if (entry.seq != index + 1 || wal::load_u32(&slot[32]) != prev_crc) return chain;  // stale
    entry.payload.assign(reinterpret_cast<const char*>(&slot[kSlotHeaderBytes]), length);
    chain.entries.push_back(std::move(entry));
    chain.crcs.push_back(crc);
    prev_crc = crc;
  }
}

Result<void> SimDisk::initialize(io::FileSystem& fs, bool suspect) {
  if (!FUSEE_TRY(fs.exists(kReplicaDir))) {
    FUSEE_TRY_VOID(fs.create_dir(kReplicaDir));
    FUSEE_TRY_VOID(fs.sync_dir("/"));
  }
  if (suspect) {
    auto marker = FUSEE_TRY(fs.open(kSuspectPath, {.write = true, .create = true}));
    FUSEE_TRY_VOID(marker->sync_data());
  }
  auto log = FUSEE_TRY(fs.open(kLogPath, {.write = true, .create = true}));
  FUSEE_TRY_VOID(log->truncate(0));
  FUSEE_TRY_VOID(log->sync_data());
  auto cluster = FUSEE_TRY(fs.open(kClusterPath, {.write = true, .create = true}));
  const std::string id = "fusee-sim-cluster";
  FUSEE_TRY_VOID(cluster->write_at(0, as_bytes(id), io::WriteFlags::dsync));
  FUSEE_TRY_VOID(fs.sync_dir(kReplicaDir));
  return ok();
}

Result<Recovered> SimDisk::recover(io::FileSystem& fs) {
  Recovered recovered;
  if (!FUSEE_TRY(fs.exists(kReplicaDir)) || !FUSEE_TRY(fs.exists(kClusterPath))) {
    recovered.log.wiped = true;
    return recovered;
  }
  recovered.log.suspect = FUSEE_TRY(fs.exists(kSuspectPath));
  if (!FUSEE_TRY(fs.exists(kLogPath))) return recovered;
  auto file = FUSEE_TRY(fs.open(kLogPath, {.write = true}));
  const std::uint64_t size = FUSEE_TRY(file->size());
  std::vector<std::byte> image(size);
  if (size > 0) FUSEE_TRY(file->read_at(0, image));
  Chain chain = read_chain(image);
  if (chain.damaged && !recovered.log.suspect) {
    // Remember the damage before the cut makes it invisible: only a
    // primary's whole log repairs it.
    auto marker = FUSEE_TRY(fs.open(kSuspectPath, {.write = true, .create = true}));
    FUSEE_TRY_VOID(marker->sync_data());
    FUSEE_TRY_VOID(fs.sync_dir(kReplicaDir));
    recovered.log.suspect = true;
  }
  const std::uint64_t end_bytes = chain.entries.size() * kSlotBytes;
  if (end_bytes < size) {
    FUSEE_TRY_VOID(file->truncate(end_bytes));
    FUSEE_TRY_VOID(file->sync_data());
  }
  recovered.damage = chain.damage;
  recovered.log.entries = std::move(chain.entries);
  recovered.crcs = std::move(chain.crcs);
  return recovered;
}

SimDisk::SimDisk(io::FileSystem& fs, std::vector<std::uint32_t> crcs) : fs_(fs), crcs_(std::move(crcs)) {}

Result<void> SimDisk::apply(const replication::DiskWrite& write) {
  if (!file_) file_ = FUSEE_TRY(fs_.open(kLogPath, {.write = true}));
  FUSEE_ASSERT(write.keep_through <= crcs_.size(), "a cut within the log");
  if (write.keep_through < crcs_.size()) {
    crcs_.resize(write.keep_through);
    FUSEE_TRY_VOID(file_->truncate(write.keep_through * kSlotBytes));
  }
  for (const replication::Entry& entry : write.entries) {
    std::uint32_t crc = 0;
    const auto slot = encode_slot(entry, crcs_.empty() ? 0 : crcs_.back(), crc);
    FUSEE_TRY(file_->write_at((entry.seq - 1) * kSlotBytes, slot, io::WriteFlags::none));
    crcs_.push_back(crc);
  }
  return ok();
}

Result<void> SimDisk::complete(const replication::DiskWrite& write) {
  if (!file_) file_ = FUSEE_TRY(fs_.open(kLogPath, {.write = true}));
  FUSEE_TRY_VOID(file_->sync_data());
  if (write.repaired && FUSEE_TRY(fs_.exists(kSuspectPath))) {
    FUSEE_TRY_VOID(fs_.remove(kSuspectPath));
    FUSEE_TRY_VOID(fs_.sync_dir(kReplicaDir));
  }
  return ok();
}

}  // namespace fusee::testing::replication_sim
