#include "replica/replica_store.hpp"

#include <algorithm>
#include <cstring>

#include "base/assert.hpp"
#include "wal/errc.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"
#include "wal/segment_file.hpp"

namespace fusee::replica {

namespace {

std::string replica_dir(const std::string& dir) { return io::join_path(dir, "replica"); }
std::string path_in(const std::string& dir, const char* name) { return io::join_path(replica_dir(dir), name); }

Result<std::string> read_text(io::FileSystem& fs, const std::string& path) {
  const auto bytes = FUSEE_TRY(io::read_file(fs, path));
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Result<void> create_marker(io::FileSystem& fs, const std::string& path, const std::string& text) {
  auto file = FUSEE_TRY(fs.open(path, {.write = true, .create = true}));
  FUSEE_TRY_VOID(file->truncate(0));
  FUSEE_TRY_VOID(wal::write_fully(*file, 0, std::as_bytes(std::span(text)), io::WriteFlags::none));
  FUSEE_TRY_VOID(file->sync_data());
  return ok();
}

// Removes every segment file numbered above `keep_through`, newest first,
// and syncs the directory.
Result<void> remove_segments(io::FileSystem& fs, const std::string& dir, std::uint64_t keep_through) {
  const std::string wal_dir = wal_dir_of(dir);
  if (!FUSEE_TRY(fs.exists(wal_dir))) return ok();
  std::vector<std::uint64_t> numbers;
  for (const std::string& name : FUSEE_TRY(fs.list(wal_dir))) {
    if (auto number = wal::parse_segment_file_name(name); number && *number > keep_through) numbers.push_back(*number);
  }
  if (numbers.empty()) return ok();
  std::sort(numbers.rbegin(), numbers.rend());
  for (const std::uint64_t number : numbers) FUSEE_TRY_VOID(fs.remove(segment_path(dir, number)));
  return fs.sync_dir(wal_dir);
}

}  // namespace

Result<StoreInspection> inspect_store(io::FileSystem& fs, const std::string& dir) {
  StoreInspection inspection;
  if (!FUSEE_TRY(fs.exists(path_in(dir, "cluster")))) return inspection;
  inspection.cluster = FUSEE_TRY(read_text(fs, path_in(dir, "cluster")));
  inspection.suspect_marked = FUSEE_TRY(fs.exists(path_in(dir, "suspect")));
  if (inspection.suspect_marked) inspection.suspect_note = FUSEE_TRY(read_text(fs, path_in(dir, "suspect")));
  inspection.chain = FUSEE_TRY(read_chain(fs, dir, inspection.cluster));
  return inspection;
}

Result<void> ReplicaStore::initialize(io::FileSystem& fs, const std::string& dir, const std::string& cluster,
                                      bool rebuild, std::uint64_t segment_bytes) {
  if (segment_bytes < kSegmentBytesMin || segment_bytes > kSegmentBytesMax || segment_bytes % wal::kBlockBytes != 0) {
    return std::make_error_code(std::errc::invalid_argument);
  }
  FUSEE_TRY_VOID(fs.create_dir(dir));
  FUSEE_TRY_VOID(fs.create_dir(replica_dir(dir)));
  auto lock = FUSEE_TRY(fs.lock_exclusive(path_in(dir, "lock")));
  if (FUSEE_TRY(fs.exists(path_in(dir, "cluster")))) return make_error_code(StoreErrc::already_initialized);
  if (rebuild) FUSEE_TRY_VOID(create_marker(fs, path_in(dir, "suspect"), "rebuilt\n"));
  FUSEE_TRY_VOID(remove_segments(fs, dir, 0));  // whatever a lost directory left
  if (FUSEE_TRY(fs.exists(log_start_path(dir)))) FUSEE_TRY_VOID(fs.remove(log_start_path(dir)));
  FUSEE_TRY_VOID(fs.create_dir(wal_dir_of(dir)));
  FUSEE_TRY(create_replica_segment(fs, dir, first_segment_header(cluster, segment_bytes)));
  FUSEE_TRY_VOID(fs.sync_dir(dir));  // wal/ itself, before the directory is the cluster's
  // Written last: until it is durable the directory is no cluster's.
  FUSEE_TRY_VOID(create_marker(fs, path_in(dir, "cluster.new"), cluster));
  FUSEE_TRY_VOID(fs.rename(path_in(dir, "cluster.new"), path_in(dir, "cluster")));
  FUSEE_TRY_VOID(fs.sync_dir(replica_dir(dir)));
  FUSEE_TRY_VOID(fs.sync_dir(dir));
  FUSEE_TRY_VOID(fs.sync_dir(io::parent_path(dir)));  // dir itself may be new
  return ok();
}

ReplicaStore::ReplicaStore(io::FileSystem& fs, std::string dir, std::string cluster)
    : fs_(fs), dir_(std::move(dir)), cluster_(std::move(cluster)) {}

Result<std::unique_ptr<ReplicaStore>> ReplicaStore::open(io::FileSystem& fs, const std::string& dir,
                                                         const std::string& cluster, StoreRecovery& recovered,
                                                         std::uint64_t segment_bytes, std::uint64_t held_bytes_max) {
  recovered = {};
  std::unique_ptr<ReplicaStore> store(new ReplicaStore(fs, dir, cluster));
  store->points_.push_back(start_point(cluster, segment_bytes));
  FUSEE_TRY_VOID(fs.create_dir(dir));
  FUSEE_TRY_VOID(fs.create_dir(replica_dir(dir)));
  store->lock_ = FUSEE_TRY(fs.lock_exclusive(path_in(dir, "lock")));
  if (!FUSEE_TRY(fs.exists(path_in(dir, "cluster")))) {
    recovered.log.wiped = true;
    return store;
  }
  if (FUSEE_TRY(read_text(fs, path_in(dir, "cluster"))) != cluster) return make_error_code(StoreErrc::foreign_cluster);
  recovered.log.suspect = FUSEE_TRY(fs.exists(path_in(dir, "suspect")));
  if (recovered.log.suspect) {
    // A marker an earlier life wrote may not be durable yet (it stopped
    // before the directory's sync): it is, before anything is cut.
    auto marker = FUSEE_TRY(fs.open(path_in(dir, "suspect"), {.write = true}));
    FUSEE_TRY_VOID(marker->sync_data());
    FUSEE_TRY_VOID(fs.sync_dir(replica_dir(dir)));
  }
  if (!FUSEE_TRY(fs.exists(wal_dir_of(dir)))) {
    FUSEE_TRY_VOID(fs.create_dir(wal_dir_of(dir)));
    FUSEE_TRY_VOID(fs.sync_dir(dir));
  }
  // Pages a failed sync left clean in the cache are not on the disk.
  for (const std::string& name : FUSEE_TRY(fs.list(wal_dir_of(dir)))) {
    if (!wal::parse_segment_file_name(name)) continue;
    auto file = FUSEE_TRY(fs.open(io::join_path(wal_dir_of(dir), name), {}));
    FUSEE_TRY_VOID(file->drop_cache());
  }
  ReadChain chain = FUSEE_TRY(read_chain(fs, dir, cluster, held_bytes_max));
  if (chain.damaged && !recovered.log.suspect) {
    // Remembered before the cut makes the damage invisible: only a
    // primary's whole log repairs it.
    FUSEE_TRY_VOID(create_marker(fs, path_in(dir, "suspect"), chain.damage + "\n"));
    FUSEE_TRY_VOID(fs.sync_dir(replica_dir(dir)));
    recovered.log.suspect = true;
  }
  store->writable_ = true;
  if (chain.points.empty()) {
    // The segment the log starts in is lost: the log starts again, empty,
    // at the cluster's first segment (and suspect, above).
    FUSEE_TRY_VOID(remove_segments(fs, dir, 0));
    if (FUSEE_TRY(fs.exists(log_start_path(dir)))) {
      FUSEE_TRY_VOID(fs.remove(log_start_path(dir)));
      FUSEE_TRY_VOID(fs.sync_dir(replica_dir(dir)));
    }
    FUSEE_TRY(create_replica_segment(fs, dir, first_segment_header(cluster, segment_bytes)));
  } else {
    // What a retirement stopped before removing: its start is durable.
    for (const std::uint64_t number : chain.retired_segments) FUSEE_TRY_VOID(fs.remove(segment_path(dir, number)));
    if (!chain.retired_segments.empty()) FUSEE_TRY_VOID(fs.sync_dir(wal_dir_of(dir)));
    store->points_ = std::move(chain.points);
    store->start_view_ = chain.start.prev_view;
    recovered.log.retired_through = chain.retired_through();
    recovered.log.retired_view = chain.start.prev_view;
    // What the core is handed must be durable: it may acknowledge it at
    // once. An earlier life killed before its sync may have left batches
    // in the page cache only -- in any segment of the chain, a rolling
    // batch in the one before the last among them -- so every segment is
    // synced, not only the last.
    for (std::uint64_t number = store->points_.front().segment; number < store->points_.back().segment; ++number) {
      FUSEE_TRY_VOID(FUSEE_TRY(store->segment_file(number))->sync_data());
    }
    FUSEE_TRY_VOID(store->cut(store->end()));
    FUSEE_TRY_VOID(fs.sync_dir(wal_dir_of(dir)));
  }
  recovered.damage = chain.damage;
  recovered.log.entries = std::move(chain.entries);
  return store;
}

Result<io::File*> ReplicaStore::segment_file(std::uint64_t number) {
  auto& file = files_[number];
  if (!file) file = FUSEE_TRY(fs_.open(segment_path(dir_, number), {.write = true}));
  return file.get();
}

Result<void> ReplicaStore::cut(replication::Seq keep_through) {
  FUSEE_ASSERT(keep_through <= end(), "a cut within the log");
  FUSEE_ASSERT(keep_through >= retired_through(), "no cut reaches a retired batch");
  // (Its bookkeeping goes first: a failed write stops the replica, which
  // recovers from what the disk holds.)
  {
    std::lock_guard lock(mu_);
    points_.resize(keep_through - retired_through() + 1);
    reading_.clear();
  }
  const ChainPoint& end_point = points_.back();
  // The later segments lose their batches first, newest first, each
  // durably; then the segment the chain now ends in is cut, durably. At
  // every step a crash leaves the chain whole up to a clean end with only
  // headers past it -- which read as left over, never as the chain's --
  // or the chain as it was.
  std::vector<std::uint64_t> later;
  for (const std::string& name : FUSEE_TRY(fs_.list(wal_dir_of(dir_)))) {
    if (auto number = wal::parse_segment_file_name(name); number && *number > end_point.segment) later.push_back(*number);
  }
  std::sort(later.rbegin(), later.rend());
  for (const std::uint64_t number : later) {
    io::File* stale = FUSEE_TRY(segment_file(number));
    if (FUSEE_TRY(stale->size()) <= wal::kSegmentHeaderBytes) continue;
    FUSEE_TRY_VOID(stale->truncate(wal::kSegmentHeaderBytes));
    FUSEE_TRY_VOID(stale->sync_data());
  }
  io::File* file = FUSEE_TRY(segment_file(end_point.segment));
  if (FUSEE_TRY(file->size()) != end_point.offset) FUSEE_TRY_VOID(file->truncate(end_point.offset));
  FUSEE_TRY_VOID(file->sync_data());
  unsynced_.erase(end_point.segment);
  for (auto it = files_.begin(); it != files_.end();) {
    it = it->first > end_point.segment ? files_.erase(it) : std::next(it);
  }
  for (auto it = unsynced_.begin(); it != unsynced_.end();) {
    it = *it > end_point.segment ? unsynced_.erase(it) : std::next(it);
  }
  return remove_segments(fs_, dir_, end_point.segment);
}

Result<void> ReplicaStore::apply(const replication::DiskWrite& write) {
  if (!writable_) {
    // A wiped directory the core has been told was rebuilt writes nothing
    // until it is: rebuilding is the operator's, offline.
    return std::make_error_code(std::errc::operation_not_permitted);
  }
  for (const replication::Entry& entry : write.entries) {
    if (entry.payload.size() > payload_bytes_max()) return make_error_code(StoreErrc::payload_too_large);
  }
  // Durable before anything is written past it: a crash that kept the new
  // batches but not the cut would leave pieces of the old ones past their
  // end, which read as damage. Cuts are rare (a divergent tail).
  if (write.restart) FUSEE_TRY_VOID(restart_after(*write.restart));
  if (write.keep_through < end()) FUSEE_TRY_VOID(cut(write.keep_through));
  // The batches that go into one segment are written at once.
  std::vector<std::byte> run;
  std::uint64_t run_segment = points_.back().segment;
  std::uint64_t run_offset = points_.back().offset;
  auto write_run = [&]() -> Result<void> {
    if (run.empty()) return ok();
    io::File* file = FUSEE_TRY(segment_file(run_segment));
    FUSEE_TRY_VOID(wal::write_fully(*file, run_offset, run, io::WriteFlags::none));
    unsynced_.insert(run_segment);
    run.clear();
    return ok();
  };
  for (const replication::Entry& entry : write.entries) {
    FUSEE_ASSERT(entry.seq == end() + 1, "batches follow the log");
    EncodedBatch batch = FUSEE_TRY(encode_entry(cluster_, points_.back(), entry));
    if (batch.roll) {
      // The segment it opens is durable before the batch that names it is
      // written, and that batch before anything goes into the new segment:
      // so a rolling batch always has its successor, and batches in a
      // segment always have the roll before them.
      FUSEE_TRY(create_replica_segment(fs_, dir_, batch.next));
      run.insert(run.end(), batch.bytes.begin(), batch.bytes.end());
      FUSEE_TRY_VOID(write_run());
      FUSEE_TRY_VOID(sync());
      run_segment = batch.after.segment;
      run_offset = batch.after.offset;
    } else {
      run.insert(run.end(), batch.bytes.begin(), batch.bytes.end());
    }
    {
      std::lock_guard lock(mu_);
      points_.push_back(batch.after);
    }
  }
  FUSEE_TRY_VOID(write_run());
  // (Only segments before the one being written go: those are synced.)
  if (write.retire_below > 0) FUSEE_TRY(retire(std::min(write.retire_below, end())));
  return ok();
}

replica::LogStart ReplicaStore::start() const {
  std::lock_guard lock(mu_);
  const ChainPoint& first = points_.front();
  return {first.segment, first.seq + 1, first.crc, start_view_};
}

Result<void> ReplicaStore::restart_after(const replication::LogAnchor& anchor) {
  if (anchor.segment < 1 || anchor.seq < 1) return make_error_code(StoreErrc::malformed_batch);
  const std::uint64_t capacity = points_.front().capacity;
  const LogStart start{anchor.segment, anchor.seq + 1, anchor.crc, anchor.view};
  const wal::SegmentHeader header{anchor.segment, segment_salt(cluster_, anchor.segment), anchor.seq + 1, capacity,
                                  anchor.crc, true};
  FUSEE_TRY_VOID(write_log_start(fs_, dir_, start));
  files_.clear();
  unsynced_.clear();
  FUSEE_TRY_VOID(remove_segments(fs_, dir_, 0));
  FUSEE_TRY(create_replica_segment(fs_, dir_, header));
  // One swap: a reader meanwhile finds the old chain, whose files may be
  // gone (an error, never a chain without points).
  std::lock_guard lock(mu_);
  points_.assign(1, point_before(header));
  reading_.clear();
  start_view_ = start.prev_view;
  return ok();
}

Result<replication::Entry> ReplicaStore::read(replication::Seq seq) {
  constexpr std::size_t kReadingFilesMax = 4;
  ChainPoint point;
  ChainPoint after;  // where the chain stands after it: its end, or the roll past it
  std::shared_ptr<io::File> file;
  {
    // The core reads only a durable batch no write in flight cuts, so the
    // place found here holds it while the read below runs unlocked.
    std::lock_guard lock(mu_);
    // A reader that lost a race with a cut or a restart (a stepped-down
    // primary's engine reading its log) is told so, never stopped.
    if (seq < 1 || seq > end()) return make_error_code(StoreErrc::unreadable_batch);
    if (seq <= retired_through()) return make_error_code(StoreErrc::retired_batch);
    point = points_[seq - 1 - retired_through()];
    after = points_[seq - retired_through()];
    auto& open = reading_[point.segment];
    if (!open) {
      open = FUSEE_TRY(fs_.open(segment_path(dir_, point.segment), {}));
      if (reading_.size() > kReadingFilesMax) reading_.erase(reading_.begin() == reading_.find(point.segment)
                                                                 ? std::next(reading_.begin())
                                                                 : reading_.begin());
    }
    file = open;
  }
  // A batch ends where the next begins; a rolling one, where its file ends
  // (segments are not preallocated).
  const std::uint64_t batch_end = after.segment == point.segment ? after.offset : FUSEE_TRY(file->size());
  const auto unreadable = make_error_code(StoreErrc::unreadable_batch);
  if (batch_end <= point.offset || batch_end - point.offset > batch_bytes_max(point.capacity)) return unreadable;
  auto read = wal::read_batch(*file, point.salt, point.offset, static_cast<std::uint32_t>(batch_end - point.offset));
  if (!read) return read.error() == make_error_code(wal::errc::corrupt) ? unreadable : read.error();
  const std::vector<std::byte>& bytes = *read;
  const auto header = wal::decode_batch_header(bytes);
  // Its own checksum held (read_batch); it must also be the batch the chain
  // holds there, exactly.
  if (header->sequence != seq || header->prev_crc != point.crc || header->crc != after.crc) return unreadable;
  replication::Entry entry;
  entry.seq = header->sequence;
  entry.view = header->view;
  entry.acked = header->acked;
  entry.payload.assign(reinterpret_cast<const char*>(bytes.data() + wal::kBatchHeaderBytes), header->body_length);
  return entry;
}

Result<replication::Seq> ReplicaStore::retire(replication::Seq below) {
  FUSEE_ASSERT(below <= end() + 1, "a retirement within the log");
  const replication::Seq base = retired_through();
  if (below <= base + 1) return base;
  // The segment batch `below` lies in (or the next goes into) starts the
  // log; everything before it retires.
  const std::uint64_t segment = points_[below - 1 - base].segment;
  const std::uint64_t old_segment = points_.front().segment;
  if (segment == old_segment) return base;
  std::size_t first = below - 1 - base;  // the point after the batch that rolled into it
  while (points_[first - 1].segment == segment) --first;
  const ChainPoint& at = points_[first];
  FUSEE_ASSERT(at.offset == wal::kSegmentHeaderBytes, "a segment's chain starts after its header");
  // The view of the last batch retired: a primary anchors its appends there.
  const replication::View view = FUSEE_TRY(read(at.seq)).view;
  const LogStart start{segment, at.seq + 1, at.crc, view};
  // Durable before any file goes: recovery then takes what is left below
  // it for a retirement's leftovers, never for a lost start.
  FUSEE_TRY_VOID(write_log_start(fs_, dir_, start));
  {
    std::lock_guard lock(mu_);
    start_view_ = view;
    points_.erase(points_.begin(), points_.begin() + static_cast<std::ptrdiff_t>(first));
    reading_.erase(reading_.begin(), reading_.lower_bound(segment));
  }
  files_.erase(files_.begin(), files_.lower_bound(segment));
  unsynced_.erase(unsynced_.begin(), unsynced_.lower_bound(segment));
  for (std::uint64_t number = old_segment; number < segment; ++number) {
    FUSEE_TRY_VOID(fs_.remove(segment_path(dir_, number)));
  }
  FUSEE_TRY_VOID(fs_.sync_dir(wal_dir_of(dir_)));
  return retired_through();
}

Result<void> ReplicaStore::sync() {
  for (const std::uint64_t number : unsynced_) {
    io::File* file = FUSEE_TRY(segment_file(number));
    FUSEE_TRY_VOID(file->sync_data());
  }
  unsynced_.clear();
  // Only the segment being written stays open.
  for (auto it = files_.begin(); it != files_.end();) {
    it = it->first != points_.back().segment ? files_.erase(it) : std::next(it);
  }
  return ok();
}

Result<void> ReplicaStore::finish(const replication::DiskWrite& write) {
  if (!write.repaired || !FUSEE_TRY(fs_.exists(path_in(dir_, "suspect")))) return ok();
  FUSEE_TRY_VOID(fs_.remove(path_in(dir_, "suspect")));
  return fs_.sync_dir(replica_dir(dir_));
}

}  // namespace fusee::replica
