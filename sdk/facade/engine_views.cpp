// The client calls that read runs: get, list, the index's queries and
// counts, finished runs page by page, the activity history; and the
// engine's time codec (to_ms, from_ms).
#include "sdk/facade/engine_impl.hpp"

namespace fusee {

RunInfo facade::run_info_of(const engine::FinishedRun& finished) {
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

namespace {

bool in_time_range(const RunInfo& run, const RunFilter& filter) {
  if (!filter.finished_from && !filter.finished_to) return true;
  if (!run.finished_at) return false;
  if (filter.finished_from && *run.finished_at < *filter.finished_from) return false;
  if (filter.finished_to && *run.finished_at >= *filter.finished_to) return false;
  return true;
}

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

std::optional<RunInfo> Engine::get_run(const std::string& id) {
  if (auto led = impl_->led()) return led->get_run(id);
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
                    promise->set_value(shard.handle_get(id, &facade::run_info_of));
                  })
      .get();
}

bool Engine::has_workflow(const std::string& name) const {
  if (impl_->replica_host) return impl_->replica_host->has_workflow(name);
  std::shared_lock lock(impl_->registry_mu);
  auto found = impl_->registry.find(name);
  return found != impl_->registry.end() && !found->second.versions.empty();
}

std::vector<RunInfo> Engine::list_runs(const RunFilter& filter) {
  if (auto led = impl_->led()) return led->list_runs(filter);
  impl_->check_open();
  Impl::refuse_on_shard_thread("list_runs");
  std::vector<std::future<std::vector<RunInfo>>> parts;
  // By id: a replica's backup has no shards of its own.
  for (std::uint32_t id = 0; id < impl_->shard_count(); ++id) {
    if (!impl_->here(id)) {
      // Another worker's shard (the primary's, on a backup): its runs in
      // memory, from it.
      parts.push_back(impl_->forward_as<std::vector<RunInfo>>(
          id, boost::json::object{{"op", "list"}, {"filter", remote::forwarded::filter_json(filter)}},
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
    auto& shard = impl_->shards[id];
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
        if (!in_memory.contains(finished.id)) runs.push_back(facade::run_info_of(finished));
      }
      if (page->next_cursor.empty()) break;
      query.cursor = page->next_cursor;
    }
  }
  std::erase_if(runs, [&](const RunInfo& run) { return !in_time_range(run, filter); });
  std::sort(runs.begin(), runs.end(), [](const RunInfo& a, const RunInfo& b) { return a.id < b.id; });
  return runs;
}

RunListPage Engine::query_runs(const RunListQuery& query) {
  if (auto led = impl_->led()) return led->query_runs(query);
  impl_->check_open();
  Impl::refuse_on_shard_thread("query_runs");
  if (impl_->replica_host) {
    // A backup keeps no run index: the primary's engine answers from its
    // own (sdk/facade/engine_wide_calls.hpp).
    return impl_->forward_as<RunListPage>(
                    0, boost::json::object{{"op", "query_runs"}, {"query", remote::forwarded::list_query_json(query)}},
                    remote::Repeat::yes, remote::kHolderPatience,
                    [](const boost::json::object& answer) {
                      if (!answer.contains("page")) throw Error(errc::storage, "a forwarded query without its page");
                      return remote::forwarded::list_page_of(answer.at("page"));
                    })
        .get();
  }
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

std::vector<ActivitySample> Engine::activity() const {
  if (impl_->replica_host) {
    auto led = impl_->replica_host->engine_if_any();
    return led ? led->activity() : std::vector<ActivitySample>{};
  }
  return impl_->activity.samples();
}

std::array<std::uint64_t, kRunStatuses.size()> Engine::count_runs() {
  using Counts = std::array<std::uint64_t, kRunStatuses.size()>;
  if (auto led = impl_->led()) return led->count_runs();
  impl_->check_open();
  if (impl_->replica_host) {
    // The primary's index counts them (a backup keeps none).
    return impl_->forward_as<Counts>(
                    0, boost::json::object{{"op", "count_runs"}}, remote::Repeat::yes, remote::kHolderPatience,
                    [](const boost::json::object& answer) {
                      const auto* counts = answer.if_contains("counts");
                      if (counts == nullptr || !counts->is_array() || counts->as_array().size() != kRunStatuses.size()) {
                        throw Error(errc::storage, "forwarded counts that are not one per status");
                      }
                      Counts out{};
                      for (std::size_t k = 0; k < out.size(); ++k) {
                        const auto& count = counts->as_array()[k];
                        if (!count.is_uint64() && !count.is_int64()) throw Error(errc::storage, "a forwarded count is no number");
                        out[k] = count.to_number<std::uint64_t>();
                      }
                      return out;
                    })
        .get();
  }
  if (impl_->all_here()) return impl_->index.counts_by_status();
  std::array<std::uint64_t, kRunStatuses.size()> counts{};
  for (const auto& run : list_runs()) ++counts[static_cast<std::size_t>(run.status)];
  return counts;
}

RunPage Engine::list_finished_runs(const RunFilter& filter, std::size_t limit, const std::string& cursor) {
  if (auto led = impl_->led()) return led->list_finished_runs(filter, limit, cursor);
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
    for (const auto& finished : found->runs) page.runs.push_back(facade::run_info_of(finished));
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
