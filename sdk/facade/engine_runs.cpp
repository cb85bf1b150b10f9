// The client calls on a run's life: start, result, signal, cancel,
// terminate and reset, each routed to the shard that owns the id.
#include "sdk/facade/engine_impl.hpp"

namespace fusee {

namespace {

// A shard's start reply as the facade's answer to it.
void settle_start(detail::Settle<StartOutcome>& settle, std::error_code error, const std::string& message,
                  StartOutcome outcome) {
  if (!error) {
    settle.set_value(outcome);
    return;
  }
  try {
    facade::throw_error(error, message);
  } catch (...) {
    settle.set_exception(std::current_exception());
  }
}

void settle_result(detail::Settle<boost::json::value>& settle, const engine::Outcome& outcome) {
  if (outcome.status == RunStatus::completed) {
    settle.set_value(outcome.value);
  } else {
    settle.set_exception(std::make_exception_ptr(Error(outcome.code, outcome.message)));
  }
}

// What a start refuses before anything is sent (Error invalid_argument).
void check_start(Engine::Impl& impl, const std::string& workflow, const std::string& id,
                 const boost::json::value& input, const StartOptions& options) {
  if (auto why = run_id_problem(id)) throw Error(errc::invalid_argument, *why);
  {
    std::shared_lock lock(impl.registry_mu);
    if (auto check = impl.registry.find(workflow); check != impl.registry.end() && check->second.input) {
      if (auto why = check->second.input(input); !why.empty()) {
        throw Error(errc::invalid_argument, fmt::format("the input does not fit workflow '{}': {}", workflow, why));
      }
    }
  }
  if (options.deadline && options.deadline->count() <= 0) {
    throw Error(errc::invalid_argument, fmt::format("run '{}': the deadline must be positive", id));
  }
  if (options.deadline && *options.deadline > kDurationMax) {
    throw Error(errc::invalid_argument,
                fmt::format("run '{}': the deadline is at most {} ms (100 years), not {} ms", id, kDurationMax.count(),
                            options.deadline->count()));
  }
}

}  // namespace

void Engine::start_to(std::shared_ptr<detail::Settle<StartOutcome>> settle, const std::string& workflow,
                      const std::string& id, boost::json::value input, const StartOptions& options) {
  if (auto led = impl_->led()) return led->start_to(std::move(settle), workflow, id, std::move(input), options);
  check_start(*impl_, workflow, id, input, options);
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    // Starting again is harmless only when it attaches.
    auto repeat = options.if_running == IfRunning::attach && options.if_finished == IfFinished::attach
                      ? remote::Repeat::yes
                      : remote::Repeat::never;
    impl_->forward_to(
        std::move(settle), shard, remote::forwarded::start_call(engine::StartRequest{workflow, id, std::move(input), options}), repeat,
        remote::kHolderPatience, [](const boost::json::object& answer) {
          auto outcome = remote::forwarded::text(answer, "outcome");
          return outcome == "started"                ? StartOutcome::started
                 : outcome == "attached_other_input" ? StartOutcome::attached_other_input
                                                     : StartOutcome::attached;
        });
    return;
  }
  impl_->request_to<StartOutcome>(
      std::move(settle), id, [workflow, id, input = std::move(input), options](
              engine::Shard& shard, const std::shared_ptr<detail::Settle<StartOutcome>>& settle) mutable {
        shard.handle_start(engine::StartRequest{workflow, id, std::move(input), options}, false,
                           [settle](std::error_code error, std::string message, StartOutcome outcome) {
                             settle_start(*settle, error, message, outcome);
                           });
      });
}

std::future<StartOutcome> Engine::start_json_async(const std::string& workflow, const std::string& id,
                                                  boost::json::value input, const StartOptions& options) {
  std::promise<StartOutcome> promise;
  auto future = promise.get_future();
  start_to(std::make_shared<detail::Settle<StartOutcome>>(std::move(promise)), workflow, id, std::move(input), options);
  return future;
}

void Engine::start_json_then(const std::string& workflow, const std::string& id, boost::json::value input,
                             const StartOptions& options, Then<StartOutcome> then) {
  start_to(std::make_shared<detail::Settle<StartOutcome>>(std::move(then)), workflow, id, std::move(input), options);
}

StartOutcome Engine::start_json(const std::string& workflow, const std::string& id, boost::json::value input,
                                const StartOptions& options) {
  Impl::refuse_on_shard_thread("start");
  return start_json_async(workflow, id, std::move(input), options).get();
}

void Engine::result_to(std::shared_ptr<detail::Settle<boost::json::value>> settle, const std::string& id) {
  if (auto led = impl_->led()) return led->result_to(std::move(settle), id);
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    // A result waits as long as the run takes, across takeovers.
    impl_->forward_to(
        std::move(settle), shard, boost::json::object{{"op", "result"}, {"id", id}}, remote::Repeat::yes,
        std::chrono::steady_clock::duration::max(), [](const boost::json::object& answer) {
          if (!answer.contains("outcome")) throw Error(errc::storage, "a forwarded result without its outcome");
          return remote::forwarded::outcome_of(answer.at("outcome")).value_or_throw();
        });
    return;
  }
  impl_->request_to<boost::json::value>(
      std::move(settle), id, [id](engine::Shard& shard, const std::shared_ptr<detail::Settle<boost::json::value>>& settle) {
        shard.handle_result(id, [settle](const engine::Outcome& outcome) { settle_result(*settle, outcome); });
      });
}

std::future<boost::json::value> Engine::result_json_async(const std::string& id) {
  std::promise<boost::json::value> promise;
  auto future = promise.get_future();
  result_to(std::make_shared<detail::Settle<boost::json::value>>(std::move(promise)), id);
  return future;
}

void Engine::result_json_then(const std::string& id, Then<boost::json::value> then) {
  result_to(std::make_shared<detail::Settle<boost::json::value>>(std::move(then)), id);
}


void Engine::execute_to(std::shared_ptr<detail::Settle<StartOutcome>> started,
                        std::shared_ptr<detail::Settle<boost::json::value>> ended, const std::string& workflow,
                        const std::string& id, boost::json::value input, const StartOptions& options) {
  if (auto led = impl_->led()) return led->execute_to(std::move(started), std::move(ended), workflow, id, std::move(input), options);
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    // Another worker holds the run: its start is forwarded, and once it is
    // answered, its result (a forwarded call may be made from an answer).
    auto chained = std::make_shared<detail::Settle<StartOutcome>>(
        [this, started, ended, id](std::variant<StartOutcome, Error> answer) {
          if (auto* failure = std::get_if<Error>(&answer)) {
            started->set_exception(std::make_exception_ptr(*failure));
            return;
          }
          started->set_value(std::get<StartOutcome>(answer));
          try {
            result_to(ended, id);
          } catch (...) {
            ended->set_exception(std::current_exception());
          }
        });
    start_to(std::move(chained), workflow, id, std::move(input), options);
    return;
  }
  check_start(*impl_, workflow, id, input, options);
  impl_->request_to<StartOutcome>(
      std::move(started), id, [workflow, id, input = std::move(input), options, ended](
              engine::Shard& shard, const std::shared_ptr<detail::Settle<StartOutcome>>& settle) mutable {
        shard.handle_start(engine::StartRequest{workflow, id, std::move(input), options}, false,
                           [&shard, settle, ended, id](std::error_code error, std::string message, StartOutcome outcome) {
                             settle_start(*settle, error, message, outcome);
                             if (error) return;
                             // The result is asked for by the shard itself,
                             // not by another trip from the caller. In a
                             // turn of its own: this reply may come from
                             // inside handle_start or while durable waits
                             // are being answered.
                             auto ask = [&shard, ended, id] {
                               shard.handle_result(id, [ended](const engine::Outcome& outcome) {
                                 settle_result(*ended, outcome);
                               });
                             };
                             if (!shard.post(std::move(ask), false)) {
                               ended->set_exception(std::make_exception_ptr(
                                   Error(errc::shut_down, "the engine shut down before the run's result")));
                             }
                           });
      });
}

void Engine::execute_json_then(const std::string& workflow, const std::string& id, boost::json::value input,
                               const StartOptions& options, Then<StartOutcome> started,
                               Then<boost::json::value> ended) {
  execute_to(std::make_shared<detail::Settle<StartOutcome>>(std::move(started)),
             std::make_shared<detail::Settle<boost::json::value>>(std::move(ended)), workflow, id, std::move(input),
             options);
}

boost::json::value Engine::execute_json(const std::string& workflow, const std::string& id, boost::json::value input,
                                        const StartOptions& options) {
  Impl::refuse_on_shard_thread("execute");
  std::promise<StartOutcome> started;
  std::promise<boost::json::value> ended;
  auto started_future = started.get_future();
  auto ended_future = ended.get_future();
  execute_to(std::make_shared<detail::Settle<StartOutcome>>(std::move(started)),
             std::make_shared<detail::Settle<boost::json::value>>(std::move(ended)), workflow, id, std::move(input),
             options);
  (void)started_future.get();  // the start's failure, if it failed (the result is then never set)
  return ended_future.get();
}

boost::json::value Engine::result_json(const std::string& id) {
  Impl::refuse_on_shard_thread("result");
  return result_json_async(id).get();
}

void Engine::signal_json(const std::string& id, const std::string& signal, boost::json::value value,
                         const std::string& signal_id) {
  if (auto led = impl_->led()) return led->signal_json(id, signal, std::move(value), signal_id);
  Impl::refuse_on_shard_thread("signal");
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    // A signal with an id is dropped when delivered twice; one without may
    // not be sent again.
    impl_->forward_as<void>(shard,
                            boost::json::object{
                                {"op", "signal"}, {"id", id}, {"signal", signal}, {"value", std::move(value)},
                                {"signal_id", signal_id}},
                            signal_id.empty() ? remote::Repeat::never : remote::Repeat::yes, remote::kHolderPatience,
                            [](const boost::json::object&) {})
        .get();
    return;
  }
  auto reply = impl_->request_async<facade::Reply>(id, [id, signal, value = std::move(value), signal_id](
                                                   engine::Shard& shard,
                                                   const std::shared_ptr<detail::Settle<facade::Reply>>& promise) mutable {
                      shard.handle_signal(id, signal, std::move(value), signal_id, facade::reply_to(promise));
                    }).get();
  facade::throw_if_failed(reply);
}

void Engine::cancel(const std::string& id, const std::string& reason) {
  if (auto led = impl_->led()) return led->cancel(id, reason);
  impl_->stop_run(id, reason, engine::CancelMode::cancel);
}

void Engine::terminate(const std::string& id, const std::string& reason) {
  if (auto led = impl_->led()) return led->terminate(id, reason);
  impl_->stop_run(id, reason, engine::CancelMode::terminate);
}

void Engine::Impl::stop_run(const std::string& id, const std::string& reason, engine::CancelMode mode) {
  refuse_on_shard_thread(mode == engine::CancelMode::terminate ? "terminate" : "cancel");
  if (auto shard = shard_of(id); !here(shard)) {
    // Sent again if its holder goes mid-call: the request id makes a
    // repeat of a recorded cancel change nothing (a second cancel would
    // terminate the run).
    auto request_id = mode == engine::CancelMode::cancel ? fmt::format("cancel-{:016x}", random()) : std::string();
    forward_as<void>(shard, cancel_call(id, reason, mode, request_id, false), remote::Repeat::yes, remote::kHolderPatience,
                     [](const boost::json::object&) {})
        .get();
    return;
  }
  auto reply = request_async<facade::Reply>(
                   id, [id, reason, mode](engine::Shard& shard, const std::shared_ptr<detail::Settle<facade::Reply>>& promise) {
                     shard.handle_cancel(id, reason, mode, {}, facade::reply_to(promise));
                   })
                   .get();
  facade::throw_if_failed(reply);
}

void Engine::reset(const std::string& id, const ResetPoint& point, const std::string& reason) {
  if (auto led = impl_->led()) return led->reset(id, point, reason);
  Impl::refuse_on_shard_thread("reset");
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    boost::json::object call{{"op", "reset"}, {"id", id}, {"reason", reason}};
    if (point.position) call["position"] = *point.position;
    if (point.after_step) call["after_step"] = *point.after_step;
    // Not sent again: a second reset would cut the new generation.
    impl_->forward_as<void>(shard, std::move(call), remote::Repeat::never, remote::kHolderPatience,
                            [](const boost::json::object&) {})
        .get();
    return;
  }
  auto reply = impl_->request_async<facade::Reply>(
                        id, [id, point, reason](engine::Shard& shard, const std::shared_ptr<detail::Settle<facade::Reply>>& promise) {
                          shard.handle_reset(id, point, reason, facade::reply_to(promise));
                        })
                   .get();
  facade::throw_if_failed(reply);
}

}  // namespace fusee
