// UpdateTable: a run's updates, by id -- the table a repeated update id is
// answered from. Each update the run accepted (or an earlier generation of
// it answered, Remembered) with its answer once there is one, and the
// callers waiting to hear that answer, which they hear only once its record
// is durable. Beside it, the accepted updates no next_update took yet, by
// name, in the order they came (a replay takes them in the same order).
//
// Plain data on the run's shard thread: the Run journals, the table keeps.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/journal_record.hpp"
#include "engine/outcome.hpp"
#include "engine/remembered.hpp"

namespace fusee::engine {

class UpdateTable {
 public:
  using Caller = std::function<void(const Outcome&)>;
  struct Update {
    std::string name;
    bool answered = false;  // update_answered appended
    bool durable = false;   // ... and durable: callers may hear it
    // Answered in an earlier generation (Remembered): a repeat gets that
    // answer; this generation's code may still answer it (a reset's replay).
    bool earlier = false;
    std::int64_t answered_ms = 0;
    Outcome answer;
    std::vector<Caller> callers;  // until the answer is durable
  };

  // Update `id` of `name` was accepted (update_accepted, or carried into
  // this generation): it waits for a next_update of its name.
  void accept(const std::string& name, const std::string& id, boost::json::value arg);
  // Takes the earliest accepted update of `name` no next_update took yet:
  // (id, argument).
  std::optional<std::pair<std::string, boost::json::value>> take(const std::string& name);
  // Update `id` of `name` was taken (an update_taken record, loading).
  void taken(const std::string& name, const std::string& id);
  // This generation answers update `id`. `durable`: its record is (loading);
  // otherwise answer_durable tells the callers once it is.
  void answer(const std::string& id, const std::string& name, Outcome answer, std::int64_t at_ms, bool durable);
  // The answer's record is durable: every caller hears it.
  void answer_durable(const std::string& id);
  // An earlier generation's answer (continue-as-new, reset), unless this
  // generation's own answer stands; answered already, it is not taken again.
  void remember(const Remembered::Answer& earlier);
  // A caller of update `id` (named `name`) waits for its answer: registered
  // before the update is delivered, as the code may answer it at once.
  void add_caller(const std::string& id, const std::string& name, Caller caller);
  // The callers of a continued generation's carried update go on waiting here.
  void adopt_callers(const std::string& id, std::vector<Caller> callers);

  Update* find(const std::string& id);
  const Update* find(const std::string& id) const;
  const std::unordered_map<std::string, Update>& all() const { return updates_; }
  // Whether a caller waits for an answer (the run holds it: it may not park).
  bool has_callers() const;
  // Tells every caller still waiting -- not those of a durable answer --
  // `outcome_of(id, update)`.
  void fail_callers(const std::function<Outcome(const std::string& id, const Update& update)>& outcome_of);

  // The accepted updates not taken yet, by name, then in the order they came
  // (what continue-as-new carries; the order across names is not observable).
  std::vector<CarriedUpdate> waiting() const;
  // Moves out the callers of the updates not taken yet, by id (the next
  // generation answers them), and forgets those updates.
  std::unordered_map<std::string, std::vector<Caller>> take_waiting_callers();
  // Nothing more is taken (the run finished).
  void clear_waiting() { waiting_.clear(); }

 private:
  std::unordered_map<std::string, Update> updates_;  // by id
  std::unordered_map<std::string, std::deque<std::pair<std::string, boost::json::value>>> waiting_;  // by name
};

}  // namespace fusee::engine
