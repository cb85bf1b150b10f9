#include "tests/support/fault_file_system.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>
#include <utility>

#include "base/assert.hpp"

namespace fusee::testing {

namespace {

using InodeId = std::uint64_t;
// Inode numbers start at the root; 0 marks "no parent" (the root's lookup).
constexpr InodeId kNoInode = 0;
constexpr InodeId kRootInode = 1;

// Pages of the sparse image. Unrelated to kDirectAlignment; 4 KiB just keeps
// the copy-on-write granularity close to what the log writes.
constexpr std::size_t kPageBytes = 4096;
// The unit a torn write is cut into: the smallest block a disk writes
// atomically.
constexpr std::size_t kSectorBytes = 512;

std::error_code error(std::errc code) { return std::make_error_code(code); }

// A file's bytes, sparse: pages never written read as zeros, so allocating a
// large segment costs nothing. Pages are immutable and shared, so copying an
// image (a sync, a clone, a crash image) copies pointers, not bytes, and two
// file systems sharing a page never race on it.
// Invariant: no page holds a non-zero byte at or past size_, so growing the
// size exposes zeros without touching pages.
class Image {
 public:
  std::uint64_t size() const { return size_; }

  void write(std::uint64_t offset, std::span<const std::byte> data) {
    std::size_t done = 0;
    while (done < data.size()) {
      std::uint64_t at = offset + done;
      std::size_t in_page = static_cast<std::size_t>(at % kPageBytes);
      std::size_t n = std::min(kPageBytes - in_page, data.size() - done);
      // Zeros over a page never written change nothing (absent pages read
      // as zeros): preallocating and zero-filling a segment stays cheap.
      if (!pages_.contains(at / kPageBytes) &&
          std::all_of(data.begin() + static_cast<std::ptrdiff_t>(done),
                      data.begin() + static_cast<std::ptrdiff_t>(done + n), [](std::byte b) { return b == std::byte{0}; })) {
        done += n;
        continue;
      }
      Page page = copy_page(at / kPageBytes);
      std::memcpy(page.data() + in_page, data.data() + done, n);
      pages_[at / kPageBytes] = std::make_shared<const Page>(page);
      done += n;
    }
    size_ = std::max(size_, offset + data.size());
  }

  // Reads up to out.size() bytes; fewer only at the end.
  std::size_t read(std::uint64_t offset, std::span<std::byte> out) const {
    if (offset >= size_) return 0;
    std::size_t length = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), size_ - offset));
    std::size_t done = 0;
    while (done < length) {
      std::uint64_t at = offset + done;
      std::size_t in_page = static_cast<std::size_t>(at % kPageBytes);
      std::size_t n = std::min(kPageBytes - in_page, length - done);
      auto it = pages_.find(at / kPageBytes);
      if (it == pages_.end()) {
        std::memset(out.data() + done, 0, n);
      } else {
        std::memcpy(out.data() + done, it->second->data() + in_page, n);
      }
      done += n;
    }
    return length;
  }

  void resize(std::uint64_t size) {
    if (size < size_) {
      // Keep the invariant: forget whole pages past the end and zero the tail
      // of the last partial one, so a later extension reads zeros as on disk.
      std::uint64_t first_gone = (size + kPageBytes - 1) / kPageBytes;
      pages_.erase(pages_.lower_bound(first_gone), pages_.end());
      std::size_t tail = static_cast<std::size_t>(size % kPageBytes);
      if (tail != 0 && pages_.contains(size / kPageBytes)) {
        Page page = copy_page(size / kPageBytes);
        std::memset(page.data() + tail, 0, kPageBytes - tail);
        pages_[size / kPageBytes] = std::make_shared<const Page>(page);
      }
    }
    size_ = size;
  }

  void flip_bit(std::uint64_t bit_offset) {
    std::uint64_t at = bit_offset / 8;
    FUSEE_ASSERT(at < size_, "flip_bit past the end of the image");
    Page page = copy_page(at / kPageBytes);
    page[at % kPageBytes] ^= std::byte{static_cast<unsigned char>(1u << (bit_offset % 8))};
    pages_[at / kPageBytes] = std::make_shared<const Page>(page);
  }

  // Makes page `index` of this image the same as in `from` (zeros where
  // `from` has none), within this image's size.
  void copy_page_from(const Image& from, std::uint64_t index) {
    if (index * kPageBytes >= size_) return;
    auto it = from.pages_.find(index);
    if (it == from.pages_.end()) {
      pages_.erase(index);
    } else {
      pages_[index] = it->second;
    }
    if ((index + 1) * kPageBytes > size_) {
      // Keep the invariant: nothing non-zero at or past size_.
      std::size_t tail = static_cast<std::size_t>(size_ % kPageBytes);
      if (tail != 0 && pages_.contains(index)) {
        Page page = copy_page(index);
        std::memset(page.data() + tail, 0, kPageBytes - tail);
        pages_[index] = std::make_shared<const Page>(page);
      }
    }
  }

  std::vector<std::byte> bytes() const {
    std::vector<std::byte> out(static_cast<std::size_t>(size_));
    std::size_t n = read(0, out);
    FUSEE_ASSERT(n == out.size(), "an image reads back its whole size");
    return out;
  }

 private:
  using Page = std::array<std::byte, kPageBytes>;

  Page copy_page(std::uint64_t index) const {
    auto it = pages_.find(index);
    if (it == pages_.end()) return Page{};
    return *it->second;
  }

  std::map<std::uint64_t, std::shared_ptr<const Page>> pages_;
  std::uint64_t size_ = 0;
};

// A write, truncate or allocate not yet made durable by sync_data (or a dsync
// write, which is durable but must still be replayed in its place in the
// order, so that an earlier kept write cannot land on top of it).
struct DataOp {
  enum class Kind { write, truncate, allocate };
  std::uint64_t seq = 0;  // global across files: the order a crash replays in
  Kind kind = Kind::write;
  std::uint64_t offset = 0;  // write, allocate
  std::uint64_t length = 0;  // allocate: bytes; truncate: the new size
  std::vector<std::byte> bytes;  // write
  bool durable = false;          // a dsync write
};

void apply(Image& image, const DataOp& op) {
  switch (op.kind) {
    case DataOp::Kind::write:
      image.write(op.offset, op.bytes);
      break;
    case DataOp::Kind::truncate:
      image.resize(op.length);
      break;
    case DataOp::Kind::allocate:
      if (op.offset + op.length > image.size()) image.resize(op.offset + op.length);
      break;
  }
}

struct Inode {
  bool is_dir = false;
  // The contents as of the last sync_data (a directory has none).
  Image synced;
  // What a cached read sees: synced with every pending op applied, and the
  // pages whose writeback failed (stale_pages) as they were in the cache.
  Image current;
  std::vector<DataOp> pending;
  int open_handles = 0;
  // Linux's writeback error state (errseq_t): a counter of failed
  // writebacks, and whether any open file description has reported the
  // latest one yet (a description opened while it is unreported reports
  // it too).
  std::uint64_t wb_err = 0;
  bool wb_err_seen = true;
  // Pages whose writeback failed: the kernel marked them clean and keeps
  // them in the cache, so cached reads still see their bytes (held in
  // `stale`) although the disk does not have them, until drop_cache or a
  // write that dirties the page again.
  Image stale;
  std::set<std::uint64_t> stale_pages;
};

// A directory-entry change not yet made durable by sync_dir on `dir`.
// Kept to count them and to drop those of a directory that disappears; the
// durable effect of sync_dir is simply copying the directory's visible
// entries (see sync_dir).
struct NamespaceOp {
  std::uint64_t seq = 0;
  InodeId dir = kNoInode;
  std::string name;
  std::optional<InodeId> target;  // nullopt: the entry was removed
};

// Directory inode -> its entries (name -> inode), kept twice: as synced by
// sync_dir, and as visible now.
using Directories = std::map<InodeId, std::map<std::string, InodeId>>;

}  // namespace

namespace detail {

// Everything a FaultFileSystem knows, copyable so that clone() is a copy.
struct FaultData {
  FaultFileSystemOptions options;
  std::map<InodeId, Inode> inodes;
  Directories synced_names;
  Directories visible_names;
  std::vector<NamespaceOp> pending_names;
  InodeId next_inode = kRootInode + 1;
  std::uint64_t next_seq = 1;

  std::uint64_t operation_count = 0;
  std::optional<std::uint64_t> crash_after_ops;

  struct ArmedFault {
    Fault fault;
    std::uint64_t matched = 0;
  };
  std::vector<ArmedFault> faults;
  std::uint64_t faults_fired = 0;

  FaultData() {
    inodes[kRootInode].is_dir = true;
    synced_names[kRootInode];
    visible_names[kRootInode];
  }
};

struct FaultState {
  std::mutex mutex;
  FaultData data;
  // Bytes File::read_at returned, for tests that bound how much a reader
  // reads. Not part of FaultData: a clone or crash image starts at zero.
  std::atomic<std::uint64_t> bytes_read{0};
};

}  // namespace detail

namespace {

using detail::FaultData;

bool is_crashed(const FaultData& s) {
  return s.crash_after_ops.has_value() && s.operation_count >= *s.crash_after_ops;
}

Result<void> check_not_crashed(const FaultData& s) {
  if (is_crashed(s)) return error(std::errc::io_error);
  return ok();
}

// The first step of every counted operation: refuse once crashed, else count.
Result<void> start_operation(FaultData& s) {
  if (is_crashed(s)) return error(std::errc::io_error);
  ++s.operation_count;
  return ok();
}

bool matches(OpKind filter, OpKind kind) {
  if (filter == OpKind::any) return true;
  if (filter == OpKind::sync) return kind == OpKind::sync_data || kind == OpKind::sync_dir;
  return filter == kind;
}

// Called once a counted operation has passed its checks, right before it
// changes anything: the effect to inject, if a fault fires.
std::optional<FaultEffect> take_fault(FaultData& s, OpKind kind) {
  std::optional<FaultEffect> effect;
  for (auto& armed : s.faults) {
    if (!matches(armed.fault.kind, kind)) continue;
    ++armed.matched;
    bool fires = armed.matched == armed.fault.nth ||
                 (armed.fault.persistent && armed.matched > armed.fault.nth);
    // Every matching fault counts the operation, but only the first decides.
    if (fires && !effect) effect = armed.fault.effect;
  }
  if (effect) ++s.faults_fired;
  return effect;
}

// The error for an operation other than a write hit by `effect`.
std::error_code fault_error(FaultEffect effect) {
  return error(effect == FaultEffect::no_space ? std::errc::no_space_on_device
                                               : std::errc::io_error);
}

Result<std::vector<std::string>> split_path(const std::string& path) {
  if (path.empty()) return error(std::errc::no_such_file_or_directory);
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t end = path.find('/', begin);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(begin, end - begin);
    // ".." would need parent links and no caller needs it; refuse it rather
    // than resolve it wrongly.
    if (part == "..") return error(std::errc::invalid_argument);
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
    begin = end + 1;
  }
  return parts;
}

// Where a path leads in one namespace: the directory holding the entry, the
// entry's name and, if it exists, its inode. The root has parent kNoInode.
struct Lookup {
  InodeId parent = kNoInode;
  std::string name;
  std::optional<InodeId> inode;
};

Result<Lookup> lookup(const FaultData& s, const Directories& dirs,
                      const std::vector<std::string>& parts) {
  if (parts.empty()) return Lookup{kNoInode, "", kRootInode};
  InodeId dir = kRootInode;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const auto& entries = dirs.at(dir);
    auto it = entries.find(parts[i]);
    if (it == entries.end()) return error(std::errc::no_such_file_or_directory);
    if (!s.inodes.at(it->second).is_dir) return error(std::errc::not_a_directory);
    dir = it->second;
  }
  Lookup found{dir, parts.back(), std::nullopt};
  const auto& entries = dirs.at(dir);
  if (auto it = entries.find(parts.back()); it != entries.end()) found.inode = it->second;
  return found;
}

Result<Lookup> lookup_visible(const FaultData& s, const std::string& path) {
  auto parts = split_path(path);
  if (!parts) return parts.error();
  return lookup(s, s.visible_names, *parts);
}

// The inode of an existing visible entry.
Result<InodeId> resolve(const FaultData& s, const std::string& path) {
  auto found = lookup_visible(s, path);
  if (!found) return found.error();
  if (!found->inode) return error(std::errc::no_such_file_or_directory);
  return *found->inode;
}

Result<InodeId> resolve_file(const FaultData& s, const std::string& path) {
  auto id = resolve(s, path);
  if (!id) return id;
  if (s.inodes.at(*id).is_dir) return error(std::errc::is_a_directory);
  return id;
}

Result<InodeId> resolve_dir(const FaultData& s, const std::string& path) {
  auto id = resolve(s, path);
  if (!id) return id;
  if (!s.inodes.at(*id).is_dir) return error(std::errc::not_a_directory);
  return id;
}

void link(FaultData& s, InodeId dir, const std::string& name, InodeId target) {
  s.visible_names[dir][name] = target;
  s.pending_names.push_back({s.next_seq++, dir, name, target});
}

void unlink(FaultData& s, InodeId dir, const std::string& name) {
  s.visible_names[dir].erase(name);
  s.pending_names.push_back({s.next_seq++, dir, name, std::nullopt});
}

// Every inode a crash could still show, whichever way names are resolved:
// reachable from the root through synced or visible entries. A directory's
// synced entries count even where the directory itself is not yet synced into
// its parent, because a later sync of the parent would expose them.
std::set<InodeId> reachable_either(const FaultData& s) {
  std::set<InodeId> seen{kRootInode};
  std::deque<InodeId> queue{kRootInode};
  while (!queue.empty()) {
    InodeId dir = queue.front();
    queue.pop_front();
    for (const Directories* names : {&s.synced_names, &s.visible_names}) {
      auto it = names->find(dir);
      if (it == names->end()) continue;
      for (const auto& [name, id] : it->second) {
        if (!seen.insert(id).second) continue;
        if (s.inodes.at(id).is_dir) queue.push_back(id);
      }
    }
  }
  return seen;
}

// Reachable from the root through one namespace only: what a crash image
// holds.
std::set<InodeId> reachable(const FaultData& s, const Directories& names) {
  std::set<InodeId> seen{kRootInode};
  std::deque<InodeId> queue{kRootInode};
  while (!queue.empty()) {
    InodeId dir = queue.front();
    queue.pop_front();
    auto it = names.find(dir);
    if (it == names.end()) continue;
    for (const auto& [name, id] : it->second) {
      if (!seen.insert(id).second) continue;
      if (s.inodes.at(id).is_dir) queue.push_back(id);
    }
  }
  return seen;
}

// Forgets inodes nothing can reach any more, so that a long workload that
// rolls and retires segments does not keep every byte it ever wrote, and so
// that their pending operations do not inflate pending_data_op_count().
void collect_garbage(FaultData& s) {
  std::set<InodeId> live = reachable_either(s);
  for (const auto& [id, inode] : s.inodes) {
    if (inode.open_handles > 0) live.insert(id);
  }
  std::erase_if(s.inodes, [&](const auto& entry) { return !live.contains(entry.first); });
  std::erase_if(s.synced_names, [&](const auto& entry) { return !live.contains(entry.first); });
  std::erase_if(s.visible_names, [&](const auto& entry) { return !live.contains(entry.first); });
  std::erase_if(s.pending_names, [&](const NamespaceOp& op) { return !live.contains(op.dir); });
}

// synced plus the dsync writes since: what survives a crash that keeps none
// of the other pending operations.
Image durable_image(const Inode& inode) {
  Image image = inode.synced;
  for (const auto& op : inode.pending) {
    if (op.durable) apply(image, op);
  }
  return image;
}

// synced with every pending op applied, without the stale pages: what the
// disk will hold once the pending ops are written back, and what a read
// that bypasses the cache sees.
Image uncached_image(const Inode& inode) {
  Image image = inode.synced;
  for (const auto& op : inode.pending) apply(image, op);
  return image;
}

void replay_current(Inode& inode) {
  inode.current = uncached_image(inode);
  for (auto page : inode.stale_pages) inode.current.copy_page_from(inode.stale, page);
}

// A write dirties every page it touches again: a stale page it touches
// becomes dirty as a whole, stale bytes and all, so its next writeback
// writes those bytes too. Modelled as a pending write of the whole page.
void redirty_stale_pages(FaultData& s, Inode& inode, std::uint64_t offset, std::size_t length, bool durable) {
  if (inode.stale_pages.empty() || length == 0) return;
  auto first = offset / kPageBytes;
  auto last = (offset + length - 1) / kPageBytes;
  for (auto it = inode.stale_pages.lower_bound(first); it != inode.stale_pages.end() && *it <= last;) {
    DataOp op;
    op.seq = s.next_seq++;
    op.kind = DataOp::Kind::write;
    op.offset = *it * kPageBytes;
    op.bytes.resize(kPageBytes);
    auto got = inode.current.read(op.offset, op.bytes);
    op.bytes.resize(got);
    op.durable = durable;
    if (!op.bytes.empty()) inode.pending.push_back(std::move(op));
    it = inode.stale_pages.erase(it);
  }
}

// Writeback of the file's pending ops failed: as ext4 and XFS do, the pages
// are marked clean without reaching the disk (the dsync writes had reached
// it already), stay readable in the cache, and the error is recorded once
// for the open file descriptions to report.
void fail_writeback(Inode& inode) {
  for (const auto& op : inode.pending) {
    if (op.durable || op.kind != DataOp::Kind::write || op.bytes.empty()) continue;
    auto first = op.offset / kPageBytes;
    auto last = (op.offset + op.bytes.size() - 1) / kPageBytes;
    for (auto page = first; page <= last; ++page) inode.stale_pages.insert(page);
  }
  inode.synced = durable_image(inode);
  inode.pending.clear();
  inode.stale = inode.current;
  ++inode.wb_err;
  inode.wb_err_seen = false;
}

std::size_t count_undecided(const FaultData& s) {
  std::size_t count = 0;
  for (InodeId id : reachable_either(s)) {
    for (const auto& op : s.inodes.at(id).pending) count += op.durable ? 0 : 1;
  }
  return count;
}

// What a crash does to one pending (not durable) data operation.
struct Fate {
  bool keep = false;
  // tear: the pieces of a write that reach the disk, each a sector kept,
  // zeroed or filled with garbage (dropped sectors are absent).
  std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> pieces;
};

std::unordered_map<std::uint64_t, Fate> decide_fates(const FaultData& s,
                                                      const CrashOutcome& outcome) {
  // Every choice is made in global sequence order, so the same seed gives the
  // same image however the inodes happen to be laid out.
  std::vector<const DataOp*> undecided;
  for (InodeId id : reachable_either(s)) {
    for (const auto& op : s.inodes.at(id).pending) {
      if (!op.durable) undecided.push_back(&op);
    }
  }
  std::sort(undecided.begin(), undecided.end(),
            [](const DataOp* a, const DataOp* b) { return a->seq < b->seq; });

  std::mt19937_64 rng(outcome.seed);
  std::unordered_map<std::uint64_t, Fate> fates;
  for (std::size_t i = 0; i < undecided.size(); ++i) {
    const DataOp& op = *undecided[i];
    Fate& fate = fates[op.seq];
    switch (outcome.data) {
      case CrashOutcome::Data::drop_all:
        break;
      case CrashOutcome::Data::keep_all:
        fate.keep = true;
        break;
      case CrashOutcome::Data::keep_first_k:
        fate.keep = i < outcome.keep_count;
        break;
      case CrashOutcome::Data::random_subset:
        fate.keep = (rng() & 1) != 0;
        break;
      case CrashOutcome::Data::tear: {
        if (op.kind != DataOp::Kind::write) {
          fate.keep = (rng() & 1) != 0;
          break;
        }
        // Sectors are aligned to the disk, not to the write: a write at
        // offset 100 tears at 512, 1024, ...
        std::uint64_t at = op.offset;
        std::uint64_t end = op.offset + op.bytes.size();
        while (at < end) {
          std::uint64_t sector_end = std::min(end, (at / kSectorBytes + 1) * kSectorBytes);
          auto first = op.bytes.begin() + static_cast<std::ptrdiff_t>(at - op.offset);
          std::vector<std::byte> piece(first, first + static_cast<std::ptrdiff_t>(sector_end - at));
          switch (rng() % 4) {
            case 0:  // kept
              fate.pieces.emplace_back(at, std::move(piece));
              break;
            case 1:  // dropped: the old bytes stay
              break;
            case 2:  // zeroed
              std::fill(piece.begin(), piece.end(), std::byte{0});
              fate.pieces.emplace_back(at, std::move(piece));
              break;
            default: {  // garbage
              std::uint64_t word = 0;
              for (std::size_t b = 0; b < piece.size(); ++b) {
                if (b % 8 == 0) word = rng();
                piece[b] = static_cast<std::byte>(word >> (8 * (b % 8)));
              }
              fate.pieces.emplace_back(at, std::move(piece));
              break;
            }
          }
          at = sector_end;
        }
        break;
      }
    }
  }
  return fates;
}

std::error_code not_writable() { return error(std::errc::bad_file_descriptor); }

bool aligned(std::uint64_t offset, std::size_t length, const void* buffer) {
  return offset % io::kDirectAlignment == 0 && length % io::kDirectAlignment == 0 &&
         reinterpret_cast<std::uintptr_t>(buffer) % io::kDirectAlignment == 0;
}

class FaultFile final : public io::File {
 public:
  FaultFile(std::shared_ptr<detail::FaultState> state, InodeId inode, bool writable, bool direct,
            std::string path, std::uint64_t wb_err_sampled)
      : state_(std::move(state)),
        inode_(inode),
        writable_(writable),
        direct_(direct),
        path_(std::move(path)),
        wb_err_seen_(wb_err_sampled) {}

  ~FaultFile() override {
    std::lock_guard lock(state_->mutex);
    --state_->data.inodes.at(inode_).open_handles;
    collect_garbage(state_->data);
  }

  Result<std::size_t> write_at(std::uint64_t offset, std::span<const std::byte> data,
                               io::WriteFlags flags) override {
    run_hook(OpKind::write, &FaultFileSystemOptions::before_operation, data.size());
    auto written = write_at_locked(offset, data, flags);
    run_hook(OpKind::write, &FaultFileSystemOptions::after_operation, data.size());
    return written;
  }

  Result<std::size_t> write_at_locked(std::uint64_t offset, std::span<const std::byte> data,
                                      io::WriteFlags flags) {
    std::lock_guard lock(state_->mutex);
    FaultData& s = state_->data;
    if (auto started = start_operation(s); !started) return started.error();
    if (!writable_) return not_writable();
    if (direct_ && s.options.refuse_direct_write) return error(std::errc::invalid_argument);
    if (direct_ && !aligned(offset, data.size(), data.data())) {
      return error(std::errc::invalid_argument);
    }
    std::size_t length = data.size();
    if (auto effect = take_fault(s, OpKind::write)) {
      if (*effect != FaultEffect::short_write) return fault_error(*effect);
      length = data.size() / 2;
      // A direct write stops on a sector boundary.
      if (direct_) length = length / kSectorBytes * kSectorBytes;
    }
    if (length == 0) return length;

    Inode& inode = s.inodes.at(inode_);
    DataOp op;
    op.seq = s.next_seq++;
    op.kind = DataOp::Kind::write;
    op.offset = offset;
    op.bytes.assign(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(length));
    op.durable = flags == io::WriteFlags::dsync;
    apply(inode.current, op);
    inode.pending.push_back(std::move(op));
    redirty_stale_pages(s, inode, offset, length, flags == io::WriteFlags::dsync);
    return length;
  }

  Result<std::size_t> read_at(std::uint64_t offset, std::span<std::byte> out) override {
    std::lock_guard lock(state_->mutex);
    const FaultData& s = state_->data;
    if (auto alive = check_not_crashed(s); !alive) return alive.error();
    if (direct_ && !aligned(offset, out.size(), out.data())) {
      return error(std::errc::invalid_argument);
    }
    const Inode& inode = s.inodes.at(inode_);
    // O_DIRECT reads go to the disk (after writing back dirty pages), so
    // they never see stale pages.
    auto got = direct_ && !inode.stale_pages.empty() ? uncached_image(inode).read(offset, out)
                                                     : inode.current.read(offset, out);
    state_->bytes_read.fetch_add(got, std::memory_order_relaxed);
    return got;
  }

  Result<void> sync_data() override {
    run_hook(OpKind::sync_data, &FaultFileSystemOptions::before_operation, 0);
    auto synced = sync_data_locked();
    run_hook(OpKind::sync_data, &FaultFileSystemOptions::after_operation, 0);
    return synced;
  }

  Result<void> sync_data_locked() {
    std::lock_guard lock(state_->mutex);
    FaultData& s = state_->data;
    if (auto started = start_operation(s); !started) return started.error();
    Inode& inode = s.inodes.at(inode_);
    if (auto effect = take_fault(s, OpKind::sync_data)) {
      if (*effect != FaultEffect::sync_loses_data) return fault_error(*effect);
      // The unsynced data is gone for good; this description reports it,
      // below, and no other sync through it will.
      fail_writeback(inode);
    } else {
      inode.synced = uncached_image(inode);
      inode.pending.clear();
    }
    // errseq: a description reports each failed writeback since it last
    // looked (or since it was opened) once; whichever description looks
    // first, a sync through another one later reports it too, but a second
    // sync through the same description (another thread's, concurrent with
    // the failure) returns 0.
    if (wb_err_seen_ != inode.wb_err) {
      wb_err_seen_ = inode.wb_err;
      inode.wb_err_seen = true;
      return error(std::errc::io_error);
    }
    return ok();
  }

  Result<void> drop_cache() override {
    std::lock_guard lock(state_->mutex);
    FaultData& s = state_->data;
    if (auto alive = check_not_crashed(s); !alive) return alive.error();
    Inode& inode = s.inodes.at(inode_);
    if (inode.stale_pages.empty()) return ok();
    inode.stale_pages.clear();
    inode.stale = Image();
    replay_current(inode);
    return ok();
  }

  Result<void> truncate(std::uint64_t size_bytes) override {
    DataOp op;
    op.kind = DataOp::Kind::truncate;
    op.length = size_bytes;
    return record(std::move(op), OpKind::truncate);
  }

  Result<void> allocate(std::uint64_t offset, std::uint64_t length) override {
    if (length == 0) {
      // Linux refuses a zero-length fallocate; still a counted call.
      std::lock_guard lock(state_->mutex);
      if (auto started = start_operation(state_->data); !started) return started.error();
      return error(std::errc::invalid_argument);
    }
    DataOp op;
    op.kind = DataOp::Kind::allocate;
    op.offset = offset;
    op.length = length;
    return record(std::move(op), OpKind::allocate);
  }

  Result<std::uint64_t> size() override {
    std::lock_guard lock(state_->mutex);
    const FaultData& s = state_->data;
    if (auto alive = check_not_crashed(s); !alive) return alive.error();
    return s.inodes.at(inode_).current.size();
  }

  bool direct() const override { return direct_; }

  // For the write queue, which acts on the file's inode under the same rules.
  const detail::FaultState* state() const { return state_.get(); }
  InodeId inode() const { return inode_; }
  bool writable() const { return writable_; }

 private:
  // Options::before_operation or after_operation, outside the lock so that
  // it may block.
  using Hook = std::function<void(OpKind, const std::string&, std::size_t)>;
  void run_hook(OpKind kind, Hook FaultFileSystemOptions::*which, std::size_t bytes) {
    Hook hook;
    {
      std::lock_guard lock(state_->mutex);
      hook = state_->data.options.*which;
    }
    if (hook) hook(kind, path_, bytes);
  }

  // A truncate or allocate: pending until sync_data.
  Result<void> record(DataOp op, OpKind kind) {
    std::lock_guard lock(state_->mutex);
    FaultData& s = state_->data;
    if (auto started = start_operation(s); !started) return started.error();
    if (!writable_) return not_writable();
    if (auto effect = take_fault(s, kind)) return fault_error(*effect);
    Inode& inode = s.inodes.at(inode_);
    op.seq = s.next_seq++;
    apply(inode.current, op);
    inode.pending.push_back(std::move(op));
    return ok();
  }

  std::shared_ptr<detail::FaultState> state_;
  InodeId inode_;
  bool writable_;
  bool direct_;
  std::string path_;  // as opened, for the Options hooks
  // The inode's wb_err this open file description last reported (errseq).
  std::uint64_t wb_err_seen_;
};

// The write queue of the model in the header. Its own fields are touched only
// under the file system's mutex, like everything else.
class FaultWriteQueue final : public io::WriteQueue {
 public:
  FaultWriteQueue(std::shared_ptr<detail::FaultState> state, std::size_t depth,
                  std::optional<std::uint64_t> seed)
      : state_(std::move(state)), depth_(depth) {
    if (seed) rng_.emplace(*seed);
  }
  FaultWriteQueue(const FaultWriteQueue&) = delete;
  FaultWriteQueue& operator=(const FaultWriteQueue&) = delete;

  ~FaultWriteQueue() override {
    // Queued writes never reach the disk; those in flight stay pending, as if
    // they had been written without RWF_DSYNC (a caller that never saw their
    // completion cannot rely on them either way).
    std::lock_guard lock(state_->mutex);
    FaultData& s = state_->data;
    for (const InFlight& write : in_flight_) release(s, write.inode);
    collect_garbage(s);
  }

  std::size_t depth() const override { return depth_; }

  Result<void> submit(const io::QueuedWrite& write) override {
    FUSEE_ASSERT(write.file != nullptr, "a queued write needs a file");
    auto* file = dynamic_cast<FaultFile*>(write.file);
    FUSEE_ASSERT(file != nullptr, "not a File of a FaultFileSystem");
    FUSEE_ASSERT(file->state() == state_.get(), "a File of another FaultFileSystem");
    std::lock_guard lock(state_->mutex);
    if (auto alive = check_not_crashed(state_->data); !alive) return alive.error();
    if (queued_.size() + in_flight_.size() == depth_) {
      return error(std::errc::resource_unavailable_try_again);
    }
    queued_.push_back({file, write});
    return ok();
  }

  Result<void> submit_and_wait(std::vector<io::WriteCompletion>& out) override {
    std::lock_guard lock(state_->mutex);
    FaultData& s = state_->data;
    if (auto alive = check_not_crashed(s); !alive) return alive.error();
    for (const Queued& queued : queued_) in_flight_.push_back(start(s, queued));
    queued_.clear();

    std::size_t completing = in_flight_.size();
    if (rng_ && completing >= 2 && ((*rng_)() & 1) != 0) completing = 1;
    for (std::size_t i = 0; i < completing; ++i) {
      // The completion is the counted operation; a crash leaves the rest in
      // flight, pending.
      if (auto started = start_operation(s); !started) break;
      out.push_back(complete(s, in_flight_.front()));
      release(s, in_flight_.front().inode);
      in_flight_.pop_front();
    }
    collect_garbage(s);
    return ok();
  }

  // submit_and_wait never blocks, so there is nothing to interrupt.
  void wake() override {}

  // A write in flight holds a copy of its bytes (start() took it), so no
  // caller's buffer is held; queued writes never reach the disk.
  std::size_t drain() override {
    std::lock_guard lock(state_->mutex);
    queued_.clear();
    return 0;
  }

 private:
  struct Queued {
    FaultFile* file;
    io::QueuedWrite write;
  };
  struct InFlight {
    std::uint64_t token = 0;
    InodeId inode = kNoInode;
    bool direct = false;
    std::size_t length = 0;
    std::uint64_t seq = 0;     // of its pending DataOp; 0 when it has none
    std::error_code rejected;  // refused before reaching the disk
  };

  // Puts one queued write in flight: a pending, visible write, as write_at
  // without dsync would leave it. Holds the inode open until the completion,
  // so that it cannot vanish with the write in flight.
  InFlight start(FaultData& s, const Queued& queued) {
    const io::QueuedWrite& write = queued.write;
    InFlight started;
    started.token = write.token;
    started.inode = queued.file->inode();
    started.direct = queued.file->direct();
    started.length = write.data.size();
    ++s.inodes.at(started.inode).open_handles;
    if (!queued.file->writable()) {
      started.rejected = not_writable();
    } else if (started.direct && s.options.refuse_direct_write) {
      started.rejected = error(std::errc::invalid_argument);
    } else if (started.direct && !aligned(write.offset, write.data.size(), write.data.data())) {
      started.rejected = error(std::errc::invalid_argument);
    } else if (!write.data.empty()) {
      Inode& inode = s.inodes.at(started.inode);
      DataOp op;
      op.seq = s.next_seq++;
      op.kind = DataOp::Kind::write;
      op.offset = write.offset;
      op.bytes.assign(write.data.begin(), write.data.end());
      apply(inode.current, op);
      started.seq = op.seq;
      inode.pending.push_back(std::move(op));
    }
    return started;
  }

  // The counted operation of one completion: the write becomes durable, or
  // a fault drops all or the second half of it.
  io::WriteCompletion complete(FaultData& s, const InFlight& write) {
    io::WriteCompletion completion;
    completion.token = write.token;
    if (write.rejected) {
      completion.error = write.rejected;
      return completion;
    }
    Inode& inode = s.inodes.at(write.inode);
    // A sync_data since may have made it durable already; then a fault
    // reports but cannot undo it.
    auto op = std::find_if(inode.pending.begin(), inode.pending.end(),
                           [&](const DataOp& pending) { return pending.seq == write.seq; });
    bool pending = write.seq != 0 && op != inode.pending.end();
    std::size_t length = write.length;
    if (auto effect = take_fault(s, OpKind::write)) {
      if (*effect != FaultEffect::short_write) {
        if (pending) {
          inode.pending.erase(op);
          replay_current(inode);
        }
        completion.error = fault_error(*effect);
        return completion;
      }
      length = write.length / 2;
      // A direct write stops on a sector boundary.
      if (write.direct) length = length / kSectorBytes * kSectorBytes;
    }
    if (pending) {
      if (length == 0) {
        inode.pending.erase(op);
      } else {
        op->bytes.resize(length);
        op->durable = true;
      }
      if (length < write.length) replay_current(inode);
    }
    completion.bytes_written = length;
    return completion;
  }

  static void release(FaultData& s, InodeId id) {
    auto inode = s.inodes.find(id);
    if (inode != s.inodes.end()) --inode->second.open_handles;
  }

  std::shared_ptr<detail::FaultState> state_;
  const std::size_t depth_;
  std::optional<std::mt19937_64> rng_;
  std::vector<Queued> queued_;
  std::deque<InFlight> in_flight_;
};

}  // namespace

std::string CrashOutcome::describe() const {
  std::string text;
  switch (data) {
    case Data::drop_all:
      text = "drop_all";
      break;
    case Data::keep_all:
      text = "keep_all";
      break;
    case Data::keep_first_k:
      text = "keep_first_k(" + std::to_string(keep_count) + ")";
      break;
    case Data::random_subset:
      text = "random_subset(seed=" + std::to_string(seed) + ")";
      break;
    case Data::tear:
      text = "tear(seed=" + std::to_string(seed) + ")";
      break;
  }
  return text + (names == Names::keep ? ", names=keep" : ", names=revert");
}

std::vector<CrashOutcome> all_crash_outcomes(std::size_t pending_data_ops,
                                             std::uint64_t seed_count) {
  std::vector<CrashOutcome> outcomes;
  for (auto names : {CrashOutcome::Names::revert, CrashOutcome::Names::keep}) {
    outcomes.push_back(CrashOutcome::drop_all(names));
    // With nothing pending every data outcome is drop_all.
    if (pending_data_ops == 0) continue;
    for (std::size_t k = 1; k < pending_data_ops; ++k) {
      outcomes.push_back(CrashOutcome::keep_first_k(k, names));
    }
    outcomes.push_back(CrashOutcome::keep_all(names));
    for (std::uint64_t seed = 0; seed < seed_count; ++seed) {
      outcomes.push_back(CrashOutcome::random_subset(seed, names));
      outcomes.push_back(CrashOutcome::tear(seed, names));
    }
  }
  return outcomes;
}

FaultFileSystem::FaultFileSystem() : FaultFileSystem(Options{}) {}

FaultFileSystem::FaultFileSystem(Options options)
    : state_(std::make_shared<detail::FaultState>()) {
  state_->data.options = options;
}

FaultFileSystem::FaultFileSystem(std::shared_ptr<detail::FaultState> state)
    : state_(std::move(state)) {}

FaultFileSystem::~FaultFileSystem() = default;

Result<std::unique_ptr<io::File>> FaultFileSystem::open(const std::string& path,
                                                        io::OpenOptions options) {
  std::lock_guard lock(state_->mutex);
  FaultData& s = state_->data;
  auto counted = options.create ? start_operation(s) : check_not_crashed(s);
  if (!counted) return counted.error();
  auto found = lookup_visible(s, path);
  if (!found) return found.error();
  if (found->parent == kNoInode) return error(std::errc::is_a_directory);
  if (options.direct && s.options.refuse_direct_open) return error(std::errc::invalid_argument);
  if (found->inode) {
    if (s.inodes.at(*found->inode).is_dir) return error(std::errc::is_a_directory);
    if (options.create && options.exclusive) return error(std::errc::file_exists);
  } else if (!options.create) {
    return error(std::errc::no_such_file_or_directory);
  }
  if (options.create) {
    if (auto effect = take_fault(s, OpKind::create)) return fault_error(*effect);
  }
  InodeId id;
  if (found->inode) {
    id = *found->inode;
  } else {
    id = s.next_inode++;
    s.inodes[id];
    link(s, found->parent, found->name, id);
  }
  Inode& inode = s.inodes.at(id);
  ++inode.open_handles;
  // errseq_sample: a description opened while the latest failed writeback
  // is unreported starts before it, so it reports it once.
  std::uint64_t sampled = inode.wb_err_seen || inode.wb_err == 0 ? inode.wb_err : inode.wb_err - 1;
  return std::unique_ptr<io::File>(
      std::make_unique<FaultFile>(state_, id, options.write, options.direct, path, sampled));
}

Result<void> FaultFileSystem::rename(const std::string& from, const std::string& to) {
  std::lock_guard lock(state_->mutex);
  FaultData& s = state_->data;
  if (auto started = start_operation(s); !started) return started.error();
  auto from_parts = split_path(from);
  if (!from_parts) return from_parts.error();
  auto to_parts = split_path(to);
  if (!to_parts) return to_parts.error();
  if (from_parts->empty() || to_parts->empty()) return error(std::errc::device_or_resource_busy);
  auto source = lookup(s, s.visible_names, *from_parts);
  if (!source) return source.error();
  if (!source->inode) return error(std::errc::no_such_file_or_directory);
  auto target = lookup(s, s.visible_names, *to_parts);
  if (!target) return target.error();

  bool moving_dir = s.inodes.at(*source->inode).is_dir;
  if (moving_dir && to_parts->size() > from_parts->size() &&
      std::equal(from_parts->begin(), from_parts->end(), to_parts->begin())) {
    return error(std::errc::invalid_argument);  // into itself
  }
  if (target->inode) {
    // POSIX: renaming a file onto itself (another link to it) does nothing.
    if (*target->inode == *source->inode) return ok();
    bool replacing_dir = s.inodes.at(*target->inode).is_dir;
    if (moving_dir && !replacing_dir) return error(std::errc::not_a_directory);
    if (!moving_dir && replacing_dir) return error(std::errc::is_a_directory);
    if (replacing_dir && !s.visible_names.at(*target->inode).empty()) {
      return error(std::errc::directory_not_empty);
    }
  }
  if (auto effect = take_fault(s, OpKind::rename)) return fault_error(*effect);
  link(s, target->parent, target->name, *source->inode);
  unlink(s, source->parent, source->name);
  collect_garbage(s);
  return ok();
}

Result<void> FaultFileSystem::remove(const std::string& path) {
  std::lock_guard lock(state_->mutex);
  FaultData& s = state_->data;
  if (auto started = start_operation(s); !started) return started.error();
  auto found = lookup_visible(s, path);
  if (!found) return found.error();
  if (!found->inode) return error(std::errc::no_such_file_or_directory);
  if (s.inodes.at(*found->inode).is_dir) return error(std::errc::is_a_directory);
  if (auto effect = take_fault(s, OpKind::remove)) return fault_error(*effect);
  unlink(s, found->parent, found->name);
  collect_garbage(s);
  return ok();
}

Result<void> FaultFileSystem::create_dir(const std::string& path) {
  std::lock_guard lock(state_->mutex);
  FaultData& s = state_->data;
  if (auto started = start_operation(s); !started) return started.error();
  auto found = lookup_visible(s, path);
  if (!found) return found.error();
  if (found->inode && !s.inodes.at(*found->inode).is_dir) return error(std::errc::file_exists);
  if (auto effect = take_fault(s, OpKind::create_dir)) return fault_error(*effect);
  if (found->inode) return ok();
  InodeId id = s.next_inode++;
  s.inodes[id].is_dir = true;
  s.synced_names[id];
  s.visible_names[id];
  link(s, found->parent, found->name, id);
  return ok();
}

Result<void> FaultFileSystem::remove_dir(const std::string& path) {
  std::lock_guard lock(state_->mutex);
  FaultData& s = state_->data;
  if (auto started = start_operation(s); !started) return started.error();
  auto found = lookup_visible(s, path);
  if (!found) return found.error();
  if (found->parent == kNoInode) return error(std::errc::device_or_resource_busy);
  if (!found->inode) return error(std::errc::no_such_file_or_directory);
  if (!s.inodes.at(*found->inode).is_dir) return error(std::errc::not_a_directory);
  if (!s.visible_names.at(*found->inode).empty()) return error(std::errc::directory_not_empty);
  if (auto effect = take_fault(s, OpKind::remove_dir)) return fault_error(*effect);
  unlink(s, found->parent, found->name);
  collect_garbage(s);
  return ok();
}

Result<std::vector<std::string>> FaultFileSystem::list(const std::string& path) {
  std::lock_guard lock(state_->mutex);
  const FaultData& s = state_->data;
  if (auto alive = check_not_crashed(s); !alive) return alive.error();
  auto dir = resolve_dir(s, path);
  if (!dir) return dir.error();
  std::vector<std::string> names;
  for (const auto& [name, id] : s.visible_names.at(*dir)) names.push_back(name);
  return names;
}

Result<bool> FaultFileSystem::exists(const std::string& path) {
  std::lock_guard lock(state_->mutex);
  const FaultData& s = state_->data;
  // Result<bool> will not take a bare error_code (bool is constructible from
  // too much), so errors go in explicitly.
  if (auto alive = check_not_crashed(s); !alive) {
    return Result<bool>(boost::system::in_place_error, alive.error());
  }
  auto parts = split_path(path);
  if (!parts) return Result<bool>(boost::system::in_place_error, parts.error());
  auto found = lookup(s, s.visible_names, *parts);
  // A missing or non-directory parent means the path does not exist, as stat says.
  return found && found->inode.has_value();
}

Result<void> FaultFileSystem::sync_dir(const std::string& path) {
  std::lock_guard lock(state_->mutex);
  FaultData& s = state_->data;
  if (auto started = start_operation(s); !started) return started.error();
  auto dir = resolve_dir(s, path);
  if (!dir) return dir.error();
  if (auto effect = take_fault(s, OpKind::sync_dir)) return fault_error(*effect);
  // Replaying this directory's pending entry changes in order onto its synced
  // entries ends, name by name, at the visible entry: every change to a name
  // in this directory is one of them. So the replay is a copy.
  s.synced_names[*dir] = s.visible_names.at(*dir);
  std::erase_if(s.pending_names, [&](const NamespaceOp& op) { return op.dir == *dir; });
  collect_garbage(s);
  return ok();
}

Result<std::unique_ptr<io::WriteQueue>> FaultFileSystem::open_write_queue(std::size_t depth) {
  if (depth == 0 || depth > io::kWriteQueueDepthMax) return error(std::errc::invalid_argument);
  std::optional<std::uint64_t> seed;
  {
    std::lock_guard lock(state_->mutex);
    seed = state_->data.options.write_queue_seed;
  }
  return std::unique_ptr<io::WriteQueue>(std::make_unique<FaultWriteQueue>(state_, depth, seed));
}

std::unique_ptr<FaultFileSystem> FaultFileSystem::crash_image(const CrashOutcome& outcome) const {
  std::lock_guard lock(state_->mutex);
  const FaultData& s = state_->data;
  auto fates = decide_fates(s, outcome);
  const Directories& names =
      outcome.names == CrashOutcome::Names::keep ? s.visible_names : s.synced_names;

  auto image = std::make_shared<detail::FaultState>();
  FaultData& after = image->data;
  after.options = s.options;
  after.next_inode = s.next_inode;
  after.next_seq = s.next_seq;
  for (InodeId id : reachable(s, names)) {
    const Inode& inode = s.inodes.at(id);
    Inode& survivor = after.inodes[id];
    survivor.is_dir = inode.is_dir;
    if (inode.is_dir) {
      after.synced_names[id] = names.at(id);
      after.visible_names[id] = names.at(id);
      continue;
    }
    survivor.synced = inode.synced;
    for (const auto& op : inode.pending) {
      if (op.durable) {
        apply(survivor.synced, op);
        continue;
      }
      const Fate& fate = fates.at(op.seq);
      if (fate.keep) apply(survivor.synced, op);
      for (const auto& [offset, bytes] : fate.pieces) survivor.synced.write(offset, bytes);
    }
    survivor.current = survivor.synced;
  }
  return std::unique_ptr<FaultFileSystem>(new FaultFileSystem(std::move(image)));
}

std::uint64_t FaultFileSystem::bytes_read() const { return state_->bytes_read.load(); }

std::size_t FaultFileSystem::pending_data_op_count() const {
  std::lock_guard lock(state_->mutex);
  return count_undecided(state_->data);
}

std::size_t FaultFileSystem::pending_namespace_op_count() const {
  std::lock_guard lock(state_->mutex);
  return state_->data.pending_names.size();
}

void FaultFileSystem::set_crash_after_ops(std::uint64_t n) {
  std::lock_guard lock(state_->mutex);
  state_->data.crash_after_ops = n;
}

bool FaultFileSystem::crashed() const {
  std::lock_guard lock(state_->mutex);
  return is_crashed(state_->data);
}

std::uint64_t FaultFileSystem::operation_count() const {
  std::lock_guard lock(state_->mutex);
  return state_->data.operation_count;
}

void FaultFileSystem::inject(const Fault& fault) {
  FUSEE_ASSERT(fault.nth >= 1, "Fault::nth is 1-based");
  std::lock_guard lock(state_->mutex);
  state_->data.faults.push_back({fault, 0});
}

void FaultFileSystem::clear_faults() {
  std::lock_guard lock(state_->mutex);
  state_->data.faults.clear();
}

std::uint64_t FaultFileSystem::faults_fired() const {
  std::lock_guard lock(state_->mutex);
  return state_->data.faults_fired;
}

FaultFileSystem::Options FaultFileSystem::options() const {
  std::lock_guard lock(state_->mutex);
  return state_->data.options;
}

void FaultFileSystem::set_options(Options options) {
  std::lock_guard lock(state_->mutex);
  state_->data.options = options;
}

Result<std::vector<std::byte>> FaultFileSystem::contents(const std::string& path) const {
  std::lock_guard lock(state_->mutex);
  const FaultData& s = state_->data;
  auto id = resolve_file(s, path);
  if (!id) return id.error();
  return s.inodes.at(*id).current.bytes();
}

Result<std::vector<std::byte>> FaultFileSystem::durable_contents(const std::string& path) const {
  std::lock_guard lock(state_->mutex);
  const FaultData& s = state_->data;
  auto id = resolve_file(s, path);
  if (!id) return id.error();
  return durable_image(s.inodes.at(*id)).bytes();
}

Result<void> FaultFileSystem::corrupt_bit(const std::string& path, std::uint64_t bit_offset) {
  std::lock_guard lock(state_->mutex);
  FaultData& s = state_->data;
  auto id = resolve_file(s, path);
  if (!id) return id.error();
  Inode& inode = s.inodes.at(*id);
  if (bit_offset / 8 >= inode.synced.size()) return error(std::errc::invalid_argument);
  inode.synced.flip_bit(bit_offset);
  replay_current(inode);
  return ok();
}

Result<void> FaultFileSystem::truncate_durable(const std::string& path, std::uint64_t size_bytes) {
  std::lock_guard lock(state_->mutex);
  FaultData& s = state_->data;
  auto id = resolve_file(s, path);
  if (!id) return id.error();
  Inode& inode = s.inodes.at(*id);
  inode.synced.resize(size_bytes);
  replay_current(inode);
  return ok();
}

std::vector<std::string> FaultFileSystem::list_files_recursive() const {
  std::lock_guard lock(state_->mutex);
  const FaultData& s = state_->data;
  std::vector<std::string> files;
  std::vector<std::pair<InodeId, std::string>> stack{{kRootInode, ""}};
  while (!stack.empty()) {
    auto [dir, prefix] = stack.back();
    stack.pop_back();
    for (const auto& [name, id] : s.visible_names.at(dir)) {
      std::string path = prefix + "/" + name;
      if (s.inodes.at(id).is_dir) {
        stack.emplace_back(id, path);
      } else {
        files.push_back(std::move(path));
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::unique_ptr<FaultFileSystem> FaultFileSystem::clone() const {
  auto copy = std::make_shared<detail::FaultState>();
  {
    std::lock_guard lock(state_->mutex);
    copy->data = state_->data;
  }
  // The copy has no open files: what only they kept alive is garbage there.
  for (auto& [id, inode] : copy->data.inodes) inode.open_handles = 0;
  collect_garbage(copy->data);
  return std::unique_ptr<FaultFileSystem>(new FaultFileSystem(std::move(copy)));
}

}  // namespace fusee::testing
