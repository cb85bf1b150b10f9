#include "replica/primary_log.hpp"

#include <mutex>
#include <shared_mutex>
#include <utility>

#include "base/assert.hpp"
#include "replica/replica_segments.hpp"
#include "wal/errc.hpp"
#include "wal/limits.hpp"
#include "wal/log_format.hpp"

namespace fusee::replica {

using replication::Seq;
using replication::View;

// The log's sink: each sealed body goes to the core at once (the log seals
// on the loop thread only: seal_pending), and a published batch's body is
// read back through the replica's store, checked against its chain. An
// engine may hold the log past this PrimaryLog: the sink is detached then,
// and reads nothing more.
class PrimaryLog::Sink : public wal::ReplicatedSink {
 public:
  explicit Sink(PrimaryLog& owner) : owner_(&owner) {}
  void detach() {
    std::unique_lock lock(mu_);  // waits for the reads and wakes under way
    owner_ = nullptr;
  }
  void sealed(std::uint64_t sequence, std::vector<std::byte> body) override {
    // On the loop thread, from seal(): the owner is alive.
    PrimaryLog& owner = *owner_;
    std::string text(reinterpret_cast<const char*>(body.data()), body.size());
    const bool clients = !owner.hooks_.configure;
    const wal::Lsn first = clients ? first_lsn_in_body(text, 0) : 0;
    const wal::Lsn last = clients ? last_lsn_in_body(text, 0) : 0;
    if (owner.refused_ || !owner.hooks_.propose(sequence, std::move(text))) {
      owner.refused_ = true;  // and every later batch: they follow this one
      return;
    }
    if (last > 0) owner.batches_[last] = {first, sequence};
  }
  Result<std::vector<std::byte>> read_body(std::uint64_t sequence) override {
    std::shared_lock lock(mu_);  // an engine's appends (staged) do not wait for the disk read
    std::lock_guard one_at_a_time(read_mu_);
    if (owner_ == nullptr) return make_error_code(wal::errc::closed);
    const replication::Entry entry = FUSEE_TRY(owner_->store_.read(sequence));
    const auto* bytes = reinterpret_cast<const std::byte*>(entry.payload.data());
    return std::vector<std::byte>(bytes, bytes + entry.payload.size());
  }
  void staged() override {
    std::shared_lock lock(mu_);
    if (owner_ == nullptr || !owner_->hooks_.staged) return;
    if (!owner_->seal_wanted_.exchange(true)) owner_->hooks_.staged();
  }

 private:
  std::shared_mutex mu_;  // shared: reads and wakes, from any thread; detach takes it alone
  PrimaryLog* owner_;     // null once detached
  std::mutex read_mu_;    // reads one at a time, as the store's reader
};

PrimaryLog::PrimaryLog(io::FileSystem& fs, std::string dir, ReplicaStore& store, PrimaryLogHooks hooks)
    : fs_(fs),
      dir_(std::move(dir)),
      store_(store),
      hooks_(std::move(hooks)),
      // The body of a batch may take the payload a replica's batch carries,
      // and no more (the store refuses a larger one, and so would a backup).
      batch_bytes_max_(std::min<std::size_t>(wal::kBatchBytesMax,
                                             store.payload_bytes_max() / wal::kBlockBytes * wal::kBlockBytes)),
      sink_(std::make_shared<Sink>(*this)) {}

PrimaryLog::~PrimaryLog() {
  close();
  for (auto& [opening, opener] : openers_) opener.join();
  sink_->detach();
}

void PrimaryLog::open(View view, Seq log_end, Seq published) {
  if (view_ == view) return;
  close();
  // An earlier opening still reading goes on on its own thread (its result
  // is thrown away): the loop must not wait for a whole log's read.
  view_ = view;
  published_ = published;
  const std::uint64_t opening = ++opening_;
  wal::LogOptions options;
  options.dir = dir_;
  options.view = view;
  options.sink = sink_;
  options.sink_thread = false;
  options.sink_published_sequence = published;
  options.batch_bytes_max = batch_bytes_max_;
  options.handoff_bytes_max = batch_bytes_max_;
  options.staged_bytes_max = wal::kBatchBytesMax;
  options.warn = [post = hooks_.post, warn = hooks_.warn](const std::string& line) {
    post([warn, line] { warn(line); });
  };
  openers_[opening] = std::thread([this, opening, log_end, options = std::move(options)]() mutable {
    Result<std::unique_ptr<wal::Log>> log = make_error_code(wal::errc::closed);
    if (auto configured = hooks_.configure ? hooks_.configure(options) : ok(); !configured) {
      log = configured.error();
    } else {
      wal::RecoveryPlan plan;
      log = wal::Log::open(fs_, std::move(options), &plan);
      // What recovery refused, said: "recovery refused" alone names no file.
      if (!log && plan.refused && hooks_.warn) {
        hooks_.post([warn = hooks_.warn, why = plan.refusal] { warn("the log's recovery refused: " + why); });
      }
    }
    auto shared = std::make_shared<Result<std::unique_ptr<wal::Log>>>(std::move(log));
    hooks_.post([this, opening, log_end, shared] { adopt(opening, std::move(*shared), log_end); });
  });
}

void PrimaryLog::adopt(std::uint64_t opening, Result<std::unique_ptr<wal::Log>> log, Seq log_end) {
  // Its thread posted this as its last act: it ends at once.
  if (auto opener = openers_.find(opening); opener != openers_.end()) {
    opener->second.join();
    openers_.erase(opener);
  }
  if (opening != opening_ || view_ == 0) {
    if (log) (void)(*log)->close();  // its view ended while it read
    return;
  }
  if (!log) {
    view_ = 0;
    hooks_.opened(log.error());
    return;
  }
  if ((*log)->recovery_plan().last_sequence != log_end) {
    // The files hold another log than the core: a bug, or a disk that lies.
    (void)(*log)->close();
    view_ = 0;
    hooks_.opened(make_error_code(StoreErrc::unreadable_batch));
    return;
  }
  log_ = std::move(*log);
  refused_ = false;
  led_ = false;
  batches_.clear();
  if (!hooks_.configure) {
    log_->set_durable_hook([this](wal::ShardId shard, wal::Lsn lsn) {
      if (shard == 0) hooks_.published(lsn);
    });
  }
  hooks_.opened(ok());
  lead_once_published();
}

void PrimaryLog::lead_once_published() {
  if (!hooks_.lead || led_ || !tail_published()) return;
  led_ = true;
  hooks_.lead(view_, log_, log_->recovery_plan().last_sequence);
}

Result<wal::Lsn> PrimaryLog::append(std::span<const std::byte> record) {
  FUSEE_ASSERT(log_ != nullptr, "append to a primary log that is not open");
  if (hooks_.configure) return make_error_code(wal::errc::invalid_argument);  // the engine's log
  // A record no batch takes is refused by the log (errc::record_too_large).
  return log_->append(0, record);
}

bool PrimaryLog::seal() {
  // Before sealing: a record staged from here on asks for the next seal.
  seal_wanted_ = false;
  if (!log_) return true;
  log_->seal_pending();
  return !refused_;
}

bool PrimaryLog::tail_published() const {
  return log_ != nullptr && published_ >= log_->recovery_plan().last_sequence;
}

void PrimaryLog::publish_through(Seq seq) {
  if (!log_) return;
  published_ = std::max(published_, seq);
  log_->publish_through(seq);
  lead_once_published();
  // What the durable hook replied to is done with.
  const wal::Lsn durable = log_->durable_lsn(0);
  batches_.erase(batches_.begin(), batches_.upper_bound(durable));
}

Seq PrimaryLog::batch_of(wal::Lsn lsn) const {
  const auto at = batches_.lower_bound(lsn);
  return at == batches_.end() || at->second.first > lsn ? 0 : at->second.second;
}

void PrimaryLog::close() {
  const View ended = std::exchange(view_, 0);
  ++opening_;
  if (!log_) return;
  log_->step_down(make_error_code(wal::errc::closed));
  (void)log_->close();
  log_.reset();
  batches_.clear();
  if (std::exchange(led_, false)) hooks_.stepped_down(ended);
}

}  // namespace fusee::replica
