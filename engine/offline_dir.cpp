#include "engine/offline_dir.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/journal_record.hpp"
#include "wal/errc.hpp"
#include "wal/record_reader.hpp"

namespace fusee::engine {

Result<OfflineDir> read_offline_dir(io::FileSystem& fs, const std::string& dir, bool list_batches) {
  OfflineDir offline;
  offline.dir = dir;
  offline.root = dir;
  if (!FUSEE_TRY(fs.exists(dir))) {
    offline.refusal = fmt::format("{} does not exist", dir);
    return offline;
  }
  auto meta = read_meta(fs, dir);
  if (!meta) {
    offline.refusal = fmt::format("{}/{} does not parse ({}): it names the shard count and layout, so nothing "
                                  "else can be read",
                                  dir, kMetaFileName, meta.error().message());
    return offline;
  }
  if (!*meta) {
    offline.refusal = fmt::format("{} is not a Fusee data directory (it has no {}); an engine opening it would "
                                  "make a new one",
                                  dir, kMetaFileName);
    return offline;
  }
  offline.meta = **meta;
  offline.root = layout_root(dir, offline.meta->layout);
  offline.leftovers = FUSEE_TRY(leftover_layouts(fs, dir, *offline.meta));
  const auto shards = offline.meta->shards;
  offline.checkpoints.resize(shards);

  const auto runs_dir = io::join_path(offline.root, "runs");
  if (FUSEE_TRY(fs.exists(io::join_path(runs_dir, "CURRENT")))) {
    std::string why;
    auto store = RunStore::open_read_only(offline.root, fs, &why);
    if (!store) {
      offline.refusal = fmt::format("the run store {} does not open: {}", runs_dir,
                                    why.empty() ? store.error().message() : why);
      return offline;
    }
    offline.store = std::move(*store);
  }

  // The checkpoints bound what the log may have retired (Engine::open does
  // the same).
  offline.base.shard_lsn_floors.assign(shards, 0);
  offline.base.shard_replay_from.assign(shards, 1);
  std::uint64_t first_sequence_max = UINT64_MAX;
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    std::uint64_t keep_from = 1;
    if (offline.store) {
      auto checkpoint = offline.store->checkpoint(shard);
      if (!checkpoint) {
        offline.refusal = fmt::format("shard {}'s checkpoint in {} does not read: {}", shard, runs_dir,
                                      checkpoint.error().message());
        return offline;
      }
      offline.checkpoints[shard] = *checkpoint;
      if (*checkpoint) {
        const auto& c = **checkpoint;
        offline.base.shard_lsn_floors[shard] = c.lsn;
        offline.base.shard_replay_from[shard] = c.replay_from > 0 ? c.replay_from : c.lsn + 1;
        keep_from = c.keep_from_sequence;
      }
    }
    first_sequence_max = std::min(first_sequence_max, keep_from);
  }
  offline.base.first_sequence_max = first_sequence_max;
  // A replica's log holds its run store's records too, in a shard of their
  // own, and its segment files are a replica's (not preallocated).
  const bool replica = FUSEE_TRY(is_replica_dir(fs, dir));
  if (replica && offline.store) {
    // The run store's shard: the log may have retired its records below
    // the last one the store applied (ReplicaHost::configure does the same).
    auto applied = offline.store->replica_applied();
    if (!applied) {
      offline.refusal = fmt::format("where the run store in {} stands in the log does not read: {}", runs_dir,
                                    applied.error().message());
      return offline;
    }
    offline.base.shard_lsn_floors.resize(replica_log_shards(shards), 0);
    offline.base.shard_lsn_floors[replica_store_shard(shards)] = applied->lsn;
  }
  offline.plan = FUSEE_TRY(wal::plan_recovery(fs, io::join_path(offline.root, "wal"),
                                              replica ? replica_log_shards(shards) : shards, offline.base,
                                              list_batches, /*replica_files=*/replica));
  offline.plan_made = true;
  if (offline.plan.refused) offline.refusal = offline.plan.refusal;
  return offline;
}

namespace {

RunStatus status_after(RecordKind kind, RunStatus before) {
  switch (kind) {
    case RecordKind::run_completed: return RunStatus::completed;
    case RecordKind::run_failed: return RunStatus::failed;
    case RecordKind::run_cancelled: return RunStatus::cancelled;
    default: return before;
  }
}

// One shard's runs, assembled as Shard::load assembles them.
class Assembler {
 public:
  Assembler(OfflineDir& offline, std::uint32_t shard, std::string* problem)
      : offline_(offline), shard_(shard), problem_(problem) {
    if (offline.checkpoints.size() > shard && offline.checkpoints[shard]) floor_ = offline.checkpoints[shard]->lsn;
  }

  Result<void> load(wal::Lsn lsn, std::span<const std::byte> bytes, RecordSource source) {
    auto record = decode_record(bytes);
    if (!record) return fail(fmt::format("shard {} record {} ({}) is not a journal record", shard_, lsn,
                                         source == RecordSource::log ? "log" : "run store"));
    // A reset's records count once its run_reset is there too, as
    // Shard::load holds them: a crash may have kept only the first ones.
    auto held = held_resets_.find(record->run_id);
    if (record->kind == RecordKind::run_started && record->position == kResetStartMarker) {
      auto& records = held_resets_[record->run_id];
      records.clear();
      records.push_back(Held{lsn, {bytes.begin(), bytes.end()}, source, record->generation});
      return ok();
    }
    if (held != held_resets_.end() && record->generation == held->second.front().generation) {
      held->second.push_back(Held{lsn, {bytes.begin(), bytes.end()}, source, record->generation});
      if (record->kind != RecordKind::run_reset) return ok();
      auto records = std::move(held->second);
      held_resets_.erase(held);
      for (const auto& item : records) FUSEE_TRY_VOID(load_whole(item.lsn, item.bytes, item.source));
      return ok();
    }
    return load_whole(lsn, bytes, source);
  }

  Result<void> load_whole(wal::Lsn lsn, std::span<const std::byte> bytes, RecordSource source) {
    auto record = decode_record(bytes);
    if (!record) return fail(fmt::format("shard {} record {} is not a journal record", shard_, lsn));
    if (source == RecordSource::log && offline_.store && lsn <= floor_) {
      // Below the checkpoint the log holds only the records of runs the
      // store did not hold yet.
      if (FUSEE_TRY(store_holds(*record))) return ok();
      // And those start with their run's start: a record of a run neither
      // stored nor started is a leftover of a generation the checkpoint
      // erased (as Shard::load).
      if (record->kind != RecordKind::run_started && !runs_.contains(record->run_id)) return ok();
    }
    OfflineRun* run = nullptr;
    if (record->kind == RecordKind::run_started) {
      auto& slot = runs_[record->run_id];
      if (slot.generation >= record->generation && !slot.id.empty()) return misfit(*record, lsn);
      slot = OfflineRun{};
      from_store_.erase(record->run_id);
      slot.id = record->run_id;
      slot.shard = shard_;
      slot.generation = record->generation;
      slot.workflow = record->name;
      if (!record->detail.empty()) slot.version = static_cast<std::uint32_t>(std::strtoul(record->detail.c_str(), nullptr, 10));
      slot.started_ms = record->time_ms;
      run = &slot;
    } else {
      auto found = runs_.find(record->run_id);
      if (found == runs_.end() && source == RecordSource::log && offline_.store) {
        // A record past the checkpoint of a run parked before it: the run
        // is loaded from its parked journal first.
        FUSEE_TRY_VOID(unpark(record->run_id));
        found = runs_.find(record->run_id);
      }
      if (found == runs_.end() || found->second.generation < record->generation) return misfit(*record, lsn);
      if (found->second.generation > record->generation) return ok();  // an older run of the id
      run = &found->second;
    }
    run->status = status_after(record->kind, run->status);
    run->records.push_back(OfflineRecord{lsn, source, {bytes.begin(), bytes.end()}});
    if (source != RecordSource::log) from_store_.insert({run->id, true});
    return ok();
  }

  Result<std::vector<OfflineRun>> finish() {
    // Runs still parked: their journals stay in the store.
    std::vector<ParkedRun> parked;
    if (offline_.store) {
      FUSEE_TRY_VOID(offline_.store->all_parked(shard_, [&](const ParkedRun& run) { parked.push_back(run); }));
    }
    for (const auto& entry : parked) {
      if (runs_.contains(entry.id)) continue;
      FUSEE_TRY_VOID(unpark(entry.id));
      auto found = runs_.find(entry.id);
      if (found != runs_.end()) found->second.parked = entry;
    }
    std::vector<OfflineRun> runs;
    runs.reserve(runs_.size());
    for (auto& [id, run] : runs_) runs.push_back(std::move(run));
    return runs;
  }

 private:
  Result<bool> store_holds(const JournalRecord& record) {
    if (runs_.contains(record.run_id)) return from_store_.contains(record.run_id);
    if (auto known = held_.find(record.run_id); known != held_.end()) return known->second;
    auto parked = offline_.store->parked(shard_, record.run_id);
    if (!parked) return Result<bool>(boost::system::in_place_error, parked.error());
    bool held = false;
    if (*parked) {
      held = (*parked)->generation >= record.generation;
    } else {
      auto finished = offline_.store->finished(record.run_id);
      if (!finished) return Result<bool>(boost::system::in_place_error, finished.error());
      held = *finished && (*finished)->generation >= record.generation;
    }
    held_[record.run_id] = held;
    return held;
  }

  Result<void> unpark(const std::string& id) {
    auto parked = FUSEE_TRY(offline_.store->parked(shard_, id));
    if (!parked) return ok();
    std::vector<std::pair<wal::Lsn, std::vector<std::byte>>> journal;
    FUSEE_TRY_VOID(offline_.store->read_journal(JournalPlace::parked, shard_, id,
                                                [&](const std::string&, std::uint64_t lsn,
                                                    std::span<const std::byte> bytes) -> Result<void> {
                                                  journal.emplace_back(lsn, std::vector<std::byte>(bytes.begin(),
                                                                                                   bytes.end()));
                                                  return ok();
                                                }));
    for (const auto& [lsn, bytes] : journal) FUSEE_TRY_VOID(load(lsn, bytes, RecordSource::store_parked));
    return ok();
  }

  std::error_code misfit(const JournalRecord& record, wal::Lsn lsn) {
    return fail(fmt::format("shard {} record {} ({} of run '{}', generation {}) does not fit its run's journal",
                            shard_, lsn, record_kind_name(record.kind), record.run_id, record.generation));
  }
  std::error_code fail(std::string text) {
    if (problem_) *problem_ = std::move(text);
    return make_error_code(wal::errc::corrupt);
  }

  OfflineDir& offline_;
  std::uint32_t shard_;
  std::string* problem_;
  wal::Lsn floor_ = 0;
  std::map<std::string, OfflineRun> runs_;
  std::map<std::string, bool> held_;
  std::map<std::string, bool> from_store_;  // runs loaded from the store's journals
  // A reset's records, by run id, until its run_reset (load).
  struct Held {
    wal::Lsn lsn = 0;
    std::vector<std::byte> bytes;
    RecordSource source = RecordSource::log;
    std::uint32_t generation = 0;
  };
  std::map<std::string, std::vector<Held>> held_resets_;
};

}  // namespace

Result<std::vector<OfflineRun>> collect_runs(io::FileSystem& fs, OfflineDir& offline, std::uint32_t shard,
                                             std::string* problem) {
  if (!offline.plan_made || offline.plan.refused || !offline.meta) return make_error_code(wal::errc::corrupt);
  Assembler assembler(offline, shard, problem);
  if (offline.store) {
    FUSEE_TRY_VOID(offline.store->load_journals(
        shard, [&](const std::string&, std::uint64_t lsn, std::span<const std::byte> bytes) -> Result<void> {
          return assembler.load(lsn, bytes, RecordSource::store_live);
        }));
  }
  if (!offline.plan.fresh) {
    Result<void> loaded = ok();
    auto first = offline.base.shard_replay_from.empty() ? 1 : offline.base.shard_replay_from[shard];
    FUSEE_TRY_VOID(wal::read_planned(fs, offline.plan, shard, first, [&](wal::Lsn lsn, std::span<const std::byte> bytes) {
      if (loaded) loaded = assembler.load(lsn, bytes, RecordSource::log);
    }));
    FUSEE_TRY_VOID(loaded);
  }
  return assembler.finish();
}

}  // namespace fusee::engine
