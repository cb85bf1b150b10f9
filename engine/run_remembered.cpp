// What a run carries into its next generation (continue-as-new, reset):
// the signals and updates it had not taken, and the answers a repeat of an
// update or an awakeable completion is answered from.
#include "engine/run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/run_internal.hpp"
#include "engine/shard.hpp"
#include "wal/errc.hpp"
#include "fusee/limits.hpp"

namespace fusee::engine {

using namespace run_text;

StartedValue Run::carried_messages() const {
  StartedValue carried;
  if (continued_input_) carried.input = *continued_input_;
  // By name, then arrival: a wait_for takes the earliest of its name, and
  // the order across names is not observable.
  using Queue = std::deque<std::pair<std::string, boost::json::value>>;
  std::map<std::string, const Queue*> signals;
  for (const auto& [name, queue] : mailbox_) signals[name] = &queue;
  for (const auto& [name, queue] : signals) {
    for (const auto& [id, value] : *queue) carried.signals.push_back(CarriedSignal{name, id, value});
  }
  carried.updates = updates.waiting();
  return carried;
}

Remembered Run::remembered(std::int64_t now_ms) const {
  Remembered window;
  for (const auto& [signal_id, seen] : signal_ids) window.signals.push_back(Remembered::Signal{signal_id, seen.at_ms});
  std::unordered_set<std::string> waiting;  // accepted, not taken: carried as updates, not remembered
  for (const auto& update : updates.waiting()) waiting.insert(update.id);
  for (const auto& [update_id, update] : updates.all()) {
    if (waiting.contains(update_id)) continue;
    // Taken and not answered: it fails for its caller as the generation
    // ends, and a repeat gets that failure.
    auto answer = update.answered ? update.answer : unanswered_update(update_id, update.name);
    window.updates.push_back(Remembered::Answer{
        update_id, update.name,
        answer_json_of(answer),
        update.answered ? update.answered_ms : now_ms});
  }
  for (const auto& [position, awakeable] : awakeables_) {
    if (!awakeable.completed) continue;
    const auto& outcome = awakeable.outcome;
    window.awakeables.push_back(Remembered::Answer{
        awakeable.secret, awakeable.name,
        answer_json_of(outcome),
        awakeable.completed_ms});
  }
  for (const auto& [secret, answer] : earlier_awakeables_) window.awakeables.push_back(answer);
  window.bound(now_ms);
  return window;
}

void Run::remember(const Remembered& earlier, wal::Lsn lsn) {
  for (const auto& signal : earlier.signals) signal_ids.try_emplace(signal.id, SignalSeen{lsn, signal.at_ms});
  for (const auto& answer : earlier.updates) updates.remember(answer);
  for (const auto& answer : earlier.awakeables) earlier_awakeables_.insert_or_assign(answer.key, answer);
}

std::optional<Remembered::Answer> Run::earlier_awakeable(const std::string& secret) const {
  for (const auto& [position, awakeable] : awakeables_) {
    if (!awakeable.completed || !same_secret(awakeable.secret, secret)) continue;
    const auto& outcome = awakeable.outcome;
    return Remembered::Answer{awakeable.secret, awakeable.name,
                              answer_json_of(outcome),
                              awakeable.completed_ms};
  }
  auto found = earlier_awakeables_.find(secret);
  if (found == earlier_awakeables_.end()) return std::nullopt;
  return found->second;
}

}  // namespace fusee::engine
