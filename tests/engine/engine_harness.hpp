// Shared by the engine API tests: an Engine in memory mode, in local mode
// on a fresh directory, or in remote mode against a `fusee server` log
// service (server/log_service.hpp) the harness runs on a Unix socket, on a ManualClock and a counting random source, plus
// bounded waits so that an engine that never answers fails a test instead of
// hanging the suite. Not thread-safe; one harness per test. The harness must
// outlive every engine it opened (its destructor shuts them down), and state
// a workflow captures by reference must outlive the harness.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fusee/fusee.hpp"
#include "server/log_service.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::testing {

using namespace std::chrono_literals;

// How long a call the engine should answer promptly may take before the test
// calls the engine hung. Generous: ASan builds share two cores.
inline constexpr std::chrono::seconds kPatience{30};
// How long the test gives the engine to react to a clock move before moving
// the clock again (see advance_until).
inline constexpr std::chrono::milliseconds kReactionTime{20};
inline constexpr int kMaxClockMoves = 2000;

// The two modes every API test runs in (TEST_CASE_TEMPLATE parameters).
struct InMemory {
  static constexpr Mode mode = Mode::memory;
};
struct OnDisk {
  static constexpr Mode mode = Mode::local;
};
struct Remote {
  static constexpr Mode mode = Mode::remote;
};

// The first value of the harness's random source; it counts up from here.
inline constexpr std::uint64_t kRandomStart = 1'000'000;

class EngineHarness {
 public:
  // server_segment_bytes: remote mode's log segments (local mode's are the
  // engine's Config::segment_bytes).
  explicit EngineHarness(Mode mode, std::uint32_t shards = 2, std::uint64_t server_segment_bytes = 64u << 20)
      : mode_(mode), shards_(shards), clock_(std::make_shared<ManualClock>()) {
    random_next_->store(kRandomStart);
    if (mode == Mode::remote) {
      server::LogServiceOptions options;
      options.dir = dir_.sub("data");
      options.listen = "unix:" + dir_.sub("server.sock");
      options.shards = shards;
      options.direct_io = false;
      options.segment_bytes = server_segment_bytes;
      options.log = [](const std::string&) {};
      server_ = server::LogService::open(server_fs_, options);
    }
  }
  ~EngineHarness() {
    for (auto& engine : engines_) {
      try {
        engine->shutdown();
      } catch (const std::exception& error) {
        FAIL_CHECK("shutdown threw: " << error.what());
      }
    }
  }
  EngineHarness(const EngineHarness&) = delete;
  EngineHarness& operator=(const EngineHarness&) = delete;

  // A fresh configuration for this harness: same directory, clock and random
  // source every time, buffered flushes so local mode stays fast.
  Config config() const {
    Config config = mode_ == Mode::memory   ? Config::memory()
                    : mode_ == Mode::remote ? Config::remote("unix:" + dir_.sub("server.sock"))
                                            : Config::local(dir_.sub("data"));
    config.shards = shards_;
    config.flush = FlushMethod::buffered;
    config.clock = clock_;
    config.random = [next = random_next_] { return next->fetch_add(1); };
    return config;
  }

  std::shared_ptr<Engine> open() { return open(config()); }
  std::shared_ptr<Engine> open(Config config) {
    std::shared_ptr<Engine> engine = Engine::open(std::move(config));
    REQUIRE(engine != nullptr);
    engines_.push_back(engine);
    return engine;
  }

  Mode mode() const { return mode_; }
  // Remote mode's server (nothing in the other modes).
  server::LogService* server() { return server_.get(); }
  // Where the log's segments are: the server's directory in remote mode.
  std::string wal_dir() const { return dir_.sub("data") + "/wal"; }
  // Segments retired and live: the server's in remote mode, where the
  // server retires them.
  std::uint64_t segments_retired(Engine& engine) const {
    return server_ ? server_->stats().segments_retired : engine.stats().segments_retired;
  }
  std::uint64_t segments_live(Engine& engine) const {
    return server_ ? server_->stats().segments_live : engine.stats().wal_segments;
  }
  ManualClock& clock() { return *clock_; }
  std::string data_dir() const { return dir_.sub("data"); }
  // Where the next value of the random source starts.
  void set_random_next(std::uint64_t value) { random_next_->store(value); }

 private:
  Mode mode_;
  std::uint32_t shards_;
  TempDir dir_;
  io::PosixFileSystem server_fs_;
  std::unique_ptr<server::LogService> server_;  // remote mode
  std::shared_ptr<ManualClock> clock_;
  std::shared_ptr<std::atomic<std::uint64_t>> random_next_ = std::make_shared<std::atomic<std::uint64_t>>();
  std::vector<std::shared_ptr<Engine>> engines_;  // last: shut down and released first
};

// A blocking call (result, StreamReader::next) run on its own thread and
// waited on with kPatience. If the engine never answers, the test fails and
// the thread is left behind: whatever it uses must be owned by the callable
// (capture shared_ptrs), never borrowed from the test's stack.
template <typename T>
class Background {
 public:
  template <typename F>
  explicit Background(F fn) {
    std::packaged_task<T()> task(std::move(fn));
    future_ = task.get_future();
    thread_ = std::thread(std::move(task));
  }
  ~Background() {
    if (!thread_.joinable()) return;
    if (!future_.valid() || future_.wait_for(0s) == std::future_status::ready) {
      thread_.join();
    } else {
      thread_.detach();
    }
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  // Whether the call returned (or threw) within `wait`.
  bool ready(std::chrono::milliseconds wait = 0ms) const {
    return future_.wait_for(wait) == std::future_status::ready;
  }
  // The call's value (or its exception), failing the test if it takes longer
  // than kPatience.
  T get() {
    REQUIRE_MESSAGE(future_.wait_for(kPatience) == std::future_status::ready,
                    "the engine did not answer within " << kPatience.count() << " s");
    return future_.get();
  }

 private:
  std::future<T> future_;
  std::thread thread_;
};

template <typename In, typename Out>
Background<Out> result_in_background(const std::shared_ptr<Engine>& engine, const WorkflowRef<In, Out>& ref,
                                     const std::string& id) {
  return Background<Out>([engine, ref, id] { return engine->result(ref, id); });
}

// engine->result(ref, id), failing the test instead of hanging.
template <typename In, typename Out>
Out result_of(const std::shared_ptr<Engine>& engine, const WorkflowRef<In, Out>& ref, const std::string& id) {
  return result_in_background(engine, ref, id).get();
}

// reader->next(), failing the test instead of hanging.
inline std::optional<StreamChunk> next_of(const std::shared_ptr<StreamReader>& reader) {
  Background<std::optional<StreamChunk>> pending([reader] { return reader->next(); });
  return pending.get();
}

inline std::shared_ptr<StreamReader> open_reader(Engine& engine, const std::string& id, const std::string& stream,
                                                 StreamFrom from) {
  return std::make_shared<StreamReader>(engine.read_stream(id, stream, from));
}

// Moves the clock by `step` until done(kReactionTime) holds. A timer's due
// time is fixed when the run reaches the timer, which the test cannot see, so
// the clock moves in steps shorter than the timer and the test checks the
// time the run saw (journaled now()) rather than how far the clock moved.
// done(wait) waits up to `wait` for the engine to react.
template <typename Done>
void advance_until(ManualClock& clock, std::chrono::milliseconds step, Done done) {
  for (int moves = 0; !done(kReactionTime); ++moves) {
    REQUIRE_MESSAGE(moves < kMaxClockMoves, "the engine did not react after " << moves << " clock moves of "
                                                                               << step.count() << " ms");
    clock.advance(step);
  }
}

template <typename T>
void advance_until_ready(ManualClock& clock, std::chrono::milliseconds step, const Background<T>& pending) {
  advance_until(clock, step, [&](std::chrono::milliseconds wait) { return pending.ready(wait); });
}

// Calls fn, which must throw fusee::Error with code `expected`; returns the
// error's message for further checks ("" if it threw something else).
template <typename F>
std::string error_message(errc expected, F&& fn) {
  try {
    fn();
  } catch (const Error& error) {
    CHECK_MESSAGE(error.error() == expected, "expected errc::" << errc_name(expected) << ", got errc::"
                                                               << errc_name(error.error()) << ": " << error.what());
    return error.what();
  } catch (const std::exception& other) {
    FAIL_CHECK("expected fusee::Error errc::" << errc_name(expected) << ", got another exception: " << other.what());
    return {};
  }
  FAIL_CHECK("expected fusee::Error errc::" << errc_name(expected) << ", nothing was thrown");
  return {};
}

// Waits (moving nothing) until fn holds, looking every kReactionTime, at
// most kPatience: for what the engine does on its own after a call returns.
template <typename F>
bool eventually(F fn);

// Waits until run `id` waits on something other than a step under way (a
// signal, a timer, an awakeable...): start() is acknowledged once durable,
// before the run's code runs, so a test that stops the engine to change
// the code must first let the old code write the journal it wants.
template <typename E>
void require_waiting(E& engine, const std::string& id) {
  REQUIRE_MESSAGE(eventually([&] {
                    auto info = engine.get_run(id);
                    if (!info) return false;
                    return std::any_of(info->waiting_on.begin(), info->waiting_on.end(),
                                       [](const auto& pending) { return pending.command != "step"; });
                  }),
                  "run " << id << " never waited");
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::int64_t milliseconds_between(TimePoint from, TimePoint to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

// Counts calls from shard threads and lets the test wait for a count.
class CallCounter {
 public:
  int add() {
    std::lock_guard lock(mu_);
    ++count_;
    changed_.notify_all();
    return count_;
  }
  int count() const {
    std::lock_guard lock(mu_);
    return count_;
  }
  // Whether the count reached `at_least` within `wait`.
  bool wait_for(int at_least, std::chrono::milliseconds wait) const {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, wait, [&] { return count_ >= at_least; });
  }
  // Fails the test if the count does not reach `at_least` within kPatience.
  void require(int at_least) const {
    REQUIRE_MESSAGE(wait_for(at_least, kPatience), "count " << count() << " never reached " << at_least);
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  int count_ = 0;
};

template <typename F>
bool eventually(F fn) {
  CallCounter never;
  for (auto waited = std::chrono::milliseconds(0); waited < kPatience; waited += kReactionTime) {
    if (fn()) return true;
    (void)never.wait_for(1, kReactionTime);
  }
  return fn();
}

}  // namespace fusee::testing

TYPE_TO_STRING(fusee::testing::InMemory);
TYPE_TO_STRING(fusee::testing::OnDisk);
