#include "engine/remembered.hpp"

#include <algorithm>
#include <map>

#include "wal/errc.hpp"

namespace fusee::engine {
namespace {

template <typename T>
void keep_newest(std::vector<T>& entries, std::int64_t oldest_ms) {
  std::stable_sort(entries.begin(), entries.end(), [](const T& a, const T& b) { return a.at_ms > b.at_ms; });
  std::erase_if(entries, [oldest_ms](const T& entry) { return entry.at_ms < oldest_ms; });
  if (entries.size() > kRememberedPerKindMax) entries.resize(kRememberedPerKindMax);
}

boost::json::object answer_entry(const Remembered::Answer& answer) {
  return {{"key", answer.key}, {"name", answer.name}, {"answer", answer.answer}, {"at_ms", answer.at_ms}};
}

bool read_answers(const boost::json::object& object, const char* field, std::vector<Remembered::Answer>& out) {
  const auto* listed = object.if_contains(field);
  if (listed == nullptr) return true;
  if (!listed->is_array()) return false;
  for (const auto& entry : listed->get_array()) {
    const auto* fields = entry.if_object();
    if (fields == nullptr) return false;
    const auto* key = fields->if_contains("key");
    const auto* name = fields->if_contains("name");
    const auto* answer = fields->if_contains("answer");
    const auto* at = fields->if_contains("at_ms");
    if (key == nullptr || !key->is_string() || name == nullptr || !name->is_string() || answer == nullptr ||
        !answer->is_object() || !answer->get_object().contains("ok") || at == nullptr || !at->is_int64()) {
      return false;
    }
    out.push_back(Remembered::Answer{std::string(key->get_string()), std::string(name->get_string()),
                                     answer->get_object(), at->get_int64()});
  }
  return true;
}

}  // namespace

boost::json::object answer_json(bool succeeded, const boost::json::value& value, const std::string& code,
                                const std::string& message) {
  if (succeeded) return {{"ok", true}, {"value", value}};
  return {{"ok", false}, {"code", code}, {"message", message}};
}

void Remembered::bound(std::int64_t now_ms) {
  const std::int64_t oldest_ms = now_ms - std::chrono::duration_cast<std::chrono::milliseconds>(kRememberedAge).count();
  keep_newest(signals, oldest_ms);
  keep_newest(updates, oldest_ms);
  keep_newest(awakeables, oldest_ms);
  // Answers carry values: past the byte budget the oldest go first. Each
  // entry is measured once (its share of the encoding, near enough), so a
  // window far over the budget costs one pass, not one per entry dropped.
  auto answer_bytes = [](const Answer& answer) { return boost::json::serialize(answer_entry(answer)).size() + 1; };
  std::size_t total = 64;  // the object's own braces and names
  for (const auto& signal : signals) total += signal.id.size() + 32;
  for (const auto& update : updates) total += answer_bytes(update);
  for (const auto& awakeable : awakeables) total += answer_bytes(awakeable);
  while (total > kRememberedBytesMax) {
    auto* older = &updates;
    if (updates.empty() || (!awakeables.empty() && awakeables.back().at_ms < updates.back().at_ms)) older = &awakeables;
    if (!older->empty()) {
      total -= answer_bytes(older->back());
      older->pop_back();
    } else if (!signals.empty()) {
      total -= signals.back().id.size() + 32;
      signals.pop_back();
    } else {
      break;
    }
  }
}

boost::json::value Remembered::to_json() const {
  boost::json::array signal_list;
  for (const auto& signal : signals) signal_list.push_back(boost::json::array{signal.id, signal.at_ms});
  boost::json::array update_list;
  for (const auto& update : updates) update_list.push_back(answer_entry(update));
  boost::json::array awakeable_list;
  for (const auto& awakeable : awakeables) awakeable_list.push_back(answer_entry(awakeable));
  return boost::json::object{
      {"signals", std::move(signal_list)}, {"updates", std::move(update_list)}, {"awakeables", std::move(awakeable_list)}};
}

Result<Remembered> Remembered::from_json(const boost::json::value& value) {
  const auto corrupt = make_error_code(wal::errc::corrupt);
  const auto* object = value.if_object();
  if (object == nullptr) return corrupt;
  Remembered remembered;
  if (const auto* listed = object->if_contains("signals")) {
    if (!listed->is_array()) return corrupt;
    for (const auto& entry : listed->get_array()) {
      const auto* pair = entry.if_array();
      if (pair == nullptr || pair->size() != 2 || !(*pair)[0].is_string() || !(*pair)[1].is_int64()) return corrupt;
      remembered.signals.push_back(Signal{std::string((*pair)[0].get_string()), (*pair)[1].get_int64()});
    }
  }
  if (!read_answers(*object, "updates", remembered.updates) ||
      !read_answers(*object, "awakeables", remembered.awakeables)) {
    return corrupt;
  }
  return remembered;
}

Remembered remembered_of_records(const std::vector<JournalRecord>& records, std::uint32_t cut) {
  Remembered remembered;
  std::map<std::uint32_t, std::string> secrets;  // awakeable position -> secret
  for (const auto& record : records) {
    switch (record.kind) {
      case RecordKind::run_started: {
        // What the replaced generation itself carried (continue-as-new).
        auto started = read_started(record);
        if (started && !started->remembered.is_null()) {
          if (auto carried = Remembered::from_json(started->remembered)) {
            remembered.signals.insert(remembered.signals.end(), carried->signals.begin(), carried->signals.end());
            remembered.updates.insert(remembered.updates.end(), carried->updates.begin(), carried->updates.end());
            remembered.awakeables.insert(remembered.awakeables.end(), carried->awakeables.begin(),
                                         carried->awakeables.end());
          }
        }
        break;
      }
      case RecordKind::run_reset:
        // ... or an earlier reset gave it.
        if (const auto* object = record.value.if_object(); object != nullptr && object->contains("remembered")) {
          if (auto carried = Remembered::from_json(object->at("remembered"))) {
            remembered.signals.insert(remembered.signals.end(), carried->signals.begin(), carried->signals.end());
            remembered.updates.insert(remembered.updates.end(), carried->updates.begin(), carried->updates.end());
            remembered.awakeables.insert(remembered.awakeables.end(), carried->awakeables.begin(),
                                         carried->awakeables.end());
          }
        }
        break;
      case RecordKind::signal_received:
        if (!record.detail.empty()) remembered.signals.push_back(Remembered::Signal{record.detail, record.at_ms});
        break;
      case RecordKind::update_answered:
        if (record.position >= cut) {
          std::string message = record.value.is_string() ? std::string(record.value.get_string()) : std::string();
          remembered.updates.push_back(Remembered::Answer{
              record.detail, record.name,
              answer_json(record.flag, record.value, "failed", "update '" + record.name + "' failed: " + message),
              record.at_ms});
        }
        break;
      case RecordKind::awakeable_created:
        secrets[record.position] = record.detail;
        break;
      case RecordKind::awakeable_completed:
        if (record.position >= cut && secrets.contains(record.position)) {
          std::string message = record.value.is_string() ? std::string(record.value.get_string()) : std::string();
          remembered.awakeables.push_back(Remembered::Answer{
              secrets[record.position], record.name,
              answer_json(record.flag, record.value, "failed", "awakeable '" + record.name + "' failed: " + message),
              record.at_ms});
        }
        break;
      default:
        break;
    }
  }
  return remembered;
}

}  // namespace fusee::engine
