// Engine: the public API over the shards. Routes each request to the shard
// that owns the run (a stable hash of its id), waits for the reply, and turns
// error codes into fusee::Error.
#include "fusee/engine.hpp"
#include "fusee/limits.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
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
#include "sdk/facade/settle.hpp"
#include "wal/io/posix_file_system.hpp"
#include "wal/limits.hpp"
#include "wal/log.hpp"

namespace fusee {
namespace {

RunInfo run_info_of(const engine::FinishedRun& finished);

[[noreturn]] void throw_error(std::error_code error, const std::string& message) {
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

}  // namespace

struct Engine::Impl final : engine::EngineCore {
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
  std::unique_ptr<engine::RunStore> store;  // local and remote mode
  // Config::backup_target: the target and its uploader, after the sink (whose
  // log the uploader reads) and the store (which it snapshots), so they go
  // first.
  std::unique_ptr<backup::BackupTarget> backup_target;
  std::unique_ptr<backup::Uploader> uploader;
  std::vector<std::unique_ptr<engine::Shard>> shards;
  std::unique_ptr<engine::Checkpointer> checkpointer;  // local and remote mode
  std::shared_ptr<Waker> waker = std::make_shared<Waker>();
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
  void index_stored(std::optional<std::uint32_t> shard) {
    if (!store) return;
    engine::RunQuery query;
    query.limit = 1000;
    for (;;) {
      auto page = store->list(query);
      if (!page) throw Error(errc::storage, fmt::format("cannot read the run store: {}", page.error().message()));
      for (const auto& finished : page->runs) {
        if (!shard || shard_of(finished.id) == *shard) index.put_if_absent(run_info_of(finished));
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
    if (warn) {
      warn(fmt::format("the log failed ({}): the shard's runs cannot go on until the engine is reopened; "
                       "the next open recovers everything acknowledged",
                       text));
    }
  }

  std::uint32_t shard_count() const { return static_cast<std::uint32_t>(shards.size()); }

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

namespace {
struct Reply {
  std::error_code error;
  std::string message;
  StartOutcome outcome = StartOutcome::started;
};

void throw_if_failed(const Reply& reply) {
  if (reply.error) throw_error(reply.error, reply.message);
}
}  // namespace

std::unique_ptr<Engine> Engine::open(Config config) {
  auto impl = std::make_unique<Impl>();
  impl->clock = config.clock ? config.clock : system_clock();
  impl->local_limits = std::make_shared<engine::Limiter>([clock = impl->clock] { return clock->now(); },
                                                         [impl = impl.get()](TimePoint at) { impl->arm_limit_poll(at); });
  impl->step_limits = impl->local_limits;
  if (config.random) {
    impl->random_source = config.random;
  } else {
    std::random_device device;
    impl->random_source = [generator = std::mt19937_64((std::uint64_t{device()} << 32) | device())]() mutable {
      return generator();
    };
  }
  if (config.shards > wal::kShardsMax) {
    throw Error(errc::invalid_argument, fmt::format("shards = {}: at most {}", config.shards, wal::kShardsMax));
  }
  auto warn = config.warn ? config.warn
                          : [](const std::string& text) { fmt::print(stderr, "fusee: {}\n", text); };
  impl->warn = warn;
  std::uint32_t shards = config.shards;
  std::string root = config.dir;  // where the store and the log are (for messages)
  engine::ShardBases bases;       // local and remote mode: where each shard's recovery starts
  if (!config.backup_target.empty() && config.mode != Mode::local) {
    throw Error(errc::invalid_argument,
                "backup_target: a backup is for local mode (a server's directory is not backed up yet, and memory mode "
                "has nothing to back up)");
  }
  if (config.mode == Mode::memory) {
    if (shards == 0) shards = std::max(1u, std::thread::hardware_concurrency());
    impl->sink = engine::make_memory_sink(shards);
  } else if (config.mode == Mode::remote) {
    std::string problem;
    std::uint32_t server_shards = 0;
    auto connection = remote::connect_remote_sink(
        remote::RemoteOptions{config.server, config.server_token, fmt::format("pid {}", ::getpid()),
                              config.server_shards_max, config.server_open_timeout, warn},
        &server_shards,
        &problem);
    if (!connection) {
      // Shards others hold past the open's deadline: try again later, or
      // wait longer; anything else is the server's or the connection's.
      throw Error(connection.error() == std::errc::timed_out ? errc::unavailable : errc::storage,
                  fmt::format("remote mode: {}", problem));
    }
    if (shards != 0 && shards != server_shards) {
      throw Error(errc::wrong_shard_count,
                  fmt::format("the server's directory has {} shards, not {}", server_shards, shards));
    }
    shards = server_shards;
    impl->sink = std::move(connection->sink);
    // The server's run store: checkpoints, parked runs and finished runs
    // live there, so a standby taking a shard over finds them.
    root = fmt::format("the server at {}", config.server);
    impl->router = connection->router;
    // Permits come from the server, so a limit holds across its workers.
    impl->step_limits = remote::RemoteLimits::attach(*connection->permits);
    auto store = std::make_unique<remote::RemoteRunStore>(*connection->store);
    impl->remote_store = store.get();
    if (auto loaded = store->load_id_filters(shards); !loaded) {
      throw Error(errc::storage, fmt::format("remote mode: cannot load the run store's id filters: {}",
                                             loaded.error().message()));
    }
    impl->store = std::move(store);
    bases = engine::read_checkpoints(*impl->store, shards, root);
  } else {
    if (config.dir.empty()) throw Error(errc::invalid_argument, "local mode needs a data directory");
    if (config.file_system) {
      impl->fs = config.file_system;
    } else {
      impl->own_fs = std::make_unique<io::PosixFileSystem>();
      impl->fs = impl->own_fs.get();
    }
    const bool backed_up = !config.backup_target.empty();
    wal::LogOptions options;
    options.segment_bytes = config.segment_bytes;
    options.direct_io = config.flush == FlushMethod::direct;
    options.staged_bytes_max = config.log_staged_bytes_max;
    options.payload_offload_bytes = config.payload_offload_bytes;
    options.random = [impl = impl.get()] { return impl->random(); };
    options.warn = warn;
    options.track_published = backed_up;
    options.list_batches = backed_up;
    options.now_ms = [clock = impl->clock] { return engine::to_ms(clock->now()); };
    auto opened = engine::open_data_dir(*impl->fs, config.dir, shards, std::move(options), config.file_system != nullptr);
    impl->lock = std::move(opened.lock);
    shards = opened.shards;
    root = opened.root;
    impl->store = std::move(opened.store);
    bases = std::move(opened.bases);
    wal::Log* log = opened.log.get();
    impl->sink = engine::make_log_sink(std::move(opened.log));
    if (backed_up) {
      auto id = backup::directory_backup_id(*impl->fs, config.dir, [impl = impl.get()] { return impl->random(); });
      if (!id) throw Error(errc::storage, fmt::format("backup: cannot read or make {}/{}: {}", config.dir,
                                                      backup::kDirectoryIdFileName, id.error().message()));
      if (auto recorded = backup::record_backup_target(*impl->fs, config.dir, config.backup_target); !recorded) {
        throw Error(errc::storage, fmt::format("backup: cannot write {}/{}: {}", config.dir,
                                               backup::kBackupTargetFileName, recorded.error().message()));
      }
      std::string target_problem;
      auto target = backup::open_target(*impl->fs, config.backup_target, &target_problem,
                                         backup::MissingDirectory::create);
      if (!target) throw Error(errc::invalid_argument, fmt::format("backup: {}", target_problem));
      impl->backup_target = std::move(*target);
      std::string problem;
      // A journal record says when it was made.
      auto record_time_ms = [](std::span<const std::byte> bytes) -> std::optional<std::int64_t> {
        auto record = engine::decode_record(bytes);
        if (!record || record->at_ms <= 0) return std::nullopt;
        return record->at_ms;
      };
      backup::UploaderOptions options;
      if (config.backup_upload_interval) {
        options.interval = *config.backup_upload_interval;
      } else {
        options.whole_segments = true;  // looked at every second, uploaded once complete
      }
      options.backlog_bytes_max = config.backup_backlog_bytes_max;
      options.warn = warn;
      options.now_ms = [clock = impl->clock] { return engine::to_ms(clock->now()); };
      options.record_time_ms = record_time_ms;
      options.store = impl->store.get();
      options.snapshot_log_bytes = config.backup_snapshot_log_bytes;
      options.snapshot_interval = config.backup_snapshot_interval;
      options.retention = config.backup_retention;
      auto uploader = backup::Uploader::start(*impl->fs, *log, io::join_path(root, "wal"), *impl->backup_target,
                                              backup::Identity{*id, shards}, std::move(options), &problem);
      if (!uploader) {
        throw Error(errc::storage, problem.empty() ? fmt::format("backup: {}", uploader.error().message())
                                                   : fmt::format("backup: {}", problem));
      }
      impl->uploader = std::move(*uploader);
    }
  }
  impl->config = config;
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    impl->shards.push_back(
        std::make_unique<engine::Shard>(*impl, shard, *impl->sink, std::max<std::size_t>(1, config.shard_queue_max)));
    impl->shards.back()->set_store(impl->store.get());
    impl->shards.back()->set_keep_history(config.keep_finished_journals);
  }
  impl->root = root;
  // Recovery: each shard's runs from its checkpoint (the run store's
  // journals), then the log past it, then the timers. In remote mode with
  // the shards split, only the shards this engine holds now; a lease that
  // comes later is adopted.
  std::vector<bool> mine(shards);
  for (std::uint32_t shard = 0; shard < shards; ++shard) mine[shard] = !impl->router || impl->router->leased(shard);
  impl->adopted = mine;
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    if (mine[shard]) impl->recover(shard, bases);
  }
  if (std::all_of(mine.begin(), mine.end(), [](bool here) { return here; })) {
    impl->index_stored(std::nullopt);
  } else {
    for (std::uint32_t shard = 0; shard < shards; ++shard) {
      if (mine[shard]) impl->index_stored(shard);
    }
  }
  if (impl->store) {
    std::vector<engine::Shard*> shard_ptrs;
    for (auto& shard : impl->shards) shard_ptrs.push_back(shard.get());
    engine::CheckpointerOptions options;
    options.interval = config.checkpoint_interval;
    options.finished_retention = config.finished_retention;
    options.now_ms = [clock = impl->clock] { return engine::to_ms(clock->now()); };
    options.expired = [index = &impl->index](std::int64_t before_ms) { index->expire_finished(before_ms); };
    options.warn = warn;
    if (impl->uploader) {
      // No segment retires before the backup holds it.
      options.retire_bound = [uploader = impl->uploader.get()] { return uploader->covered_sequence() + 1; };
    }
    impl->checkpointer = std::make_unique<engine::Checkpointer>(std::move(shard_ptrs), *impl->sink, *impl->store,
                                                                std::move(options), bases.keep_from, mine);
    impl->sink->set_roll_hook([checkpointer = impl->checkpointer.get()](std::uint64_t retires_at) {
      checkpointer->request_lagging(retires_at);
    });
    impl->sink->set_checkpoint_hook(
        [checkpointer = impl->checkpointer.get()](wal::ShardId shard) { checkpointer->request(shard); });
    for (std::uint32_t shard = 0; shard < shards; ++shard) {
      impl->shards[shard]->set_parking(config.park_after, config.run_memory_budget_bytes / shards,
                                       [checkpointer = impl->checkpointer.get(), shard] {
                                         checkpointer->request(shard);
                                       });
    }
  }
  {
    std::lock_guard lock(impl->waker->mu);
    for (auto& shard : impl->shards) impl->waker->shards.push_back(shard.get());
  }
  // Only the shard whose records became durable has something to do.
  impl->sink->set_listener([waker = impl->waker](wal::ShardId shard) { waker->wake(shard); });
  impl->clock->on_advance([waker = std::weak_ptr<Waker>(impl->waker)] {
    if (auto alive = waker.lock()) alive->wake();
  });
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    if (!mine[shard]) continue;
    impl->shards[shard]->start();
    if (impl->router) impl->router->set_running(shard);
  }
  if (impl->checkpointer) impl->checkpointer->start();
  if (impl->router) {
    impl->remote_calls = std::make_unique<remote::RemoteCalls>(*impl->router, impl->shards, &run_info_of);
    impl->adopter = std::thread([impl = impl.get()] { impl->adopt_loop(); });
    impl->router->set_handlers([calls = impl->remote_calls.get()](remote::ShardRouter::Call call) {
                                 calls->serve(std::move(call));
                               },
                               [impl = impl.get()](wal::ShardId shard) {
                                 {
                                   std::lock_guard lock(impl->adopt_mu);
                                   impl->to_adopt.push_back(shard);
                                 }
                                 impl->adopt_cv.notify_all();
                               });
  }
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(impl)));
  // The built-in workflows behind schedules and queues (a recovered run of
  // one starts once it is registered).
  WorkflowRegistration schedule_registration;
  schedule_registration.input = [](const boost::json::value& input) -> std::string {
    try {
      (void)schedule::state_from_json(input);
      return {};
    } catch (const Error& error) {
      return error.what();
    }
  };
  engine->register_workflow_json(schedule::kScheduleWorkflow, &schedule::run_schedule, std::move(schedule_registration));
  WorkflowRegistration queue_registration;
  queue_registration.input = [](const boost::json::value& input) -> std::string {
    try {
      (void)queue::state_from_json(input);
      return {};
    } catch (const Error& error) {
      return error.what();
    }
  };
  engine->register_workflow_json(queue::kQueueWorkflow, &queue::run_queue, std::move(queue_registration));
  if (!config.http_listen.empty()) {
    auto* sink = engine->impl_->sink.get();
    http::HttpApiOptions api_options;
    api_options.token = config.http_token;
    api_options.front_token = [sink] { return sink->front_http_token(); };
    // The rule is here, not only in the CLI: an application that listens
    // beyond loopback with no token serves anyone who reaches the port.
    if (config.http_token.empty() && sink->front_http_token().empty() && !config.http_insecure_no_token &&
        !http::is_loopback_listen(config.http_listen)) {
      throw Error(errc::invalid_argument,
                  fmt::format("Config::http_listen {} is not a loopback address and there is no Config::http_token: "
                              "anyone who reaches it could start, signal and cancel runs. Give a token, listen on "
                              "127.0.0.1, or set Config::http_insecure_no_token",
                              config.http_listen));
    }
    http::HttpServerOptions server_options;
    server_options.body_bytes_max = config.http_body_bytes_max;
    server_options.allowed_hosts = config.http_allowed_hosts;
    engine->impl_->http =
        std::make_unique<http::HttpServer>(*engine, config.http_listen, std::move(api_options), std::move(server_options));
    engine->impl_->sink->announce_http(engine->impl_->http->endpoint());
  }
  // The baseline before any call: everything after it is in a sample.
  engine->impl_->activity.read(std::chrono::system_clock::now(), engine->stats());
  engine->impl_->sampler = std::thread([engine = engine.get()] {
    auto& impl = *engine->impl_;
    std::unique_lock lock(impl.sampler_mu);
    while (!impl.sampler_cv.wait_for(lock, std::chrono::seconds(1), [&] { return impl.sampler_stopping; })) {
      lock.unlock();
      try {
        impl.activity.read(std::chrono::system_clock::now(), engine->stats());
      } catch (const std::exception&) {
        // A reading missed: the next one's sample covers two seconds.
      }
      lock.lock();
    }
  });
  return engine;
}

TimePoint Engine::now() const { return impl_->clock->now(); }

void Engine::limit(const std::string& name, const StepLimit& limit) {
  impl_->check_open();
  if (name.empty()) throw Error(errc::invalid_argument, "a limit needs a name");
  if (!std::isfinite(limit.per_second) || limit.per_second < 0) {
    throw Error(errc::invalid_argument, fmt::format("limit '{}': per_second must be a finite number, 0 or more", name));
  }
  impl_->step_limits->set(name, limit);
}

std::string Engine::http_endpoint() const { return impl_->http ? impl_->http->endpoint() : std::string(); }

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { shutdown(); }

std::uint32_t Engine::shard_count() const { return impl_->shard_count(); }

EngineStats Engine::stats() const {
  auto log = impl_->sink->stats();
  EngineStats stats{log.records_written, log.batches_written, log.inline_writes, log.direct_io};
  static_assert(kFlushLatencyBoundsUs == wal::kFlushLatencyBoundsUs, "one histogram, one set of bounds");
  stats.flush_latency_counts = log.flush_latency_counts;
  stats.flush_latency_sum_us = log.flush_latency_sum_us;
  stats.staged_bytes = log.staged_bytes;
  stats.limits = impl_->step_limits->stats();
  if (impl_->uploader) {
    auto uploader = impl_->uploader->stats();
    stats.backup.enabled = true;
    stats.backup.uploads = uploader.uploads;
    stats.backup.chunks = uploader.chunks;
    stats.backup.bytes = uploader.bytes;
    stats.backup.failures = uploader.failures;
    stats.backup.snapshots = uploader.snapshots;
    stats.backup.snapshot_sequence = uploader.snapshot_sequence;
    stats.backup.snapshot_at = engine::from_ms(uploader.snapshot_at_ms);
    stats.backup.retired_objects = uploader.retired_objects;
    stats.backup.covered_sequence = uploader.covered_sequence;
    stats.backup.covered_at = engine::from_ms(uploader.covered_at_ms);
    stats.backup.pending_batches = uploader.pending_batches;
    stats.backup.blobs = uploader.blobs;
    stats.backup.backlog_bytes = uploader.backlog_bytes;
    stats.backup.backlog_full = uploader.backlog_full;
    stats.backup.connected = uploader.connected;
    stats.backup.stopped = uploader.stopped;
    stats.backup.upload_lag_p50 = std::chrono::milliseconds(uploader.lag_p50_ms);
    stats.backup.upload_lag_p99 = std::chrono::milliseconds(uploader.lag_p99_ms);
    stats.backup.upload_lag_max = std::chrono::milliseconds(uploader.lag_max_ms);
    stats.backup.loss_window = std::chrono::milliseconds(uploader.loss_window_ms);
    stats.backup.error = uploader.error;
  }
  stats.wal_segments = log.segments_live;
  stats.wal_bytes = log.live_bytes;
  if (impl_->checkpointer) {
    auto checkpoints = impl_->checkpointer->stats();
    stats.checkpoints = checkpoints.checkpoints;
    stats.segments_retired = checkpoints.segments_retired;
    stats.run_store_bytes = checkpoints.store_bytes;
    stats.checkpoint_error = checkpoints.error;
  }
  {
    std::lock_guard lock(impl_->storage_error_mu);
    stats.log_error = impl_->storage_error;
  }
  for (std::uint32_t shard = 0; shard < impl_->shard_count(); ++shard) stats.shards_held += impl_->here(shard) ? 1 : 0;
  for (const auto& shard : impl_->shards) {
    stats.runs_parked += shard->stats().runs_parked.load();
    stats.runs_woken += shard->stats().runs_woken.load();
    stats.runs_started += shard->stats().runs_started.load(std::memory_order_relaxed);
    stats.runs_finished += shard->stats().runs_finished.load(std::memory_order_relaxed);
    stats.runs_failed += shard->stats().runs_failed.load(std::memory_order_relaxed);
    stats.steps_completed += shard->stats().steps_completed.load(std::memory_order_relaxed);
  }
  return stats;
}

void Engine::shutdown() {
  Impl::refuse_on_shard_thread("shutdown");
  std::lock_guard lock(impl_->shutdown_mu);
  if (impl_->shut.exchange(true)) return;
  // No new requests, and none left waiting on the shards.
  if (impl_->http) impl_->http->stop();
  if (impl_->sampler.joinable()) {
    {
      std::lock_guard sampler_lock(impl_->sampler_mu);
      impl_->sampler_stopping = true;
    }
    impl_->sampler_cv.notify_all();
    impl_->sampler.join();
  }
  // No more permits: a grant to a stopping shard would free its permit and
  // grant the next, one inside the other, as deep as the line is long.
  impl_->step_limits->close();
  if (impl_->adopter.joinable()) {
    {
      std::lock_guard adopt_lock(impl_->adopt_mu);
      impl_->adopt_stopping = true;
    }
    impl_->adopt_cv.notify_all();
    impl_->adopter.join();
  }
  if (impl_->checkpointer) impl_->checkpointer->stop();
  for (auto& shard : impl_->shards) shard->stop();
  // Remote mode checkpoints while it still holds the leases (close gives
  // them back); the server's log has everything appended by then.
  bool remote = impl_->config.mode == Mode::remote;
  if (remote && impl_->checkpointer && impl_->sink->drain()) (void)impl_->checkpointer->final_checkpoint();
  // Calls for other workers' runs fail with shut_down from here on: those
  // waiting to be sent again now, those still out as the sink closes.
  if (impl_->remote_calls) impl_->remote_calls->stop();
  (void)impl_->sink->close();
  if (impl_->uploader) {
    // After a clean close the backup holds everything, the close marker too.
    if (auto uploaded = impl_->uploader->finish(); !uploaded && impl_->warn) {
      impl_->warn(fmt::format("backup: the last upload at shutdown failed ({}): the backup ends before it; the "
                              "next open uploads the rest",
                              impl_->uploader->stats().error));
    }
  }
  if (impl_->router) impl_->router->set_handlers(nullptr, nullptr);
  {
    std::lock_guard waker_lock(impl_->waker->mu);
    impl_->waker->shards.clear();
  }
  for (auto& shard : impl_->shards) shard->fail_waiters(make_error_code(errc::shut_down));
  // One last checkpoint, so the next open reads little of the log.
  if (impl_->checkpointer && !remote) (void)impl_->checkpointer->final_checkpoint();
  impl_->checkpointer.reset();
  impl_->store.reset();
  impl_->lock.reset();  // the directory is free for the next engine
}

void Engine::checkpoint() {
  impl_->check_open();
  Impl::refuse_on_shard_thread("checkpoint");
  if (!impl_->checkpointer) return;
  if (auto done = impl_->checkpointer->checkpoint_all(); !done) {
    auto stats = impl_->checkpointer->stats();
    throw Error(errc::storage, stats.error.empty() ? fmt::format("checkpoint: {}", done.error().message())
                                                   : fmt::format("checkpoint: {}", stats.error));
  }
}

void Engine::register_workflow_json(const std::string& name, WorkflowFn fn, InputCheck check) {
  WorkflowRegistration registration;
  registration.input = std::move(check);
  register_workflow_json(name, std::move(fn), std::move(registration));
}

void Engine::register_workflow_json(const std::string& name, WorkflowFn fn, WorkflowRegistration registration) {
  impl_->check_open();
  if (registration.version == 0) {
    throw Error(errc::invalid_argument, fmt::format("workflow '{}': versions start at 1", name));
  }
  {
    std::unique_lock lock(impl_->registry_mu);
    auto& registered = impl_->registry[name];
    if (registered.versions.contains(registration.version)) {
      throw Error(errc::invalid_argument, fmt::format("version {} of workflow '{}' is already registered",
                                                      registration.version, name));
    }
    bool newest = registered.versions.empty() || registration.version > registered.versions.rbegin()->first;
    registered.versions.emplace(registration.version, std::make_shared<const WorkflowFn>(std::move(fn)));
    // New runs take the newest version: its input and signals are the ones checked.
    if (newest) {
      registered.input = std::move(registration.input);
      registered.signals.clear();
      for (auto& [signal, signal_check] : registration.signals) registered.signals[signal] = std::move(signal_check);
    }
  }
  for (auto& shard : impl_->shards) {
    (void)shard->post([shard = shard.get(), name] { shard->handle_registered(name); }, false);
  }
}

void Engine::start_to(std::shared_ptr<detail::Settle<StartOutcome>> settle, const std::string& workflow,
                      const std::string& id, boost::json::value input, const StartOptions& options) {
  if (auto why = run_id_problem(id)) throw Error(errc::invalid_argument, *why);
  {
    std::shared_lock lock(impl_->registry_mu);
    if (auto check = impl_->registry.find(workflow); check != impl_->registry.end() && check->second.input) {
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
                             if (!error) {
                               settle->set_value(outcome);
                               return;
                             }
                             try {
                               throw_error(error, message);
                             } catch (...) {
                               settle->set_exception(std::current_exception());
                             }
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
        shard.handle_result(id, [settle](const engine::Outcome& outcome) {
          if (outcome.status == RunStatus::completed) {
            settle->set_value(outcome.value);
          } else {
            settle->set_exception(std::make_exception_ptr(Error(outcome.code, outcome.message)));
          }
        });
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

boost::json::value Engine::result_json(const std::string& id) {
  Impl::refuse_on_shard_thread("result");
  return result_json_async(id).get();
}

namespace {
// A reply that keeps its promise alive: shards answer after the request's
// message is gone (once a record is durable).
std::function<void(std::error_code, std::string)> reply_to(const std::shared_ptr<detail::Settle<Reply>>& promise) {
  return [promise](std::error_code error, std::string message) {
    promise->set_value(Reply{error, std::move(message)});
  };
}
}  // namespace

void Engine::signal_json(const std::string& id, const std::string& signal, boost::json::value value,
                         const std::string& signal_id) {
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
  auto reply = impl_->request_async<Reply>(id, [id, signal, value = std::move(value), signal_id](
                                                   engine::Shard& shard,
                                                   const std::shared_ptr<detail::Settle<Reply>>& promise) mutable {
                      shard.handle_signal(id, signal, std::move(value), signal_id, reply_to(promise));
                    }).get();
  throw_if_failed(reply);
}

void Engine::cancel(const std::string& id, const std::string& reason) {
  impl_->stop_run(id, reason, engine::CancelMode::cancel);
}

void Engine::terminate(const std::string& id, const std::string& reason) {
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
  auto reply = request_async<Reply>(
                   id, [id, reason, mode](engine::Shard& shard, const std::shared_ptr<detail::Settle<Reply>>& promise) {
                     shard.handle_cancel(id, reason, mode, {}, reply_to(promise));
                   })
                   .get();
  throw_if_failed(reply);
}

void Engine::reset(const std::string& id, const ResetPoint& point, const std::string& reason) {
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
  auto reply = impl_->request_async<Reply>(
                        id, [id, point, reason](engine::Shard& shard, const std::shared_ptr<detail::Settle<Reply>>& promise) {
                          shard.handle_reset(id, point, reason, reply_to(promise));
                        })
                   .get();
  throw_if_failed(reply);
}

void Engine::update_to(std::shared_ptr<detail::Settle<boost::json::value>> settle, UpdateCall call) {
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
                                                       throw_error(error, message);
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
  if (answer.error) throw_error(answer.error, answer.text);
  return boost::json::parse(answer.text);
}

std::string Engine::journal_json(const std::string& id) {
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
  if (answer.error) throw_error(answer.error, answer.text);
  return answer.text;
}

StreamReader Engine::read_stream(const std::string& id, const std::string& stream, StreamFrom from) {
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
  auto reply = impl_->request_async<Reply>(id, [id, stream, from, feed](
                                                   engine::Shard& shard,
                                                   const std::shared_ptr<detail::Settle<Reply>>& promise) {
                      shard.handle_read_stream(id, stream, from, feed, reply_to(promise));
                    }).get();
  throw_if_failed(reply);
  return StreamReader(feed);
}

namespace {

RunInfo run_info_of(const engine::FinishedRun& finished) {
  RunInfo info;
  info.id = finished.id;
  info.workflow = finished.workflow;
  info.version = finished.version;
  info.status = finished.status;
  info.generation = finished.generation;
  info.started_at = engine::from_ms(finished.started_ms);
  info.finished_at = engine::from_ms(finished.finished_ms);
  if (finished.status != RunStatus::completed) info.error = finished.message;
  return info;
}

bool in_time_range(const RunInfo& run, const RunFilter& filter) {
  if (!filter.finished_from && !filter.finished_to) return true;
  if (!run.finished_at) return false;
  if (filter.finished_from && *run.finished_at < *filter.finished_from) return false;
  if (filter.finished_to && *run.finished_at >= *filter.finished_to) return false;
  return true;
}

}  // namespace

std::optional<RunInfo> Engine::get_run(const std::string& id) {
  Impl::refuse_on_shard_thread("get_run");
  if (auto shard = impl_->shard_of(id); !impl_->here(shard)) {
    return impl_->forward_as<std::optional<RunInfo>>(shard, boost::json::object{{"op", "get"}, {"id", id}},
                                                     remote::Repeat::yes, remote::kHolderPatience,
                                                     [](const boost::json::object& answer) -> std::optional<RunInfo> {
                                                       if (!answer.contains("run") || answer.at("run").is_null()) {
                                                         return std::nullopt;
                                                       }
                                                       return remote::forwarded::run_info_of(answer.at("run"));
                                                     })
        .get();
  }
  return impl_->request_async<std::optional<RunInfo>>(
                  id,
                  [id](engine::Shard& shard, const std::shared_ptr<detail::Settle<std::optional<RunInfo>>>& promise) {
                    promise->set_value(shard.handle_get(id, &run_info_of));
                  })
      .get();
}

bool Engine::has_workflow(const std::string& name) const {
  std::shared_lock lock(impl_->registry_mu);
  auto found = impl_->registry.find(name);
  return found != impl_->registry.end() && !found->second.versions.empty();
}

std::vector<RunInfo> Engine::list_runs(const RunFilter& filter) {
  impl_->check_open();
  Impl::refuse_on_shard_thread("list_runs");
  std::vector<std::future<std::vector<RunInfo>>> parts;
  for (auto& shard : impl_->shards) {
    if (!impl_->here(shard->id())) {
      // Another worker's shard: its runs in memory, from it.
      parts.push_back(impl_->forward_as<std::vector<RunInfo>>(
          shard->id(), boost::json::object{{"op", "list"}, {"filter", remote::forwarded::filter_json(filter)}},
          remote::Repeat::yes, remote::kHolderPatience, [](const boost::json::object& answer) {
            std::vector<RunInfo> runs;
            if (!answer.contains("runs") || !answer.at("runs").is_array()) {
              throw Error(errc::storage, "a forwarded list without its runs");
            }
            for (const auto& run : answer.at("runs").as_array()) runs.push_back(remote::forwarded::run_info_of(run));
            return runs;
          }));
      continue;
    }
    auto promise = std::make_shared<std::promise<std::vector<RunInfo>>>();
    parts.push_back(promise->get_future());
    bool posted = shard->post(
        [shard = shard.get(), promise, filter] {
          std::vector<RunInfo> runs;
          shard->handle_list(filter, runs);
          promise->set_value(std::move(runs));
        },
        true);
    if (!posted) {
      impl_->check_open();
      throw Error(errc::busy, fmt::format("shard {} is busy (its request queue is full), try again", shard->id()));
    }
  }
  std::vector<RunInfo> runs;
  for (auto& part : parts) {
    auto some = part.get();
    std::move(some.begin(), some.end(), std::back_inserter(runs));
  }
  if (impl_->store && filter.status != RunStatus::running && filter.status != RunStatus::stuck) {
    // Finished runs that left memory, from the run store's index; a run
    // still in memory is the newer of the two.
    std::set<std::string> in_memory;
    for (const auto& run : runs) in_memory.insert(run.id);
    engine::RunQuery query;
    query.workflow = filter.workflow;
    query.status = filter.status;
    if (filter.finished_from) query.finished_from_ms = engine::to_ms(*filter.finished_from);
    if (filter.finished_to) query.finished_to_ms = engine::to_ms(*filter.finished_to);
    query.limit = 1000;
    for (;;) {
      auto page = impl_->store->list(query);
      if (!page) throw Error(errc::storage, fmt::format("list_runs: cannot read the run store: {}",
                                                        page.error().message()));
      for (const auto& finished : page->runs) {
        if (!in_memory.contains(finished.id)) runs.push_back(run_info_of(finished));
      }
      if (page->next_cursor.empty()) break;
      query.cursor = page->next_cursor;
    }
  }
  std::erase_if(runs, [&](const RunInfo& run) { return !in_time_range(run, filter); });
  std::sort(runs.begin(), runs.end(), [](const RunInfo& a, const RunInfo& b) { return a.id < b.id; });
  return runs;
}

namespace {

engine::IndexQuery index_query_of(const RunListQuery& query) {
  engine::IndexQuery out;
  out.status = query.status;
  out.workflow_prefix = query.workflow_prefix;
  out.id_prefix = query.id_prefix;
  if (query.started_from) out.started_from_ms = engine::to_ms(*query.started_from);
  if (query.started_to) out.started_to_ms = engine::to_ms(*query.started_to);
  out.order = query.order == RunListQuery::Order::id       ? engine::IndexQuery::Order::id
              : query.order == RunListQuery::Order::oldest ? engine::IndexQuery::Order::oldest
                                                           : engine::IndexQuery::Order::newest;
  out.limit = std::max<std::size_t>(1, query.limit);
  out.cursor = query.cursor;
  return out;
}

}  // namespace

RunListPage Engine::query_runs(const RunListQuery& query) {
  impl_->check_open();
  Impl::refuse_on_shard_thread("query_runs");
  auto index_query = index_query_of(query);
  engine::IndexPage found;
  if (impl_->all_here()) {
    found = impl_->index.query(index_query);
  } else {
    // The other workers' runs are theirs to index: a scan, made an index
    // for the one page.
    engine::RunIndex every;
    std::map<std::string, std::vector<PendingCommand>> waits;
    for (auto& run : list_runs()) {
      if (!run.waiting_on.empty()) waits[run.id] = std::move(run.waiting_on);
      every.put(run);
    }
    found = every.query(index_query);
    for (auto& run : found.runs) {
      if (auto wait = waits.find(run.id); wait != waits.end()) run.waiting_on = std::move(wait->second);
    }
  }
  if (impl_->all_here()) impl_->fill_waiting_on(found.runs);
  return RunListPage{std::move(found.runs), std::move(found.next_cursor), std::move(found.previous_cursor),
                     found.total, found.total_exact};
}

std::vector<ActivitySample> Engine::activity() const { return impl_->activity.samples(); }

std::array<std::uint64_t, kRunStatuses.size()> Engine::count_runs() {
  impl_->check_open();
  if (impl_->all_here()) return impl_->index.counts_by_status();
  std::array<std::uint64_t, kRunStatuses.size()> counts{};
  for (const auto& run : list_runs()) ++counts[static_cast<std::size_t>(run.status)];
  return counts;
}

RunPage Engine::list_finished_runs(const RunFilter& filter, std::size_t limit, const std::string& cursor) {
  impl_->check_open();
  if (filter.status == RunStatus::running || filter.status == RunStatus::stuck) {
    throw Error(errc::invalid_argument, fmt::format("list_finished_runs: status {} is not a finished status",
                                                    run_status_name(*filter.status)));
  }
  limit = std::max<std::size_t>(1, limit);
  RunPage page;
  if (impl_->store) {
    engine::RunQuery query;
    query.workflow = filter.workflow;
    query.status = filter.status;
    if (filter.finished_from) query.finished_from_ms = engine::to_ms(*filter.finished_from);
    if (filter.finished_to) query.finished_to_ms = engine::to_ms(*filter.finished_to);
    query.limit = limit;
    query.cursor = cursor;
    auto found = impl_->store->list(query);
    if (!found) {
      throw Error(errc::storage, fmt::format("list_finished_runs: cannot read the run store: {}",
                                             found.error().message()));
    }
    for (const auto& finished : found->runs) page.runs.push_back(run_info_of(finished));
    page.next_cursor = found->next_cursor;
    return page;
  }
  // Memory mode: every run is in memory; the cursor is the last run's
  // finish time and id.
  auto all = list_runs(filter);
  std::erase_if(all, [](const RunInfo& run) { return !run.finished_at; });
  auto key = [](const RunInfo& run) { return std::make_pair(engine::to_ms(*run.finished_at), run.id); };
  std::sort(all.begin(), all.end(), [&](const RunInfo& a, const RunInfo& b) { return key(a) < key(b); });
  std::pair<std::int64_t, std::string> after{INT64_MIN, {}};
  if (!cursor.empty()) {
    auto colon = cursor.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      after = {std::stoll(cursor.substr(0, colon)), cursor.substr(colon + 1)};
    } catch (const std::exception&) {
      throw Error(errc::invalid_argument, fmt::format("list_finished_runs: '{}' is not a cursor it gave", cursor));
    }
  }
  for (auto& run : all) {
    if (!cursor.empty() && key(run) <= after) continue;
    if (page.runs.size() == limit) {
      auto last = key(page.runs.back());
      page.next_cursor = fmt::format("{}:{}", last.first, last.second);
      break;
    }
    page.runs.push_back(std::move(run));
  }
  return page;
}

namespace engine {
std::int64_t to_ms(TimePoint time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}
TimePoint from_ms(std::int64_t ms) {
  return TimePoint{std::chrono::duration_cast<TimePoint::duration>(std::chrono::milliseconds(ms))};
}
}  // namespace engine

}  // namespace fusee
