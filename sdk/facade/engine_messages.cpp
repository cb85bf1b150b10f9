// The client calls answered by a run's code or journal: updates,
// awakeable completions, queries, the journal and stream reads.
#include "sdk/facade/engine_impl.hpp"

namespace fusee {

void Engine::update_to(std::shared_ptr<detail::Settle<boost::json::value>> settle, UpdateCall call) {
  if (auto led = impl_->led()) return led->update_to(std::move(settle), std::move(call));
  if (call.run_id.empty()) throw Error(errc::invalid_argument, "a run id must not be empty");
  if (call.start) {
    if (auto why = run_id_problem(call.run_id)) throw Error(errc::invalid_argument, *why);
  }
  if (call.update.empty()) throw Error(errc::invalid_argument, "an update's name must not be empty");
  if (call.update_id.empty()) {
    // Made up here, before it is sent: a call repeated between workers
    // after a lost answer carries the same id, so it counts once.
    call.update_id = fmt::format("update-{:016x}{:016x}", impl_->random(), impl_->random());
  }
  if (call.start) {
    std::shared_lock lock(impl_->registry_mu);
    if (auto check = impl_->registry.find(call.start->workflow);
        check != impl_->registry.end() && check->second.input) {
      if (auto why = check->second.input(call.start->input); !why.empty()) {
        throw Error(errc::invalid_argument,
                    fmt::format("the input does not fit workflow '{}': {}", call.start->workflow, why));
      }
    }
  }
  auto settle_with = [](const std::shared_ptr<detail::Settle<boost::json::value>>& settle, const engine::Outcome& outcome) {
    if (outcome.status == RunStatus::completed) {
      settle->set_value(outcome.value);
    } else {
      settle->set_exception(std::make_exception_ptr(Error(outcome.code, outcome.message)));
    }
  };
  if (auto shard = impl_->shard_of(call.run_id); !impl_->here(shard)) {
    boost::json::object forwarded{{"op", "update"},     {"id", call.run_id},           {"name", call.update},
                                  {"arg", call.arg},    {"update_id", call.update_id}};
    if (call.start) {
      forwarded["start"] = remote::forwarded::start_call(
          engine::StartRequest{call.start->workflow, call.run_id, call.start->input, call.start->options});
    }
    // Sent again after a lost answer: the update id makes it count once.
    impl_->forward_to(std::move(settle), shard, std::move(forwarded), remote::Repeat::yes,
                      std::chrono::steady_clock::duration::max(), [](const boost::json::object& answer) {
                        if (!answer.contains("outcome")) throw Error(errc::storage, "a forwarded update without its outcome");
                        return remote::forwarded::outcome_of(answer.at("outcome")).value_or_throw();
                      });
    return;
  }
  auto run_id = call.run_id;  // (the lambda takes call: read the id first)
  impl_->request_to<boost::json::value>(
      std::move(settle), run_id,
      [call = std::move(call), settle_with](engine::Shard& shard,
                                            const std::shared_ptr<detail::Settle<boost::json::value>>& settle) {
        std::optional<engine::StartRequest> start;
        if (call.start) {
          start = engine::StartRequest{call.start->workflow, call.run_id, call.start->input, call.start->options};
        }
        shard.handle_update(std::move(start), call.run_id, call.update, call.arg, call.update_id,
                            [settle, settle_with](const engine::Outcome& outcome) { settle_with(settle, outcome); });
      });
}

std::future<boost::json::value> Engine::update_json_async(UpdateCall call) {
  std::promise<boost::json::value> promise;
  auto future = promise.get_future();
  update_to(std::make_shared<detail::Settle<boost::json::value>>(std::move(promise)), std::move(call));
  return future;
}

boost::json::value Engine::update_json(UpdateCall call) {
  Impl::refuse_on_shard_thread("update");
  return update_json_async(std::move(call)).get();
}

void Engine::update_json_then(UpdateCall call, Then<boost::json::value> then) {
  update_to(std::make_shared<detail::Settle<boost::json::value>>(std::move(then)), std::move(call));
}

void Engine::complete_awakeable_to(std::shared_ptr<detail::Settle<void>> settle, const std::string& token,
                                   bool succeeded, boost::json::value value) {
  if (auto led = impl_->led()) return led->complete_awakeable_to(std::move(settle), token, succeeded, std::move(value));
  auto parsed = engine::parse_token(token);
  if (!parsed) {
    throw Error(errc::invalid_argument,
                "not an awakeable token (tokens look like awk1.<hex>.<position>.<32 hex digits>)");
  }
  if (auto shard = impl_->shard_of(parsed->run_id); !impl_->here(shard)) {
    // A repeat of the same completion is acknowledged, so it may be sent again.
    impl_->forward_to(std::move(settle), shard,
                      boost::json::object{{"op", "awakeable"},
                                          {"token", token},
                                          {"succeeded", succeeded},
                                          {"value", std::move(value)}},
                      remote::Repeat::yes, remote::kHolderPatience, [](const boost::json::object&) {});
    return;
  }
  impl_->request_to<void>(std::move(settle), parsed->run_id,
                          [token, succeeded, value = std::move(value)](
                              engine::Shard& shard, const std::shared_ptr<detail::Settle<void>>& settle) mutable {
                            shard.handle_awakeable(token, succeeded, std::move(value),
                                                   [settle](std::error_code error, std::string message) {
                                                     if (!error) {
                                                       settle->set_value();
                                                       return;
                                                     }
                                                     try {
                                                       facade::throw_error(error, message);
                                                     } catch (...) {
                                                       settle->set_exception(std::current_exception());
                                                     }
                                                   });
                          });
}

void Engine::complete_awakeable_json(const std::string& token, bool succeeded, boost::json::value value) {
  Impl::refuse_on_shard_thread("complete_awakeable");
  std::promise<void> promise;
  auto future = promise.get_future();
  complete_awakeable_to(std::make_shared<detail::Settle<void>>(std::move(promise)), token, succeeded, std::move(value));
  future.get();
}

void Engine::complete_awakeable_then(const std::string& token, bool succeeded, boost::json::value value,
                                     Then<std::monostate> then) {
  complete_awakeable_to(std::make_shared<detail::Settle<void>>(std::move(then)), token, succeeded, std::move(value));
}

boost::json::value Engine::query_json(const std::string& id, const std::string& name, boost::json::value arg) {
  if (auto led = impl_->led()) return led->query_json(id, name, std::move(arg));
  Impl::refuse_on_shard_thread("query");
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    return impl_
        ->forward_as<boost::json::value>(
            shard, boost::json::object{{"op", "query"}, {"id", id}, {"name", name}, {"arg", std::move(arg)}},
            remote::Repeat::yes, remote::kHolderPatience,
            [](const boost::json::object& answer) {
              if (!answer.contains("answer")) throw Error(errc::storage, "a forwarded query without its answer");
              return answer.at("answer");
            })
        .get();
  }
  struct Answer {
    std::error_code error;
    std::string text;
  };
  auto answer = impl_->request_async<Answer>(
                         id, [id, name, arg = std::move(arg)](engine::Shard& shard,
                                                              const std::shared_ptr<detail::Settle<Answer>>& promise) {
                           shard.handle_query(id, name, arg, [promise](std::error_code error, std::string text) {
                             promise->set_value(Answer{error, std::move(text)});
                           });
                         })
                    .get();
  if (answer.error) facade::throw_error(answer.error, answer.text);
  return boost::json::parse(answer.text);
}

std::string Engine::journal_json(const std::string& id) {
  if (auto led = impl_->led()) return led->journal_json(id);
  Impl::refuse_on_shard_thread("journal_json");
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    return impl_
        ->forward_as<std::string>(shard, boost::json::object{{"op", "journal"}, {"id", id}}, remote::Repeat::yes,
                                  remote::kHolderPatience,
                                  [](const boost::json::object& answer) { return remote::forwarded::text(answer, "journal"); })
        .get();
  }
  struct Answer {
    std::error_code error;
    std::string text;
  };
  auto answer = impl_->request_async<Answer>(id, [id](engine::Shard& shard, const std::shared_ptr<detail::Settle<Answer>>& promise) {
                      shard.handle_journal(id, [promise](std::error_code error, std::string text) {
                        promise->set_value(Answer{error, std::move(text)});
                      });
                    }).get();
  if (answer.error) facade::throw_error(answer.error, answer.text);
  return answer.text;
}

StreamReader Engine::read_stream(const std::string& id, const std::string& stream, StreamFrom from) {
  if (auto led = impl_->led()) return led->read_stream(id, stream, from);
  auto feed = std::make_shared<detail::StreamFeed>();
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    // Chunks come as parts of the call's answer. When the holder goes, the
    // read is sent again to the next one from the chunk after the last
    // received, so the reader sees no gap and no duplicate.
    impl_->check_open();
    auto opened = std::make_shared<std::promise<void>>();
    auto state = std::make_shared<std::pair<bool, std::uint64_t>>(false, 0);  // opened; the next offset
    impl_->remote_calls->call(
        shard,
        boost::json::object{{"op", "stream"}, {"id", id}, {"stream", stream}, {"from", remote::forwarded::from_json(from)}},
        remote::Repeat::yes, std::chrono::steady_clock::duration::max(),
        [feed, opened, state](const boost::json::object& part, boost::json::object& call) {
          if (!state->first) {
            state->first = true;
            opened->set_value();
          }
          auto chunk = part.find("chunk");
          if (chunk == part.end() || !chunk->value().is_object()) return;
          const auto& object = chunk->value().as_object();
          auto offset = object.contains("offset") && object.at("offset").is_number()
                            ? object.at("offset").to_number<std::uint64_t>()
                            : 0;
          if (offset < state->second && state->second != 0) return;  // sent again after a takeover
          state->second = offset + 1;
          call["from"] = remote::forwarded::from_json(StreamFrom::at(offset + 1));
          feed->push(StreamChunk{offset, object.contains("value") ? object.at("value") : boost::json::value()});
        },
        [feed, opened, state](remote::RemoteCalls::Answer answer) {
          auto* error = std::get_if<Error>(&answer);
          if (!state->first) {
            state->first = true;
            if (error) {
              opened->set_exception(std::make_exception_ptr(*error));
              return;
            }
            opened->set_value();
          }
          feed->end(error ? error->code() : std::error_code());
        });
    opened->get_future().get();
    return StreamReader(feed);
  }
  auto reply = impl_->request_async<facade::Reply>(id, [id, stream, from, feed](
                                                   engine::Shard& shard,
                                                   const std::shared_ptr<detail::Settle<facade::Reply>>& promise) {
                      shard.handle_read_stream(id, stream, from, feed, facade::reply_to(promise));
                    }).get();
  facade::throw_if_failed(reply);
  return StreamReader(feed);
}

}  // namespace fusee
