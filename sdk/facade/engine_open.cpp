// Engine::open wires the engine of each mode (memory, local, remote):
// the log or the log service, the run store, the shards, the checkpointer,
// the backup and the HTTP front; shutdown takes them down in order. Also
// the clock, a checkpoint on demand and workflow registration.
#include "sdk/facade/engine_impl.hpp"
#include "sdk/facade/primary_router.hpp"

namespace fusee {

namespace facade {

// The built-in workflows behind schedules and queues (a recovered run of
// one starts once it is registered).
void register_builtins(Engine& engine) {
  // Each checks its input by reading it as its state.
  auto checked_by = [](auto read_state) {
    WorkflowRegistration registration;
    registration.input = [read_state](const boost::json::value& input) -> std::string {
      try {
        (void)read_state(input);
        return {};
      } catch (const Error& error) {
        return error.what();
      }
    };
    return registration;
  };
  engine.register_workflow_json(schedule::kScheduleWorkflow, &schedule::run_schedule,
                                checked_by([](const boost::json::value& input) { return schedule::state_from_json(input); }));
  engine.register_workflow_json(queue::kQueueWorkflow, &queue::run_queue,
                                checked_by([](const boost::json::value& input) { return queue::state_from_json(input); }));
}

}  // namespace facade

std::unique_ptr<Engine> Engine::open(Config config) { return Impl::open(std::move(config), nullptr); }

std::unique_ptr<Engine> facade::open_engine_over_log(Config config, LogOver over) {
  return Engine::Impl::open(std::move(config), &over);
}

void facade::serve_forwarded(Engine& engine, remote::ShardRouter::Call call) {
  Engine::Impl::serve_forwarded(engine, std::move(call));
}

namespace {

// Why an answer says errc::unavailable (an error, or a run's outcome that
// did not complete), if it does.
std::optional<std::string> unavailable_in(std::span<const std::byte> body) {
  auto answer = remote::forwarded::from_bytes(body);
  if (!answer) return std::nullopt;
  if (auto failure = remote::forwarded::error_of(*answer); failure && failure->error() == errc::unavailable) {
    return std::string(failure->what());
  }
  if (const auto* outcome = answer->if_contains("outcome"); outcome != nullptr && outcome->is_object()) {
    const auto& fields = outcome->as_object();
    const auto* code = fields.if_contains("code");
    const auto* status = fields.if_contains("status");
    const auto* message = fields.if_contains("message");
    if (code != nullptr && code->is_string() && code->as_string() == errc_name(errc::unavailable) &&
        status != nullptr && status->is_string() && status->as_string() != run_status_name(RunStatus::completed)) {
      return message != nullptr && message->is_string() ? std::string(message->as_string()) : std::string();
    }
  }
  return std::nullopt;
}

}  // namespace

void Engine::Impl::serve_forwarded(Engine& engine, remote::ShardRouter::Call call) {
  Impl* impl = engine.impl_.get();
  // A view's engine whose log stepped down tells its waiters
  // errc::unavailable: the call's outcome is the next primary's to tell,
  // and the caller is told it is unknown ({"unknown": why},
  // sdk/facade/primary_router.hpp) rather than given this answer. Replies
  // come from the engine's shards, while it is alive.
  call.reply = [impl, reply = std::move(call.reply)](bool last, std::vector<std::byte> body) {
    if (last && impl->sink->poison() == make_error_code(errc::unavailable)) {
      if (auto why = unavailable_in(body)) body = remote::forwarded::to_bytes(boost::json::object{{"unknown", *why}});
    }
    reply(last, std::move(body));
  };
  impl->remote_calls->serve(std::move(call));
}

std::unique_ptr<Engine> Engine::Impl::open(Config config, facade::LogOver* over) {
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
  if (config.mode == Mode::replicated) {
    if (over != nullptr) throw Error(errc::invalid_argument, "an engine over a replica's log runs as a local engine does");
    config.warn = warn;
    return open_replicated(std::move(impl), std::move(config));
  }
  std::uint32_t shards = config.shards;
  std::string root = config.dir;  // where the store and the log are (for messages)
  engine::ShardBases bases;       // local and remote mode: where each shard's recovery starts
  if (over != nullptr && config.mode != Mode::local) {
    throw Error(errc::invalid_argument, "an engine over a replica's log runs as a local engine does");
  }
  if (!config.backup_target.empty() && over != nullptr) {
    throw Error(errc::invalid_argument,
                "backup_target: a replica's directory is not backed up yet (its replicas are its copies)");
  }
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
  } else if (over != nullptr) {
    // The replica's: its run store and its log (the replica holds the lock).
    shards = over->shards;
    root = over->root;
    impl->store = std::move(over->store);
    bases = std::move(over->bases);
    if (over->log == nullptr || impl->store == nullptr || over->log->shard_count() < shards) {
      throw Error(errc::invalid_argument, "an engine over a replica's log needs the log, with its shards");
    }
    impl->sink = engine::make_replicated_log_sink(std::move(over->log), shards);
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
    impl->shards.back()->set_first_step_ahead(config.first_step_ahead);
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
  // The finished runs join the index after open returns (fill_index,
  // below): at a million runs, reading them took seconds. Pages and counts
  // wait for them meanwhile.
  const bool fill_index = std::all_of(mine.begin(), mine.end(), [](bool here) { return here; });
  if (fill_index) {
    impl->index.begin_fill();
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
  impl->clock->on_advance([waker = std::weak_ptr<facade::Waker>(impl->waker)] {
    if (auto alive = waker.lock()) alive->wake();
  });
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    if (!mine[shard]) continue;
    impl->shards[shard]->start();
    if (impl->router) impl->router->set_running(shard);
  }
  if (impl->checkpointer) impl->checkpointer->start();
  if (impl->router) {
    impl->remote_calls = std::make_unique<remote::RemoteCalls>(*impl->router, impl->shards, &facade::run_info_of);
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
  } else if (over != nullptr) {
    // A view's engine serves the calls other replicas' applications
    // forward to it (sdk/facade/primary_router.hpp).
    impl->serving_router = std::make_unique<facade::ServeEveryShard>();
    impl->remote_calls = std::make_unique<remote::RemoteCalls>(*impl->serving_router, impl->shards, &facade::run_info_of);
  }
  if (fill_index) impl->index_fill = std::thread([impl = impl.get()] { impl->fill_index(); });
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(impl)));
  facade::register_builtins(*engine);
  Impl::start_http(*engine, config, [sink = engine->impl_->sink.get()] { return sink->front_http_token(); });
  if (engine->impl_->http) engine->impl_->sink->announce_http(engine->impl_->http->endpoint());
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

void Engine::Impl::start_http(Engine& engine, const Config& config, std::function<std::string()> front_token) {
  if (config.http_listen.empty()) return;
  http::HttpApiOptions api_options;
  api_options.token = config.http_token;
  api_options.front_token = front_token;
  // The rule is here, not only in the CLI: an application that listens
  // beyond loopback with no token serves anyone who reaches the port.
  if (config.http_token.empty() && front_token().empty() && !config.http_insecure_no_token &&
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
  engine.impl_->http =
      std::make_unique<http::HttpServer>(engine, config.http_listen, std::move(api_options), std::move(server_options));
}

TimePoint Engine::now() const { return impl_->clock->now(); }

void Engine::limit(const std::string& name, const StepLimit& limit) {
  impl_->check_open();
  if (name.empty()) throw Error(errc::invalid_argument, "a limit needs a name");
  if (!std::isfinite(limit.per_second) || limit.per_second < 0) {
    throw Error(errc::invalid_argument, fmt::format("limit '{}': per_second must be a finite number, 0 or more", name));
  }
  // Replicated mode: checked here, so each view's engine takes it.
  if (impl_->replica_host) return impl_->replica_host->limit(name, limit);
  impl_->step_limits->set(name, limit);
}

std::string Engine::http_endpoint() const { return impl_->http ? impl_->http->endpoint() : std::string(); }

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { shutdown(); }

std::uint32_t Engine::shard_count() const {
  return impl_->replica_host ? impl_->replica_host->shard_count() : impl_->shard_count();
}

EngineStats Engine::stats() const {
  if (impl_->replica_host) {
    // A backup's: nothing runs here (shards_held 0).
    auto led = impl_->replica_host->engine_if_any();
    auto stats = led ? led->stats() : EngineStats{};
    stats.replica = impl_->replica_host->replica_stats();
    return stats;
  }
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
    stats.steps_run_ahead += shard->stats().steps_run_ahead.load(std::memory_order_relaxed);
  }
  return stats;
}

void Engine::shutdown() {
  Impl::refuse_on_shard_thread("shutdown");
  std::lock_guard lock(impl_->shutdown_mu);
  if (impl_->shut.exchange(true)) return;
  if (impl_->replica_host) {
    // Calls out to the primary fail with shut_down first -- those waiting to
    // be sent again, then those sent -- so that an HTTP request waiting on
    // one lets the listener stop; then no new requests; then the replica
    // stops, and its view's engine with it; the store the lists read last.
    impl_->remote_calls->stop();
    impl_->replica_host->router().stop();
    if (impl_->http) impl_->http->stop();
    impl_->replica_host->stop();
    impl_->store.reset();
    return;
  }
  // The index fill first: it stops at its next page and releases what
  // waits on it (a list on an HTTP thread, which stopping HTTP joins).
  if (impl_->index_fill.joinable()) {
    impl_->index_fill_stop = true;
    impl_->index_fill.join();
  }
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
  // A replica's log that stepped down (its poison stays, and closing a
  // replicated sink leaves it alone): the runs go on on the next primary,
  // and their callers are told so.
  const bool stepped_down = impl_->sink->poison() == make_error_code(errc::unavailable);
  for (auto& shard : impl_->shards) {
    shard->fail_waiters(make_error_code(stepped_down ? errc::unavailable : errc::shut_down));
  }
  // One last checkpoint, so the next open reads little of the log (not
  // through a log that stepped down: the next primary checkpoints).
  if (impl_->checkpointer && !remote && !stepped_down) (void)impl_->checkpointer->final_checkpoint();
  impl_->checkpointer.reset();
  impl_->store.reset();
  impl_->lock.reset();  // the directory is free for the next engine
}

void Engine::checkpoint() {
  // The primary's engine checkpoints (a backup's says where it is).
  if (impl_->replica_host) {
    impl_->check_open();
    return impl_->replica_host->engine()->checkpoint();
  }
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
  if (impl_->replica_host) {
    impl_->check_open();
    if (registration.version == 0) {
      throw Error(errc::invalid_argument, fmt::format("workflow '{}': versions start at 1", name));
    }
    impl_->replica_host->register_workflow(name, fn, registration);
    return;
  }
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

}  // namespace fusee
