#include "engine/journal_record.hpp"

#include <cstring>

#include "wal/errc.hpp"
#include "wal/log_format.hpp"

namespace fusee::engine {
namespace {

void put_varint(std::vector<std::byte>& out, std::uint64_t value) {
  std::byte bytes[wal::kVarintBytesMax];
  out.insert(out.end(), bytes, bytes + wal::encode_varint(value, bytes));
}

void put_string(std::vector<std::byte>& out, const std::string& text) {
  put_varint(out, text.size());
  const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
  out.insert(out.end(), bytes, bytes + text.size());
}

std::uint64_t zigzag(std::int64_t value) {
  return (static_cast<std::uint64_t>(value) << 1) ^ static_cast<std::uint64_t>(value >> 63);
}

std::int64_t unzigzag(std::uint64_t value) {
  return static_cast<std::int64_t>(value >> 1) ^ -static_cast<std::int64_t>(value & 1);
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  bool varint(std::uint64_t& value) {
    auto decoded = wal::decode_varint(bytes_.subspan(at_));
    if (!decoded) return false;
    value = decoded->value;
    at_ += decoded->length;
    return true;
  }
  bool byte(std::uint8_t& value) {
    if (at_ >= bytes_.size()) return false;
    value = static_cast<std::uint8_t>(bytes_[at_++]);
    return true;
  }
  bool string(std::string& text) {
    std::uint64_t size = 0;
    if (!varint(size) || size > bytes_.size() - at_) return false;
    text.assign(reinterpret_cast<const char*>(bytes_.data() + at_), size);
    at_ += size;
    return true;
  }
  std::string_view rest() const {
    return {reinterpret_cast<const char*>(bytes_.data() + at_), bytes_.size() - at_};
  }

 private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

}  // namespace

const char* record_kind_name(RecordKind kind) {
  switch (kind) {
    case RecordKind::run_started: return "run_started";
    case RecordKind::step_completed: return "step_completed";
    case RecordKind::step_attempt_failed: return "step_attempt_failed";
    case RecordKind::step_failed: return "step_failed";
    case RecordKind::sleep_started: return "sleep_started";
    case RecordKind::sleep_fired: return "sleep_fired";
    case RecordKind::signal_received: return "signal_received";
    case RecordKind::wait_started: return "wait_started";
    case RecordKind::wait_completed: return "wait_completed";
    case RecordKind::stream_chunk: return "stream_chunk";
    case RecordKind::stream_closed: return "stream_closed";
    case RecordKind::value_recorded: return "value_recorded";
    case RecordKind::child_started: return "child_started";
    case RecordKind::child_completed: return "child_completed";
    case RecordKind::run_completed: return "run_completed";
    case RecordKind::run_failed: return "run_failed";
    case RecordKind::run_cancelled: return "run_cancelled";
    case RecordKind::any_resolved: return "any_resolved";
    case RecordKind::cancel_requested: return "cancel_requested";
    case RecordKind::cancel_delivered: return "cancel_delivered";
    case RecordKind::patch_marked: return "patch_marked";
    case RecordKind::run_reset: return "run_reset";
    case RecordKind::update_accepted: return "update_accepted";
    case RecordKind::update_taken: return "update_taken";
    case RecordKind::update_answered: return "update_answered";
    case RecordKind::awakeable_created: return "awakeable_created";
    case RecordKind::awakeable_completed: return "awakeable_completed";
    case RecordKind::step_started: return "step_started";
  }
  return "unknown";
}

const char* command_name(RecordKind kind) {
  switch (kind) {
    case RecordKind::step_started:
    case RecordKind::step_completed:
    case RecordKind::step_attempt_failed:
    case RecordKind::step_failed:
      return "step";
    case RecordKind::sleep_started:
    case RecordKind::sleep_fired:
      return "sleep";
    case RecordKind::wait_started:
    case RecordKind::wait_completed:
      return "wait_for";
    case RecordKind::stream_chunk:
      return "stream write";
    case RecordKind::stream_closed:
      return "stream close";
    case RecordKind::value_recorded:
      return "value";
    case RecordKind::child_started:
    case RecordKind::child_completed:
      return "child";
    case RecordKind::any_resolved:
      return "any";
    case RecordKind::patch_marked:
      return "patch";
    case RecordKind::update_taken:
      return "next_update";
    case RecordKind::update_answered:
      return "reply";
    case RecordKind::awakeable_created:
    case RecordKind::awakeable_completed:
      return "awakeable";
    default:
      return "?";
  }
}

bool is_positional(RecordKind kind) {
  switch (kind) {
    case RecordKind::run_started:
    case RecordKind::signal_received:
    case RecordKind::run_completed:
    case RecordKind::run_failed:
    case RecordKind::run_cancelled:
    case RecordKind::cancel_requested:
    case RecordKind::cancel_delivered:
    case RecordKind::run_reset:
    case RecordKind::update_accepted:
      return false;
    default:
      return true;
  }
}

// Layout: version u8, kind u8, varints generation, position, number,
// zigzag(time_ms), zigzag(at_ms) and took_us (version 2 on), flag u8,
// strings run_id, name, detail and parent (version 2 on; varint length +
// bytes), then the value as serialized JSON to the end (empty for null).
void encode_record(const JournalRecord& record, std::vector<std::byte>& out) {
  out.push_back(static_cast<std::byte>(kJournalFormatVersion));
  out.push_back(static_cast<std::byte>(record.kind));
  put_varint(out, record.generation);
  put_varint(out, record.position);
  put_varint(out, record.number);
  put_varint(out, zigzag(record.time_ms));
  put_varint(out, zigzag(record.at_ms));
  put_varint(out, record.took_us);
  out.push_back(static_cast<std::byte>(record.flag ? 1 : 0));
  put_string(out, record.run_id);
  put_string(out, record.name);
  put_string(out, record.detail);
  put_string(out, record.parent);
  if (!record.value.is_null()) {
    std::string json = boost::json::serialize(record.value);
    const auto* bytes = reinterpret_cast<const std::byte*>(json.data());
    out.insert(out.end(), bytes, bytes + json.size());
  }
}

std::vector<std::byte> encode_record(const JournalRecord& record) {
  std::vector<std::byte> out;
  out.reserve(32 + record.run_id.size() + record.name.size() + record.detail.size());
  encode_record(record, out);
  return out;
}

Result<JournalRecord> decode_record(std::span<const std::byte> bytes) {
  const auto corrupt = make_error_code(wal::errc::corrupt);
  Reader reader(bytes);
  JournalRecord record;
  std::uint8_t version = 0;
  std::uint8_t kind = 0;
  std::uint8_t flag = 0;
  std::uint64_t generation = 0;
  std::uint64_t position = 0;
  std::uint64_t time = 0;
  std::uint64_t at = 0;
  if (!reader.byte(version) || version < kJournalFormatVersionOldest || version > kJournalFormatVersion) return corrupt;
  if (!reader.byte(kind) || kind == 0 || kind > kRecordKindMax) return corrupt;
  if (!reader.varint(generation) || generation > UINT32_MAX) return corrupt;
  if (!reader.varint(position) || position > UINT32_MAX) return corrupt;
  if (!reader.varint(record.number) || !reader.varint(time)) return corrupt;
  if (version >= 2 && (!reader.varint(at) || !reader.varint(record.took_us))) return corrupt;
  if (!reader.byte(flag) || flag > 1) return corrupt;
  if (!reader.string(record.run_id) || !reader.string(record.name) || !reader.string(record.detail)) return corrupt;
  if (version >= 2 && !reader.string(record.parent)) return corrupt;
  record.kind = static_cast<RecordKind>(kind);
  record.generation = static_cast<std::uint32_t>(generation);
  record.position = static_cast<std::uint32_t>(position);
  record.time_ms = unzigzag(time);
  record.at_ms = unzigzag(at);
  record.flag = flag == 1;
  auto json = reader.rest();
  if (!json.empty()) {
    boost::system::error_code parse_error;
    record.value = boost::json::parse(json, parse_error);
    if (parse_error) return corrupt;
  }
  return record;
}

boost::json::value started_value(const StartedValue& started, bool continued) {
  if (!continued) return started.input;
  boost::json::array signals;
  for (const auto& signal : started.signals) {
    signals.push_back(boost::json::object{{"name", signal.name}, {"id", signal.id}, {"value", signal.value}});
  }
  boost::json::array updates;
  for (const auto& update : started.updates) {
    updates.push_back(boost::json::object{{"name", update.name}, {"id", update.id}, {"arg", update.arg}});
  }
  boost::json::object value{{"input", started.input}, {"signals", std::move(signals)}, {"updates", std::move(updates)}};
  if (!started.remembered.is_null()) value["remembered"] = started.remembered;
  return value;
}

Result<StartedValue> read_started(const JournalRecord& record) {
  const auto corrupt = make_error_code(wal::errc::corrupt);
  StartedValue started;
  if (record.kind != RecordKind::run_started) return corrupt;
  if (!record.flag) {
    started.input = record.value;
    return started;
  }
  const auto* object = record.value.if_object();
  if (object == nullptr || !object->contains("input")) return corrupt;
  started.input = object->at("input");
  if (const auto* remembered = object->if_contains("remembered")) started.remembered = *remembered;
  auto text = [](const boost::json::object& entry, const char* key, std::string& out) {
    const auto* found = entry.if_contains(key);
    if (found == nullptr || !found->is_string()) return false;
    out = std::string(found->get_string());
    return true;
  };
  if (const auto* signals = object->if_contains("signals")) {
    if (!signals->is_array()) return corrupt;
    for (const auto& entry : signals->get_array()) {
      CarriedSignal signal;
      const auto* fields = entry.if_object();
      if (fields == nullptr || !text(*fields, "name", signal.name) || !text(*fields, "id", signal.id)) return corrupt;
      if (const auto* value = fields->if_contains("value")) signal.value = *value;
      started.signals.push_back(std::move(signal));
    }
  }
  if (const auto* updates = object->if_contains("updates")) {
    if (!updates->is_array()) return corrupt;
    for (const auto& entry : updates->get_array()) {
      CarriedUpdate update;
      const auto* fields = entry.if_object();
      if (fields == nullptr || !text(*fields, "name", update.name) || !text(*fields, "id", update.id)) return corrupt;
      if (const auto* arg = fields->if_contains("arg")) update.arg = *arg;
      started.updates.push_back(std::move(update));
    }
  }
  return started;
}

}  // namespace fusee::engine
