#include "remote/remote_run_store.hpp"

#include "engine/run_hash.hpp"
#include "wal/errc.hpp"

namespace fusee::remote {

using engine::Checkpoint;
using engine::FinishedRun;
using engine::IdFilter;
using engine::JournalPlace;
using engine::ParkedRun;
using engine::RunPage;
using engine::RunQuery;
using engine::shard_of;
using protocol::StoreCall;
using protocol::StoreOp;
using protocol::decode_checkpoint;
using protocol::decode_finished;
using protocol::decode_journal_row;
using protocol::decode_optional;
using protocol::decode_parked;
using protocol::decode_u64;

namespace {

// Rows per parked_by_wake call: the shard usually wants only the first few.
constexpr std::uint32_t kWakeRowsPerCall = 256;

std::error_code malformed() { return make_error_code(wal::errc::corrupt); }

// The error a failed reply stands for here: the log's own codes for damage
// and for a store write fenced off (a lease another worker holds now).
std::error_code store_reply_error(const protocol::StoreReply& reply) {
  if (reply.error.empty()) return {};
  if (reply.error == "corrupt") return make_error_code(wal::errc::corrupt);
  if (reply.error == "read_only") return std::make_error_code(std::errc::read_only_file_system);
  if (reply.error == "no_space") return std::make_error_code(std::errc::no_space_on_device);
  if (reply.error == "fenced") return make_error_code(wal::errc::closed);
  if (reply.error == "bad_request") return std::make_error_code(std::errc::invalid_argument);
  return std::make_error_code(std::errc::io_error);
}

}  // namespace

Result<std::vector<std::byte>> RemoteRunStore::call(StoreCall call, std::vector<std::vector<std::byte>>* rows) {
  auto reply = FUSEE_TRY(channel_.store_call(std::move(call), rows));
  if (auto error = store_reply_error(reply)) return error;
  return std::move(reply.value);
}

bool RemoteRunStore::may_hold(std::string_view id) {
  std::lock_guard lock(filters_mu_);
  if (filters_.empty() || filters_[shard_of(id, static_cast<std::uint32_t>(filters_.size()))].may_contain(id)) {
    return true;
  }
  ++lookups_saved_;
  return false;
}

Result<std::vector<IdFilter>> RemoteRunStore::fetch_id_filters(std::uint32_t shard_count) {
  StoreCall request;
  request.op = StoreOp::id_filters;
  request.limit = shard_count;
  std::vector<std::vector<std::byte>> rows;
  FUSEE_TRY_VOID(call(std::move(request), &rows));
  if (rows.size() != shard_count) return malformed();
  std::vector<IdFilter> filters;
  for (const auto& row : rows) {
    auto filter = IdFilter::decode(row);
    if (!filter) return malformed();
    filters.push_back(std::move(*filter));
  }
  return filters;
}

Result<void> RemoteRunStore::load_id_filters(std::uint32_t shard_count) {
  auto filters = fetch_id_filters(shard_count);
  if (!filters) return filters.error();
  std::lock_guard lock(filters_mu_);
  filters_ = std::move(*filters);
  return ok();
}

Result<void> RemoteRunStore::reload_id_filter(std::uint32_t shard_count, std::uint32_t shard) {
  auto filters = fetch_id_filters(shard_count);
  if (!filters) return filters.error();
  std::lock_guard lock(filters_mu_);
  if (shard >= shard_count || filters_.size() != shard_count) return malformed();
  filters_[shard] = std::move((*filters)[shard]);
  return ok();
}

Result<void> RemoteRunStore::stored_ids(const std::function<void(std::string_view)>&) {
  return std::make_error_code(std::errc::operation_not_supported);
}

Result<void> RemoteRunStore::write(Batch batch) {
  {
    // Before the write goes out: once it is in the store, a lookup of these
    // ids must ask.
    std::lock_guard lock(filters_mu_);
    if (!filters_.empty()) {
      for (const auto& id : batch.stored_ids()) {
        filters_[shard_of(id, static_cast<std::uint32_t>(filters_.size()))].add(id);
      }
    }
  }
  StoreCall request;
  request.op = StoreOp::write;
  for (auto shard : batch.shards()) request.epochs.emplace_back(shard, 0);
  request.batch = batch.encode();
  auto value = FUSEE_TRY(call(std::move(request)));
  auto size = decode_u64(value);
  if (!size) return malformed();
  size_bytes_ = *size;
  return ok();
}

template <typename T, typename Decode>
Result<std::optional<T>> RemoteRunStore::call_optional(StoreCall request, Decode decode) {
  auto value = FUSEE_TRY(call(std::move(request)));
  auto present = decode_optional(value);
  if (!present) return malformed();
  if (!*present) return std::optional<T>();
  std::optional<T> decoded = decode(std::span<const std::byte>(**present));
  if (!decoded) return malformed();
  return decoded;
}

Result<std::optional<FinishedRun>> RemoteRunStore::finished(const std::string& id) {
  if (!may_hold(id)) return std::optional<FinishedRun>();
  StoreCall request;
  request.op = StoreOp::finished;
  request.id = id;
  return call_optional<FinishedRun>(std::move(request), decode_finished);
}

Result<RunPage> RemoteRunStore::list(const RunQuery& query) {
  StoreCall request;
  request.op = StoreOp::list;
  request.query = query;
  std::vector<std::vector<std::byte>> rows;
  auto value = FUSEE_TRY(call(std::move(request), &rows));
  RunPage page;
  page.next_cursor.assign(reinterpret_cast<const char*>(value.data()), value.size());
  for (const auto& row : rows) {
    auto run = decode_finished(row);
    if (!run) return malformed();
    page.runs.push_back(std::move(*run));
  }
  return page;
}

Result<std::optional<Checkpoint>> RemoteRunStore::checkpoint(std::uint32_t shard) {
  StoreCall request;
  request.op = StoreOp::checkpoint;
  request.shard = shard;
  return call_optional<Checkpoint>(std::move(request), decode_checkpoint);
}

Result<std::optional<std::string>> RemoteRunStore::journal_of_finished(const std::string& id) {
  StoreCall request;
  request.op = StoreOp::journal_of_finished;
  request.id = id;
  return call_optional<std::string>(std::move(request), [](std::span<const std::byte> bytes) {
    return std::optional<std::string>(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  });
}

Result<std::optional<std::string>> RemoteRunStore::streams(const std::string& id) {
  StoreCall request;
  request.op = StoreOp::streams;
  request.id = id;
  return call_optional<std::string>(std::move(request), [](std::span<const std::byte> bytes) {
    return std::optional<std::string>(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  });
}

Result<void> RemoteRunStore::visit_journal_rows(StoreCall request, const JournalVisitor& visit) {
  // The rows arrive whole before any is visited: a call cut short by a
  // reconnect is made again, and must not visit a record twice.
  std::vector<std::vector<std::byte>> rows;
  FUSEE_TRY_VOID(call(std::move(request), &rows));
  for (const auto& bytes : rows) {
    auto row = decode_journal_row(bytes);
    if (!row) return malformed();
    FUSEE_TRY_VOID(visit(row->id, row->lsn, row->record));
  }
  return ok();
}

Result<void> RemoteRunStore::load_journals(std::uint32_t shard, const JournalVisitor& visit) {
  StoreCall request;
  request.op = StoreOp::load_journals;
  request.shard = shard;
  return visit_journal_rows(std::move(request), visit);
}

Result<void> RemoteRunStore::read_journal(JournalPlace place, std::uint32_t shard, const std::string& id,
                                          const JournalVisitor& visit) {
  StoreCall request;
  request.op = StoreOp::read_journal;
  request.place = place;
  request.shard = shard;
  request.id = id;
  return visit_journal_rows(std::move(request), visit);
}

Result<std::optional<ParkedRun>> RemoteRunStore::parked(std::uint32_t shard, const std::string& id) {
  // A parked run sits under the shard its id hashes to.
  if (!may_hold(id)) return std::optional<ParkedRun>();
  StoreCall request;
  request.op = StoreOp::parked;
  request.shard = shard;
  request.id = id;
  return call_optional<ParkedRun>(std::move(request), decode_parked);
}

Result<void> RemoteRunStore::parked_by_wake(std::uint32_t shard, std::int64_t from_ms,
                                            const std::function<bool(const ParkedRun&)>& visit) {
  // Page by page: each call starts after the last run seen (its wake time
  // and id, the order of the store's index).
  std::string after_id;
  for (;;) {
    StoreCall request;
    request.op = StoreOp::parked_by_wake;
    request.shard = shard;
    request.ms = from_ms;
    request.id = after_id;
    request.limit = kWakeRowsPerCall;
    std::vector<std::vector<std::byte>> rows;
    FUSEE_TRY_VOID(call(std::move(request), &rows));
    for (const auto& row : rows) {
      auto run = decode_parked(row);
      if (!run || !run->wake_ms) return malformed();
      if (!visit(*run)) return ok();
      from_ms = *run->wake_ms;
      after_id = run->id;
    }
    if (rows.size() < kWakeRowsPerCall) return ok();
  }
}

Result<void> RemoteRunStore::all_parked(std::uint32_t shard, const std::function<void(const ParkedRun&)>& visit) {
  StoreCall request;
  request.op = StoreOp::all_parked;
  request.shard = shard;
  std::vector<std::vector<std::byte>> rows;
  FUSEE_TRY_VOID(call(std::move(request), &rows));
  for (const auto& row : rows) {
    auto run = decode_parked(row);
    if (!run) return malformed();
    visit(*run);
  }
  return ok();
}

Result<std::size_t> RemoteRunStore::expire_finished(std::int64_t before_ms) {
  StoreCall request;
  request.op = StoreOp::expire_finished;
  request.ms = before_ms;
  auto value = FUSEE_TRY(call(std::move(request)));
  auto expired = decode_u64(value);
  if (!expired) return malformed();
  return static_cast<std::size_t>(*expired);
}

}  // namespace fusee::remote
