// Client requests that read runs: stream reads (live or stored), get,
// list, what runs wait on, and journals.
#include "engine/shard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/journal_json.hpp"
#include "engine/kept_journal.hpp"
#include "engine/shard_internal.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"

namespace fusee::engine {

using namespace shard_text;

void Shard::handle_read_stream(const std::string& id, const std::string& stream_name, StreamFrom from,
                               std::shared_ptr<detail::StreamFeed> feed, Reply reply) {
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run: the reader follows it
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  auto found = runs_.find(id);
  if (found == runs_.end()) {
    read_stored_stream(id, stream_name, from, *feed, reply);
    return;
  }
  auto& run = *found->second;
  auto& stream = run.streams[stream_name];
  std::uint64_t start = 0;
  switch (from.kind) {
    case StreamFrom::Kind::earliest: start = 0; break;
    case StreamFrom::Kind::latest: start = stream.chunks.size(); break;
    case StreamFrom::Kind::offset: start = from.offset; break;
  }
  // The shard owns the stream, so history and the live edge join here with
  // nothing in between: no gap, no duplicate.
  for (auto offset = start; offset < stream.durable_count; ++offset) {
    feed->push(StreamChunk{offset, stream.chunks[offset]});
  }
  if (stream.closed || run.finished()) {
    feed->end();
  } else if (storage_error_) {
    feed->end(storage_error_);
  } else {
    stream.readers.push_back(StreamState::Reader{feed, std::max(start, stream.durable_count)});
  }
  reply({}, {});
}

void Shard::read_stored_stream(const std::string& id, const std::string& stream_name, StreamFrom from,
                               detail::StreamFeed& feed, const Reply& reply) {
  auto stored = stored_run(id);
  if (!stored) {
    reply(make_error_code(errc::storage), storage_message(id, stored.error()));
    return;
  }
  if (!*stored) {
    reply(make_error_code(errc::not_found), fmt::format("read_stream: no run '{}'", id));
    return;
  }
  auto streams = store_->streams(id);
  if (!streams) {
    reply(make_error_code(errc::storage), storage_message(id, streams.error()));
    return;
  }
  boost::json::array chunks;
  if (*streams) {
    boost::system::error_code error;
    auto parsed = boost::json::parse(**streams, error);
    if (error || !parsed.is_object()) {
      reply(make_error_code(errc::storage), fmt::format("run '{}': its streams in the run store do not decode", id));
      return;
    }
    if (const auto* stream = parsed.get_object().if_contains(stream_name)) {
      if (stream->is_object() && stream->get_object().contains("chunks")) {
        chunks = stream->get_object().at("chunks").as_array();
      }
    }
  }
  std::uint64_t start = from.kind == StreamFrom::Kind::offset ? from.offset
                        : from.kind == StreamFrom::Kind::latest ? chunks.size()
                                                                : 0;
  for (auto offset = start; offset < chunks.size(); ++offset) feed.push(StreamChunk{offset, chunks[offset]});
  feed.end();  // the run finished: nothing more comes
  reply({}, {});
}

RunInfo Shard::parked_info(const ParkedRun& run) {
  RunInfo info;
  info.id = run.id;
  info.workflow = run.workflow;
  info.status = RunStatus::running;
  info.generation = run.generation;
  info.version = run.version;
  info.started_at = from_ms(run.started_ms);
  info.waiting_on = run.waiting;
  return info;
}

void Shard::handle_waits(const std::vector<std::string>& ids, std::map<std::string, std::vector<PendingCommand>>& out) {
  for (const auto& id : ids) {
    if (auto found = runs_.find(id); found != runs_.end()) out[id] = found->second->waiting_on();
  }
}

void Shard::handle_list(const RunFilter& filter, std::vector<RunInfo>& out) {
  for (auto& [id, run] : runs_) {
    auto info = run->info();
    if (filter.workflow && info.workflow != *filter.workflow) continue;
    if (filter.status && info.status != *filter.status) continue;
    out.push_back(std::move(info));
  }
  if (store_ == nullptr || (filter.status && *filter.status != RunStatus::running)) return;
  // Parked runs are running too, out of memory.
  auto listed = store_->all_parked(id_, [&](const ParkedRun& run) {
    if (runs_.contains(run.id) || (filter.workflow && run.workflow != *filter.workflow)) return;
    out.push_back(parked_info(run));
  });
  if (!listed) fail_storage(listed.error());
}

std::optional<RunInfo> Shard::handle_get(const std::string& id, RunInfo (*from_finished)(const FinishedRun&)) {
  if (auto found = runs_.find(id); found != runs_.end()) return found->second->info();
  if (store_ == nullptr) return std::nullopt;
  auto parked = store_->parked(id_, id);
  if (!parked) {
    fail_storage(parked.error());
    return std::nullopt;
  }
  if (*parked) {
    auto info = parked_info(**parked);
    // A row written before rows kept the version: the index has the one
    // the run had when it parked (in this process).
    if (auto indexed = core_.run_index().get(id);
        info.version == 0 && indexed && indexed->generation == info.generation) {
      info.version = indexed->version;
    }
    return info;
  }
  auto finished = store_->finished(id);
  if (!finished) {
    fail_storage(finished.error());
    return std::nullopt;
  }
  if (*finished) return from_finished(**finished);
  return std::nullopt;
}

void Shard::handle_journal(const std::string& id, std::function<void(std::error_code, std::string)> reply) {
  std::error_code store_error;
  (void)find_run(id, store_error);  // wakes a parked run: its journal comes back with it
  if (store_error) {
    reply(make_error_code(errc::storage), storage_message(id, store_error));
    return;
  }
  // The kept journal (in memory or in the store) as JSON, without secrets.
  auto answer = [&](std::string_view kept) {
    auto records = records_of_kept_journal(kept);
    if (!records) {
      reply(make_error_code(errc::storage), fmt::format("run '{}': its kept journal does not decode", id));
      return;
    }
    reply({}, without_secrets(journal_json(*records)));
  };
  if (auto found = runs_.find(id); found != runs_.end()) {
    if (found->second->journal.empty()) {
      reply(make_error_code(errc::not_found), fmt::format("run '{}': its journal is not kept", id));
      return;
    }
    answer(found->second->journal.stored());
    return;
  }
  if (store_ != nullptr) {
    auto stored = store_->journal_of_finished(id);
    if (!stored) {
      reply(make_error_code(errc::storage), storage_message(id, stored.error()));
      return;
    }
    if (*stored) {
      answer(**stored);
      return;
    }
    auto finished = stored_run(id);
    if (finished && *finished) {
      reply(make_error_code(errc::not_found),
            fmt::format("run '{}' finished, and its journal was not kept (Config::keep_finished_journals)", id));
      return;
    }
  }
  reply(make_error_code(errc::not_found), fmt::format("no run '{}'", id));
}

}  // namespace fusee::engine
