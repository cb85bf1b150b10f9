// Client requests that act on a run: signal, cancel and terminate, a
// result and its waiters, a workflow registered, a child started.
#include "engine/shard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/journal_json.hpp"
#include "engine/shard_internal.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"

namespace fusee::engine {

using namespace shard_text;

std::string Shard::busy_text() const {
  if (busy_reason_.empty()) return fmt::format("shard {} is busy", id_);
  return fmt::format("shard {} is busy ({})", id_, busy_reason_);
}

std::string Shard::refused_append_message(std::error_code error, const std::string& what,
                                         const std::string& run_id) const {
  if (error == make_error_code(errc::busy)) {
    return fmt::format("{}: {} to run '{}' was not recorded", busy_text(), what, run_id);
  }
  if (error == make_error_code(errc::invalid_argument)) {
    return fmt::format("{} was not recorded: {}", what, oversize_message_);
  }
  return error.message();
}

void Shard::handle_signal(const std::string& id, const std::string& signal, boost::json::value value,
                          const std::string& signal_id, Reply reply) {
  if (hold_if_continuing(id, [=, this] { handle_signal(id, signal, value, signal_id, reply); })) return;
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  auto found = runs_.find(id);
  if (found != runs_.end() && !signal_id.empty()) {
    // A repeat of a delivered signal is acknowledged even after the run ended.
    auto& seen_ids = found->second->signal_ids;
    if (auto seen = seen_ids.find(signal_id); seen != seen_ids.end()) {
      after_durable(seen->second.lsn, [reply](std::error_code error) { reply(error, error ? error.message() : ""); });
      return;
    }
  }
  bool finished = found != runs_.end();
  if (found == runs_.end()) {
    auto stored = stored_run(id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(id, stored.error()));
      return;
    }
    if (*stored) {
      const auto& ids = (*stored)->signal_ids;
      if (!signal_id.empty() && std::binary_search(ids.begin(), ids.end(), signal_id)) {
        reply({}, {});  // a repeat of a delivered signal: the store holds it durably
        return;
      }
      finished = true;
    }
  }
  // A stuck run takes signals (Temporal's rule too): its code waits for a
  // fix, and a signal refused now would be missing when it goes on. Only
  // a run that ended, or whose end is being recorded, refuses them.
  bool stuck = found != runs_.end() && !found->second->stuck_error().empty() && !found->second->end_recorded;
  if (found == runs_.end() || (found->second->ending() && !stuck)) {
    const char* why = found != runs_.end() && !found->second->finished() ? " (it is ending)"
                      : finished                                          ? " (it has finished)"
                                                                          : "";
    reply(make_error_code(errc::not_found), fmt::format("signal '{}': no run '{}' is running{}", signal, id, why));
    return;
  }
  auto run = found->second;
  if (auto why = core_.check_signal(run->workflow(), signal, value); !why.empty()) {
    reply(make_error_code(errc::invalid_argument), why);
    return;
  }
  JournalRecord record;
  record.kind = RecordKind::signal_received;
  record.run_id = id;
  record.generation = run->generation();
  record.name = signal;
  record.detail = signal_id;
  record.value = value;
  auto lsn = append_external(*run, record);
  if (!lsn) {
    reply(lsn.error(), refused_append_message(lsn.error(), fmt::format("signal '{}'", signal), id));
    return;
  }
  if (!signal_id.empty()) run->signal_ids[signal_id] = Run::SignalSeen{*lsn, to_ms(core_.now())};
  after_durable(*lsn, [reply](std::error_code error) { reply(error, error ? error.message() : ""); });
  run->deliver_signal(signal, signal_id, std::move(value));
}

void Shard::handle_cancel(const std::string& id, const std::string& reason, CancelMode mode,
                          const std::string& request_id, Reply reply) {
  if (hold_if_continuing(id, [=, this] { handle_cancel(id, reason, mode, request_id, reply); })) return;
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  auto found = runs_.find(id);
  if (found == runs_.end()) {
    auto stored = stored_run(id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(id, stored.error()));
    } else if (*stored) {
      reply({}, {});  // it finished already, as cancelling an ending run does
    } else {
      reply(make_error_code(errc::not_found), fmt::format("cancel: no run '{}'", id));
    }
    return;
  }
  auto run = found->second;
  auto acknowledge = [reply](std::error_code error) { reply(error, error ? error.message() : ""); };
  bool repeat = !request_id.empty() && run->cancel_ids.contains(request_id);
  // A stuck run's code does not run: any cancel ends it at once, durably.
  bool stuck = !run->stuck_error().empty() && !run->end_recorded;
  if (!stuck && (run->ending() || repeat || (mode == CancelMode::parent_close && run->cancel_requested()))) {
    after_run_durable(*run, acknowledge);
    return;
  }
  if (stuck || mode == CancelMode::terminate || run->cancel_requested()) {
    // Terminate, or a second cancel: the code stops here.
    if (storage_error_) {
      reply(storage_error_, storage_error_.message());
      return;
    }
    if (!waiting_appends_.empty()) {
      reply(make_error_code(errc::busy), fmt::format("shard {} is busy: run '{}' was not stopped, try again", id_, id));
      return;
    }
    auto message = mode == CancelMode::terminate ? fmt::format("run '{}' was terminated: {}", id, reason)
                   : stuck ? fmt::format("run '{}' was cancelled while stuck (none of its code ran): {}", id, reason)
                           : fmt::format("run '{}' was cancelled twice, which terminates it: {}", id, reason);
    run->stop();
    end_run(*run, Outcome{RunStatus::cancelled, {}, errc::cancelled, std::move(message)}, acknowledge);
    return;
  }
  JournalRecord record;
  record.kind = RecordKind::cancel_requested;
  record.run_id = id;
  record.generation = run->generation();
  record.detail = request_id;
  record.value = reason;
  auto lsn = append_external(*run, record);
  if (!lsn) {
    reply(lsn.error(), lsn.error() == make_error_code(errc::busy)
                           ? fmt::format("{}: cancel of run '{}' was not recorded", busy_text(), id)
                       : lsn.error() == make_error_code(errc::invalid_argument)
                           ? fmt::format("cancel was not recorded: {}", oversize_message_)
                           : lsn.error().message());
    return;
  }
  if (!request_id.empty()) run->cancel_ids.insert(request_id);
  after_durable(*lsn, acknowledge);
  run->request_cancel(reason);
}

void Shard::handle_result(const std::string& id, std::function<void(const Outcome&)> reply) {
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run: the caller waits on it
  if (store_error) {
    reply(Outcome{RunStatus::failed, {}, errc::storage, storage_message(id, store_error)});
    return;
  }
  auto found = runs_.find(id);
  if (found == runs_.end()) {
    reply(finished_outcome(id));
    return;
  }
  auto& run = *found->second;
  if (run.finished()) {
    reply(run.outcome());
  } else if (!run.stuck_error().empty()) {
    reply(Outcome{RunStatus::failed, {}, errc::nondeterminism, run.stuck_error()});
  } else if (storage_error_) {
    reply(shard_text::log_failed_outcome(id, storage_error_));
  } else {
    run.external_waiters.push_back(std::move(reply));
  }
}

void Shard::subscribe_end(const std::string& id, std::function<void(const Outcome&)> fn) {
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run: the parent waits on it
  if (store_error) {
    fn(Outcome{RunStatus::failed, {}, errc::storage, storage_message(id, store_error)});
    return;
  }
  auto found = runs_.find(id);
  if (found == runs_.end()) {
    fn(finished_outcome(id));
    return;
  }
  auto& run = *found->second;
  if (run.finished()) {
    fn(run.outcome());
  } else {
    run.result_waiters.push_back(std::move(fn));
  }
}

void Shard::handle_registered(const std::string& workflow) {
  std::vector<std::shared_ptr<Run>> waiting;
  for (auto& [id, run] : runs_) {
    if (run->workflow() == workflow && !run->code_started() && !run->ending()) waiting.push_back(run);
  }
  for (auto& run : waiting) start_code(*run);
  if (auto found = children_awaiting_code_.find(workflow); found != children_awaiting_code_.end()) {
    auto starts = std::move(found->second);
    children_awaiting_code_.erase(found);
    for (auto& start : starts) start();
  }
}

void Shard::start_child(StartRequest request, ChildEnd on_end) {
  auto id = request.id;
  auto workflow = request.workflow;
  auto again = request;  // for another try once the workflow is registered
  handle_start(std::move(request), true,
               [this, id, workflow, again = std::move(again), on_end = std::move(on_end)](
                   std::error_code error, std::string message, StartOutcome) mutable {
                 if (error == make_error_code(errc::unknown_workflow)) {
                   children_awaiting_code_[workflow].push_back(
                       [this, again = std::move(again), on_end = std::move(on_end)]() mutable {
                         start_child(std::move(again), std::move(on_end));
                       });
                   return;
                 }
                 if (error) {
                   auto code = error.category() == error_category() ? static_cast<errc>(error.value()) : errc::storage;
                   on_end(error, Outcome{RunStatus::failed, {}, code, std::move(message)});
                   return;
                 }
                 subscribe_end(id, [on_end = std::move(on_end)](const Outcome& outcome) { on_end({}, outcome); });
               });
}

}  // namespace fusee::engine
