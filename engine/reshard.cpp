#include "engine/reshard.hpp"

#include <fmt/format.h>

#include <map>
#include <random>

#include "engine/meta.hpp"
#include "engine/offline_dir.hpp"
#include "engine/run_hash.hpp"
#include "engine/run_store.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"
#include "wal/segment_file.hpp"

namespace fusee::engine {
namespace {

// A batch is written once it holds this many bytes or runs, so memory stays
// bounded whatever the directory holds.
constexpr std::size_t kBatchBytesMax = 4u << 20;
constexpr std::size_t kBatchRunsMax = 1000;
// Where the new layout's empty log starts (see reshard.hpp).
constexpr std::uint64_t kNewLogFirstSequence = 2;

std::uint64_t salt() {
  std::random_device device;
  return (std::uint64_t{device()} << 32) | device();
}

class Resharder {
 public:
  Resharder(io::FileSystem& fs, std::string dir, const ReshardOptions& options, std::string* problem)
      : fs_(fs), dir_(std::move(dir)), options_(options), problem_(problem) {}

  Result<ReshardReport> run() {
    if (options_.shards == 0 || options_.shards > wal::kShardsMax) {
      return fail(wal::errc::invalid_argument, fmt::format("--shards {}: must be 1 to {}", options_.shards,
                                                           wal::kShardsMax));
    }
    auto lock = fs_.lock_exclusive(io::join_path(dir_, "fusee.lock"));
    if (!lock) {
      return fail(lock.error(), lock.error() == std::errc::operation_would_block
                                    ? fmt::format("{} is in use: an engine or server holds {}/fusee.lock; stop it "
                                                  "first (resharding is offline)",
                                                  dir_, dir_)
                                    : fmt::format("cannot lock {}: {}", dir_, lock.error().message()));
    }
    auto replica = is_replica_dir(fs_, dir_);
    if (!replica) return fail(replica.error(), fmt::format("cannot read {}: {}", dir_, replica.error().message()));
    if (*replica) {
      return fail(wal::errc::invalid_argument,
                  fmt::format("{} is a replica's directory (it holds {}/{}): every replica of a cluster has the "
                              "same shards, so a replica is not resharded on its own",
                              dir_, dir_, kReplicaMarker));
    }
    auto offline = read_offline_dir(fs_, dir_);
    if (!offline) return fail(offline.error(), fmt::format("cannot read {}: {}", dir_, offline.error().message()));
    offline_ = std::move(*offline);
    if (!offline_.meta) return fail(wal::errc::corrupt, offline_.refusal);
    if (!offline_.refusal.empty()) {
      return fail(wal::errc::corrupt, fmt::format("{} does not open, so it cannot be resharded: {} (see `fusee "
                                                  "inspect {}`)",
                                                  dir_, offline_.refusal, dir_));
    }
    const auto& meta = *offline_.meta;
    report_.shards_from = meta.shards;
    report_.shards_to = options_.shards;
    report_.layout_from = meta.layout;
    report_.layout_to = meta.layout;
    for (const auto& leftover : offline_.leftovers) {
      FUSEE_TRY_VOID(step(io::remove_tree(fs_, leftover), "removing " + leftover));
      ++report_.leftovers_removed;
    }
    if (options_.shards == meta.shards) return report_;

    report_.layout_to = meta.layout + 1;
    const auto root = layout_root(dir_, report_.layout_to);
    FUSEE_TRY_VOID(step(fs_.create_dir(root), "creating " + root));
    FUSEE_TRY_VOID(step(fs_.sync_dir(dir_), "syncing " + dir_));
    FUSEE_TRY_VOID(step(fs_.create_dir(io::join_path(root, "runs")), "creating " + root + "/runs"));
    FUSEE_TRY_VOID(step(fs_.sync_dir(root), "syncing " + root));
    {
      std::string why;
      auto store = RunStore::open(root, &why, &fs_);
      if (!store) return fail(store.error(), fmt::format("cannot create the run store in {}/runs: {}", root, why));
      target_ = std::move(*store);
    }
    progress_.shards_total = meta.shards;
    FUSEE_TRY_VOID(copy_finished());
    next_lsn_.assign(options_.shards, 1);
    for (std::uint32_t shard = 0; shard < meta.shards; ++shard) {
      FUSEE_TRY_VOID(move_shard(shard));
      progress_.shards_read = shard + 1;
      report_progress();
    }
    // Each new shard's checkpoint covers the LSNs given to its journals, so
    // the new log starts past them and replays nothing below.
    RunStore::Batch checkpoints;
    for (std::uint32_t shard = 0; shard < options_.shards; ++shard) {
      checkpoints.put_checkpoint(Checkpoint{shard, next_lsn_[shard] - 1, kNewLogFirstSequence, {}, 0});
    }
    FUSEE_TRY_VOID(step(target_->write(std::move(checkpoints)), "writing the checkpoints"));
    target_.reset();
    FUSEE_TRY_VOID(step(wal::create_empty_log(fs_, root, kNewLogFirstSequence, 0, options_.segment_bytes,
                                              options_.direct_io, salt()),
                        "creating the new log in " + root + "/wal"));
    offline_.store.reset();
    // The switch.
    Meta switched{kMetaFormat, options_.shards, report_.layout_to};
    FUSEE_TRY_VOID(step(write_meta(fs_, dir_, switched), "switching fusee.meta to the new layout"));
    report_.changed = true;
    // The old layout is a leftover now; a crash here leaves it to the next open.
    auto leftovers = FUSEE_TRY(step(leftover_layouts(fs_, dir_, switched), "listing " + dir_));
    for (const auto& leftover : leftovers) {
      FUSEE_TRY_VOID(step(io::remove_tree(fs_, leftover), "removing the old layout " + leftover));
    }
    return report_;
  }

 private:
  Result<void> copy_finished() {
    if (!offline_.store) return ok();
    RunQuery query;
    query.limit = kBatchRunsMax;
    for (;;) {
      auto page = FUSEE_TRY(step(offline_.store->list(query), "listing finished runs"));
      RunStore::Batch batch;
      for (const auto& run : page.runs) {
        batch.put_finished(run);
        auto streams = FUSEE_TRY(step(offline_.store->streams(run.id), "reading streams of " + run.id));
        if (streams) batch.put_streams(run.id, *streams);
      }
      FUSEE_TRY_VOID(step(target_->write(std::move(batch)), "writing finished runs"));
      report_.finished_copied += page.runs.size();
      progress_.finished_copied = report_.finished_copied;
      report_progress();
      if (page.next_cursor.empty()) return ok();
      query.cursor = page.next_cursor;
    }
  }

  Result<void> move_shard(std::uint32_t shard) {
    std::string why;
    auto runs = collect_runs(fs_, offline_, shard, &why);
    if (!runs) {
      return fail(runs.error(), fmt::format("cannot read shard {}'s runs: {}", shard,
                                            why.empty() ? runs.error().message() : why));
    }
    RunStore::Batch batch;
    std::size_t batch_bytes = 0;
    std::size_t batch_runs = 0;
    for (const auto& run : *runs) {
      auto to = shard_of(run.id, options_.shards);
      auto place = run.parked ? JournalPlace::parked : JournalPlace::live;
      for (const auto& record : run.records) {
        batch.put_journal_record(place, to, run.id, next_lsn_[to]++, record.bytes);
        batch_bytes += record.bytes.size() + run.id.size() + 16;
      }
      if (run.parked) {
        batch.put_parked(to, *run.parked);
        ++report_.runs_parked;
      }
      report_.records_moved += run.records.size();
      ++report_.runs_moved;
      ++progress_.runs_moved;
      if (++batch_runs >= kBatchRunsMax || batch_bytes >= kBatchBytesMax) {
        FUSEE_TRY_VOID(step(target_->write(std::move(batch)), "writing runs"));
        batch = RunStore::Batch();
        batch_bytes = 0;
        batch_runs = 0;
        report_progress();
      }
    }
    return step(target_->write(std::move(batch)), "writing runs");
  }

  void report_progress() {
    if (options_.progress) options_.progress(progress_);
  }

  template <typename T>
  Result<T> step(Result<T> result, const std::string& what) {
    if (!result && problem_ && problem_->empty()) *problem_ = fmt::format("{}: {}", what, result.error().message());
    return result;
  }
  std::error_code fail(std::error_code code, std::string text) {
    if (problem_) *problem_ = std::move(text);
    return code;
  }

  io::FileSystem& fs_;
  std::string dir_;
  const ReshardOptions& options_;
  std::string* problem_;
  OfflineDir offline_;
  std::unique_ptr<RunStore> target_;
  std::vector<wal::Lsn> next_lsn_;
  ReshardReport report_;
  ReshardProgress progress_;
};

}  // namespace

Result<ReshardReport> reshard(io::FileSystem& fs, const std::string& dir, const ReshardOptions& options,
                              std::string* problem) {
  Resharder resharder(fs, dir, options, problem);
  return resharder.run();
}

}  // namespace fusee::engine
