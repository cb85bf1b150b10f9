// Messages answered by the run's code: queries (Ctx::on_query) and
// updates (Ctx::on_update, next_update, reply), and the callers failed
// when the run ends unanswered.
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

void Run::on_query(std::string name, detail::QueryHandler handler) {
  refuse_outside_code("on_query");
  queries_[std::move(name)] = std::move(handler);
}

Result<boost::json::value> Run::answer_query(const std::string& name, const boost::json::value& arg, std::string& why) {
  auto found = queries_.find(name);
  if (found == queries_.end()) {
    std::string names;
    for (const auto& [known, handler] : queries_) names += (names.empty() ? "'" : ", '") + known + "'";
    why = fmt::format("run '{}' has no query '{}' ({})", id_, name,
                      names.empty() ? std::string("it registered none") : "it answers " + names);
    return make_error_code(errc::not_found);
  }
  in_query_ = true;
  try {
    auto answer = found->second(arg);
    in_query_ = false;
    return answer;
  } catch (const Error& error) {
    in_query_ = false;
    why = error.what();
    return make_error_code(error.error());
  } catch (const std::exception& error) {
    in_query_ = false;
    why = fmt::format("run '{}': query '{}' failed: {}", id_, name, error.what());
    return make_error_code(errc::failed);
  } catch (...) {
    // A handler may throw anything (`throw "not ready";`); on the shard's
    // thread an escaping one ends the process, and any client can ask.
    in_query_ = false;
    why = fmt::format("run '{}': query '{}' failed: it threw something that is not a std::exception", id_, name);
    return make_error_code(errc::failed);
  }
}

void Run::on_update(std::string name, detail::UpdateValidator validator) {
  refuse_outside_code("on_update");
  update_validators_[std::move(name)] = std::move(validator);
}

Result<void> Run::validate_update(const std::string& name, const boost::json::value& arg, std::string& why) {
  auto found = update_validators_.find(name);
  if (found == update_validators_.end()) {
    std::string names;
    for (const auto& [known, validator] : update_validators_) names += (names.empty() ? "'" : ", '") + known + "'";
    why = fmt::format("run '{}' takes no update '{}' ({})", id_, name,
                      names.empty() ? std::string("it declared none") : "it takes " + names);
    return make_error_code(errc::not_found);
  }
  // Like a query, the validator reads: it may not start commands.
  in_query_ = true;
  try {
    auto refused = found->second(arg);
    in_query_ = false;
    if (refused.empty()) return ok();
    why = fmt::format("run '{}' rejected update '{}': {}", id_, name, refused);
    return make_error_code(errc::rejected);
  } catch (const Error& error) {
    in_query_ = false;
    why = fmt::format("run '{}': the validator of update '{}' failed: {}", id_, name, error.what());
    return make_error_code(error.error() == errc::invalid_argument ? errc::invalid_argument : errc::rejected);
  } catch (const std::exception& error) {
    in_query_ = false;
    why = fmt::format("run '{}': the validator of update '{}' failed: {}", id_, name, error.what());
    return make_error_code(errc::rejected);
  } catch (...) {
    in_query_ = false;  // as a query handler: anything thrown is caught here
    why = fmt::format("run '{}': the validator of update '{}' failed: it threw something that is not a "
                      "std::exception",
                      id_, name);
    return make_error_code(errc::rejected);
  }
}

void Run::deliver_update(const std::string& name, const std::string& update_id, boost::json::value arg) {
  // The earliest started next_update of this name takes it (positions are
  // the order the code started them in, so a replay agrees).
  if (!stopped_) {
    for (auto& [position, pending] : pending_) {
      if (pending.update != name) continue;
      auto record = make_record(RecordKind::update_taken, position, name);
      record.detail = update_id;
      record.value = arg;
      append(std::move(record));
      auto& completion = *pending.completion;
      completion.value = boost::json::object{{"id", update_id}, {"arg", std::move(arg)}};
      complete(completion);
      return;
    }
  }
  updates.accept(name, update_id, std::move(arg));
}

bool Run::next_update(std::string_view name, detail::Completion& completion) {
  auto position = begin_command(completion, "next_update");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "next_update", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched: {
      const auto& taken = recorded->records.front();
      completion.value = boost::json::object{{"id", taken.detail}, {"arg", taken.value}};
      complete(completion);
      return end_command();
    }
    case Replay::none:
      break;
  }
  if (auto taken = updates.take(std::string(name))) {
    auto [update_id, arg] = std::move(*taken);
    auto record = make_record(RecordKind::update_taken, position, name);
    record.detail = update_id;
    record.value = arg;
    append(std::move(record));
    completion.value = boost::json::object{{"id", std::move(update_id)}, {"arg", std::move(arg)}};
    complete(completion);
    return end_command();
  }
  auto& pending = park(position, completion, "next_update", name);
  pending.update = std::string(name);
  pending.parkable = true;
  pending.since = shard_.now();
  return end_command();
}

bool Run::reply_update(std::string_view name, std::string_view update_id, bool succeeded, boost::json::value value,
                       detail::Completion& completion) {
  auto position = begin_command(completion, "reply");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "reply", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      if (recorded->records.front().detail != update_id) {
        diverge(position, fmt::format("run '{}': nondeterminism at position {}: the journal answers update '{}' id '{}' but "
                            "the workflow answered id '{}'",
                            id_, position, name, recorded->records.front().detail, update_id));
        return end_command();
      }
      complete(completion);
      return end_command();
    case Replay::none:
      break;
  }
  auto* found = updates.find(std::string(update_id));
  if (found != nullptr && found->earlier) {
    // Answered in the generation a reset replaced: the code that took it
    // again answers again (journaled, so a replay agrees), and callers keep
    // the answer they were given then.
    auto record = make_record(RecordKind::update_answered, position, name);
    record.detail = std::string(update_id);
    record.flag = succeeded;
    record.value = std::move(value);
    append(std::move(record));
    complete(completion);
    return end_command();
  }
  if (found == nullptr || found->answered) {
    // Nothing recorded: a replay reaches the same refusal.
    completion.error = std::make_exception_ptr(
        Error(errc::invalid_argument,
              found == nullptr
                  ? fmt::format("run '{}': no update '{}' with id '{}' was accepted", id_, name, update_id)
                  : fmt::format("run '{}': update '{}' id '{}' was answered already", id_, name, update_id)));
    complete(completion);
    return end_command();
  }
  const auto update_name = found->name;
  updates.answer(std::string(update_id), update_name, answer_of(succeeded, value, "update", update_name),
                 to_ms(shard_.now()), false);
  auto record = make_record(RecordKind::update_answered, position, name);
  record.detail = std::string(update_id);
  record.flag = succeeded;
  record.value = std::move(value);
  // The caller hears the answer once it is durable, never before.
  append(std::move(record), [self = shared_from_this(), id = std::string(update_id)] { self->updates.answer_durable(id); });
  complete(completion);
  return end_command();
}

Outcome Run::unanswered_update(const std::string& update_id, const std::string& name) const {
  return Outcome{RunStatus::failed, {}, errc::failed,
                 fmt::format("run '{}' ended before it answered update '{}' (id '{}')", id_, name, update_id)};
}

void Run::fail_callers(const Outcome& why) {
  updates.fail_callers([&](const std::string& update_id, const UpdateTable::Update& update) {
    return why.status != RunStatus::running ? why : unanswered_update(update_id, update.name);
  });
  if (why.status == RunStatus::running) return;
  for (auto& [position, awakeable] : awakeables_) {
    auto waiters = std::move(awakeable.waiters);
    awakeable.waiters.clear();
    for (auto& waiter : waiters) waiter(make_error_code(why.code), why.message);
  }
}

}  // namespace fusee::engine
