// The shared log as a replicated log's primary (LogOptions::sink; the plan
// in docs/replication.md, "The plan for the replica over the shared log",
// step 3): it seals batches as ever -- group commit, shards' sections,
// atomic groups -- and hands each body to the replica instead of writing
// it; a batch is published to its waiters once the replica says a quorum
// holds it (publish_through), never on the primary's own flush. Part of
// class Log (wal/log.hpp).
#include <algorithm>
#include <map>
#include <vector>

#include "base/assert.hpp"
#include "wal/errc.hpp"
#include "wal/log.hpp"

namespace fusee::wal {

Result<std::unique_ptr<Log>> Log::open_as_primary(io::FileSystem& fs, LogOptions options, RecoveryPlan* plan_out) {
  // A replica's directory, written by the replica: the log seals only.
  if (options.view == 0) return make_error_code(errc::invalid_argument);
  options.payload_offload_bytes = 0;
  options.inline_writes = false;
  options.prepare_segments = false;
  options.track_published = false;
  // The replica's own recovery has made its files whole (it cuts a damaged
  // tail, durably, before it serves); here they are only read.
  auto plan = FUSEE_TRY(plan_recovery(fs, io::join_path(options.dir, "wal"), options.shard_count, options.base,
                                      options.list_batches, /*replica_files=*/true));
  if (plan_out != nullptr) *plan_out = plan;
  if (plan.refused || plan.fresh) return make_error_code(errc::recovery_refused);
  if (!plan.replicated) return make_error_code(errc::invalid_argument);
  std::unique_ptr<Log> log(new Log(fs, std::move(options), std::move(plan)));
  log->hold_unpublished_tail();
  if (log->options_.sink_thread) log->writers_.emplace_back([raw = log.get()] { raw->sink_loop(); });
  return log;
}

void Log::hold_unpublished_tail() {
  std::lock_guard lock(mu_);
  const std::uint64_t published = std::min(options_.sink_published_sequence, plan_.last_sequence);
  // The stages go on after the whole log (the constructor set them); only
  // what counts as durable goes back to the quorum's part.
  for (ShardId shard = 0; shard < options_.shard_count; ++shard) {
    Lsn floor = shard < options_.base.shard_lsn_floors.size() ? options_.base.shard_lsn_floors[shard] : 0;
    durable_lsns_[shard] = floor;
    index_[shard].clear();
  }
  std::map<std::uint64_t, std::unique_ptr<Write>> tail;
  for (const auto& section : plan_.sections) {
    if (section.sequence <= published) {
      durable_lsns_[section.shard] =
          std::max(durable_lsns_[section.shard], section.first_lsn + section.record_count - 1);
      index_[section.shard].push_back(section);
      continue;
    }
    auto& write = tail[section.sequence];
    if (!write) {
      write = std::make_unique<Write>();
      write->sequence = section.sequence;
      write->batch_bytes = section.batch_bytes;
    }
    write->sections.push_back({section.shard, section.record_count, 0});
    write->first_lsns.push_back(section.first_lsn);
    write->records += section.record_count;
  }
  published_sequence_ = published;
  for (auto& [sequence, write] : tail) in_flight_.push_back(std::move(write));
}

Result<void> Log::close_as_primary() {
  // No marker (the replica's files are the replica's), and nothing to wait
  // for: what was sealed and not published stays unacknowledged.
  std::error_code earlier;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return make_error_code(errc::closed);
    closing_ = true;
    stopping_ = true;
    earlier = poison_;
    // Nothing is published from here on, even if the core's word comes.
    if (!poison_) poison_locked(make_error_code(errc::closed));
  }
  work_cv_.notify_all();
  wake_all_waiters();
  for (auto& writer : writers_) writer.join();
  writers_.clear();
  if (earlier) return earlier;
  return ok();
}

void Log::sink_loop() {
  io::AlignedBuffer buffer;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || poison_ || has_work_locked(); });
      if (stopping_ || poison_) return;
    }
    std::unique_lock seal_lock(seal_mu_);
    std::shared_ptr<io::File> file;
    Write* write = nullptr;
    (void)seal_next(file, buffer, write);  // hands the batch to the sink (hand_to_sink)
  }
}

void Log::seal_pending() {
  FUSEE_ASSERT(options_.sink && !options_.sink_thread, "seal_pending is for a sink's owner that seals");
  std::unique_lock seal_lock(seal_mu_);
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_ || poison_ || !has_work_locked()) return;
    }
    std::shared_ptr<io::File> file;
    Write* write = nullptr;
    (void)seal_next(file, sink_buffer_, write);  // hands the batch to the sink (hand_to_sink)
  }
}

void Log::hand_to_sink(BatchPlan& batch, std::vector<Lsn>& first_lsns, std::uint64_t records, std::uint32_t flags,
                       std::span<const std::byte> body, std::uint32_t total_bytes) {
  auto pending = std::make_unique<Write>();
  const std::uint64_t sequence = next_sequence_++;
  pending->sequence = sequence;
  pending->sections = std::move(batch.sections);
  pending->first_lsns = std::move(first_lsns);
  pending->batch_bytes = total_bytes;
  pending->records = records;
  pending->flags = flags;
  {
    // In flight before the sink has it: a publication that comes back at
    // once finds it.
    std::lock_guard lock(mu_);
    if (stopping_ || poison_) return;  // its records' waiters are told the error
    in_flight_.push_back(std::move(pending));
  }
  // Under seal_mu_ still: the sink takes the bodies in sequence order.
  options_.sink->sealed(sequence, std::vector<std::byte>(body.begin(), body.end()));
}

void Log::publish_through(std::uint64_t sequence) {
  FUSEE_ASSERT(options_.sink, "publish_through is a replicated log's");
  // One at a time: complete() frees each write it publishes, so a second
  // caller must not hold pointers collected before it ran.
  std::lock_guard publishing(publish_mu_);
  std::vector<Write*> published;
  {
    std::lock_guard lock(mu_);
    if (poison_ || stopping_) return;
    for (const auto& write : in_flight_) {
      if (write->sequence <= sequence && !write->done) published.push_back(write.get());
    }
  }
  // complete() publishes in sequence order, each once: a publication that
  // comes twice (or out of order) finds them done.
  for (Write* write : published) complete(write, ok());
}

void Log::step_down(std::error_code error) {
  std::lock_guard lock(mu_);
  poison_locked(error);
}

Result<void> Log::read_through_sink(std::span<const SectionLocation> sections, ShardId shard, Lsn first, Lsn last,
                                    const std::function<void(Lsn, std::span<const std::byte>)>& visit) {
  std::vector<SectionView> decoded;
  for (const auto& location : sections) {
    const std::vector<std::byte> body = FUSEE_TRY(options_.sink->read_body(location.sequence));
    if (decode_body_sections(body, decoded)) return make_error_code(errc::corrupt);
    bool found = false;
    for (const auto& section : decoded) {
      if (section.header.shard != shard || section.header.first_lsn != location.first_lsn) continue;
      if (section.records.size() != location.record_count) return make_error_code(errc::corrupt);
      found = true;
      for (std::size_t r = 0; r < section.records.size(); ++r) {
        const Lsn lsn = section.header.first_lsn + r;
        // A replica holds no blob area, so no record is a reference.
        if (section.blob_refs[r]) return make_error_code(errc::corrupt);
        if (lsn >= first && lsn <= last) visit(lsn, section.records[r]);
      }
    }
    if (!found) return make_error_code(errc::corrupt);
  }
  return ok();
}

}  // namespace fusee::wal
