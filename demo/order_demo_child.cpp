#include "demo/order_demo_child.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <coroutine>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "demo/backoffice.hpp"
#include "demo/order_events.hpp"
#include "demo/order_workflow.hpp"
#include "demo/replicated_order_demo.hpp"
#include "fusee/engine.hpp"
#include "fusee/error.hpp"

namespace fusee::cli {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

constexpr int kReportFd = 3;
// Small log segments, so that the demo's runs cross segment rolls (and a
// kill lands in one now and then).
constexpr std::uint64_t kSegmentBytes = 1u << 20;
// Frequent checkpoints, so that kills land around them too, finished orders
// are answered from the run store, and a standby (remote mode) recovers from
// checkpoints and the log's tail.
constexpr auto kCheckpointInterval = 100ms;
// The payment service and the warehouse answer after a few milliseconds,
// which leaves room for a kill between a step's call and its durable result.
constexpr int kServiceLatencyMinMs = 2;
constexpr int kServiceLatencyMaxMs = 15;
// Packing takes this much longer than the other services' calls.
constexpr auto kPackingExtra = 20ms;
// New orders arrive this far apart, so a life's work is spread over time.
constexpr auto kStartGap = 10ms;
// How often the payment provider tries a confirmation the engine refused
// for now (busy) before it reports a failure.
constexpr int kConfirmAttemptsMax = 50;
// Making the audit schedule, or declaring the packing queue, again after an
// answer that left it unknown whether the first took effect.
constexpr int kScheduleAttemptsMax = 100;
constexpr auto kScheduleRetryPause = 100ms;

// Writes report lines to the parent. Each line is one write(2) of less than
// PIPE_BUF bytes: atomic on a pipe, so it survives a SIGKILL whole or not at
// all and never interleaves with another thread's line. Thread-safe.
class Reporter {
 public:
  explicit Reporter(int fd) : fd_(fd) {}

  void send(std::string line) const {
    if (line.size() > PIPE_BUF) {
      line.resize(PIPE_BUF - 1);
      line.back() = '\n';  // the parent flags the cut line as malformed
    }
    for (;;) {
      auto wrote = ::write(fd_, line.data(), line.size());
      if (wrote == static_cast<ssize_t>(line.size())) return;
      if (wrote < 0 && errno == EINTR) continue;
      _exit(5);  // the parent is gone (or the pipe broke): nobody to report to
    }
  }

 private:
  int fd_;
};

// The workflow's outside world: reports each step execution to the parent
// (that line is the call to the service), and answers each call after a
// latency of its own on one service thread. The payment provider lives here
// too: it confirms a charge by completing the run's awakeable, after a
// latency, on the same thread, and the parent hands a confirmation not yet
// acknowledged to the next life, which sends it again (a provider retrying
// its webhook). Thread-safe.
class OutsideWorld final : public OrderServices, public BackofficeServices {
 public:
  explicit OutsideWorld(const Reporter& reporter) : reporter_(reporter), thread_([this] { serve(); }) {}

  // The engine the payment provider completes awakeables on; nullptr waits
  // for a completion under way to return, then holds the others back until
  // an engine is set again.
  void set_engine(Engine* engine) {
    std::unique_lock lock(engine_mutex_);
    engine_ = engine;
  }
  // Replicated mode, before the final life: a confirmation refused
  // unavailable (this replica no longer leads) is dropped, as the driver's
  // calls are; the next life's provider sends it again.
  void set_droppable(bool droppable) { droppable_ = droppable; }

  void request_payment(const std::string& order_id, const std::string& token, const std::string& key) override {
    reporter_.send(pay_line(order_id, token, key));
    confirm_later(order_id, token, key, 0);
  }

  // A confirmation an earlier life did not see acknowledged.
  void confirm_again(const std::string& order_id, const std::string& token, const std::string& key) {
    confirm_later(order_id, token, key, 0);
  }
  ~OutsideWorld() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();  // calls still unanswered are dropped with the process
  }

  void step_running(const std::string& order_id, std::string_view step, const StepContext& context) override {
    auto now = std::chrono::system_clock::now().time_since_epoch();
    reporter_.send(
        ran_line(order_id, step, std::chrono::duration_cast<std::chrono::milliseconds>(now).count(), context.key()));
  }

  void answer_later(const std::string& order_id, std::string_view step, std::coroutine_handle<> waiter) override {
    // Packing takes longer than the orders come, so packs wait in their
    // queue and its bound is what holds them back.
    auto latency = latency_of(order_id + std::string(step));
    if (step == kPackStep) latency += kPackingExtra;
    at(latency, [waiter] { waiter.resume(); });
  }

  void packing(const std::string& pack_id, bool done) override {
    auto now = std::chrono::steady_clock::now().time_since_epoch();
    reporter_.send(pack_line(pack_id, done, ::getpid(), std::chrono::duration_cast<std::chrono::microseconds>(now).count()));
  }
  void audited(const std::string& run_id) override {
    auto now = std::chrono::system_clock::now().time_since_epoch();
    reporter_.send(audit_line(run_id, std::chrono::duration_cast<std::chrono::milliseconds>(now).count()));
  }

 private:
  static std::chrono::milliseconds latency_of(const std::string& what) {
    std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a: a latency per order and step
    for (unsigned char c : what) hash = (hash ^ c) * 0x100000001b3ULL;
    return std::chrono::milliseconds(kServiceLatencyMinMs +
                                     static_cast<int>(hash % (kServiceLatencyMaxMs - kServiceLatencyMinMs + 1)));
  }

  void at(std::chrono::milliseconds latency, std::function<void()> fn) {
    {
      std::lock_guard lock(mutex_);
      due_.emplace(std::chrono::steady_clock::now() + latency, std::move(fn));
    }
    wake_.notify_all();
  }

  void confirm_later(const std::string& order_id, const std::string& token, const std::string& key, int attempt) {
    at(latency_of(order_id + "/payment"), [this, order_id, token, key, attempt] {
      std::shared_lock lock(engine_mutex_);
      if (engine_ == nullptr) {
        // Between engines (the final life closes its engine and opens it
        // again for its check): later, not dropped -- no next life would
        // send it again. A process going away takes it along.
        lock.unlock();
        confirm_later(order_id, token, key, attempt);
        return;
      }
      try {
        engine_->complete_awakeable(token, key);
        reporter_.send(paid_line(order_id, key));
      } catch (const Error& error) {
        // Finished already (an earlier confirmation took effect): nothing
        // to confirm. Busy or a shard going: try again a little later.
        if (error.error() == errc::shut_down) return;
        if (error.error() == errc::unavailable && droppable_) {
          reporter_.send(dropped_line(order_id + " payment", error.what()));
          return;
        }
        if (error.error() == errc::not_found) {
          // Any other not_found leaves the run waiting for a confirmation
          // that will not come: said on stderr, so that a run that then
          // never ends names its cause (issue 38).
          if (std::string_view(error.what()).find("has finished") == std::string_view::npos)
            std::fprintf(stderr, "fusee demo: the payment provider's confirmation for %s was refused: %s\n",
                         order_id.c_str(), error.what());
          return;
        }
        if (attempt + 1 < kConfirmAttemptsMax) {
          lock.unlock();
          confirm_later(order_id, token, key, attempt + 1);
        } else {
          reporter_.send(failed_line(order_id, fmt::format("confirming its payment: {}", error.what())));
        }
      }
    });
  }

  void serve() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (due_.empty()) {
        wake_.wait(lock);
        continue;
      }
      auto next = due_.begin();
      if (next->first > std::chrono::steady_clock::now()) {
        wake_.wait_until(lock, next->first);
        continue;
      }
      auto fn = std::move(next->second);
      due_.erase(next);
      lock.unlock();
      fn();  // a step finishes (the engine takes it from here), or a payment is confirmed
      lock.lock();
    }
  }

  const Reporter& reporter_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> due_;  // guarded by mutex_
  bool stopping_ = false;                                                            // guarded by mutex_
  std::shared_mutex engine_mutex_;
  Engine* engine_ = nullptr;  // guarded by engine_mutex_
  std::atomic<bool> droppable_{false};
  std::thread thread_;  // last: starts once the rest exists
};

// What the parent knew when this life began.
struct KnownState {
  std::set<std::string> started, signalled, finished, updated, enqueued;
  // Replicated mode: set by the parent when it makes this replica a life's
  // driver (the replica was started before it knew which life).
  std::optional<std::uint32_t> allow;
  bool final = false;
  struct Payment {
    std::string token, key;
  };
  std::map<std::string, Payment> unconfirmed;  // payments requested and not acknowledged
};

KnownState read_known_state(int fd) {
  std::string text;
  char buffer[4096];
  for (;;) {
    auto got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
  }
  KnownState known;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    if (line == kFinalStateLine) known.final = true;
    if (line.starts_with(kAllowStatePrefix)) {
      known.allow = static_cast<std::uint32_t>(std::stoul(std::string(line.substr(kAllowStatePrefix.size()))));
    }
    auto space = line.find(' ');
    if (space != std::string_view::npos) {
      auto verb = line.substr(0, space);
      std::string id(line.substr(space + 1));
      if (verb == "started") known.started.insert(id);
      if (verb == "signalled") known.signalled.insert(id);
      if (verb == "finished") known.finished.insert(id);
      if (verb == "updated") known.updated.insert(id);
      if (verb == "enqueued") known.enqueued.insert(id);
      if (verb == "pay") {
        // "pay ID TOKEN KEY"
        auto rest = std::string_view(id);
        auto first = rest.find(' ');
        auto second = first == std::string_view::npos ? first : rest.find(' ', first + 1);
        if (second != std::string_view::npos) {
          known.unconfirmed[std::string(rest.substr(0, first))] =
              KnownState::Payment{std::string(rest.substr(first + 1, second - first - 1)),
                                  std::string(rest.substr(second + 1))};
        }
      }
    }
    start = end + 1;
  }
  return known;
}

// The packing queue, declared by every life. Declaring it again is safe
// (the queue's run is attached to, its options set again), so an answer
// that leaves it unknown whether the declaration took effect
// (errc::unavailable: in split mode the queue's shard may be the partner's,
// and the server can go mid-call) is met by declaring again -- as
// make_audit_schedule does. A stress run saw a life's worker end at its
// open this way while the server restarted (issue 38).
void declare_packing_queue(Engine& engine) {
  for (int attempt = 1;; ++attempt) {
    try {
      engine.queue(std::string(kPackingQueue), QueueOptions{.concurrency = kPackingConcurrency});
      return;
    } catch (const Error& error) {
      if (error.error() != errc::unavailable || attempt == kScheduleAttemptsMax) throw;
    }
    std::this_thread::sleep_for(kScheduleRetryPause);
  }
}

Config demo_config(const OrderDemoOptions& options) {
  if (options.replicated) {
    auto config = Config::replicated(options.dir, options.etcd, std::string(kDemoCluster), options.replica_id,
                                     options.replicas);
    config.shards = kDemoShards;
    // A failover within about a second of the primary's SIGKILL.
    config.etcd_lease_ttl = 1s;
    config.replica_tick = 5ms;
    // What a replica warns of (a view change, a peer that does not
    // answer) goes to a file beside its directory, not the demo's output.
    const std::string warn_path = options.dir + ".log";
    config.warn = [warn_path](const std::string& line) {
      if (FILE* file = std::fopen(warn_path.c_str(), "a")) {
        std::fprintf(file, "%s\n", line.c_str());
        std::fclose(file);
      }
    };
    return config;
  }
  auto config = options.server.empty() ? Config::local(options.dir) : Config::remote(options.server);
  config.segment_bytes = kSegmentBytes;
  return config;
}

// Replicated mode: until the parent hands this replica a life (its state,
// on stdin), it reports its role whenever it changes: the parent makes the
// primary the life's driver.
void report_role_until_state(Engine& engine, const Reporter& reporter) {
  reporter.send(std::string(kReadyLine) + "\n");
  std::string reported;
  for (;;) {
    pollfd input{STDIN_FILENO, POLLIN, 0};
    if (::poll(&input, 1, 20) > 0) return;  // the state (or the parent gone: end of file)
    const std::string role = engine.stats().replica.role;
    if (role != reported) {
      reporter.send(fmt::format("{}{}\n", kRoleLinePrefix, role));
      reported = role;
    }
  }
}

std::unique_ptr<Engine> open_engine(const OrderDemoOptions& options, OutsideWorld& world) {
  auto config = demo_config(options);
  config.checkpoint_interval = kCheckpointInterval;
  config.server_shards_max = options.shards_max;
  // The next life's worker is started while this one runs, as a standby: it
  // waits in open until the killed worker's leases come free.
  config.server_open_timeout = std::chrono::milliseconds::zero();
  if (!options.backup.empty()) {
    config.backup_target = options.backup;
    // Often, so that kills land during uploads and snapshots of the run
    // store (and the restores after them start from one).
    config.backup_upload_interval = 50ms;
    config.backup_snapshot_log_bytes = kSegmentBytes / 4;
  }
  auto engine = Engine::open(config);
  // The provider has its engine before any code runs: registering the
  // order workflow replays the runs recovered, and a charge run again there
  // asks for its confirmation at once (issue 38: it came before the engine
  // was set, was dropped as "closing", and the final life waited for it).
  world.set_engine(engine.get());
  const bool patched = options.patched;
  engine->register_workflow(kOrderWorkflow, [&world, patched](Ctx& ctx, Order order) {
    return order_workflow(ctx, std::move(order), world, patched);
  });
  engine->register_workflow(kPackWorkflow, [&world](Ctx& ctx, std::uint32_t index) {
    return pack_workflow(ctx, index, world, world);
  });
  engine->register_workflow(kAuditWorkflow, [&world](Ctx& ctx, int) { return audit_workflow(ctx, world); });
  declare_packing_queue(*engine);
  return engine;
}

// Replicated mode: a call that failed errc::unavailable was not
// acknowledged, and the engine it went to no longer leads (a SIGSTOP deposed
// this replica, or the primary changed under the call): the driver drops
// that work quietly, and the next life's driver does it again from the
// ledger's state. Anywhere else such a failure is reported (the ledger
// counts it as a violation).
// `droppable`: replicated mode, and not the final life (which must finish
// everything). A drop is reported ("dropped ..."): the parent holds it
// against a life whose primary was never replaced.
bool dropped_as_unavailable(bool droppable, const std::exception& error, const Reporter& reporter,
                            std::string_view what) {
  const auto* failure = dynamic_cast<const Error*>(&error);
  if (!droppable || failure == nullptr || failure->error() != errc::unavailable) return false;
  reporter.send(dropped_line(what, failure->what()));
  return true;
}

bool awaits_approval(const json::value& chunk) {
  const auto* object = chunk.if_object();
  const auto* phase = object ? object->if_contains("phase") : nullptr;
  return phase && phase->is_string() && phase->get_string() == "awaiting_approval";
}

// Follows the progress stream of each order it is given on a thread of its
// own (a StreamReader belongs to one thread, and a blocked next() hands over
// a chunk the moment it is durable): reports every chunk, signals the
// order's approval once the order awaits it, and reports the result once
// the stream ends. watch() and wait_until_idle() are thread-safe; the engine
// must outlive the watcher, whose destructor waits for every stream's end.
class ProgressWatcher {
 public:
  ProgressWatcher(Engine& engine, const Reporter& reporter, std::uint64_t seed, std::set<std::string> signalled,
                  std::set<std::string> updated, bool droppable)
      : engine_(engine),
        reporter_(reporter),
        seed_(seed),
        signalled_(std::move(signalled)),
        updated_(std::move(updated)),
        droppable_(droppable) {}

  ~ProgressWatcher() {
    for (auto& thread : threads_) thread.join();
  }

  void watch(std::uint32_t index) {
    std::lock_guard lock(mutex_);
    ++unfinished_;
    threads_.emplace_back([this, index] {
      follow(index);
      std::lock_guard done(mutex_);
      if (--unfinished_ == 0) idle_.notify_all();
    });
  }

  // Blocks until every watched order's stream ended and its result is reported.
  void wait_until_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return unfinished_ == 0; });
  }

 private:
  void follow(std::uint32_t index) {
    const auto id = order_id(index);
    const auto plan = make_plan(seed_, index);
    bool signal_sent = signalled_.contains(id);
    bool update_sent = updated_.contains(id);
    try {
      auto reader = engine_.read_stream(id, std::string(kProgressStream), StreamFrom::earliest());
      while (auto chunk = reader.next()) {
        reporter_.send(chunk_line(id, chunk->offset, chunk->value));
        if (awaits_approval(chunk->value) && !update_sent) {
          // The desk's change of quantity first, then its decision.
          if (auto extra = make_item_change(seed_, index)) send_update(id, *extra);
          update_sent = true;
        }
        if (awaits_approval(chunk->value) && plan != Plan::stay_silent && !signal_sent) {
          send_approval(id, index, plan);
          signal_sent = true;
        }
      }
    } catch (const std::exception& error) {
      if (!dropped_as_unavailable(droppable_, error, reporter_, id))
        reporter_.send(failed_line(id, fmt::format("following its progress stream: {}", error.what())));
      return;
    }
    try {
      reporter_.send(result_line(id, engine_.result_json(id)));
    } catch (const std::exception& error) {
      if (!dropped_as_unavailable(droppable_, error, reporter_, id))
        reporter_.send(failed_line(id, fmt::format("result: {}", error.what())));
    }
  }

  // Sent with the same update id in every life: a repeat after a kill that
  // took the answer gets the same answer, and adds nothing again.
  void send_update(const std::string& id, std::uint32_t extra) {
    auto update_id = id + "/add_items";
    json::object answer;
    try {
      answer = {{"status", "completed"}, {"items", engine_.update(id, kAddItemsUpdate, extra, update_id)}};
    } catch (const Error& error) {
      if (error.error() == errc::rejected) {
        answer = {{"status", "rejected"}};
      } else if (error.error() == errc::not_found) {
        answer = {{"status", "not_found"}};  // the order finished while no life was there
      } else if (error.error() == errc::failed) {
        answer = {{"status", "failed"}};  // decided before the code took it
      } else {
        throw;
      }
    }
    reporter_.send(updated_line(id, update_id, answer));
  }

  void send_approval(const std::string& id, std::uint32_t index, Plan plan) {
    auto approval = make_approval(plan, index);
    // The same id in every life: a signal repeated after a kill that took
    // its acknowledgement is dropped by the engine, not delivered twice.
    auto signal_id = id + "/approval";
    try {
      engine_.signal(id, kApprovalSignal, approval, signal_id);
    } catch (const Error& error) {
      // The run already finished: its wait timed out while no life was
      // there to answer (re-reading history shows the old request).
      if (error.error() == errc::not_found) return;
      throw;
    }
    reporter_.send(signalled_line(id, signal_id, json::value_from(approval)));
  }

  Engine& engine_;
  const Reporter& reporter_;
  const std::uint64_t seed_;
  const std::set<std::string> signalled_;
  const std::set<std::string> updated_;
  const bool droppable_;  // dropped_as_unavailable's
  std::mutex mutex_;
  std::condition_variable idle_;
  std::vector<std::thread> threads_;  // guarded by mutex_
  std::size_t unfinished_ = 0;        // guarded by mutex_
};

// After a clean shutdown and a reopen: every order's whole stream, its
// result, and the engine's list of runs.
void final_check(const OrderDemoOptions& options, Engine& engine, const Reporter& reporter) {
  for (std::uint32_t index = 0; index < options.orders; ++index) {
    auto id = order_id(index);
    try {
      auto reader = engine.read_stream(id, std::string(kProgressStream), StreamFrom::earliest());
      while (auto chunk = reader.next()) reporter.send(final_chunk_line(id, chunk->offset, chunk->value));
      reporter.send(final_end_line(id));
    } catch (const std::exception& error) {
      reporter.send(failed_line(id, fmt::format("re-reading its stream after reopening: {}", error.what())));
    }
    try {
      reporter.send(final_result_line(id, engine.result_json(id)));
    } catch (const std::exception& error) {
      reporter.send(failed_line(id, fmt::format("its result after reopening: {}", error.what())));
    }
  }
  for (std::uint32_t index = 0; index < options.orders; ++index) {
    auto id = pack_id(index);
    try {
      reporter.send(final_result_line(id, engine.result_json(id)));
    } catch (const std::exception& error) {
      reporter.send(failed_line(id, fmt::format("its result after reopening: {}", error.what())));
    }
  }
  for (const auto& run : engine.list_runs()) reporter.send(run_line(run.id, run_status_name(run.status)));
}

// Puts order `index`'s pack run in the packing queue (again, after a life
// that did not see it acknowledged: the queue knows the run's id).
void enqueue_pack(Engine& engine, const Reporter& reporter, std::uint32_t index, bool droppable) {
  auto id = pack_id(index);
  try {
    (void)engine.enqueue(std::string(kPackingQueue), kPackWorkflow, id, index);
  } catch (const std::exception& error) {
    if (!dropped_as_unavailable(droppable, error, reporter, id))
      reporter.send(failed_line(id, fmt::format("enqueue: {}", error.what())));
    return;
  }
  reporter.send(enqueued_line(id));
}

// The audit schedule, made by the first life that gets this far (a later
// one finds it made). Making it is safe to repeat (a second making finds it
// made), so an answer that leaves it unknown whether the first took effect
// (errc::unavailable: the shard's holder or the server went mid-call) is met
// by asking again, as a client of any workflow engine would.
void make_audit_schedule(Engine& engine) {
  for (int attempt = 1;; ++attempt) {
    try {
      engine.schedule(std::string(kAuditSchedule), ScheduleSpec{.every = kAuditEvery}, kAuditWorkflow, 0,
                      ScheduleOptions{.overlap = Overlap::skip});
      return;
    } catch (const Error& error) {
      if (error.error() == errc::already_exists) return;
      if (error.error() != errc::unavailable || attempt == kScheduleAttemptsMax) throw;
    }
    std::this_thread::sleep_for(kScheduleRetryPause);
  }
}

constexpr auto kPackStartWait = std::chrono::seconds(30);

// The final life's end of the back office: the schedule stops (its count of
// runs started reported, for the ledger to hold against list_runs) and is
// deleted, and every pack and audit run is waited for.

void close_backoffice(const OrderDemoOptions& options, Engine& engine, const Reporter& reporter) {
  auto paused = engine.pause_schedule(std::string(kAuditSchedule), "the demo ends");
  reporter.send(audit_schedule_line(kAuditSchedule, paused.started));
  engine.delete_schedule(std::string(kAuditSchedule));
  for (std::uint32_t index = 0; index < options.orders; ++index) {
    // The queue starts each pack as a place frees up: the one after the
    // pack just waited for may be a moment from its start (not_found until
    // then). A pack lost for good still fails, after kPackStartWait.
    const auto give_up = std::chrono::steady_clock::now() + kPackStartWait;
    for (;;) {
      try {
        (void)engine.result_json(pack_id(index));
        break;
      } catch (const Error& error) {
        if (error.error() != errc::not_found || std::chrono::steady_clock::now() >= give_up) throw;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  for (const auto& run : engine.list_runs()) {
    if (audit_due_ms(run.id) && run.status == RunStatus::running) (void)engine.result_json(run.id);
  }
}

}  // namespace

int run_order_demo_child(const OrderDemoOptions& options) {
  // An orphan would wait for a SIGKILL that never comes.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return 5;

  Reporter reporter(kReportFd);
  OutsideWorld world(reporter);  // outlives the engine
  std::unique_ptr<Engine> engine;
  try {
    // First the engine, then what the parent knows: a standby (remote mode)
    // waits here for the leases, and the parent sends the state once the
    // holder is dead and its last reports are in.
    engine = open_engine(options, world);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fusee demo child: the engine did not open on %s: %s\n", options.dir.c_str(), error.what());
    return 3;
  }
  if (options.check_only) {
    // A restored directory: the final check alone.
    final_check(options, *engine, reporter);
    world.set_engine(nullptr);
    engine->shutdown();
    reporter.send(complete_line());
    return 0;
  }
  if (options.partner) {
    // It runs the orders of its shards and answers the other workers'
    // calls for them, until the parent's SIGKILL.
    reporter.send(std::string(kReadyLine) + "\n");
    for (;;) ::pause();
  }
  if (options.replicated) report_role_until_state(*engine, reporter);
  auto known = read_known_state(STDIN_FILENO);
  const bool final = options.final || known.final;
  const bool droppable = options.replicated && !final;
  world.set_droppable(droppable);
  {
    // The payment provider sends again what it never saw acknowledged.
    for (const auto& [id, payment] : known.unconfirmed) world.confirm_again(id, payment.token, payment.key);
    ProgressWatcher watcher(*engine, reporter, options.seed, known.signalled, known.updated, droppable);
    // What earlier lives started and did not see finish: the engine replays
    // those runs; follow them from their first chunk.
    const auto allowed = std::min(known.allow.value_or(options.allow), options.orders);
    for (std::uint32_t index = 0; index < allowed; ++index) {
      auto id = order_id(index);
      if (known.started.contains(id) && !known.finished.contains(id)) watcher.watch(index);
    }
    try {
      make_audit_schedule(*engine);
    } catch (const std::exception& error) {
      reporter.send(failed_line(std::string(kAuditSchedule) + "@", fmt::format("making the schedule: {}", error.what())));
    }
    // Orders started earlier whose pack run was never seen enqueued.
    for (std::uint32_t index = 0; index < allowed; ++index) {
      if (known.started.contains(order_id(index)) && !known.enqueued.contains(pack_id(index))) {
        enqueue_pack(*engine, reporter, index, droppable);
      }
    }
    // A result, once reported, must read the same in every later life.
    for (const auto& id : known.finished) {
      try {
        reporter.send(result_line(id, engine->result_json(id)));
      } catch (const std::exception& error) {
        if (!dropped_as_unavailable(droppable, error, reporter, id))
          reporter.send(failed_line(id, fmt::format("its result, reported in an earlier life: {}", error.what())));
      }
    }
    // New orders, a few milliseconds apart. An order whose start was never
    // acknowledged is started again: the engine attaches if it has the run.
    bool first_start = true;
    for (std::uint32_t index = 0; index < allowed; ++index) {
      auto id = order_id(index);
      if (known.started.contains(id)) continue;
      if (!std::exchange(first_start, false)) std::this_thread::sleep_for(kStartGap);
      try {
        (void)engine->start(kOrderWorkflow, id, make_order(options.seed, index));
      } catch (const std::exception& error) {
        // Deposed: no more starts in this life (the parent ends it).
        if (dropped_as_unavailable(droppable, error, reporter, id)) break;
        std::fprintf(stderr, "fusee demo child: starting %s failed: %s\n", id.c_str(), error.what());
        reporter.send(failed_line(id, fmt::format("start: {}", error.what())));
        _exit(4);  // no clean-up: the watcher's threads may wait for streams that never end
      }
      reporter.send(started_line(id));
      watcher.watch(index);
      enqueue_pack(*engine, reporter, index, droppable);
    }
    if (!final) {
      for (;;) ::pause();  // until the parent's SIGKILL
    }
    watcher.wait_until_idle();
    try {
      close_backoffice(options, *engine, reporter);
    } catch (const std::exception& error) {
      reporter.send(failed_line(std::string(kAuditSchedule) + "@", fmt::format("closing the back office: {}", error.what())));
    }
  }
  try {
    world.set_engine(nullptr);
    engine->shutdown();
    engine.reset();
    engine = open_engine(options, world);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fusee demo child: the engine did not reopen after a clean shutdown: %s\n", error.what());
    return 3;
  }
  final_check(options, *engine, reporter);
  world.set_engine(nullptr);
  engine->shutdown();
  reporter.send(complete_line());
  return 0;
}

}  // namespace fusee::cli
