// Engine::Impl, the engine behind the public Engine: its shards and their
// threads, the log or the log service and the run store of its mode, the
// checkpointer, the backup uploader, the HTTP front, the run index and
// the step limits, wired by Engine::open (engine_open.cpp). The client
// calls are in engine_runs.cpp (start, result, signal, cancel, reset),
// engine_messages.cpp (updates, awakeables, queries, journals, streams),
// engine_views.cpp (get, list, query, activity), queues.cpp and
// schedules.cpp. Only those files include it.
#pragma once

#include "fusee/engine.hpp"
#include "fusee/limits.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <future>
#include <map>
#include <random>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "backup/directory_id.hpp"
#include "backup/open_target.hpp"
#include "backup/uploader.hpp"
#include "engine/journal_record.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/checkpointer.hpp"
#include "engine/data_dir.hpp"
#include "engine/engine_core.hpp"
#include "engine/journal_sink.hpp"
#include "engine/limiter.hpp"
#include "engine/run_hash.hpp"
#include "engine/run_store.hpp"
#include "engine/shard.hpp"
#include "http/http_server.hpp"
#include "http/request_guard.hpp"
#include "remote/forwarded_call.hpp"
#include "remote/remote_calls.hpp"
#include "remote/remote_limits.hpp"
#include "remote/remote_run_store.hpp"
#include "remote/remote_sink.hpp"
#include "queue/queue_state.hpp"
#include "queue/queue_workflow.hpp"
#include "remote/shard_router.hpp"
#include "schedule/schedule_state.hpp"
#include "schedule/schedule_workflow.hpp"
#include "sdk/facade/activity_history.hpp"
#include "sdk/facade/engine_over_log.hpp"
#include "sdk/facade/replica_host.hpp"
#include "sdk/facade/settle.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/limits.hpp"
#include "wal/log.hpp"

namespace fusee {
namespace facade {

RunInfo run_info_of(const engine::FinishedRun& finished);

// Registers the built-in workflows behind schedules and queues (a recovered
// run of one starts once it is registered).
void register_builtins(Engine& engine);

[[noreturn]] inline void throw_error(std::error_code error, const std::string& message) {
  auto text = message.empty() ? error.message() : message;
  if (error.category() == error_category()) throw Error(static_cast<errc>(error.value()), text);
  throw Error(errc::storage, text);
}

// Lets a clock's listener outlive the engine safely.
struct Waker {
  std::mutex mu;
  std::vector<engine::Shard*> shards;
  void wake() {
    std::lock_guard lock(mu);
    for (auto* shard : shards) shard->notify();
  }
  void wake(wal::ShardId shard) {
    std::lock_guard lock(mu);
    if (shard < shards.size()) shards[shard]->notify();
  }
};

// A shard's answer to a request, as the client call waits for it.
struct Reply {
  std::error_code error;
  std::string message;
  StartOutcome outcome = StartOutcome::started;
};

inline void throw_if_failed(const Reply& reply) {
  if (reply.error) throw_error(reply.error, reply.message);
}

// A reply that keeps its promise alive: shards answer after the request's
// message is gone (once a record is durable).
inline std::function<void(std::error_code, std::string)> reply_to(const std::shared_ptr<detail::Settle<Reply>>& promise) {
  return [promise](std::error_code error, std::string message) {
    promise->set_value(Reply{error, std::move(message)});
  };
}

}  // namespace facade

struct Engine::Impl final : engine::EngineCore {
  // Engine::open, and open_engine_over_log (sdk/facade/engine_over_log.hpp)
  // when `over` is set.
  static std::unique_ptr<Engine> open(Config config, facade::LogOver* over);
  // Replicated mode's Engine: calls go to the engine of the view this
  // replica leads (sdk/facade/replica_host.hpp).
  static std::unique_ptr<Engine> open_replicated(std::unique_ptr<Impl> impl, Config config);
  // Config::http_listen's server over `engine`; `front_token`: a token the
  // API takes besides Config::http_token (remote mode's server's).
  static void start_http(Engine& engine, const Config& config, std::function<std::string()> front_token);
  // Replicated mode: the engine of the view this replica leads; null on a
  // backup (and while a view's engine opens), whose calls then go on as a
  // split worker's for a shard it does not hold: to the primary
  // (sdk/facade/primary_router.hpp). Null in every other mode.
  std::shared_ptr<Engine> led() {
    if (!replica_host) return nullptr;
    check_open();
    return replica_host->engine_if_any();
  }
  // The primary's side of those calls: `engine` is a view's.
  static void serve_forwarded(Engine& engine, remote::ShardRouter::Call call);
  // A view's engine's router for the calls it serves (facade::ServeEveryShard).
  std::unique_ptr<remote::ShardRouter> serving_router;
  std::unique_ptr<facade::ReplicaHost> replica_host;

  Config config;
  // Before the shards, which put runs in it to the end.
  engine::RunIndex index;
  std::unique_ptr<io::FileSystem> own_fs;
  io::FileSystem* fs = nullptr;
  std::shared_ptr<Clock> clock;
  std::mutex random_mu;
  std::function<std::uint64_t()> random_source;
  std::unique_ptr<io::FileSystem::Lock> lock;  // held while open; released after the log closes
  std::unique_ptr<fusee::http::HttpServer> http;    // Config::http_listen; stopped first at shutdown
  std::function<void(const std::string&)> warn;  // Config::warn or stderr
  std::mutex storage_error_mu;
  std::string storage_error;  // the first journal failure, for stats()
  std::unique_ptr<engine::JournalSink> sink;
  std::shared_ptr<engine::RunStore> store;  // local and remote mode (lent by a replica's host)
  // Config::backup_target: the target and its uploader, after the sink (whose
  // log the uploader reads) and the store (which it snapshots), so they go
  // first.
  std::unique_ptr<backup::BackupTarget> backup_target;
  std::unique_ptr<backup::Uploader> uploader;
  std::vector<std::unique_ptr<engine::Shard>> shards;
  std::unique_ptr<engine::Checkpointer> checkpointer;  // local and remote mode
  std::shared_ptr<facade::Waker> waker = std::make_shared<facade::Waker>();
  // Engine::limit: the engine's own limiter (local_limits), or in remote
  // mode the server's permits (remote/remote_limits.hpp).
  std::shared_ptr<engine::StepLimits> step_limits;
  std::shared_ptr<engine::Limiter> local_limits;
  // The registered workflows by name: code by version, the newest
  // registration's input check, and the signals declared.
  struct Registered {
    std::map<std::uint32_t, std::shared_ptr<const WorkflowFn>> versions;
    InputCheck input;
    std::map<std::string, InputCheck> signals;
  };
  mutable std::shared_mutex registry_mu;
  std::unordered_map<std::string, Registered> registry;
  std::mutex shutdown_mu;
  std::atomic<bool> shut{false};
  // Remote mode with the shards split among workers (Config::server_shards_max):
  // which shards this engine holds, and calls for the others.
  remote::ShardRouter* router = nullptr;
  remote::RemoteRunStore* remote_store = nullptr;
  std::unique_ptr<remote::RemoteCalls> remote_calls;
  std::string root;  // where the store and the log are (for messages)
  // Shards leased after open, recovered and started one at a time.
  std::mutex adopt_mu;
  std::condition_variable adopt_cv;
  std::deque<std::uint32_t> to_adopt;
  std::vector<bool> adopted;  // recovered here (at open or since), under adopt_mu
  bool adopt_stopping = false;
  std::thread adopter;

  // The run store's finished runs into the index, after open returned
  // (engine::RunIndex::begin_fill): reading a long history is not on the
  // open path. Joined by shutdown.
  std::atomic<bool> index_fill_stop{false};
  std::thread index_fill;
  static inline std::function<void(engine::RunIndex&)> index_fill_hook_for_tests;
  void fill_index() {
    if (index_fill_hook_for_tests) index_fill_hook_for_tests(index);
    try {
      index_stored(std::nullopt, &index_fill_stop);
    } catch (const std::exception& error) {
      if (warn) {
        warn(fmt::format("cannot read the finished runs from the run store into the run index ({}): lists and "
                         "counts omit them until the next open",
                         error.what()));
      }
    }
    index.end_fill();
  }

  // Engine::activity: a reading of stats() each second, by `sampler`.
  detail::ActivityHistory activity;
  std::mutex sampler_mu;
  std::condition_variable sampler_cv;
  bool sampler_stopping = false;
  std::thread sampler;

  // Whether this engine runs shard `shard` (always, but in remote mode with
  // the shards split).
  bool here(std::uint32_t shard) const { return !router || router->holds(shard); }
  // Every shard is held here and recovered: the index has every run.
  bool all_here() {
    if (!router) return true;
    if (replica_host) return false;  // a backup: the primary holds them all
    std::lock_guard lock(adopt_mu);
    for (std::uint32_t shard = 0; shard < shards.size(); ++shard) {
      if (!adopted[shard] || !router->holds(shard)) return false;
    }
    return true;
  }
  // The limiter's rate waits end on a timer of a shard this engine runs
  // (the engine's clock drives shard timers, a manual one too).
  void arm_limit_poll(TimePoint at) {
    for (std::uint32_t shard = 0; shard < shards.size(); ++shard) {
      if (!shards[shard] || !here(shard)) continue;
      auto* target = shards[shard].get();
      if (target->post([this, target, at] { target->add_timer(at, nullptr, [this] { local_limits->poll(); }); }, false)) {
        return;
      }
    }
  }
  std::uint32_t shard_of(const std::string& id) const { return engine::shard_of(id, shard_count()); }
  // What each running run of a page waits on (the index does not keep it:
  // it changes at every command): from its shard for a run in memory, one
  // post per shard with a running run on the page; from the run store for a
  // parked one, read here, off the shards' threads.
  void fill_waiting_on(std::vector<RunInfo>& runs) {
    std::map<std::uint32_t, std::vector<std::string>> by_shard;
    for (const auto& run : runs) {
      if (run.status == RunStatus::running) by_shard[shard_of(run.id)].push_back(run.id);
    }
    using Waits = std::map<std::string, std::vector<PendingCommand>>;
    std::vector<std::future<Waits>> parts;
    for (auto& [shard, ids] : by_shard) {
      auto promise = std::make_shared<std::promise<Waits>>();
      parts.push_back(promise->get_future());
      auto* target = shards[shard].get();
      if (!target->post([target, promise, ids = std::move(ids)] {
            Waits waits;
            target->handle_waits(ids, waits);
            promise->set_value(std::move(waits));
          }, true)) {
        check_open();
        throw Error(errc::busy, fmt::format("shard {} is busy (its request queue is full), try again", shard));
      }
    }
    Waits waits;
    for (auto& part : parts) waits.merge(part.get());
    for (auto& run : runs) {
      if (auto found = waits.find(run.id); found != waits.end()) {
        run.waiting_on = std::move(found->second);
      } else if (run.status == RunStatus::running && store) {
        auto parked = store->parked(shard_of(run.id), run.id);
        if (!parked) {
          throw Error(errc::storage, fmt::format("query_runs: cannot read the run store: {}", parked.error().message()));
        }
        if (*parked) run.waiting_on = std::move((*parked)->waiting);
      }
    }
  }

  // The run store's finished runs of `shard` (every shard: nothing) that
  // no shard holds in memory, into the index: a shard's recovery put its
  // own runs there first, and those are newer.
  void index_stored(std::optional<std::uint32_t> shard, const std::atomic<bool>* stop = nullptr) {
    if (!store) return;
    engine::RunQuery query;
    query.limit = 1000;
    for (;;) {
      if (stop != nullptr && stop->load()) return;
      auto page = store->list(query);
      if (!page) throw Error(errc::storage, fmt::format("cannot read the run store: {}", page.error().message()));
      for (const auto& finished : page->runs) {
        if (!shard || shard_of(finished.id) == *shard) index.put_if_absent(facade::run_info_of(finished));
      }
      if (page->next_cursor.empty()) return;
      query.cursor = page->next_cursor;
    }
  }

  // --- EngineCore ---
  engine::RunIndex& run_index() override { return index; }
  std::shared_ptr<const WorkflowFn> workflow(const std::string& name, std::uint32_t version) const override {
    std::shared_lock lock(registry_mu);
    auto found = registry.find(name);
    if (found == registry.end()) return nullptr;
    auto code = found->second.versions.find(version);
    return code == found->second.versions.end() ? nullptr : code->second;
  }
  std::optional<std::uint32_t> newest_version(const std::string& name) const override {
    std::shared_lock lock(registry_mu);
    auto found = registry.find(name);
    if (found == registry.end() || found->second.versions.empty()) return std::nullopt;
    return found->second.versions.rbegin()->first;
  }
  std::string check_signal(const std::string& workflow, const std::string& signal,
                           const boost::json::value& value) const override {
    std::shared_lock lock(registry_mu);
    auto found = registry.find(workflow);
    if (found == registry.end() || found->second.signals.empty()) return {};
    auto declared = found->second.signals.find(signal);
    if (declared == found->second.signals.end()) {
      std::string names;
      for (const auto& [name, check] : found->second.signals) names += (names.empty() ? "'" : ", '") + name + "'";
      return fmt::format("workflow '{}' takes no signal '{}' (it takes {})", workflow, signal, names);
    }
    if (!declared->second) return {};
    if (auto why = declared->second(value); !why.empty()) {
      return fmt::format("signal '{}': the value {} does not fit the type workflow '{}' takes: {}", signal,
                         boost::json::serialize(value), workflow, why);
    }
    return {};
  }
  TimePoint now() const override { return clock->now(); }
  engine::StepLimits& limiter() override { return *step_limits; }
  std::uint64_t random() override {
    std::lock_guard lock(random_mu);
    return random_source();
  }
  engine::Shard& shard_for(const std::string& id) { return *shards[engine::shard_of(id, shard_count())]; }
  void post_to_run_shard(const std::string& id, std::function<void()> fn) override {
    (void)shard_for(id).post(std::move(fn), false);
  }
  void post_to_shard(std::uint32_t shard, std::function<void()> fn) override {
    (void)shards[shard]->post(std::move(fn), false);
  }
  void start_child(engine::StartRequest request, std::function<void(const engine::Outcome&)> on_end) override {
    if (auto shard = shard_of(request.id); !here(shard)) {
      // The parent asks as long as it takes; starting is idempotent
      // (attach), so asking again after its holder went is safe. A call
      // that fails (shutdown, a failed connection) leaves the parent
      // waiting: it asks again when it is replayed.
      auto call = remote::forwarded::start_call(request);
      call["op"] = "child";
      remote_calls->call(shard, std::move(call), remote::Repeat::yes, std::chrono::steady_clock::duration::max(),
                         nullptr, [on_end = std::move(on_end)](remote::RemoteCalls::Answer answer) {
                           auto* value = std::get_if<boost::json::object>(&answer);
                           if (!value || !value->contains("outcome")) return;
                           try {
                             on_end(remote::forwarded::outcome_of(value->at("outcome")));
                           } catch (const Error&) {
                             // A malformed outcome: the parent asks again when it is replayed.
                           }
                         });
      return;
    }
    auto& shard = shard_for(request.id);
    (void)shard.post(
        [&shard, request = std::move(request), on_end = std::move(on_end)]() mutable {
          shard.start_child(std::move(request),
                            [on_end = std::move(on_end)](std::error_code, const engine::Outcome& outcome) {
                              on_end(outcome);
                            });
        },
        false);
  }

  void close_child(const std::string& id, const std::string& reason, engine::CancelMode mode,
                   std::function<void()> done) override {
    if (auto shard = shard_of(id); !here(shard)) {
      // As a child's start: asked as long as it takes (the request is
      // idempotent); a call that fails lets the parent go on.
      remote_calls->call(shard, cancel_call(id, reason, mode, {}, true), remote::Repeat::yes,
                         std::chrono::steady_clock::duration::max(), nullptr,
                         [done = std::move(done)](remote::RemoteCalls::Answer) { done(); });
      return;
    }
    auto& target = shard_for(id);
    if (!target.post(
            [&target, id, reason, mode, done] {
              target.handle_cancel(id, reason, mode, {}, [done](std::error_code, std::string) { done(); });
            },
            false)) {
      done();  // shutting down: the parent's end is not recorded either
    }
  }
  // A call that waits for a shard, made on a shard's thread (from a
  // workflow or a plain step), would hang when the run it waits on lives
  // on that shard and work otherwise: refused every time instead.
  static void refuse_on_shard_thread(const char* call) {
    if (!engine::Shard::on_shard_thread()) return;
    throw Error(errc::wrong_thread,
                fmt::format("Engine::{} was called from a workflow or a step, on a shard's thread, where it would "
                            "wait on a shard (maybe its own) and could hang: start a workflow from a workflow with "
                            "ctx.child(...), and make Engine calls from outside the engine's threads",
                            call));
  }
  // Engine::cancel and Engine::terminate.
  void stop_run(const std::string& id, const std::string& reason, engine::CancelMode mode);
  // from_parent: a ParentClose, which a full queue does not refuse.
  static boost::json::object cancel_call(const std::string& id, const std::string& reason, engine::CancelMode mode,
                                         const std::string& request_id, bool from_parent) {
    return boost::json::object{{"op", "cancel"},
                               {"id", id},
                               {"reason", reason},
                               {"mode", remote::forwarded::cancel_mode_name(mode)},
                               {"request_id", request_id},
                               {"from_parent", from_parent}};
  }

  void warn_operator(const std::string& message) override {
    if (warn) warn(message);
  }

  std::string refusing_new_requests() const override {
    if (uploader && uploader->backlog_full()) {
      return "the backup's backlog is past backup_backlog_bytes_max (the target does not take uploads)";
    }
    return {};
  }

  void storage_failed(std::uint32_t shard, std::error_code error) override {
    std::string text;
    {
      std::lock_guard lock(storage_error_mu);
      if (!storage_error.empty()) return;
      storage_error = fmt::format("shard {}: {}", shard, error.message());
      text = storage_error;
    }
    if (!warn) return;
    if (error == make_error_code(errc::unavailable)) {
      // A replica's view ended (replicated mode): not a failure of anything.
      warn(fmt::format("this replica no longer leads ({}): its runs go on on the next primary", text));
      return;
    }
    warn(fmt::format("the log failed ({}): the shard's runs cannot go on until the engine is reopened; "
                     "the next open recovers everything acknowledged",
                     text));
  }

  std::uint32_t shard_count() const {
    return replica_host ? replica_host->shard_count() : static_cast<std::uint32_t>(shards.size());
  }

  // A call for a run of a shard another worker holds, as a future of T:
  // convert(the answer), or the answer's Error.
  template <typename T, typename Convert>
  std::future<T> forward_as(std::uint32_t shard, boost::json::object call, remote::Repeat repeat,
                            std::chrono::steady_clock::duration patience, Convert convert) {
    std::promise<T> promise;
    auto future = promise.get_future();
    forward_to(std::make_shared<detail::Settle<T>>(std::move(promise)), shard, std::move(call), repeat, patience,
               std::move(convert));
    return future;
  }

  // The same, answering `settle` (a promise or an Engine::Then callback).
  template <typename T, typename Convert>
  void forward_to(std::shared_ptr<detail::Settle<T>> settle, std::uint32_t shard, boost::json::object call,
                  remote::Repeat repeat, std::chrono::steady_clock::duration patience, Convert convert) {
    check_open();
    remote_calls->call(shard, std::move(call), repeat, patience, nullptr,
                       [settle, convert = std::move(convert)](remote::RemoteCalls::Answer answer) {
                         try {
                           if (auto* error = std::get_if<Error>(&answer)) throw *error;
                           if constexpr (std::is_void_v<T>) {
                             convert(std::get<boost::json::object>(answer));
                             settle->set_value();
                           } else {
                             settle->set_value(convert(std::get<boost::json::object>(answer)));
                           }
                         } catch (...) {
                           settle->set_exception(std::current_exception());
                         }
                       });
  }

  // Recovers one shard: its checkpoint's journals from the run store, then
  // the log past it. Before the shard starts.
  void recover(std::uint32_t shard, const engine::ShardBases& bases) {
    auto load = [&](const char* where, wal::Lsn lsn, std::span<const std::byte> bytes,
                    std::optional<engine::JournalPlace> stored) {
      auto record = engine::decode_record(bytes);
      if (!record) {
        throw Error(errc::storage, fmt::format("{}/{}: shard {} record {} is not a journal record", root,
                                               where, shard, lsn));
      }
      if (record->kind == engine::RecordKind::run_started && engine::shard_of(record->run_id, shard_count()) != shard) {
        // Written with another shard count: a replica given a
        // Config::shards its cluster's other replicas were not.
        throw Error(errc::wrong_shard_count,
                    fmt::format("{}/{}: shard {} holds run '{}', which {} shards put in shard {}: the log was written "
                                "with another shard count (in replicated mode every replica must have the same "
                                "Config::shards)",
                                root, where, shard, record->run_id, shard_count(),
                                engine::shard_of(record->run_id, shard_count())));
      }
      if (auto added =
              shards[shard]->load(*record, lsn, bytes, stored, bases.floors.empty() ? 0 : bases.floors[shard]);
          !added) {
        throw Error(errc::storage, fmt::format("{}/{}: shard {} record {} ({} of run '{}') does not fit its run's "
                                               "journal",
                                               root, where, shard, lsn, engine::record_kind_name(record->kind),
                                               record->run_id));
      }
    };
    if (store) {
      auto stored = store->load_journals(
          shard, [&](const std::string&, std::uint64_t lsn, std::span<const std::byte> bytes) -> Result<void> {
            // A checkpoint covers every journal record the store holds: one
            // past it would wait forever for a durable position the log
            // never reaches.
            if (lsn > bases.floors[shard]) {
              throw Error(errc::storage,
                          fmt::format("{}/runs: shard {}'s run store holds record {}, past its checkpoint (LSN {}): "
                                      "the run store and the log do not belong together",
                                      root, shard, lsn, bases.floors[shard]));
            }
            load("runs", lsn, bytes, engine::JournalPlace::live);
            return ok();
          });
      if (!stored) {
        throw Error(errc::storage, fmt::format("{}/runs: cannot read shard {}'s journals: {}", root, shard,
                                               stored.error().message()));
      }
    }
    wal::Lsn first = bases.replay_from.empty() ? 1 : bases.replay_from[shard];
    auto read = sink->read(shard, first, [&](wal::Lsn lsn, std::span<const std::byte> bytes) {
      load("wal", lsn, bytes, std::nullopt);
    });
    if (!read) {
      throw Error(errc::storage, fmt::format("{}/wal: cannot read shard {}: {}", root, shard,
                                             read.error().message()));
    }
    shards[shard]->finish_loading();
  }

  // A standby's takeover: a shard leased after open is recovered from the
  // server (its id filter, checkpoint, journals and log) and started; its
  // runs resume under the workflows registered by then.
  void adopt_loop() {
    std::unique_lock lock(adopt_mu);
    for (;;) {
      adopt_cv.wait(lock, [&] { return adopt_stopping || !to_adopt.empty(); });
      if (adopt_stopping) return;
      auto shard = to_adopt.front();
      to_adopt.pop_front();
      if (adopted[shard]) continue;
      adopted[shard] = true;
      lock.unlock();
      try {
        if (auto loaded = remote_store->reload_id_filter(shard_count(), shard); !loaded) {
          throw Error(errc::storage, fmt::format("cannot load shard {}'s id filter: {}", shard,
                                                 loaded.error().message()));
        }
        auto bases = engine::read_checkpoints(*store, shard_count(), root);
        // What the index held of the shard from an earlier lease is stale:
        // another worker ran its runs since.
        index.remove_if([&](const std::string& id) { return shard_of(id) == shard; });
        recover(shard, bases);
        index_stored(shard);
        checkpointer->adopt(shard, bases.keep_from[shard]);
        shards[shard]->start();
        router->set_running(shard);
      } catch (const Error& error) {
        // Its runs stay where they are, in the server's log and store, for
        // the next worker that takes the shard; calls for them wait for it.
        router->release(shard);
        if (warn) {
          warn(fmt::format("cannot take over shard {}: {}; gave its lease back for another worker", shard,
                           error.what()));
        }
      }
      lock.lock();
    }
  }

  void check_open() const {
    if (shut.load()) throw Error(errc::shut_down, "the engine is shut down");
  }

  // Runs fn on the run's shard as an external request; fn settles the
  // promise there. A full queue fails the future with errc::busy at once.
  template <typename T>
  std::future<T> request_async(const std::string& id,
                               std::function<void(engine::Shard&, const std::shared_ptr<detail::Settle<T>>&)> fn) {
    std::promise<T> promise;
    auto future = promise.get_future();
    request_to(std::make_shared<detail::Settle<T>>(std::move(promise)), id, std::move(fn));
    return future;
  }

  // The same, answering `settle` (a promise or an Engine::Then callback).
  template <typename T>
  void request_to(std::shared_ptr<detail::Settle<T>> settle, const std::string& id,
                  std::function<void(engine::Shard&, const std::shared_ptr<detail::Settle<T>>&)> fn) {
    check_open();
    auto& shard = shard_for(id);
    bool posted = shard.post([&shard, settle, fn = std::move(fn)] { fn(shard, settle); }, true);
    if (!posted) {
      check_open();
      settle->set_exception(std::make_exception_ptr(
          Error(errc::busy, fmt::format("shard {} is busy (its request queue is full): nothing was recorded, try "
                                        "again",
                                        shard.id()))));
    }
  }

};

}  // namespace fusee
