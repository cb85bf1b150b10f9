// Steps in memory and local mode: values, coroutine steps, retries with capped exponential backoff, TerminalError, non_retryable, step_failed, key() and attempt(), and journaled now() and random().
#include <doctest/doctest.h>

#include <coroutine>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/engine/engine_harness.hpp"
#include "tests/engine/gate.hpp"
#include "wal/limits.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<std::string> kGo{"go"};

// What a step's function saw on each call.
struct Attempt {
  std::uint32_t number = 0;
  TimePoint at;
  std::string key;
};

class AttemptLog {
 public:
  void record(const StepContext& step, TimePoint at) {
    {
      std::lock_guard lock(mu_);
      attempts_.push_back({step.attempt(), at, step.key()});
    }
    calls_.add();
  }
  std::vector<Attempt> attempts() const {
    std::lock_guard lock(mu_);
    return attempts_;
  }
  const CallCounter& calls() const { return calls_; }

 private:
  mutable std::mutex mu_;
  std::vector<Attempt> attempts_;
  CallCounter calls_;
};

std::string describe(const Error& error) { return std::string(errc_name(error.error())) + "|" + error.what(); }

Task<int> add_later(int a, int b) { co_return a + b; }

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("a step's value reaches the workflow and its function runs once", M, InMemory, OnDisk, Remote) {
  CallCounter first_calls, second_calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> ref{"two-steps"};
  engine->register_workflow(ref, [&](Ctx& ctx, int input) -> Task<int> {
    int a = co_await ctx.step("first", [&first_calls, input] {
      first_calls.add();
      return input + 1;
    });
    int b = co_await ctx.step("second", [&second_calls, a] {
      second_calls.add();
      return a * 2;
    });
    co_return b;
  });

  (void)engine->start(ref, "s-1", 20);
  CHECK(result_of(engine, ref, "s-1") == 42);
  CHECK(first_calls.count() == 1);
  CHECK(second_calls.count() == 1);
}

TEST_CASE_TEMPLATE("a step may return nothing, and may take its StepContext or no argument", M, InMemory, OnDisk, Remote) {
  CallCounter void_calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::vector<std::string>> ref{"step-shapes"};
  engine->register_workflow(ref, [&](Ctx& ctx, int) -> Task<std::vector<std::string>> {
    co_await ctx.step("no-value", [&void_calls] { void_calls.add(); });
    std::string key = co_await ctx.step("with-context", [](StepContext& step) { return step.key(); });
    std::uint32_t attempt = co_await ctx.step("attempt", [](StepContext& step) { return step.attempt(); });
    co_return std::vector<std::string>{key, std::to_string(attempt)};
  });

  (void)engine->start(ref, "shapes-1", 0);
  std::vector<std::string> out = result_of(engine, ref, "shapes-1");
  REQUIRE(out.size() == 2);
  CHECK_FALSE(out[0].empty());
  CHECK(out[1] == "1");
  CHECK(void_calls.count() == 1);
}

TEST_CASE_TEMPLATE("a coroutine step runs to completion and its value is journaled", M, InMemory, OnDisk, Remote) {
  CallCounter void_calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> ref{"coroutine-steps"};
  engine->register_workflow(ref, [&](Ctx& ctx, int input) -> Task<int> {
    int sum = co_await ctx.step("add", [input](StepContext& step) -> Task<int> {
      int inner = co_await add_later(input, static_cast<int>(step.attempt()));
      co_return inner * 10;
    });
    co_await ctx.step("nothing", [&void_calls]() -> Task<void> {
      void_calls.add();
      co_return;
    });
    co_return sum;
  });

  (void)engine->start(ref, "c-1", 3);
  CHECK(result_of(engine, ref, "c-1") == 40);
  CHECK(void_calls.count() == 1);
}

TEST_CASE_TEMPLATE("a coroutine step that is suspended does not hold up the other runs of its shard", M, InMemory,
                   OnDisk, Remote) {
  Gate gate;
  CallCounter entered;
  EngineHarness harness(M::mode, 1);
  auto engine = harness.open();
  const WorkflowRef<int, int> slow{"slow-coroutine-step"};
  const WorkflowRef<int, int> quick{"quick"};
  engine->register_workflow(slow, [&gate, &entered](Ctx& ctx, int) -> Task<int> {
    int value = co_await ctx.step("outside-call", [&gate, &entered]() -> Task<int> {
      entered.add();
      co_await gate.wait();
      co_return 7;
    });
    co_return value;
  });
  engine->register_workflow(quick, [](Ctx& ctx, int input) -> Task<int> {
    co_return co_await ctx.step("plain", [input] { return input + 1; });
  });

  (void)engine->start(slow, "slow-1", 0);
  auto slow_result = result_in_background(engine, slow, "slow-1");
  entered.require(1);
  (void)engine->start(quick, "quick-1", 41);
  CHECK(result_of(engine, quick, "quick-1") == 42);  // the only shard is free while the step waits
  CHECK_FALSE(slow_result.ready());
  gate.open();
  CHECK(slow_result.get() == 7);
}

TEST_CASE_TEMPLATE("a failing step is retried with exponential backoff capped at maximum_backoff", M, InMemory,
                   OnDisk, Remote) {
  AttemptLog log;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  auto clock = &harness.clock();
  const WorkflowRef<int, int> ref{"flaky"};
  RetryPolicy policy;
  policy.attempts = 5;
  policy.initial_backoff = 1s;
  policy.multiplier = 10.0;
  policy.maximum_backoff = 20s;
  engine->register_workflow(ref, [&log, clock, policy](Ctx& ctx, int) -> Task<int> {
    int attempt = co_await ctx
                      .step("flaky-call",
                            [&log, clock](StepContext& step) {
                              log.record(step, clock->now());
                              if (step.attempt() < 5) {
                                throw std::runtime_error("flaky " + std::to_string(step.attempt()));
                              }
                              return static_cast<int>(step.attempt());
                            })
                      .retry(policy);
    co_return attempt;
  });

  (void)engine->start(ref, "f-1", 0);
  auto pending = result_in_background(engine, ref, "f-1");
  // Backoff before attempt n+1 is 1 s * 10^(n-1), at most 20 s: 1, 10, 20, 20.
  const std::vector<std::chrono::milliseconds> backoffs{1s, 10s, 20s, 20s};
  for (int done = 1; done <= 4; ++done) {
    log.calls().require(done);
    CHECK_FALSE(log.calls().wait_for(done + 1, kReactionTime));  // no retry while the clock stands still
    advance_until(harness.clock(), backoffs[done - 1] / 4,
                  [&](std::chrono::milliseconds wait) { return log.calls().wait_for(done + 1, wait); });
  }
  CHECK(pending.get() == 5);

  std::vector<Attempt> attempts = log.attempts();
  REQUIRE(attempts.size() == 5);
  // The clock moves in quarter-backoff steps; a retry may land one backoff
  // late if the test's first move came before the engine read the clock, so
  // the upper bounds sit below what an uncapped or unmultiplied schedule gives.
  const std::vector<std::pair<std::int64_t, std::int64_t>> bounds{
      {1'000, 10'000}, {10'000, 100'000}, {20'000, 100'000}, {20'000, 100'000}};
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    std::int64_t waited = milliseconds_between(attempts[i].at, attempts[i + 1].at);
    CAPTURE(waited);
    CHECK(waited >= bounds[i].first);
    CHECK(waited < bounds[i].second);
  }
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    CHECK(attempts[i].number == i + 1);
    CHECK(attempts[i].key == attempts[0].key);
  }
}

TEST_CASE_TEMPLATE("a step that keeps failing stops after `attempts` calls and surfaces as step_failed", M, InMemory,
                   OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::string> ref{"always-fails"};
  RetryPolicy policy;
  policy.attempts = 3;
  policy.initial_backoff = 1s;
  policy.multiplier = 1.0;
  engine->register_workflow(ref, [&calls, policy](Ctx& ctx, int) -> Task<std::string> {
    std::string outcome = "no error";
    try {
      co_await ctx
          .step("call-api",
                [&calls] {
                  int call = calls.add();
                  throw std::runtime_error("still down (attempt " + std::to_string(call) + ")");
                })
          .retry(policy);
    } catch (const Error& error) {
      outcome = describe(error);
    }
    co_return outcome;
  });

  (void)engine->start(ref, "a-1", 0);
  auto pending = result_in_background(engine, ref, "a-1");
  advance_until_ready(harness.clock(), 250ms, pending);
  std::string outcome = pending.get();
  CHECK(calls.count() == 3);
  CHECK(contains(outcome, "step_failed|"));
  CHECK(contains(outcome, "still down (attempt 3)"));
  CHECK(contains(outcome, "call-api"));
}

TEST_CASE_TEMPLATE("a step without a retry policy is tried once", M, InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::string> ref{"one-try"};
  engine->register_workflow(ref, [&calls](Ctx& ctx, int) -> Task<std::string> {
    std::string outcome = "no error";
    try {
      co_await ctx.step("once", [&calls] {
        calls.add();
        throw std::runtime_error("refused");
      });
    } catch (const Error& error) {
      outcome = describe(error);
    }
    co_return outcome;
  });

  (void)engine->start(ref, "o-1", 0);
  std::string outcome = result_of(engine, ref, "o-1");  // the clock never moves: no retry could run
  CHECK(calls.count() == 1);
  CHECK(contains(outcome, "step_failed|"));
  CHECK(contains(outcome, "refused"));
}

TEST_CASE_TEMPLATE("an uncaught step failure fails the run and its result carries the step's error", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> ref{"uncaught"};
  engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<int> {
    co_await ctx.step("charge", []() -> int { throw std::runtime_error("card declined by bank"); });
    co_return 1;
  });

  (void)engine->start(ref, "u-1", 0);
  try {
    (void)result_of(engine, ref, "u-1");
    FAIL_CHECK("the run did not fail");
  } catch (const Error& error) {
    // The run failed because of a step: step_failed passed through, or failed.
    CHECK_MESSAGE((error.error() == errc::step_failed || error.error() == errc::failed), describe(error));
    CHECK(contains(error.what(), "card declined by bank"));
  }
  std::vector<RunInfo> runs = engine->list_runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].status == RunStatus::failed);
}

TEST_CASE_TEMPLATE("TerminalError fails a step at once whatever its retry policy says", M, InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::string> ref{"terminal"};
  RetryPolicy policy;
  policy.attempts = 5;
  engine->register_workflow(ref, [&calls, policy](Ctx& ctx, int) -> Task<std::string> {
    std::string outcome = "no error";
    try {
      co_await ctx
          .step("pay",
                [&calls] {
                  calls.add();
                  throw TerminalError("card declined");
                })
          .retry(policy);
    } catch (const Error& error) {
      outcome = describe(error);
    }
    co_return outcome;
  });

  (void)engine->start(ref, "t-1", 0);
  std::string outcome = result_of(engine, ref, "t-1");  // the clock never moves: no retry could run
  CHECK(calls.count() == 1);
  CHECK(contains(outcome, "step_failed|"));
  CHECK(contains(outcome, "card declined"));
}

TEST_CASE_TEMPLATE("non_retryable ends the retries on a matching error", M, InMemory, OnDisk, Remote) {
  CallCounter calls;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::string> ref{"non-retryable"};
  RetryPolicy policy;
  policy.attempts = 5;
  policy.initial_backoff = 1s;
  policy.non_retryable = [](const std::exception& error) {
    return dynamic_cast<const std::invalid_argument*>(&error) != nullptr;
  };
  engine->register_workflow(ref, [&calls, policy](Ctx& ctx, int) -> Task<std::string> {
    std::string outcome = "no error";
    try {
      co_await ctx
          .step("transfer",
                [&calls] {
                  if (calls.add() == 1) throw std::runtime_error("timeout, worth another try");
                  throw std::invalid_argument("bad account number");
                })
          .retry(policy);
    } catch (const Error& error) {
      outcome = describe(error);
    }
    co_return outcome;
  });

  (void)engine->start(ref, "n-1", 0);
  auto pending = result_in_background(engine, ref, "n-1");
  advance_until_ready(harness.clock(), 250ms, pending);
  std::string outcome = pending.get();
  CHECK(calls.count() == 2);
  CHECK(contains(outcome, "step_failed|"));
  CHECK(contains(outcome, "bad account number"));
}

TEST_CASE_TEMPLATE("ctx.key() is the same for every attempt of a step and differs between steps", M, InMemory,
                   OnDisk, Remote) {
  AttemptLog log;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  auto clock = &harness.clock();
  const WorkflowRef<int, std::vector<std::string>> ref{"keys"};
  RetryPolicy policy;
  policy.attempts = 2;
  policy.initial_backoff = 1s;
  engine->register_workflow(ref, [&log, clock, policy](Ctx& ctx, int) -> Task<std::vector<std::string>> {
    std::string first = co_await ctx
                            .step("charge",
                                  [&log, clock](StepContext& step) {
                                    log.record(step, clock->now());
                                    if (step.attempt() == 1) throw std::runtime_error("try again");
                                    return step.key();
                                  })
                            .retry(policy);
    std::string other = co_await ctx.step("refund", [](StepContext& step) { return step.key(); });
    std::string again = co_await ctx.step("charge", [](StepContext& step) { return step.key(); });
    co_return std::vector<std::string>{first, other, again};
  });

  (void)engine->start(ref, "k-1", 0);
  auto pending = result_in_background(engine, ref, "k-1");
  advance_until_ready(harness.clock(), 250ms, pending);
  std::vector<std::string> keys = pending.get();
  REQUIRE(keys.size() == 3);
  std::vector<Attempt> attempts = log.attempts();
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[0].number == 1);
  CHECK(attempts[1].number == 2);
  CHECK(attempts[0].key == attempts[1].key);
  CHECK(keys[0] == attempts[0].key);
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == 3);  // same name, later position: another key
}

TEST_CASE_TEMPLATE("ctx.key() is deterministic: the same run id gets the same keys on another engine", M, InMemory,
                   OnDisk, Remote) {
  const WorkflowRef<int, std::vector<std::string>> ref{"keys"};
  auto keys_of = [&](const std::string& id) {
    EngineHarness harness(M::mode);
    auto engine = harness.open();
    engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<std::vector<std::string>> {
      std::string a = co_await ctx.step("a", [](StepContext& step) { return step.key(); });
      std::string b = co_await ctx.step("b", [](StepContext& step) { return step.key(); });
      co_return std::vector<std::string>{a, b};
    });
    (void)engine->start(ref, id, 0);
    return result_of(engine, ref, id);
  };
  std::vector<std::string> first = keys_of("order-17");
  CHECK(keys_of("order-17") == first);
  std::vector<std::string> other = keys_of("order-18");
  REQUIRE(other.size() == 2);
  REQUIRE(first.size() == 2);
  CHECK(other[0] != first[0]);
  CHECK(other[1] != first[1]);
}

TEST_CASE("local mode: a retrying step keeps its attempt count, key and retry time across a reopen") {
  AttemptLog log;
  EngineHarness harness(Mode::local);
  auto clock = &harness.clock();
  const WorkflowRef<int, int> ref{"slow-retry"};
  RetryPolicy policy;
  policy.attempts = 3;
  policy.initial_backoff = 60min;
  policy.maximum_backoff = 2h;
  auto register_it = [&](Engine& engine) {
    engine.register_workflow(ref, [&log, clock, policy](Ctx& ctx, int) -> Task<int> {
      int attempt = co_await ctx
                        .step("sync-ledger",
                              [&log, clock](StepContext& step) {
                                log.record(step, clock->now());
                                if (step.attempt() == 1) throw std::runtime_error("ledger offline");
                                return static_cast<int>(step.attempt());
                              })
                        .retry(policy);
      co_return attempt;
    });
  };
  {
    auto engine = harness.open();
    register_it(*engine);
    (void)engine->start(ref, "r-1", 0);
    log.calls().require(1);
    engine->shutdown();
  }
  harness.clock().advance(50min);
  auto engine = harness.open();
  register_it(*engine);
  auto pending = result_in_background(engine, ref, "r-1");
  advance_until_ready(harness.clock(), 5min, pending);
  CHECK(pending.get() == 2);

  std::vector<Attempt> attempts = log.attempts();
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[1].number == 2);
  CHECK(attempts[1].key == attempts[0].key);
  // Due 60 min after the failure, not 60 min after the reopen (110 min).
  std::int64_t waited = milliseconds_between(attempts[0].at, attempts[1].at);
  CAPTURE(waited);
  CHECK(waited >= 60 * 60'000);
  CHECK(waited < 100 * 60'000);
}

TEST_CASE("local mode: a failed step and a coroutine step's value replay from the journal without running again") {
  CallCounter failing_calls, coroutine_calls, reached_wait;
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, std::string> ref{"replayed-steps"};
  auto register_it = [&](Engine& engine) {
    engine.register_workflow(ref, [&](Ctx& ctx, int) -> Task<std::string> {
      std::string failure;
      try {
        co_await ctx.step("doomed", [&failing_calls] {
          failing_calls.add();
          throw TerminalError("gone for good");
        });
      } catch (const Error& error) {
        failure = describe(error);
      }
      int value = co_await ctx.step("async", [&coroutine_calls]() -> Task<int> {
        coroutine_calls.add();
        co_return co_await add_later(20, 22);
      });
      co_await ctx.step("reached-wait", [&reached_wait] { reached_wait.add(); });
      (void)co_await ctx.wait_for(kGo);
      co_return failure + "#" + std::to_string(value);
    });
  };
  {
    auto engine = harness.open();
    register_it(*engine);
    (void)engine->start(ref, "rs-1", 0);
    reached_wait.require(1);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_it(*engine);
  engine->signal("rs-1", kGo, std::string("go"));
  std::string out = result_of(engine, ref, "rs-1");
  CHECK(contains(out, "step_failed|"));
  CHECK(contains(out, "gone for good"));
  CHECK(contains(out, "#42"));
  CHECK(failing_calls.count() == 1);
  CHECK(coroutine_calls.count() == 1);
  CHECK(reached_wait.count() == 1);
}

TEST_CASE_TEMPLATE("now() and random() give the engine clock's time and the configured source's values", M,
                   InMemory, OnDisk, Remote) {
  CallCounter first_taken;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::vector<std::uint64_t>> ref{"values"};
  engine->register_workflow(ref, [&first_taken](Ctx& ctx, int) -> Task<std::vector<std::uint64_t>> {
    TimePoint first = co_await ctx.now();
    std::uint64_t a = co_await ctx.random();
    std::uint64_t b = co_await ctx.random();
    co_await ctx.step("taken", [&first_taken] { first_taken.add(); });
    (void)co_await ctx.wait_for(kGo);
    TimePoint second = co_await ctx.now();
    auto ms = [](TimePoint t) {
      return static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
    };
    co_return std::vector<std::uint64_t>{ms(first), a, b, ms(second)};
  });
  const TimePoint start = harness.clock().now();

  (void)engine->start(ref, "v-1", 0);
  first_taken.require(1);
  harness.clock().advance(5s);
  engine->signal("v-1", kGo, std::string("go"));
  std::vector<std::uint64_t> out = result_of(engine, ref, "v-1");
  REQUIRE(out.size() == 4);
  const auto start_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(start.time_since_epoch()).count());
  CHECK(out[0] == start_ms);
  CHECK(out[3] == start_ms + 5'000);
  // From the harness's counting source (the engine may draw from it for
  // other purposes too, so only the range is fixed).
  CHECK(out[1] >= kRandomStart);
  CHECK(out[1] < kRandomStart + 1'000);
  CHECK(out[2] > out[1]);
  CHECK(out[2] < kRandomStart + 1'000);
}

TEST_CASE("local mode: now() and random() keep their journaled values when the run is replayed") {
  struct Seen {
    TimePoint now;
    std::uint64_t random = 0;
  };
  std::mutex mu;
  std::vector<Seen> executions;
  CallCounter taken;
  EngineHarness harness(Mode::local);
  const WorkflowRef<int, std::vector<std::uint64_t>> ref{"replayed-values"};
  auto register_it = [&](Engine& engine) {
    engine.register_workflow(ref, [&](Ctx& ctx, int) -> Task<std::vector<std::uint64_t>> {
      TimePoint now = co_await ctx.now();
      std::uint64_t random = co_await ctx.random();
      {
        std::lock_guard lock(mu);
        executions.push_back({now, random});
      }
      co_await ctx.step("taken", [&taken] { taken.add(); });
      (void)co_await ctx.wait_for(kGo);
      co_return std::vector<std::uint64_t>{
          static_cast<std::uint64_t>(milliseconds_between(TimePoint{}, now)), random};
    });
  };
  {
    auto engine = harness.open();
    register_it(*engine);
    (void)engine->start(ref, "rv-1", 0);
    taken.require(1);
    engine->shutdown();
  }
  harness.clock().advance(1h);
  harness.set_random_next(9'000'000'000);
  auto engine = harness.open();
  register_it(*engine);
  engine->signal("rv-1", kGo, std::string("go"));
  std::vector<std::uint64_t> out = result_of(engine, ref, "rv-1");

  std::lock_guard lock(mu);
  REQUIRE(executions.size() == 2);
  CHECK(executions[1].now == executions[0].now);
  CHECK(executions[1].random == executions[0].random);
  CHECK(executions[0].random < 9'000'000'000);
  REQUIRE(out.size() == 2);
  CHECK(out[0] == static_cast<std::uint64_t>(milliseconds_between(TimePoint{}, executions[0].now)));
  CHECK(out[1] == executions[0].random);
  CHECK(taken.count() == 1);
}
}

constexpr std::size_t kTooBig = wal::kRecordBytesMax + 1;

TEST_CASE_TEMPLATE("a record over the size limit fails its run or is refused, and the shard goes on", M, InMemory,
                   OnDisk, Remote) {
  CallCounter big_calls;
  EngineHarness harness(M::mode, 1);  // one shard: the others' runs share it
  const WorkflowRef<int, std::string> big{"big"};
  const WorkflowRef<int, int> chunky{"chunky"};
  const WorkflowRef<std::string, std::string> echo{"echo"};
  auto register_all = [&](Engine& engine) {
    engine.register_workflow(big, [&big_calls](Ctx& ctx, int) -> Task<std::string> {
      co_return co_await ctx.step("fill", [&big_calls] {
        big_calls.add();
        return std::string(kTooBig, 'x');
      });
    });
    engine.register_workflow(chunky, [](Ctx& ctx, int) -> Task<int> {
      co_await ctx.stream("out").write(std::string(kTooBig, 'y'));
      co_return 1;
    });
    engine.register_workflow(echo, [](Ctx& ctx, std::string text) -> Task<std::string> {
      co_return co_await ctx.step("echo", [text] { return text; });
    });
  };
  {
    auto engine = harness.open();
    register_all(*engine);
    (void)engine->start(big, "big-1", 1);
    try {
      (void)engine->result(big, "big-1");
      FAIL("an over-large step result must fail the run");
    } catch (const Error& error) {
      CHECK(error.error() == errc::invalid_argument);
      CHECK(std::string(error.what()).find("over the 16 MiB") != std::string::npos);
    }
    (void)engine->start(chunky, "chunky-1", 1);
    CHECK_THROWS_AS((void)engine->result(chunky, "chunky-1"), Error);
    // Refused before anything is recorded.
    try {
      (void)engine->start(echo, "echo-big", std::string(kTooBig, 'z'));
      FAIL("an over-large input must be refused");
    } catch (const Error& error) {
      CHECK(error.error() == errc::invalid_argument);
      CHECK(std::string(error.what()).find("was not started") != std::string::npos);
    }
    CHECK_FALSE(engine->get_run("echo-big").has_value());
    // The shard goes on.
    (void)engine->start(echo, "echo-1", std::string("still here"));
    CHECK(result_of(engine, echo, "echo-1") == "still here");
    engine->shutdown();
  }
  if (M::mode == Mode::local) {
    // The failure was journaled: a reopen does not run the step again.
    auto engine = harness.open();
    register_all(*engine);
    CHECK_THROWS_AS((void)engine->result(big, "big-1"), Error);
    CHECK(engine->get_run("big-1")->status == RunStatus::failed);
    CHECK(big_calls.count() == 1);
  }
}
