#include "remote/remote_calls.hpp"

#include <fmt/format.h>

#include "engine/stream_feed.hpp"
#include "protocol/wire.hpp"
#include "remote/forwarded_call.hpp"

namespace fusee::remote {
namespace json = boost::json;
using protocol::text_of;

namespace {

constexpr auto kFirstPause = std::chrono::milliseconds(20);

errc code_of(std::error_code error) {
  return error.category() == error_category() ? static_cast<errc>(error.value()) : errc::storage;
}

// The holder stopped (shut down, or its log failed) before the run could
// answer: the caller asks the shard's next holder.
json::object retry(const std::string& why) { return {{"retry", why}}; }

}  // namespace

struct RemoteCalls::Pending {
  std::uint32_t shard = 0;
  json::object call;
  Repeat repeat = Repeat::never;
  std::chrono::steady_clock::time_point give_up;
  std::chrono::steady_clock::duration pause = kFirstPause;
  std::function<void(const json::object&, json::object&)> on_part;
  std::function<void(Answer)> on_answer;
};

RemoteCalls::RemoteCalls(ShardRouter& router, std::vector<std::unique_ptr<engine::Shard>>& shards,
                         RunInfo (*from_finished)(const engine::FinishedRun&), std::chrono::milliseconds longest_pause)
    : router_(router), shards_(shards), from_finished_(from_finished), longest_pause_(longest_pause) {
  retry_thread_ = std::thread([this] { retry_loop(); });
}

RemoteCalls::~RemoteCalls() { stop(); }

void RemoteCalls::stop() {
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<Pending>> waiting;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    waiting.swap(waiting_);
  }
  cv_.notify_all();
  if (retry_thread_.joinable() && retry_thread_.get_id() != std::this_thread::get_id()) retry_thread_.join();
  for (auto& [when, pending] : waiting) pending->on_answer(Error(errc::shut_down, "the engine is shut down"));
}

// --- Caller side ---

void RemoteCalls::call(std::uint32_t shard, json::object call, Repeat repeat,
                       std::chrono::steady_clock::duration patience,
                       std::function<void(const json::object&, json::object&)> on_part,
                       std::function<void(Answer)> on_answer) {
  auto pending = std::make_shared<Pending>();
  pending->shard = shard;
  pending->call = std::move(call);
  pending->repeat = repeat;
  auto now = std::chrono::steady_clock::now();
  pending->give_up = patience >= std::chrono::steady_clock::time_point::max() - now
                         ? std::chrono::steady_clock::time_point::max()
                         : now + patience;
  pending->on_part = std::move(on_part);
  pending->on_answer = std::move(on_answer);
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      pending->on_answer(Error(errc::shut_down, "the engine is shut down"));
      return;
    }
  }
  send(pending);
}

std::future<json::object> RemoteCalls::call(std::uint32_t shard, json::object call, Repeat repeat,
                                            std::chrono::steady_clock::duration patience) {
  auto promise = std::make_shared<std::promise<json::object>>();
  auto future = promise->get_future();
  this->call(shard, std::move(call), repeat, patience, nullptr, [promise](Answer answer) {
    if (auto* value = std::get_if<json::object>(&answer)) {
      promise->set_value(std::move(*value));
    } else {
      promise->set_exception(std::make_exception_ptr(std::get<Error>(answer)));
    }
  });
  return future;
}

void RemoteCalls::send(const std::shared_ptr<Pending>& pending) {
  router_.forward(pending->shard, forwarded::to_bytes(pending->call),
                  [this, pending](ShardRouter::Part part, std::vector<std::byte> body) {
                    switch (part) {
                      case ShardRouter::Part::more: {
                        if (auto value = forwarded::from_bytes(body); value && pending->on_part) {
                          pending->on_part(*value, pending->call);
                        }
                        return;
                      }
                      case ShardRouter::Part::last: {
                        auto value = forwarded::from_bytes(body);
                        if (!value) {
                          pending->on_answer(Error(errc::storage, fmt::format("shard {}'s holder sent a malformed "
                                                                              "answer",
                                                                              pending->shard)));
                        } else if (auto found = value->find("retry"); found != value->end()) {
                          again(pending, found->value().is_string() ? std::string(found->value().as_string())
                                                                    : "its holder stopped");
                        } else if (auto error = forwarded::error_of(*value)) {
                          pending->on_answer(std::move(*error));
                        } else {
                          pending->on_answer(std::move(*value));
                        }
                        return;
                      }
                      case ShardRouter::Part::no_holder:
                        again(pending, text_of(body));
                        return;
                      case ShardRouter::Part::lost:
                        if (pending->repeat == Repeat::yes) {
                          again(pending, text_of(body));
                        } else {
                          pending->on_answer(Error(
                              errc::unavailable,
                              fmt::format("shard {}: {}: the call may or may not have taken effect", pending->shard,
                                          text_of(body))));
                        }
                        return;
                      case ShardRouter::Part::failed: {
                        bool stopping = false;
                        {
                          std::lock_guard lock(mu_);
                          stopping = stopping_;
                        }
                        pending->on_answer(stopping ? Error(errc::shut_down, "the engine is shut down")
                                                    : Error(errc::storage, text_of(body)));
                        return;
                      }
                    }
                  });
}

void RemoteCalls::again(const std::shared_ptr<Pending>& pending, const std::string& why) {
  auto now = std::chrono::steady_clock::now();
  if (now >= pending->give_up) {
    pending->on_answer(Error(errc::unavailable, fmt::format("shard {}: {}; gave up waiting for a worker to take it",
                                                            pending->shard, why)));
    return;
  }
  auto when = now + pending->pause;
  pending->pause = std::min<std::chrono::steady_clock::duration>(pending->pause * 2, longest_pause_);
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      waiting_.emplace(when, pending);
      cv_.notify_all();
      return;
    }
  }
  pending->on_answer(Error(errc::shut_down, "the engine is shut down"));
}

void RemoteCalls::retry_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (waiting_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto due = waiting_.begin()->first;
    if (std::chrono::steady_clock::now() < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    auto pending = waiting_.begin()->second;
    waiting_.erase(waiting_.begin());
    lock.unlock();
    send(pending);
    lock.lock();
  }
}

// --- Holder side ---

void RemoteCalls::serve(ShardRouter::Call call) {
  auto reply = std::make_shared<std::function<void(bool, std::vector<std::byte>)>>(std::move(call.reply));
  auto answer = [reply](const json::object& value) { (*reply)(true, forwarded::to_bytes(value)); };
  auto body = forwarded::from_bytes(call.body);
  if (!body) {
    answer(forwarded::error_json(errc::invalid_argument, "a forwarded call that is not a JSON object"));
    return;
  }
  if (call.shard >= shards_.size() || !router_.holds(call.shard)) {
    answer(retry(fmt::format("this worker does not hold shard {}", call.shard)));
    return;
  }
  auto& shard = *shards_[call.shard];
  // External requests may be refused for a full queue, as local ones are.
  auto post = [&](std::function<void()> fn, bool external) {
    if (shard.post(std::move(fn), external)) return;
    answer(external ? forwarded::error_json(errc::busy,
                                            fmt::format("shard {} is busy (its request queue is full): nothing was "
                                                        "recorded, try again",
                                                        shard.id()))
                    : retry("the worker is shutting down"));
  };
  auto reply_to = [answer](std::error_code error, std::string message) {
    answer(error ? forwarded::error_json(code_of(error), message) : json::object{});
  };
  try {
    auto op = forwarded::text(*body, "op");
    if (op == "start") {
      auto request = forwarded::start_request_of(*body);
      post(
          [&shard, request = std::move(request), answer]() mutable {
            shard.handle_start(std::move(request), false,
                               [answer](std::error_code error, std::string message, StartOutcome outcome) {
                                 if (error) {
                                   answer(forwarded::error_json(code_of(error), message));
                                 } else {
                                   answer({{"outcome", start_outcome_name(outcome)}});
                                 }
                               });
          },
          true);
    } else if (op == "child") {
      // As EngineCore::start_child (Shard::start_child): a start that fails
      // ends the child at once; the answer comes when the child ends.
      auto request = forwarded::start_request_of(*body);
      post(
          [&shard, request = std::move(request), answer]() mutable {
            shard.start_child(std::move(request), [answer](std::error_code error, const engine::Outcome& outcome) {
              if (error && code_of(error) == errc::shut_down) {
                answer(retry("the worker is shutting down"));
                return;
              }
              answer({{"outcome", forwarded::outcome_json(outcome)}});
            });
          },
          false);
    } else if (op == "result") {
      auto id = forwarded::text(*body, "id");
      post(
          [&shard, id, answer] {
            shard.handle_result(id, [answer](const engine::Outcome& outcome) {
              if (outcome.status != RunStatus::completed && outcome.code == errc::shut_down) {
                answer(retry("the worker is shutting down"));
              } else {
                answer({{"outcome", forwarded::outcome_json(outcome)}});
              }
            });
          },
          true);
    } else if (op == "signal") {
      auto id = forwarded::text(*body, "id");
      auto name = forwarded::text(*body, "signal");
      auto signal_id = forwarded::text(*body, "signal_id");
      auto value = body->contains("value") ? body->at("value") : json::value();
      post([&shard, id, name, value, signal_id,
            reply_to] { shard.handle_signal(id, name, value, signal_id, reply_to); },
           true);
    } else if (op == "cancel") {
      auto id = forwarded::text(*body, "id");
      auto reason = forwarded::text(*body, "reason");
      // A call from before modes existed cancelled at once.
      auto mode = body->contains("mode") ? forwarded::cancel_mode_of(forwarded::text(*body, "mode"))
                                         : engine::CancelMode::terminate;
      auto request_id = body->contains("request_id") ? forwarded::text(*body, "request_id") : std::string();
      // A parent's close of its child is internal: never refused for a full queue.
      auto from_parent = body->contains("from_parent") && body->at("from_parent").is_bool() &&
                         body->at("from_parent").get_bool();
      post([&shard, id, reason, mode, request_id,
            reply_to] { shard.handle_cancel(id, reason, mode, request_id, reply_to); },
           !from_parent);
    } else if (op == "reset") {
      auto id = forwarded::text(*body, "id");
      auto reason = forwarded::text(*body, "reason");
      ResetPoint point;
      if (body->contains("position")) {
        const auto& position = body->at("position");
        if (!position.is_uint64() && !(position.is_int64() && position.get_int64() >= 0)) {
          throw Error(errc::invalid_argument, "a forwarded reset's position is not a whole number");
        }
        const auto value = position.to_number<std::uint64_t>();
        if (value > UINT32_MAX) throw Error(errc::invalid_argument, "a forwarded reset's position is out of range");
        point.position = static_cast<std::uint32_t>(value);
      }
      if (body->contains("after_step")) point.after_step = forwarded::text(*body, "after_step");
      post([&shard, id, point, reason, reply_to] { shard.handle_reset(id, point, reason, reply_to); }, true);
    } else if (op == "query") {
      auto id = forwarded::text(*body, "id");
      auto name = forwarded::text(*body, "name");
      auto arg = body->contains("arg") ? body->at("arg") : json::value();
      post(
          [&shard, id, name, arg, answer] {
            shard.handle_query(id, name, arg, [answer](std::error_code error, std::string text) {
              answer(error ? forwarded::error_json(code_of(error), text)
                           : json::object{{"answer", json::parse(text)}});
            });
          },
          true);
    } else if (op == "update") {
      auto id = forwarded::text(*body, "id");
      auto name = forwarded::text(*body, "name");
      auto update_id = forwarded::text(*body, "update_id");
      auto arg = body->contains("arg") ? body->at("arg") : json::value();
      std::optional<engine::StartRequest> start;
      if (const auto* given = body->if_contains("start")) {
        if (!given->is_object()) throw Error(errc::invalid_argument, "a forwarded update's start is not an object");
        start = forwarded::start_request_of(given->as_object());
      }
      post(
          [&shard, start = std::move(start), id, name, arg, update_id, answer]() mutable {
            shard.handle_update(std::move(start), id, name, arg, update_id, [answer](const engine::Outcome& outcome) {
              if (outcome.status != RunStatus::completed && outcome.code == errc::shut_down) {
                answer(retry("the worker is shutting down"));
              } else {
                answer({{"outcome", forwarded::outcome_json(outcome)}});
              }
            });
          },
          true);
    } else if (op == "awakeable") {
      auto token = forwarded::text(*body, "token");
      bool succeeded = body->contains("succeeded") && body->at("succeeded").is_bool() && body->at("succeeded").get_bool();
      auto value = body->contains("value") ? body->at("value") : json::value();
      post([&shard, token, succeeded, value,
            reply_to] { shard.handle_awakeable(token, succeeded, value, reply_to); },
           true);
    } else if (op == "journal") {
      auto id = forwarded::text(*body, "id");
      post(
          [&shard, id, answer] {
            shard.handle_journal(id, [answer](std::error_code error, std::string text) {
              answer(error ? forwarded::error_json(code_of(error), text) : json::object{{"journal", text}});
            });
          },
          true);
    } else if (op == "get") {
      auto id = forwarded::text(*body, "id");
      post(
          [&shard, id, answer, from_finished = from_finished_] {
            auto info = shard.handle_get(id, from_finished);
            answer({{"run", info ? json::value(forwarded::run_info_json(*info)) : json::value()}});
          },
          true);
    } else if (op == "list") {
      auto filter = forwarded::filter_of(body->contains("filter") ? body->at("filter") : json::value());
      post(
          [&shard, filter, answer] {
            std::vector<RunInfo> runs;
            shard.handle_list(filter, runs);
            json::array out;
            for (const auto& run : runs) out.push_back(forwarded::run_info_json(run));
            answer({{"runs", std::move(out)}});
          },
          true);
    } else if (op == "stream") {
      auto id = forwarded::text(*body, "id");
      auto name = forwarded::text(*body, "stream");
      auto from = forwarded::stream_from_of(body->contains("from") ? body->at("from") : json::value());
      auto feed = std::make_shared<detail::StreamFeed>(
          [reply](StreamChunk chunk) {
            json::object part{{"chunk", json::object{{"offset", chunk.offset}, {"value", std::move(chunk.value)}}}};
            (*reply)(false, forwarded::to_bytes(part));
          },
          [answer](std::error_code error) {
            if (!error) {
              answer({{"end", true}});
            } else if (code_of(error) == errc::shut_down) {
              answer(retry("the worker is shutting down"));
            } else {
              answer(forwarded::error_json(code_of(error), error.message()));
            }
          });
      post(
          [&shard, id, name, from, feed, reply, answer] {
            shard.handle_read_stream(id, name, from, feed, [reply, answer](std::error_code error, std::string message) {
              if (error) {
                answer(forwarded::error_json(code_of(error), message));
              } else {
                (*reply)(false, forwarded::to_bytes(json::object{{"opened", true}}));
              }
            });
          },
          true);
    } else {
      answer(forwarded::error_json(errc::invalid_argument, fmt::format("a forwarded call '{}' is not one", op)));
    }
  } catch (const Error& error) {
    answer(forwarded::error_json(error.error(), error.what()));
  } catch (const std::exception& error) {
    // A field of the wrong kind (Boost.JSON's own errors): the caller's
    // mistake, not a reason to stop the thread that reads calls.
    answer(forwarded::error_json(errc::invalid_argument, fmt::format("a malformed forwarded call: {}", error.what())));
  }
}

}  // namespace fusee::remote
