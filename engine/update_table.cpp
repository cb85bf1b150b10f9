#include "engine/update_table.hpp"

#include <algorithm>
#include <map>

namespace fusee::engine {

void UpdateTable::accept(const std::string& name, const std::string& id, boost::json::value arg) {
  updates_[id].name = name;
  waiting_[name].emplace_back(id, std::move(arg));
}

std::optional<std::pair<std::string, boost::json::value>> UpdateTable::take(const std::string& name) {
  auto queue = waiting_.find(name);
  if (queue == waiting_.end() || queue->second.empty()) return std::nullopt;
  auto taken = std::move(queue->second.front());
  queue->second.pop_front();
  return taken;
}

void UpdateTable::taken(const std::string& name, const std::string& id) {
  auto queue = waiting_.find(name);
  if (queue == waiting_.end()) return;
  auto found = std::find_if(queue->second.begin(), queue->second.end(),
                            [&](const auto& entry) { return entry.first == id; });
  if (found != queue->second.end()) queue->second.erase(found);
}

void UpdateTable::answer(const std::string& id, const std::string& name, Outcome answer, std::int64_t at_ms,
                         bool durable) {
  auto& update = updates_[id];
  update.name = name;
  update.answered = true;
  update.durable = durable;
  update.earlier = false;
  update.answered_ms = at_ms;
  update.answer = std::move(answer);
}

void UpdateTable::answer_durable(const std::string& id) {
  auto found = updates_.find(id);
  if (found == updates_.end()) return;
  found->second.durable = true;
  auto callers = std::exchange(found->second.callers, {});
  const auto answer = found->second.answer;  // a caller may add to the table
  for (auto& caller : callers) caller(answer);
}

void UpdateTable::remember(const Remembered::Answer& earlier) {
  auto& update = updates_[earlier.key];
  if (update.answered && !update.earlier) return;  // this generation's own answer stands
  update.name = earlier.name;
  update.answered = true;
  update.durable = true;
  update.earlier = true;
  update.answered_ms = earlier.at_ms;
  const auto& fields = earlier.answer;
  if (const auto* ok = fields.if_contains("ok"); ok != nullptr && ok->is_bool() && ok->get_bool()) {
    const auto* value = fields.if_contains("value");
    update.answer = Outcome{RunStatus::completed, value != nullptr ? *value : nullptr, errc::failed, {}};
  } else {
    auto text = [&](const char* key) {
      const auto* found = fields.if_contains(key);
      return found != nullptr && found->is_string() ? std::string(found->get_string()) : std::string();
    };
    update.answer = Outcome{RunStatus::failed, {}, errc_from_name(text("code")), text("message")};
  }
  // Answered already: the new code does not take it again.
  if (auto queue = waiting_.find(earlier.name); queue != waiting_.end()) {
    std::erase_if(queue->second, [&](const auto& entry) { return entry.first == earlier.key; });
  }
}

void UpdateTable::add_caller(const std::string& id, const std::string& name, Caller caller) {
  auto& update = updates_[id];
  update.name = name;
  update.callers.push_back(std::move(caller));
}

void UpdateTable::adopt_callers(const std::string& id, std::vector<Caller> callers) {
  updates_[id].callers = std::move(callers);
}

UpdateTable::Update* UpdateTable::find(const std::string& id) {
  auto found = updates_.find(id);
  return found == updates_.end() ? nullptr : &found->second;
}

const UpdateTable::Update* UpdateTable::find(const std::string& id) const {
  auto found = updates_.find(id);
  return found == updates_.end() ? nullptr : &found->second;
}

bool UpdateTable::has_callers() const {
  return std::any_of(updates_.begin(), updates_.end(), [](const auto& entry) { return !entry.second.callers.empty(); });
}

void UpdateTable::fail_callers(const std::function<Outcome(const std::string& id, const Update& update)>& outcome_of) {
  for (auto& [id, update] : updates_) {
    if (update.callers.empty() || (update.answered && update.durable)) continue;
    auto outcome = outcome_of(id, update);
    auto callers = std::exchange(update.callers, {});
    for (auto& caller : callers) caller(outcome);
  }
}

std::vector<CarriedUpdate> UpdateTable::waiting() const {
  std::map<std::string, const std::deque<std::pair<std::string, boost::json::value>>*> by_name;
  for (const auto& [name, queue] : waiting_) by_name[name] = &queue;
  std::vector<CarriedUpdate> carried;
  for (const auto& [name, queue] : by_name) {
    for (const auto& [id, arg] : *queue) carried.push_back(CarriedUpdate{name, id, arg});
  }
  return carried;
}

std::unordered_map<std::string, std::vector<UpdateTable::Caller>> UpdateTable::take_waiting_callers() {
  std::unordered_map<std::string, std::vector<Caller>> carried;
  for (const auto& [name, queue] : waiting_) {
    for (const auto& [id, arg] : queue) {
      if (auto found = updates_.find(id); found != updates_.end()) {
        carried.emplace(id, std::move(found->second.callers));
        updates_.erase(found);
      }
    }
  }
  return carried;
}

}  // namespace fusee::engine
