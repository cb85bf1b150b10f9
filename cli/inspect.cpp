#include "cli/inspect.hpp"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>

#include "cli/backup_status.hpp"
#include "cli/table.hpp"
#include "engine/journal_json.hpp"
#include "engine/kept_journal.hpp"
#include "engine/journal_record.hpp"
#include "engine/offline_dir.hpp"
#include "engine/run_hash.hpp"
#include "replica/replica_store.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/io/read_only_file_system.hpp"
#include "wal/log_format.hpp"
#include "wal/recovery.hpp"

namespace fusee::cli {
namespace {

namespace json = boost::json;
using engine::OfflineDir;
using engine::OfflineRun;

std::string time_text(std::int64_t ms) {
  if (ms == 0) return "-";
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03}Z", text, ms % 1000);
}

const char* header_status_name(wal::SegmentHeaderStatus status) {
  switch (status) {
    case wal::SegmentHeaderStatus::valid: return "valid";
    case wal::SegmentHeaderStatus::zeroed: return "zeroed";
    case wal::SegmentHeaderStatus::damaged: return "damaged";
  }
  return "?";
}

std::string short_json(const json::value& value, std::size_t max_chars = 48) {
  auto text = json::serialize(value);
  if (text.size() > max_chars) text = text.substr(0, max_chars - 3) + "...";
  return text;
}

void print_json(const json::value& value) { fmt::print("{}\n", json::serialize(value)); }

// --- What the views share -------------------------------------------------

struct Inspection {
  io::PosixFileSystem posix;
  io::ReadOnlyFileSystem fs{posix};
  OfflineDir offline;

  // A replica's directory (docs/replication.md): no engine's, its log the
  // shared log's segments, read with the replica's own strict recovery.
  std::optional<replica::StoreInspection> replica;

  bool opens() const { return offline.refusal.empty(); }
  bool log_only() const { return replica.has_value(); }
  // Whether the directory reads whole: the engine would open it, or it is a
  // replica's whose log the replica's recovery finds undamaged.
  bool log_readable() const {
    return opens() || (replica && !replica->chain.damaged && offline.plan_made && !offline.plan.refused);
  }
  std::uint32_t shards() const { return offline.meta ? offline.meta->shards : 0; }
};

// Where a run is: loaded by recovery, parked in the store, or finished in
// the store.
struct RunRow {
  std::string id;
  std::uint32_t shard = 0;
  std::uint32_t generation = 1;
  std::uint32_t version = 1;
  std::string workflow;
  RunStatus status = RunStatus::running;
  std::string where;  // "log" (loaded at open), "parked", "store" (finished)
  std::int64_t started_ms = 0;
  std::int64_t finished_ms = 0;
};

const char* where_of(const OfflineRun& run) { return run.parked ? "parked" : "log"; }

Result<std::vector<RunRow>> all_runs(Inspection& inspection, std::string& problem) {
  std::vector<RunRow> rows;
  for (std::uint32_t shard = 0; shard < inspection.shards(); ++shard) {
    auto runs = FUSEE_TRY(engine::collect_runs(inspection.fs, inspection.offline, shard, &problem));
    for (const auto& run : runs) {
      rows.push_back({run.id, run.shard, run.generation, run.version, run.workflow, run.status, where_of(run),
                      run.started_ms, 0});
    }
  }
  if (inspection.offline.store) {
    engine::RunQuery query;
    query.limit = 1000;
    for (;;) {
      auto page = FUSEE_TRY(inspection.offline.store->list(query));
      for (const auto& run : page.runs) {
        rows.push_back({run.id, engine::shard_of(run.id, inspection.shards()), run.generation, run.version,
                        run.workflow, run.status, "store", run.started_ms, run.finished_ms});
      }
      if (page.next_cursor.empty()) break;
      query.cursor = page.next_cursor;
    }
  }
  std::sort(rows.begin(), rows.end(), [](const RunRow& a, const RunRow& b) {
    return std::tie(a.id, a.generation) < std::tie(b.id, b.generation);
  });
  return rows;
}

struct Counts {
  std::uint64_t loaded = 0, parked = 0, completed = 0, failed = 0, cancelled = 0;
};

Counts count(const std::vector<RunRow>& rows) {
  Counts counts;
  for (const auto& row : rows) {
    switch (row.status) {
      case RunStatus::running:
      case RunStatus::stuck:  // (only code replaying the run can tell; inspect runs none)
        (row.where == "parked" ? counts.parked : counts.loaded)++;
        break;
      case RunStatus::completed: counts.completed++; break;
      case RunStatus::failed: counts.failed++; break;
      case RunStatus::cancelled: counts.cancelled++; break;
    }
  }
  return counts;
}

json::object counts_json(const Counts& counts) {
  return {{"running", counts.loaded + counts.parked}, {"parked", counts.parked}, {"completed", counts.completed},
          {"failed", counts.failed}, {"cancelled", counts.cancelled}};
}

// --- The pieces of the summary, each also a view --------------------------

json::object meta_json(const Inspection& inspection) {
  const auto& meta = inspection.offline.meta;
  if (!meta) return {};
  return {{"format", meta->format}, {"shards", meta->shards}, {"layout", meta->layout}};
}

json::object recovery_json(const Inspection& inspection) {
  const auto& offline = inspection.offline;
  json::object out;
  out["opens"] = inspection.opens();
  out["refusal"] = offline.refusal.empty() ? json::value(nullptr) : json::value(offline.refusal);
  if (!offline.plan_made) return out;
  const auto& plan = offline.plan;
  out["fresh"] = plan.fresh;
  out["first_sequence"] = plan.first_sequence;
  out["last_sequence"] = plan.last_sequence;
  out["chain_batches"] = plan.chain_batches;
  out["chain_records"] = plan.chain_records;
  out["ends_with_close"] = plan.ends_with_close;
  out["write_segment"] = plan.write_segment;
  out["write_offset"] = plan.write_offset;
  out["torn_tail"] = plan.tail.empty() ? json::value(nullptr) : json::value(plan.tail);
  out["stale_batches_past_end"] = plan.stale_batches_past_end;
  json::array deletes;
  for (const auto& path : plan.files_to_delete) deletes.push_back(json::value(path));
  for (auto number : plan.blob_files_unreferenced) deletes.push_back(json::value(fmt::format("blob file {}", number)));
  out["would_delete"] = std::move(deletes);
  json::array leftovers;
  for (const auto& path : offline.leftovers) leftovers.push_back(json::value(path));
  out["leftovers"] = std::move(leftovers);
  return out;
}

// The continuous backup (docs/backup.md), as its target tells it: what it
// covers and the backlog, the batches the log holds past it.
json::value backup_json(Inspection& inspection) {
  std::string problem;
  auto summary = read_backup_summary(inspection.fs, inspection.offline, problem);
  if (!summary) return problem.empty() ? json::value(nullptr) : json::value(json::object{{"problem", problem}});
  json::object out{{"target", summary->target}};
  if (!problem.empty()) {
    out["problem"] = problem;
    return out;
  }
  out["uploads"] = summary->uploads;
  out["covered_sequence"] = summary->covered_sequence;
  out["covered_at_ms"] = summary->covered_at_ms;
  out["pending_batches"] = summary->pending_batches;
  out["first_sequence"] = summary->first_sequence;
  out["snapshots"] = summary->snapshots;
  out["snapshot_sequence"] = summary->snapshot_sequence;
  return out;
}

void print_backup(Inspection& inspection) {
  std::string problem;
  auto summary = read_backup_summary(inspection.fs, inspection.offline, problem);
  if (!summary) {
    if (!problem.empty()) fmt::print("backup         cannot tell: {}\n", problem);
    return;
  }
  if (!problem.empty()) {
    fmt::print("backup         to {}: cannot read it now: {}\n", summary->target, problem);
    return;
  }
  fmt::print("backup         to {}: batches {} to {} on it, {} snapshots of the run store{}; backlog {} batches, which "
             "losing the disk now would lose (fusee backup status {})\n",
             summary->target, summary->first_sequence, summary->covered_sequence, summary->snapshots,
             summary->snapshots > 0 ? fmt::format(" (the newest to batch {})", summary->snapshot_sequence) : "",
             summary->pending_batches, inspection.offline.dir);
}

void print_recovery(const Inspection& inspection) {
  const auto& offline = inspection.offline;
  if (!inspection.opens()) {
    if (!inspection.log_only()) {
      fmt::print("recovery       REFUSES TO OPEN\n  {}\n", offline.refusal);
      return;
    }
    const auto& replica = *inspection.replica;
    fmt::print("replica        of cluster {}: its log alone, no engine's directory (fusee replica inspect --dir {} "
               "tells more)\n",
               replica.cluster, offline.dir);
    fmt::print("log            a replicated log, chain of {} batches ({} records), sequences {}..{}\n",
               replica.chain.entries.size(), offline.plan.chain_records, offline.plan.first_sequence,
               offline.plan.last_sequence);
    if (replica.chain.damaged) {
      fmt::print("  damage       {} (the replica's recovery marks it suspect and cuts the log there)\n",
                 replica.chain.damage);
    }
    if (replica.suspect_marked) fmt::print("  suspect      until a primary repairs it\n");
    if (offline.plan.refused) fmt::print("  refused      by the shared log's recovery: {}\n", offline.plan.refusal);
    return;
  }
  const auto& plan = offline.plan;
  if (plan.fresh) {
    fmt::print("recovery       opens; no log yet (the next open creates one)\n");
  } else if (plan.chain_batches == 0) {
    fmt::print("recovery       opens; the chain is empty, the next batch is sequence {}\n", plan.last_sequence + 1);
  } else {
    fmt::print("recovery       opens; chain of {} batches ({} records), sequences {}..{}{}\n", plan.chain_batches,
               plan.chain_records, plan.first_sequence, plan.last_sequence,
               plan.ends_with_close ? ", ends with a clean close" : ", no close marker (the last life crashed)");
  }
  if (!plan.fresh) {
    fmt::print("  next batch   segment {} offset {}\n", plan.write_segment, plan.write_offset);
    fmt::print("  torn tail    {}\n", plan.tail.empty() ? "none" : plan.tail + " (dropped: never acknowledged)");
    if (plan.stale_batches_past_end > 0) {
      fmt::print("  past end     {} valid batches of an earlier life, dropped\n", plan.stale_batches_past_end);
    }
    for (const auto& path : plan.files_to_delete) fmt::print("  would delete {}\n", path);
    for (auto number : plan.blob_files_unreferenced) {
      fmt::print("  would delete blob file {} (no batch of the chain refers to it)\n", number);
    }
  }
  for (const auto& path : offline.leftovers) {
    fmt::print("  leftover     {} (an interrupted reshard's; the next open removes it)\n", path);
  }
}

std::uint64_t last_sequence_of(const wal::SegmentSummary& segment) {
  return segment.chain_batches == 0 ? 0 : segment.header.first_sequence + segment.chain_batches - 1;
}

std::string segment_state(const Inspection& inspection, const wal::SegmentSummary& segment) {
  const auto& deletes = inspection.offline.plan.files_to_delete;
  if (std::find(deletes.begin(), deletes.end(), segment.path) != deletes.end()) {
    if (segment.header_status == wal::SegmentHeaderStatus::valid) return "past the end: deleted at open";
    // Past the end with a zeroed header: prepared ahead of a roll that never
    // came (wal/log_prepare.cpp). Before the chain: a retirement's leftover.
    if (segment.number > inspection.offline.plan.write_segment) return "prepared, never used: deleted at open";
    return "retired: deleted at open";
  }
  return "live";
}

json::array segments_json(const Inspection& inspection) {
  json::array out;
  for (const auto& segment : inspection.offline.plan.segments) {
    bool valid = segment.header_status == wal::SegmentHeaderStatus::valid;
    out.push_back(json::object{
        {"number", segment.number},
        {"path", segment.path},
        {"bytes", segment.file_bytes},
        {"header", header_status_name(segment.header_status)},
        {"first_sequence", valid ? json::value(segment.header.first_sequence) : json::value(nullptr)},
        {"last_sequence", segment.chain_batches > 0 ? json::value(last_sequence_of(segment)) : json::value(nullptr)},
        {"chain_batches", segment.chain_batches},
        {"state", segment_state(inspection, segment)},
    });
  }
  return out;
}

void print_segments(const Inspection& inspection) {
  Table table({{"segment", Table::Align::right},
               {"bytes", Table::Align::right},
               {"header"},
               {"first seq", Table::Align::right},
               {"last seq", Table::Align::right},
               {"batches", Table::Align::right},
               {"state"}});
  for (const auto& segment : inspection.offline.plan.segments) {
    bool valid = segment.header_status == wal::SegmentHeaderStatus::valid;
    table.add({std::to_string(segment.number), std::to_string(segment.file_bytes),
               header_status_name(segment.header_status),
               valid ? std::to_string(segment.header.first_sequence) : "-",
               segment.chain_batches > 0 ? std::to_string(last_sequence_of(segment)) : "-",
               std::to_string(segment.chain_batches), segment_state(inspection, segment)});
  }
  fmt::print("segments       {} in {}/wal\n", inspection.offline.plan.segments.size(), inspection.offline.root);
  if (!table.empty()) table.print(stdout);
}

json::array shards_json(const Inspection& inspection) {
  json::array out;
  const auto& offline = inspection.offline;
  for (std::uint32_t shard = 0; shard < inspection.shards(); ++shard) {
    json::object row{{"shard", shard}};
    if (offline.plan_made && shard < offline.plan.shards.size() && offline.plan.shards[shard].first_lsn > 0) {
      row["log_first_lsn"] = offline.plan.shards[shard].first_lsn;
      row["log_last_lsn"] = offline.plan.shards[shard].last_lsn;
    } else {
      row["log_first_lsn"] = nullptr;
      row["log_last_lsn"] = nullptr;
    }
    const auto& checkpoint = offline.checkpoints.size() > shard ? offline.checkpoints[shard] : std::nullopt;
    if (checkpoint) {
      row["checkpoint"] = json::object{
          {"lsn", checkpoint->lsn},
          {"replay_from", checkpoint->replay_from > 0 ? checkpoint->replay_from : checkpoint->lsn + 1},
          {"keep_from_sequence", checkpoint->keep_from_sequence}};
    } else {
      row["checkpoint"] = nullptr;
    }
    out.push_back(std::move(row));
  }
  return out;
}

void print_shards(const Inspection& inspection) {
  Table table({{"shard", Table::Align::right},
               {"log LSNs"},
               {"checkpoint LSN", Table::Align::right},
               {"replay from", Table::Align::right},
               {"keep from seq", Table::Align::right}});
  for (const auto& value : shards_json(inspection)) {
    const auto& row = value.as_object();
    std::string lsns = row.at("log_first_lsn").is_null()
                           ? "none"
                           : fmt::format("{}..{}", row.at("log_first_lsn").as_uint64(),
                                         row.at("log_last_lsn").as_uint64());
    if (row.at("checkpoint").is_null()) {
      table.add({json::serialize(row.at("shard")), lsns, "-", "-", "-"});
    } else {
      const auto& c = row.at("checkpoint").as_object();
      table.add({json::serialize(row.at("shard")), lsns, json::serialize(c.at("lsn")),
                 json::serialize(c.at("replay_from")), json::serialize(c.at("keep_from_sequence"))});
    }
  }
  fmt::print("shards         {}\n", inspection.shards());
  table.print(stdout);
}

json::object blobs_json(const Inspection& inspection) {
  const auto& plan = inspection.offline.plan;
  json::array files;
  for (auto number : plan.blob_files_referenced) {
    auto last = plan.blob_file_last_segment.find(number);
    files.push_back(json::object{{"file", number},
                                 {"referenced", true},
                                 {"last_segment", last == plan.blob_file_last_segment.end()
                                                      ? json::value(nullptr)
                                                      : json::value(last->second)}});
  }
  for (auto number : plan.blob_files_unreferenced) {
    files.push_back(json::object{{"file", number}, {"referenced", false}, {"last_segment", nullptr}});
  }
  return {{"blob_records", plan.blob_records}, {"files", std::move(files)}};
}

void print_blobs(const Inspection& inspection) {
  const auto& plan = inspection.offline.plan;
  fmt::print("blobs          {} records in {} files ({}/wal/blobs)\n", plan.blob_records,
             plan.blob_files_referenced.size() + plan.blob_files_unreferenced.size(), inspection.offline.root);
  Table table({{"file", Table::Align::right}, {"referenced"}, {"newest referring segment", Table::Align::right}});
  const auto blobs = blobs_json(inspection);
  for (const auto& value : blobs.at("files").as_array()) {
    const auto& file = value.as_object();
    table.add({json::serialize(file.at("file")), file.at("referenced").as_bool() ? "yes" : "no: deleted at open",
               file.at("last_segment").is_null() ? "-" : json::serialize(file.at("last_segment"))});
  }
  if (!table.empty()) table.print(stdout);
}

// --- Views ----------------------------------------------------------------

int fail_view(const Inspection& inspection, const std::string& what) {
  fmt::print(stderr, "fusee inspect: cannot show {}: {}\n", what,
             inspection.opens() ? "the directory could not be read" : inspection.offline.refusal);
  return 1;
}

int show_summary(Inspection& inspection, bool as_json) {
  const auto& offline = inspection.offline;
  std::optional<Counts> counts;
  std::string problem;
  if (inspection.opens()) {
    auto rows = all_runs(inspection, problem);
    if (rows) {
      counts = count(*rows);
    } else if (problem.empty()) {
      problem = rows.error().message();
    }
  }
  if (as_json) {
    json::object out{{"dir", offline.dir}, {"root", offline.root}};
    out["meta"] = offline.meta ? json::value(meta_json(inspection)) : json::value(nullptr);
    out["recovery"] = recovery_json(inspection);
    out["segments"] = offline.plan_made ? json::value(segments_json(inspection)) : json::value(json::array());
    out["shards"] = shards_json(inspection);
    out["blobs"] = offline.plan_made ? json::value(blobs_json(inspection)) : json::value(nullptr);
    out["backup"] = backup_json(inspection);
    out["runs"] = counts ? json::value(counts_json(*counts)) : json::value(nullptr);
    if (inspection.replica) {
      const auto& replica = *inspection.replica;
      out["replica"] = json::object{
          {"cluster", replica.cluster},
          {"batches", replica.chain.entries.size()},
          {"damage", replica.chain.damaged ? json::value(replica.chain.damage) : json::value(nullptr)},
          {"suspect", replica.suspect_marked}};
    }
    if (!problem.empty()) out["runs_problem"] = problem;
    print_json(out);
    return inspection.log_readable() && problem.empty() ? 0 : 1;
  }
  fmt::print("data directory {}\n", offline.dir);
  if (offline.meta) {
    fmt::print("format         {}\n", offline.meta->format);
    fmt::print("layout         {} (wal/ and runs/ in {})\n", offline.meta->layout, offline.root);
  }
  print_recovery(inspection);
  if (offline.plan_made) {
    print_segments(inspection);
    print_blobs(inspection);
  }
  print_backup(inspection);
  if (offline.meta) print_shards(inspection);
  if (counts) {
    fmt::print("runs           {} running ({} of them parked), {} completed, {} failed, {} cancelled\n",
               counts->loaded + counts->parked, counts->parked, counts->completed, counts->failed, counts->cancelled);
  } else if (!problem.empty()) {
    fmt::print("runs           cannot be read: {}\n", problem);
  }
  return inspection.log_readable() && problem.empty() ? 0 : 1;
}

int show_batches(Inspection& inspection, const InspectOptions& options) {
  if (!inspection.offline.plan_made) return fail_view(inspection, "batches");
  json::array batches;
  // A replicated log's batches each carry the view that sealed them.
  const bool replicated = inspection.offline.plan.replicated;
  std::vector<Table::Column> columns{{"segment", Table::Align::right},
                                     {"offset", Table::Align::right},
                                     {"sequence", Table::Align::right},
                                     {"bytes", Table::Align::right},
                                     {"kind"}};
  if (replicated) columns.push_back({"view", Table::Align::right});
  for (Table::Column column : std::initializer_list<Table::Column>{{"acked", Table::Align::right},
                                                                   {"life"},
                                                                   {"sections", Table::Align::right},
                                                                   {"records", Table::Align::right}}) {
    columns.push_back(column);
  }
  Table table(std::move(columns));
  for (const auto& batch : inspection.offline.plan.batches) {
    if (options.segment && batch.segment != *options.segment) continue;
    const char* kind = (batch.flags & wal::kBatchFlagRoll)    ? "roll"
                       : (batch.flags & wal::kBatchFlagClose) ? "close"
                                                              : "records";
    batches.push_back(json::object{{"segment", batch.segment},
                                   {"offset", batch.offset},
                                   {"sequence", batch.sequence},
                                   {"bytes", batch.total_length},
                                   {"kind", kind},
                                   {"acked", batch.acked},
                                   {"life", fmt::format("{:016x}", batch.life)},
                                   {"sections", batch.section_count},
                                   {"records", batch.records}});
    if (replicated) batches.back().as_object()["view"] = batch.view;
    std::vector<std::string> row{std::to_string(batch.segment), std::to_string(batch.offset),
                                 std::to_string(batch.sequence), std::to_string(batch.total_length), kind};
    if (replicated) row.push_back(std::to_string(batch.view));
    for (std::string cell : {std::to_string(batch.acked), fmt::format("{:016x}", batch.life),
                             std::to_string(batch.section_count), std::to_string(batch.records)}) {
      row.push_back(std::move(cell));
    }
    table.add(std::move(row));
  }
  if (options.json) {
    print_json(json::object{{"batches", std::move(batches)}, {"refusal", inspection.opens()
                                                                              ? json::value(nullptr)
                                                                              : json::value(inspection.offline.refusal)}});
  } else {
    fmt::print("batches of the chain{}: {}\n",
               options.segment ? fmt::format(" in segment {}", *options.segment) : std::string(), batches.size());
    if (!table.empty()) table.print(stdout);
    if (!inspection.opens() && !inspection.log_only()) {
      fmt::print("the chain ends here: recovery refuses: {}\n", inspection.offline.refusal);
    }
  }
  return inspection.log_readable() ? 0 : 1;
}

std::optional<RunStatus> parse_status(const std::string& name) {
  for (auto status : kRunStatuses) {
    if (name == run_status_name(status)) return status;
  }
  return std::nullopt;
}

int show_runs(Inspection& inspection, const InspectOptions& options) {
  if (!inspection.opens()) return fail_view(inspection, "the runs");
  std::string problem;
  auto rows = all_runs(inspection, problem);
  if (!rows) {
    fmt::print(stderr, "fusee inspect: cannot read the runs: {}\n", problem.empty() ? rows.error().message() : problem);
    return 1;
  }
  auto status = options.status ? parse_status(*options.status) : std::nullopt;
  json::array listed;
  Table table({{"id"},
               {"shard", Table::Align::right},
               {"gen", Table::Align::right},
               {"ver", Table::Align::right},
               {"workflow"},
               {"status"},
               {"where"},
               {"started"},
               {"finished"}});
  std::size_t matched = 0;
  for (const auto& row : *rows) {
    if (status && row.status != *status) continue;
    if (options.workflow && row.workflow != *options.workflow) continue;
    if (++matched > options.limit) continue;
    listed.push_back(json::object{{"id", row.id},
                                  {"shard", row.shard},
                                  {"generation", row.generation},
                                  {"version", row.version},
                                  {"workflow", row.workflow},
                                  {"status", run_status_name(row.status)},
                                  {"where", row.where},
                                  {"started_ms", row.started_ms},
                                  {"finished_ms", row.finished_ms == 0 ? json::value(nullptr)
                                                                       : json::value(row.finished_ms)}});
    table.add({row.id, std::to_string(row.shard), std::to_string(row.generation), std::to_string(row.version),
               row.workflow,
               run_status_name(row.status), row.where, time_text(row.started_ms), time_text(row.finished_ms)});
  }
  if (options.json) {
    print_json(json::object{{"runs", std::move(listed)}, {"matched", matched}, {"counts", counts_json(count(*rows))}});
    return 0;
  }
  auto counts = count(*rows);
  fmt::print("runs: {} running ({} parked), {} completed, {} failed, {} cancelled; {} match, {} shown\n",
             counts.loaded + counts.parked, counts.parked, counts.completed, counts.failed, counts.cancelled, matched,
             std::min(matched, options.limit));
  if (!table.empty()) table.print(stdout);
  return 0;
}

// A record's detail as shown: an awakeable's secret is not (its token
// completes the awakeable to whoever holds it).
std::string shown_detail(const engine::JournalRecord& record) {
  return record.kind == engine::RecordKind::awakeable_created ? std::string(engine::kRedactedSecret) : record.detail;
}

json::object record_json(const engine::OfflineRecord& stored, const engine::JournalRecord& record) {
  return {{"source", stored.source == engine::RecordSource::log          ? "log"
                     : stored.source == engine::RecordSource::store_live ? "store"
                                                                         : "store (parked)"},
          {"lsn", stored.lsn},
          {"kind", engine::record_kind_name(record.kind)},
          {"generation", record.generation},
          {"position", record.position},
          {"name", record.name},
          {"detail", shown_detail(record)},
          {"number", record.number},
          {"time_ms", record.time_ms},
          {"at_ms", record.at_ms},
          {"took_us", record.took_us},
          {"parent", record.parent},
          {"flag", record.flag},
          {"value", record.value}};
}

// The runs of the shard a run id belongs to; nothing (the reason printed)
// when they cannot be read.
std::optional<std::vector<OfflineRun>> runs_of_shard(Inspection& inspection, std::uint32_t shard) {
  std::string problem;
  auto runs = engine::collect_runs(inspection.fs, inspection.offline, shard, &problem);
  if (!runs) {
    fmt::print(stderr, "fusee inspect: cannot read shard {}: {}\n", shard, problem.empty() ? runs.error().message() : problem);
    return std::nullopt;
  }
  return std::move(*runs);
}

int show_run(Inspection& inspection, const InspectOptions& options) {
  if (!inspection.opens()) return fail_view(inspection, "the run");
  auto shard = engine::shard_of(options.run_id, inspection.shards());
  auto runs = runs_of_shard(inspection, shard);
  if (!runs) return 1;
  const OfflineRun* loaded = nullptr;
  for (const auto& run : *runs) {
    if (run.id == options.run_id) loaded = &run;
  }
  std::optional<engine::FinishedRun> finished;
  if (inspection.offline.store) {
    auto found = inspection.offline.store->finished(options.run_id);
    if (!found) {
      fmt::print(stderr, "fusee inspect: cannot read the run store: {}\n", found.error().message());
      return 1;
    }
    finished = *found;
  }
  // A finished run's journal, kept with it (Config::keep_finished_journals).
  std::optional<json::object> kept;
  if (finished && inspection.offline.store) {
    auto stored = inspection.offline.store->journal_of_finished(options.run_id);
    if (!stored) {
      fmt::print(stderr, "fusee inspect: cannot read the run store: {}\n", stored.error().message());
      return 1;
    }
    if (*stored) {
      auto records = engine::records_of_kept_journal(**stored);
      if (records) {
        auto parsed = json::parse(engine::without_secrets(engine::journal_json(*records)));
        if (parsed.is_object()) kept = parsed.as_object();
      } else {
        // The rest of the run is still worth showing.
        fmt::print(stderr, "fusee inspect: run '{}': its kept journal does not decode; shown without it\n",
                   options.run_id);
      }
    }
  }
  if (!loaded && !finished) {
    if (options.json) {
      print_json(json::object{{"id", options.run_id}, {"shard", shard}, {"found", false}});
    } else {
      fmt::print("run '{}': no such run in {} (it would be in shard {})\n", options.run_id, inspection.offline.dir,
                 shard);
    }
    return 1;
  }
  json::object out{{"id", options.run_id}, {"shard", shard}, {"found", true}};
  if (finished) {
    out["finished"] = json::object{{"generation", finished->generation},
                                   {"workflow", finished->workflow},
                                   {"status", run_status_name(finished->status)},
                                   {"input", finished->input},
                                   {"result", finished->result},
                                   {"error_code", finished->error_code},
                                   {"message", finished->message},
                                   {"started_ms", finished->started_ms},
                                   {"finished_ms", finished->finished_ms}};
    out["finished"].as_object()["journal"] = kept ? json::value(*kept) : json::value(nullptr);
  } else {
    out["finished"] = nullptr;
  }
  json::array journal;
  std::vector<engine::JournalRecord> decoded;
  if (loaded) {
    for (const auto& stored : loaded->records) {
      auto record = engine::decode_record(stored.bytes);
      if (!record) {
        fmt::print(stderr, "fusee inspect: record {} of run '{}' does not decode\n", stored.lsn, options.run_id);
        return 1;
      }
      journal.push_back(record_json(stored, *record));
      decoded.push_back(std::move(*record));
    }
    out["journal"] = json::object{{"generation", loaded->generation},
                                  {"version", loaded->version},
                                  {"workflow", loaded->workflow},
                                  {"status", run_status_name(loaded->status)},
                                  {"where", where_of(*loaded)},
                                  {"records", journal}};
  } else {
    out["journal"] = nullptr;
  }
  if (options.json) {
    print_json(out);
    return 0;
  }
  fmt::print("run '{}' (shard {})\n", options.run_id, shard);
  if (finished) {
    fmt::print("  finished     generation {}, {} version {}, {}, started {}, finished {}\n", finished->generation,
               finished->workflow, finished->version, run_status_name(finished->status), time_text(finished->started_ms),
               time_text(finished->finished_ms));
    fmt::print("  input        {}\n", short_json(finished->input, 100));
    if (finished->status == RunStatus::completed) {
      fmt::print("  result       {}\n", short_json(finished->result, 100));
    } else {
      fmt::print("  error        {}: {}\n", finished->error_code, finished->message);
    }
  }
  if (loaded) {
    fmt::print("  journal      generation {}, {} version {}, {}, {} records{}\n", loaded->generation, loaded->workflow,
               loaded->version,
               run_status_name(loaded->status), loaded->records.size(),
               loaded->parked ? " (parked in the store)" : " (recovery loads it)");
    Table table({{"source"},
                 {"lsn", Table::Align::right},
                 {"kind"},
                 {"pos", Table::Align::right},
                 {"name"},
                 {"detail"},
                 {"number", Table::Align::right},
                 {"time"},
                 {"value"}});
    for (std::size_t i = 0; i < decoded.size(); ++i) {
      const auto& record = decoded[i];
      const auto& row = journal[i].as_object();
      table.add({std::string(row.at("source").as_string()), std::to_string(loaded->records[i].lsn),
                 engine::record_kind_name(record.kind), std::to_string(record.position), record.name, shown_detail(record),
                 std::to_string(record.number), record.time_ms > 0 ? time_text(record.time_ms) : "-",
                 short_json(record.value)});
    }
    table.print(stdout, "    ");
  } else if (kept && kept->contains("commands") && kept->at("commands").is_array()) {
    const auto& commands = kept->at("commands").as_array();
    fmt::print("  journal      kept with the finished run: {} commands, {} records\n", commands.size(),
               kept->contains("records") && kept->at("records").is_array() ? kept->at("records").as_array().size() : 0);
    Table table({{"pos", Table::Align::right}, {"command"}, {"name"}, {"outcome"}, {"attempts", Table::Align::right},
                 {"value"}});
    auto text_of = [](const json::object& entry, const char* key) {
      const auto* value = entry.if_contains(key);
      if (value == nullptr) return std::string("-");
      return value->is_string() ? std::string(value->as_string()) : short_json(*value);
    };
    for (const auto& command : commands) {
      if (!command.is_object()) continue;
      const auto& entry = command.as_object();
      table.add({text_of(entry, "position"), text_of(entry, "command"), text_of(entry, "name"), text_of(entry, "outcome"),
                 text_of(entry, "attempts"), entry.contains("value") ? short_json(entry.at("value")) : "-"});
    }
    table.print(stdout, "    ");
  } else {
    fmt::print("  journal      none loaded: the run store holds the finished run (recovery skips its records)\n");
  }
  return 0;
}

int show_stream(Inspection& inspection, const InspectOptions& options) {
  if (!inspection.opens()) return fail_view(inspection, "the stream");
  auto shard = engine::shard_of(options.run_id, inspection.shards());
  auto runs = runs_of_shard(inspection, shard);
  if (!runs) return 1;
  json::array chunks;
  bool closed = false;
  std::string source;
  for (const auto& run : *runs) {
    if (run.id != options.run_id) continue;
    source = "journal";
    for (const auto& stored : run.records) {
      auto record = engine::decode_record(stored.bytes);
      if (!record || record->name != options.stream) continue;
      if (record->kind == engine::RecordKind::stream_chunk) {
        chunks.push_back(json::object{{"offset", record->number}, {"value", record->value}});
      } else if (record->kind == engine::RecordKind::stream_closed) {
        closed = true;
      }
    }
  }
  if (source.empty() && inspection.offline.store) {
    auto stored = inspection.offline.store->streams(options.run_id);
    if (stored && *stored) {
      boost::system::error_code error;
      auto value = json::parse(**stored, error);
      if (!error && value.is_object()) {
        if (const auto* stream = value.as_object().if_contains(options.stream)) {
          source = "store";
          std::uint64_t offset = 0;
          for (const auto& chunk : stream->at("chunks").as_array()) {
            chunks.push_back(json::object{{"offset", offset++}, {"value", chunk}});
          }
          closed = stream->at("closed").as_bool();
        } else {
          source = "store";
        }
      }
    }
  }
  if (source.empty()) {
    fmt::print(stderr, "fusee inspect: no run '{}' in {}\n", options.run_id, inspection.offline.dir);
    return 1;
  }
  if (options.json) {
    print_json(json::object{{"id", options.run_id}, {"stream", options.stream}, {"source", source},
                            {"closed", closed}, {"chunks", chunks}});
    return 0;
  }
  fmt::print("stream '{}' of run '{}': {} chunks, {} (from the {})\n", options.stream, options.run_id, chunks.size(),
             closed ? "closed" : "open", source == "store" ? "run store" : "run's journal");
  Table table({{"offset", Table::Align::right}, {"value"}});
  for (const auto& value : chunks) {
    const auto& chunk = value.as_object();
    table.add({json::serialize(chunk.at("offset")), short_json(chunk.at("value"), 100)});
  }
  if (!table.empty()) table.print(stdout);
  return 0;
}

}  // namespace

int run_inspect(const InspectOptions& options) {
  Inspection inspection;
  auto offline = engine::read_offline_dir(inspection.fs, options.dir, options.view == InspectView::batches);
  if (!offline) {
    fmt::print(stderr, "fusee inspect: cannot read {}: {}\n", options.dir, offline.error().message());
    return 1;
  }
  inspection.offline = std::move(*offline);
  if (!inspection.offline.meta) {
    // No engine's directory: a replica's, perhaps, which holds the shared
    // log alone. Its log views read its segments as a replica's files.
    auto replica = replica::inspect_store(inspection.fs, options.dir);
    if (replica && !replica->cluster.empty()) {
      auto plan = wal::plan_recovery(inspection.fs, replica::wal_dir_of(options.dir), 1, {},
                                     options.view == InspectView::batches, /*replica_files=*/true);
      if (!plan) {
        fmt::print(stderr, "fusee inspect: cannot read {}: {}\n", options.dir, plan.error().message());
        return 1;
      }
      inspection.offline.plan = std::move(*plan);
      inspection.offline.plan_made = true;
      inspection.replica = std::move(*replica);
    }
  }
  switch (options.view) {
    case InspectView::summary: return show_summary(inspection, options.json);
    case InspectView::batches: return show_batches(inspection, options);
    case InspectView::runs: return show_runs(inspection, options);
    case InspectView::run: return show_run(inspection, options);
    case InspectView::stream: return show_stream(inspection, options);
    case InspectView::segments:
    case InspectView::shards:
    case InspectView::blobs: break;
  }
  if (!inspection.offline.meta && !(inspection.log_only() && options.view != InspectView::shards)) {
    return fail_view(inspection, "it");
  }
  if (!inspection.offline.plan_made && options.view != InspectView::shards) return fail_view(inspection, "it");
  if (options.json) {
    json::object out{{"refusal", inspection.opens() ? json::value(nullptr) : json::value(inspection.offline.refusal)}};
    if (options.view == InspectView::segments) out["segments"] = segments_json(inspection);
    if (options.view == InspectView::shards) out["shards"] = shards_json(inspection);
    if (options.view == InspectView::blobs) out["blobs"] = blobs_json(inspection);
    print_json(out);
  } else {
    if (options.view == InspectView::segments) print_segments(inspection);
    if (options.view == InspectView::shards) print_shards(inspection);
    if (options.view == InspectView::blobs) print_blobs(inspection);
    if (!inspection.opens() && !inspection.log_only()) {
      fmt::print("recovery refuses: {}\n", inspection.offline.refusal);
    }
  }
  return inspection.log_readable() ? 0 : 1;
}

}  // namespace fusee::cli
