#include "protocol/store_call.hpp"

#include "rows/pending_json.hpp"
#include "protocol/wire.hpp"

namespace fusee::protocol {

using rows::Checkpoint;
using rows::FinishedRun;
using rows::JournalPlace;
using rows::ParkedRun;

const char* store_op_name(StoreOp op) {
  switch (op) {
    case StoreOp::write: return "write";
    case StoreOp::finished: return "finished";
    case StoreOp::list: return "list";
    case StoreOp::checkpoint: return "checkpoint";
    case StoreOp::streams: return "streams";
    case StoreOp::load_journals: return "load_journals";
    case StoreOp::read_journal: return "read_journal";
    case StoreOp::parked: return "parked";
    case StoreOp::parked_by_wake: return "parked_by_wake";
    case StoreOp::all_parked: return "all_parked";
    case StoreOp::expire_finished: return "expire_finished";
    case StoreOp::id_filters: return "id_filters";
    case StoreOp::journal_of_finished: return "journal_of_finished";
  }
  return "unknown";
}

// op u8, shard u32, id, place u8, ms i64, limit u32, query (has-workflow u8,
// workflow, status u8 (0: none, else 1 + RunStatus), from i64, to i64, limit
// u64, cursor), epochs (u32 count, then shard u32 and epoch u64), batch.
std::vector<std::byte> encode(const StoreCall& call) {
  Writer writer;
  writer.u8(static_cast<std::uint8_t>(call.op)).u32(call.shard).text(call.id);
  writer.u8(static_cast<std::uint8_t>(call.place)).i64(call.ms).u32(call.limit);
  const auto& query = call.query;
  writer.u8(query.workflow ? 1 : 0).text(query.workflow.value_or(""));
  writer.u8(query.status ? static_cast<std::uint8_t>(1 + static_cast<int>(*query.status)) : 0);
  writer.i64(query.finished_from_ms).i64(query.finished_to_ms).u64(query.limit).text(query.cursor);
  writer.u32(static_cast<std::uint32_t>(call.epochs.size()));
  for (const auto& [shard, epoch] : call.epochs) writer.u32(shard).u64(epoch);
  writer.bytes(call.batch);
  return writer.take();
}

std::optional<StoreCall> decode_store_call(std::span<const std::byte> payload) {
  return decode_with<StoreCall>(payload, [](Reader& r, StoreCall& call) {
    std::uint8_t op = 0;
    std::uint8_t place = 0;
    std::uint8_t has_workflow = 0;
    std::uint8_t status = 0;
    std::string workflow;
    std::uint64_t limit = 0;
    std::uint32_t epochs = 0;
    if (!r.u8(op) || !r.u32(call.shard) || !r.text(call.id) || !r.u8(place) || !r.i64(call.ms) ||
        !r.u32(call.limit) || !r.u8(has_workflow) || !r.text(workflow) || !r.u8(status) ||
        !r.i64(call.query.finished_from_ms) || !r.i64(call.query.finished_to_ms) || !r.u64(limit) ||
        !r.text(call.query.cursor) || !r.u32(epochs)) {
      return false;
    }
    if (op < 1 || op > static_cast<std::uint8_t>(StoreOp::journal_of_finished)) return false;
    call.op = static_cast<StoreOp>(op);
    if (place != static_cast<std::uint8_t>(JournalPlace::live) && place != static_cast<std::uint8_t>(JournalPlace::parked)) {
      return false;
    }
    call.place = static_cast<JournalPlace>(place);
    if (has_workflow > 1 || status > 1 + static_cast<int>(RunStatus::cancelled)) return false;
    if (has_workflow) call.query.workflow = workflow;
    if (status) call.query.status = static_cast<RunStatus>(status - 1);
    call.query.limit = static_cast<std::size_t>(limit);
    for (std::uint32_t i = 0; i < epochs; ++i) {
      std::uint32_t shard = 0;
      std::uint64_t epoch = 0;
      if (!r.u32(shard) || !r.u64(epoch)) return false;
      call.epochs.emplace_back(shard, epoch);
    }
    return r.bytes(call.batch);
  });
}

std::vector<std::byte> encode(const StoreReply& reply) {
  return Writer().text(reply.error).text(reply.message).bytes(reply.value).take();
}
std::optional<StoreReply> decode_store_reply(std::span<const std::byte> payload) {
  return decode_with<StoreReply>(payload, [](Reader& r, StoreReply& reply) {
    return r.text(reply.error) && r.text(reply.message) && r.bytes(reply.value);
  });
}

std::vector<std::byte> encode_rows(const std::vector<std::vector<std::byte>>& rows) {
  Writer writer;
  writer.u32(static_cast<std::uint32_t>(rows.size()));
  for (const auto& row : rows) writer.bytes(row);
  return writer.take();
}
std::optional<std::vector<std::vector<std::byte>>> decode_rows(std::span<const std::byte> payload) {
  return decode_with<std::vector<std::vector<std::byte>>>(payload, [](Reader& r, auto& rows) {
    std::uint32_t count = 0;
    if (!r.u32(count)) return false;
    for (std::uint32_t i = 0; i < count; ++i) {
      if (!r.bytes(rows.emplace_back())) return false;
    }
    return true;
  });
}

std::vector<std::byte> encode_journal_row(const std::string& id, std::uint64_t lsn, std::span<const std::byte> record) {
  return Writer().text(id).u64(lsn).bytes(record).take();
}
std::optional<JournalRow> decode_journal_row(std::span<const std::byte> row) {
  return decode_with<JournalRow>(row, [](Reader& r, JournalRow& m) { return r.text(m.id) && r.u64(m.lsn) && r.bytes(m.record); });
}

std::vector<std::byte> encode_parked(const ParkedRun& run) {
  return Writer()
      .text(run.id)
      .text(run.workflow)
      .u32(run.generation)
      .i64(run.started_ms)
      .u8(run.wake_ms ? 1 : 0)
      .i64(run.wake_ms.value_or(0))
      .u32(run.version)
      .text(boost::json::serialize(rows::pending_json(run.waiting)))
      .take();
}
std::optional<ParkedRun> decode_parked(std::span<const std::byte> row) {
  return decode_with<ParkedRun>(row, [](Reader& r, ParkedRun& m) {
    std::uint8_t has_wake = 0;
    std::int64_t wake_ms = 0;
    std::string waiting;
    if (!r.text(m.id) || !r.text(m.workflow) || !r.u32(m.generation) || !r.i64(m.started_ms) || !r.u8(has_wake) ||
        !r.i64(wake_ms) || has_wake > 1 || !r.u32(m.version) || !r.text(waiting)) {
      return false;
    }
    if (has_wake) m.wake_ms = wake_ms;
    boost::system::error_code error;
    auto parsed = boost::json::parse(waiting, error);
    auto commands = error ? std::nullopt : rows::pending_of(parsed);
    if (!commands) return false;
    m.waiting = std::move(*commands);
    return true;
  });
}

std::vector<std::byte> encode_finished(const FinishedRun& run) { return Writer().text(rows::encode_finished_run(run)).take(); }
std::optional<FinishedRun> decode_finished(std::span<const std::byte> row) {
  auto text = decode_with<std::string>(row, [](Reader& r, std::string& m) { return r.text(m); });
  if (!text) return std::nullopt;
  return rows::decode_finished_run(*text);
}

std::vector<std::byte> encode_checkpoint(const Checkpoint& c) {
  return Writer().u32(c.shard).u64(c.lsn).u64(c.keep_from_sequence).u64(c.replay_from).text(c.state).take();
}
std::optional<Checkpoint> decode_checkpoint(std::span<const std::byte> value) {
  return decode_with<Checkpoint>(value, [](Reader& r, Checkpoint& c) {
    return r.u32(c.shard) && r.u64(c.lsn) && r.u64(c.keep_from_sequence) && r.u64(c.replay_from) && r.text(c.state);
  });
}

std::vector<std::byte> encode_optional(const std::optional<std::vector<std::byte>>& value) {
  Writer writer;
  writer.u8(value ? 1 : 0);
  auto out = writer.take();
  if (value) out.insert(out.end(), value->begin(), value->end());
  return out;
}
std::optional<std::optional<std::vector<std::byte>>> decode_optional(std::span<const std::byte> value) {
  if (value.empty()) return std::nullopt;
  auto flag = std::to_integer<std::uint8_t>(value[0]);
  if (flag == 0) {
    if (value.size() != 1) return std::nullopt;
    return std::optional<std::vector<std::byte>>();
  }
  if (flag != 1) return std::nullopt;
  return std::optional<std::vector<std::byte>>(std::vector<std::byte>(value.begin() + 1, value.end()));
}

std::vector<std::byte> encode_u64(std::uint64_t value) { return Writer().u64(value).take(); }
std::optional<std::uint64_t> decode_u64(std::span<const std::byte> value) {
  return decode_with<std::uint64_t>(value, [](Reader& r, std::uint64_t& m) { return r.u64(m); });
}

}  // namespace fusee::protocol
