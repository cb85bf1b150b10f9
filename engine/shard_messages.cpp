// Messages a run's code answers: queries, updates (with update-with-start)
// and awakeable completions.
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

void Shard::handle_query(const std::string& id, const std::string& name, const boost::json::value& arg,
                         std::function<void(std::error_code, std::string)> reply) {
  if (hold_if_continuing(id, [=, this] { handle_query(id, name, arg, reply); })) return;
  std::error_code store_error;
  auto run = find_run(id, store_error);  // a parked run comes back (its replay registers its handlers)
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  if (!run) {
    auto stored = stored_run(id);
    bool finished = stored && *stored;
    reply(make_error_code(errc::not_found), finished ? fmt::format("query: run '{}' has finished; queries answer "
                                                                   "running runs (its journal tells what happened)",
                                                                   id)
                                                     : fmt::format("query: no run '{}'", id));
    return;
  }
  if (run->finished() || run->ending()) {
    if (!run->stuck_error().empty()) {
      reply(make_error_code(errc::nondeterminism), run->stuck_error());
    } else {
      reply(make_error_code(errc::not_found),
            fmt::format("query: run '{}' has finished; queries answer running runs (its journal tells what happened)",
                        id));
    }
    return;
  }
  if (!run->code_started()) {
    reply(make_error_code(errc::unavailable),
          fmt::format("query: run '{}' is not running code here yet (workflow '{}' version {} is not registered)",
                      id, run->workflow(), run->version()));
    return;
  }
  std::string why;
  auto answer = run->answer_query(name, arg, why);
  if (!answer) {
    reply(answer.error(), why);
    return;
  }
  // The answer reads state whose records may not be durable yet (an
  // awakeable's token, a step's result): it leaves once they are, so a
  // crash cannot take back what a caller was told. Nothing is written.
  after_run_durable(*run, [reply = std::move(reply), text = boost::json::serialize(*answer)](std::error_code error) {
    if (error) {
      reply(error, "the run's state is not durable: " + error.message());
    } else {
      reply({}, text);
    }
  });
}

void Shard::handle_update(std::optional<StartRequest> start, const std::string& id, const std::string& name,
                          const boost::json::value& arg, const std::string& update_id,
                          std::function<void(const Outcome&)> reply) {
  if (hold_if_continuing(id, [=, this] { handle_update(start, id, name, arg, update_id, reply); })) return;
  auto fail = [&reply](errc code, std::string message) {
    reply(Outcome{RunStatus::failed, {}, code, std::move(message)});
  };
  if (start) {
    // A start refused at once answers here; one that fails later (the log)
    // fails the update's record too, which follows it.
    // (The start's reply may come later, once its record is durable.)
    auto refused = std::make_shared<std::optional<Outcome>>();
    // Its first step does not run ahead: the update, appended below, must
    // reach the run before that step's result can end it.
    handle_start(
        std::move(*start), false,
        [refused](std::error_code error, std::string message, StartOutcome) {
          if (error) {
            auto code = error.category() == error_category() ? static_cast<errc>(error.value()) : errc::storage;
            *refused = Outcome{RunStatus::failed, {}, code, std::move(message)};
          }
        },
        /*first_step_ahead=*/false);
    if (*refused) {
      reply(**refused);
      return;
    }
  }
  std::error_code store_error;
  auto run = find_run(id, store_error);  // a parked run comes back (its replay declares its updates again)
  if (store_error) {
    fail(errc::storage, storage_message(id, store_error));
    return;
  }
  if (!run) {
    auto stored = stored_run(id);
    if (!stored) {
      fail(errc::storage, storage_message(id, stored.error()));
    } else if (!*stored) {
      fail(errc::not_found, fmt::format("update '{}': no run '{}'", name, id));
    } else if (const auto* answer = (*stored)->update_answers.if_contains(update_id)) {
      // A repeat after the run ended: the answer the run store keeps.
      const auto& object = answer->as_object();
      if (object.at("ok").as_bool()) {
        reply(Outcome{RunStatus::completed, object.at("value"), errc::failed, {}});
      } else {
        fail(errc_from_name(std::string(object.at("code").as_string())),
             std::string(object.at("message").as_string()));
      }
    } else {
      fail(errc::not_found, fmt::format("update '{}': run '{}' has finished; it takes no more updates", name, id));
    }
    return;
  }
  if (auto* known = run->updates.find(update_id)) {
    // The same id again: the same answer, once it is durable.
    auto& update = *known;
    if (update.answered && update.durable) {
      reply(update.answer);
    } else if (!run->ending() && run->stuck_error().empty()) {
      update.callers.push_back(std::move(reply));
    } else if (!run->stuck_error().empty()) {
      fail(errc::nondeterminism, run->stuck_error());
    } else if (run->finished()) {
      reply(run->unanswered_update(update_id, update.name));
    } else {
      update.callers.push_back(std::move(reply));  // the run's end answers it
    }
    return;
  }
  if (run->finished() || run->ending()) {
    if (!run->stuck_error().empty()) {
      fail(errc::nondeterminism, run->stuck_error());
    } else {
      fail(errc::not_found, fmt::format("update '{}': run '{}' has finished; it takes no more updates", name, id));
    }
    return;
  }
  if (!run->code_started()) {
    fail(errc::unavailable,
         fmt::format("update '{}': run '{}' is not running code here yet (workflow '{}' version {} is not registered)",
                     name, id, run->workflow(), run->version()));
    return;
  }
  std::string why;
  if (auto valid = run->validate_update(name, arg, why); !valid) {
    fail(static_cast<errc>(valid.error().value()), why);
    return;
  }
  JournalRecord record;
  record.kind = RecordKind::update_accepted;
  record.run_id = id;
  record.generation = run->generation();
  record.name = name;
  record.detail = update_id;
  record.value = arg;
  auto lsn = append_external(*run, record);
  if (!lsn) {
    fail(static_cast<errc>(lsn.error() == make_error_code(errc::busy) || lsn.error() == make_error_code(errc::invalid_argument)
                               ? lsn.error().value()
                               : static_cast<int>(errc::storage)),
         refused_append_message(lsn.error(), fmt::format("update '{}'", name), id));
    return;
  }
  // Registered before the delivery: the code may take and answer it at once.
  run->updates.add_caller(update_id, name, std::move(reply));
  run->deliver_update(name, update_id, arg);
}

void Shard::handle_awakeable(const std::string& token_text, bool succeeded, boost::json::value value, Reply reply) {
  auto token = parse_token(token_text);
  if (!token) {
    reply(make_error_code(errc::invalid_argument),
          "not an awakeable token (tokens look like awk1.<hex>.<position>.<32 hex digits>)");
    return;
  }
  if (hold_if_continuing(token->run_id, [=, this] { handle_awakeable(token_text, succeeded, value, reply); })) return;
  std::error_code store_error;
  auto run = find_run(token->run_id, store_error);  // a parked run comes back to take it
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(token->run_id, store_error));
    return;
  }
  if (!run || run->finished() || run->ending()) {
    // A repeat of a completion after the run ended: answered as the first.
    if (run) {
      if (auto first = run->earlier_awakeable(token->secret)) {
        answer_awakeable_repeat(*first, succeeded, value, reply);
        return;
      }
      if (!run->finished() && !run->stuck_error().empty() && !run->end_recorded) {
        // Stuck: its code does not run to take it (docs/engine.md, "Stuck runs").
        reply(make_error_code(errc::nondeterminism), run->stuck_error());
        return;
      }
    }
    bool finished = run != nullptr;
    if (!run) {
      auto stored = stored_run(token->run_id);
      finished = stored && *stored;
      if (finished) {
        for (const auto& [secret, answer] : (*stored)->awakeable_answers) {
          if (!same_secret(std::string(secret), token->secret) || !answer.is_object()) continue;
          const auto* name = answer.as_object().if_contains("name");
          answer_awakeable_repeat(Remembered::Answer{std::string(secret),
                                                     name != nullptr && name->is_string()
                                                         ? std::string(name->get_string())
                                                         : std::string(),
                                                     answer.as_object(), 0},
                                  succeeded, value, reply);
          return;
        }
      }
    }
    reply(make_error_code(errc::not_found),
          finished ? fmt::format("run '{}' has finished: its awakeables can no longer be completed", token->run_id)
                   : fmt::format("no run '{}' is running", token->run_id));
    return;
  }
  if (!run->code_started()) {
    reply(make_error_code(errc::unavailable),
          fmt::format("run '{}' is not running code here yet (workflow '{}' version {} is not registered)",
                      token->run_id, run->workflow(), run->version()));
    return;
  }
  run->complete_awakeable(token->position, token->secret, succeeded, std::move(value), std::move(reply));
}

}  // namespace fusee::engine
