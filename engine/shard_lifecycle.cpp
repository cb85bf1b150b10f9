// A run's life on its shard: its start (and the id policies), its code
// started once its workflow is registered, its deadline, its end (children
// closed first) and continue-as-new.
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

namespace {

JournalRecord terminal_record(const Run& run, const Outcome& outcome, TimePoint now) {
  JournalRecord record;
  record.run_id = run.id();
  record.generation = run.generation();
  record.time_ms = to_ms(now);
  switch (outcome.status) {
    case RunStatus::completed:
      record.kind = RecordKind::run_completed;
      record.value = outcome.value;
      break;
    case RunStatus::cancelled:
      record.kind = RecordKind::run_cancelled;
      record.value = outcome.message;
      break;
    default:
      record.kind = RecordKind::run_failed;
      record.detail = errc_name(outcome.code);
      record.value = outcome.message;
      break;
  }
  return record;
}

Outcome outcome_of(const FinishedRun& run) {
  if (run.status == RunStatus::completed) return Outcome{run.status, run.result, errc::failed, {}};
  return Outcome{run.status, {}, errc_from_name(run.error_code), run.message};
}

}  // namespace

Outcome Shard::finished_outcome(const std::string& id) {
  auto stored = stored_run(id);
  if (!stored) return Outcome{RunStatus::failed, {}, errc::storage, storage_message(id, stored.error())};
  if (!*stored) return Outcome{RunStatus::failed, {}, errc::not_found, fmt::format("no run '{}'", id)};
  return outcome_of(**stored);
}

Result<std::optional<FinishedRun>> Shard::stored_run(const std::string& id) {
  if (store_ == nullptr) return std::optional<FinishedRun>();
  return store_->finished(id);
}

void Shard::index_run(const Run& run) {
  auto found = runs_.find(run.id());
  if (found != runs_.end() && found->second.get() == &run) core_.run_index().put(run.info());
}

void Shard::arm_deadline(const std::shared_ptr<Run>& run) {
  if (!run->deadline() || run->ending()) return;
  add_timer(*run->deadline(), run.get(), [run] { run->on_deadline(); });
}

void Shard::start_code(Run& run) {
  if (run.code_started() || run.ending()) return;
  if (auto fn = core_.workflow(run.workflow(), run.version())) {
    bool was_waiting = run.info().status == RunStatus::stuck;
    run.waiting_for_code({});
    run.begin(*fn);
    if (was_waiting) index_run(run);  // the code came: no longer stuck
    return;
  }
  // Code of another version is there, not the run's: it waits, visibly.
  if (auto newest = core_.newest_version(run.workflow())) {
    auto why = fmt::format("run '{}' started on version {} of workflow '{}', whose code is not registered (the "
                           "newest registered is version {}): it waits for that code",
                           run.id(), run.version(), run.workflow(), *newest);
    if (run.waiting_for_code(why)) core_.warn_operator(why);
    index_run(run);
  }
}

void Shard::end_run(Run& run, Outcome outcome, DurableCallback on_durable) {
  run.end_recorded = true;
  auto why = fmt::format("its parent run '{}' ended ({})", run.id(), run_status_name(outcome.status));
  close_children_then(run, why,
                      [this, self = run.shared_from_this(), outcome = std::move(outcome),
                       on_durable = std::move(on_durable)](std::error_code error) mutable {
                        if (error) {
                          if (on_durable) on_durable(error);
                          return;
                        }
                        append_terminal(*self, std::move(outcome), std::move(on_durable));
                      });
}

void Shard::close_children_then(Run& run, const std::string& why, std::function<void(std::error_code)> then) {
  auto children = run.take_open_children();
  if (children.empty()) {
    then({});
    return;
  }
  // The children's cancels are durable before the parent's end is: a crash
  // in between replays the parent, which ends again and sends them again
  // (a parent_close cancel is idempotent, and so is terminating an ended
  // run). The other order could lose them for good.
  struct Closing {
    std::size_t left;
    std::function<void(std::error_code)> then;
  };
  auto closing = std::make_shared<Closing>(Closing{children.size(), std::move(then)});
  // Sent once the run's records are durable, after its children's starts
  // (which wait for the same): the child's shard sees the start first.
  after_run_durable(run, [this, self = run.shared_from_this(), children = std::move(children), closing,
                          why](std::error_code error) {
    if (error) {
      closing->then(error);
      return;
    }
    for (const auto& [position, child] : children) {
      auto mode = close_mode(child.policy);
      core_.close_child(child.id, why, mode, [this, self, closing] {
        core_.post_to_shard(id_, [closing] {
          if (--closing->left == 0) closing->then({});
        });
      });
    }
  });
}

void Shard::continue_run(Run& run) {
  run.end_recorded = true;
  run.continuing = true;
  // Not within the call: this is the run's own coroutine returning, whose
  // frame the old generation's stop() destroys.
  (void)post(
      [this, self = run.shared_from_this()] {
        auto why = fmt::format("its parent run '{}' continued as new", self->id());
        close_children_then(*self, why, [this, self](std::error_code error) {
          if (error) {
            // The shard's storage failed: nothing more is journaled.
            self->continuing = false;
            release_held(self->id());
            return;
          }
          // Every record of the old generation durable first: its answered
          // updates have told their callers, and what the new generation
          // carries is all the old one will ever hold.
          after_run_durable(*self, [this, self](std::error_code error) {
            if (!error) {
              start_continued(self);
            } else {
              self->continuing = false;
              release_held(self->id());
            }
          });
        });
      },
      false);
}

bool Shard::hold_if_continuing(const std::string& id, std::function<void()> retry) {
  auto found = runs_.find(id);
  if (found == runs_.end() || !found->second->continuing) return false;
  held_for_continue_[id].push_back(std::move(retry));
  return true;
}

void Shard::release_held(const std::string& id) {
  auto held = held_for_continue_.extract(id);
  if (held.empty()) return;
  for (auto& retry : held.mapped()) retry();
}

void Shard::start_continued(const std::shared_ptr<Run>& old) {
  // Requests that came between the generations go to the new one (or, if
  // it never starts, to whatever the id holds then).
  struct Release {
    Shard& shard;
    std::string id;
    ~Release() { shard.release_held(id); }
  } release{*this, old->id()};
  old->continuing = false;
  auto found = runs_.find(old->id());
  if (found == runs_.end() || found->second != old || old->superseded) return;  // reset meanwhile
  auto carried = old->carried_messages();
  auto version = core_.newest_version(old->workflow()).value_or(old->version());
  auto now = core_.now();
  // The ids the run was sent, a window of them, go with it: a client that
  // sends again what it has no acknowledgement of is answered as before.
  if (auto remembered = old->remembered(to_ms(now)); !remembered.empty()) carried.remembered = remembered.to_json();
  auto run = std::make_shared<Run>(*this, old->id(), old->generation() + 1, old->workflow(), version, carried.input,
                                   now, old->deadline());
  JournalRecord record;
  record.kind = RecordKind::run_started;
  record.run_id = old->id();
  record.generation = run->generation();
  record.name = old->workflow();
  record.detail = std::to_string(version);
  record.parent = old->parent;
  record.flag = true;
  record.value = started_value(carried, true);
  record.time_ms = to_ms(now);
  record.number = old->deadline() ? static_cast<std::uint64_t>(to_ms(*old->deadline())) : 0;
  if (auto bytes = encode_record(record).size(); bytes > wal::kRecordBytesMax) {
    // The old generation ends failed instead; nothing of the new one exists.
    append_terminal(*old,
                    Outcome{RunStatus::failed, {}, errc::invalid_argument,
                            fmt::format("continue_as_new: {} (the input with {} signal(s) and {} update(s) not taken)",
                                        oversize_message(record, bytes), carried.signals.size(),
                                        carried.updates.size())},
                    {});
    return;
  }
  append(*run, record, {});
  run->started_lsn = run->last_lsn;
  (void)run->load(record, run->last_lsn);  // takes the carried signals and updates
  for (auto& [update_id, callers] : old->updates.take_waiting_callers()) {
    run->updates.adopt_callers(update_id, std::move(callers));
  }
  // The old generation stops here: an update it took and did not answer
  // fails for its caller; its streams end; whoever waited for the id's
  // result waits for the new generation's.
  old->superseded = true;
  old->superseded_by_lsn = run->started_lsn;
  old->fail_callers(Outcome{});
  old->stop();
  for (auto& [name, stream] : old->streams) {
    for (auto& reader : stream.readers) reader.feed->end();
    stream.readers.clear();
  }
  run->external_waiters = std::move(old->external_waiters);
  run->result_waiters = std::move(old->result_waiters);
  if (store_ != nullptr) superseded_.push_back(old);
  loaded_bytes_ -= old->memory_bytes;
  loaded_bytes_ += run->memory_bytes;
  found->second = run;
  arm_deadline(run);
  start_code(*run);
  core_.run_index().put(run->info());
}

void Shard::append_terminal(Run& run, Outcome outcome, DurableCallback on_durable) {
  auto now = core_.now();
  auto record = terminal_record(run, outcome, now);
  append(run, record, [self = run.shared_from_this(), outcome = std::move(outcome), now]() mutable {
    self->finish(std::move(outcome), now);
  });
  if (on_durable) after_run_durable(run, std::move(on_durable));
}

void Shard::handle_start(StartRequest request, bool internal,
                         std::function<void(std::error_code, std::string, StartOutcome)> reply,
                         bool first_step_ahead) {
  std::uint32_t generation = 1;
  // Attaching to the id's run: the outcome, or nothing when the start gave
  // another workflow or input and the caller asked to refuse that (then it
  // was answered here).
  auto attach_to = [&](const std::string& workflow, const boost::json::value& input) -> std::optional<StartOutcome> {
    if (workflow == request.workflow && input == request.input) return StartOutcome::attached;
    if (request.options.if_input_differs == IfInputDiffers::reject) {
      reply(make_error_code(errc::conflict),
            workflow != request.workflow
                ? fmt::format("run '{}' is a run of workflow '{}', not '{}'", request.id, workflow, request.workflow)
                : fmt::format("run '{}' of workflow '{}' has another input: {}", request.id, workflow,
                              boost::json::serialize(input)),
            StartOutcome::attached_other_input);
      return std::nullopt;
    }
    return StartOutcome::attached_other_input;
  };
  std::error_code store_error;
  auto existing = find_run(request.id, store_error);
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(request.id, store_error), StartOutcome::started);
    return;
  }
  if (existing) {
    if (!existing->finished()) {
      if (request.options.if_running == IfRunning::reject) {
        reply(make_error_code(errc::already_exists),
              fmt::format("run '{}' of workflow '{}' is already running", request.id, existing->workflow()),
              StartOutcome::attached);
        return;
      }
      auto outcome = attach_to(existing->workflow(), existing->input());
      if (!outcome) return;
      after_run_durable(*existing, [reply, outcome = *outcome](std::error_code error) {
        reply(error, error ? "the run's start is not durable: " + error.message() : "", outcome);
      });
      return;
    }
    if (request.options.if_finished == IfFinished::reject) {
      reply(make_error_code(errc::already_exists),
            fmt::format("run '{}' of workflow '{}' already finished ({})", request.id, existing->workflow(),
                        run_status_name(existing->outcome().status)),
            StartOutcome::attached);
      return;
    }
    if (request.options.if_finished == IfFinished::attach) {
      if (auto outcome = attach_to(existing->workflow(), existing->input())) reply({}, {}, *outcome);
      return;
    }
    generation = existing->generation() + 1;
  } else {
    auto stored = stored_run(request.id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(request.id, stored.error()), StartOutcome::started);
      return;
    }
    if (*stored) {
      const auto& finished = **stored;
      if (request.options.if_finished == IfFinished::reject) {
        reply(make_error_code(errc::already_exists),
              fmt::format("run '{}' of workflow '{}' already finished ({})", request.id, finished.workflow,
                          run_status_name(finished.status)),
              StartOutcome::attached);
        return;
      }
      if (request.options.if_finished == IfFinished::attach) {
        if (auto outcome = attach_to(finished.workflow, finished.input)) reply({}, {}, *outcome);
        return;
      }
      generation = finished.generation + 1;
    }
  }
  auto version = core_.newest_version(request.workflow);
  if (!version) {
    reply(make_error_code(errc::unknown_workflow),
          fmt::format("no workflow named '{}' is registered (run '{}')", request.workflow, request.id),
          StartOutcome::started);
    return;
  }
  auto now = core_.now();
  std::optional<TimePoint> deadline;
  if (request.options.deadline) deadline = now + *request.options.deadline;
  auto run = std::make_shared<Run>(*this, request.id, generation, request.workflow, *version, request.input, now,
                                  deadline);
  JournalRecord record;
  record.kind = RecordKind::run_started;
  record.run_id = request.id;
  record.generation = generation;
  record.name = request.workflow;
  record.detail = std::to_string(*version);
  record.parent = request.parent;
  record.value = std::move(request.input);
  record.time_ms = to_ms(now);
  record.number = deadline ? static_cast<std::uint64_t>(to_ms(*deadline)) : 0;
  // Everything this turn journals, from the start on, goes to the log as
  // one atomic group: then the run's first step may run before the start is
  // durable (may_run_ahead), and the start and its first records share one
  // flush. Ended on every way out of here.
  struct TurnGroup {
    Shard& shard;
    bool opened = false;
    ~TurnGroup() {
      if (!opened) return;
      shard.sink_.end_group(shard.id_);
      shard.group_open_ = false;
    }
  } turn_group{*this};
  if (!internal && !group_open_) {
    sink_.begin_group(id_);
    group_open_ = turn_group.opened = true;
  }
  if (internal) {
    append(*run, record, {});
  } else {
    auto lsn = append_external(*run, record);
    if (!lsn) {
      reply(lsn.error(),
            lsn.error() == make_error_code(errc::busy)
                ? fmt::format("{}: run '{}' was not started, try again", busy_text(), request.id)
                : lsn.error() == make_error_code(errc::invalid_argument)
                ? fmt::format("run '{}' was not started: {}", request.id, oversize_message_)
                : fmt::format("run '{}' was not started: {}", request.id, lsn.error().message()),
            StartOutcome::started);
      return;
    }
  }
  run->started_lsn = run->last_lsn;
  run->parent = request.parent;
  if (existing) loaded_bytes_ -= existing->memory_bytes;
  loaded_bytes_ += run->memory_bytes;
  runs_[request.id] = run;
  after_run_durable(*run, [reply](std::error_code error) {
    reply(error, error ? "the run's start is not durable: " + error.message() : "", StartOutcome::started);
  });
  arm_deadline(run);
  run->ahead = turn_group.opened && first_step_ahead_ && first_step_ahead;
  start_code(*run);
  run->ahead = false;
  core_.run_index().put(run->info());
}

}  // namespace fusee::engine
