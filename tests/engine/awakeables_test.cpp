// Awakeables: a run makes a token and waits on its Future; anyone with the
// token completes or fails it, once. The token is checked against the
// journal (a wrong secret changes nothing), a repeat of the same completion
// is acknowledged, another refused; a token survives a reopen, parking and
// resharding; a cancelled awakeable says it no longer waits.
#include <doctest/doctest.h>

#include <string>

#include "engine/awakeable_token.hpp"
#include "engine/reshard.hpp"
#include "tests/engine/engine_harness.hpp"
#include "tests/support/crash_points.hpp"
#include "tests/support/fault_file_system.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

// Publishes its token on a stream, then waits: the value plus one, or
// -1 when the awakeable failed (after checking the message).
const WorkflowRef<int, int> kPayment{"payment"};

void register_payment(Engine& engine) {
  engine.register_workflow(kPayment, [](Ctx& ctx, int) -> Task<int> {
    auto paid = ctx.awakeable<int>("paid");
    ctx.on_query("token", [token = paid.token] { return token; });
    co_await ctx.stream("token").write(paid.token);
    try {
      co_return (co_await paid.future) + 1;
    } catch (const Error& error) {
      if (error.error() == errc::failed && std::string(error.what()).find("card declined") != std::string::npos) {
        co_return -1;
      }
      throw;
    }
  });
}

std::string token_of(Engine& engine, const std::string& id) {
  return engine.query<std::string>(id, "token");
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("an awakeable token names its run and position, and carries 128 random bits") {
  engine::AwakeableToken token{"order/7 ü", 12, engine::new_secret()};
  auto text = engine::format_token(token);
  CHECK(text.find('/') == std::string::npos);
  CHECK(text.find(' ') == std::string::npos);
  auto parsed = engine::parse_token(text);
  REQUIRE(parsed);
  CHECK(parsed->run_id == token.run_id);
  CHECK(parsed->position == 12);
  CHECK(parsed->secret == token.secret);
  CHECK(token.secret.size() == 32);
  CHECK(engine::new_secret() != token.secret);
  for (const char* bad : {"", "awk1", "awk1.61.1", "awk2.61.1.00000000000000000000000000000000",
                          "awk1.6.1.00000000000000000000000000000000", "awk1.61.x.00000000000000000000000000000000",
                          "awk1.61.1.0000000000000000000000000000000", "awk1.61.1.0000000000000000000000000000000g",
                          "awk1.61.1.00000000000000000000000000000000.1"}) {
    CHECK_MESSAGE(!engine::parse_token(bad), bad);
  }
}

TEST_CASE_TEMPLATE("an awakeable completes once with the value sent with its token", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_payment(*engine);
  (void)engine->start(kPayment, "pay-1", 0);
  auto token = token_of(*engine, "pay-1");
  CHECK(token.rfind("awk1.", 0) == 0);

  // A wrong secret, or not a token at all: refused, nothing recorded.
  auto wrong = token;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  auto message = error_message(errc::not_found, [&] { engine->complete_awakeable(wrong, 5); });
  CHECK(contains(message, "run 'pay-1' has no awakeable with this token"));
  message = error_message(errc::invalid_argument, [&] { engine->complete_awakeable("pay-1", 5); });
  CHECK(contains(message, "not an awakeable token"));

  engine->complete_awakeable(token, 41);
  CHECK(result_of(engine, kPayment, "pay-1") == 42);
  // The journal shows the awakeable, not its secret (this workflow writes
  // its token to a stream, which the journal shows as it is).
  auto journal = boost::json::parse(engine->journal_json("pay-1"));
  int created = 0;
  for (const auto& record : journal.at("records").as_array()) {
    if (record.at("kind") != "awakeable_created") continue;
    ++created;
    CHECK(record.at("detail") == "(secret)");
  }
  CHECK(created == 1);
  // Late, the run has ended: a repeat is acknowledged as an update's is,
  // another value refused, and a token never completed is not found.
  engine->complete_awakeable(token, 41);
  message = error_message(errc::already_exists, [&] { engine->complete_awakeable(token, 40); });
  CHECK(contains(message, "already completed, with another value"));
  message = error_message(errc::not_found, [&] { engine->complete_awakeable(wrong, 41); });
  CHECK(contains(message, "run 'pay-1' has finished: its awakeables can no longer be completed"));
  if (M::mode != Mode::memory) {
    // From the run store too, once the finished run has left memory.
    engine->checkpoint();
    engine->shutdown();
    engine = harness.open();
    register_payment(*engine);
    engine->complete_awakeable(token, 41);
    error_message(errc::already_exists, [&] { engine->complete_awakeable(token, 40); });
  }
}

TEST_CASE_TEMPLATE("an awakeable's failure reaches the code; a repeat is acknowledged, another completion refused", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  // Waits on two awakeables, so that the run is still there for repeats.
  const WorkflowRef<int, int> kTwo{"two"};
  engine->register_workflow(kTwo, [](Ctx& ctx, int) -> Task<int> {
    auto first = ctx.awakeable<int>("first");
    auto second = ctx.awakeable<void>("second");
    ctx.on_query("tokens", [a = first.token, b = second.token] { return std::vector<std::string>{a, b}; });
    int value = 0;
    try {
      value = co_await first.future;
    } catch (const Error& error) {
      value = error.error() == errc::failed ? -1 : -2;
    }
    co_await second.future;
    co_return value;
  });
  (void)engine->start(kTwo, "pay-2", 0);
  auto tokens = engine->query<std::vector<std::string>>("pay-2", "tokens");
  REQUIRE(tokens.size() == 2);
  CHECK(tokens[0] != tokens[1]);
  engine->fail_awakeable(tokens[0], "card declined");
  engine->fail_awakeable(tokens[0], "card declined");  // the same: acknowledged
  auto message = error_message(errc::already_exists, [&] { engine->complete_awakeable(tokens[0], 3); });
  CHECK(contains(message, "awakeable 'first' of run 'pay-2' was already completed, with another failure"));
  message = error_message(errc::already_exists, [&] { engine->fail_awakeable(tokens[0], "another reason"); });
  CHECK(contains(message, "already completed"));
  engine->complete_awakeable(tokens[1]);
  CHECK(result_of(engine, kTwo, "pay-2") == -1);
}

TEST_CASE_TEMPLATE("an awakeable token survives a reopen and parking", M, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto config = harness.config();
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = std::chrono::seconds(10);
  std::string token;
  {
    auto engine = harness.open(config);
    register_payment(*engine);
    (void)engine->start(kPayment, "pay-3", 0);
    token = token_of(*engine, "pay-3");
    engine->shutdown();
  }
  auto engine = harness.open(config);
  auto message = error_message(errc::unavailable, [&] { engine->complete_awakeable(token, 1); });
  CHECK(contains(message, "is not registered"));
  register_payment(*engine);
  CHECK(token_of(*engine, "pay-3") == token);  // the same token after the replay
  auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (engine->stats().runs_parked == 0) {
    harness.clock().advance(std::chrono::seconds(11));
    engine->checkpoint();
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < give_up, "the run never parked");
  }
  engine->complete_awakeable(token, 9);  // wakes it
  CHECK(result_of(engine, kPayment, "pay-3") == 10);
}

TEST_CASE("an awakeable token survives resharding") {
  EngineHarness harness(Mode::local, 2);
  std::vector<std::string> tokens;
  {
    auto engine = harness.open();
    register_payment(*engine);
    for (int i = 0; i < 6; ++i) {
      auto id = "pay-r" + std::to_string(i);
      (void)engine->start(kPayment, id, 0);
      tokens.push_back(token_of(*engine, id));
    }
    engine->shutdown();
  }
  io::PosixFileSystem fs;
  std::string problem;
  REQUIRE_MESSAGE(engine::reshard(fs, harness.data_dir(), {.shards = 3}, &problem).has_value(), problem);
  auto config = harness.config();
  config.shards = 3;
  auto engine = harness.open(config);
  register_payment(*engine);
  for (int i = 0; i < 6; ++i) engine->complete_awakeable(tokens[i], i);
  for (int i = 0; i < 6; ++i) CHECK(result_of(engine, kPayment, "pay-r" + std::to_string(i)) == i + 1);
}

TEST_CASE_TEMPLATE("a cancelled awakeable no longer waits, and says so", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> kCleanup{"cleanup"};
  engine->register_workflow(kCleanup, [](Ctx& ctx, int) -> Task<int> {
    auto paid = ctx.awakeable<int>("paid");
    ctx.on_query("token", [token = paid.token] { return token; });
    try {
      co_return co_await paid.future;
    } catch (const Error& error) {
      if (error.error() != errc::cancelled) throw;
    }
    auto refund = ctx.awakeable<int>("refunded");  // a clean-up awaiting another system
    ctx.on_query("refund", [token = refund.token] { return token; });
    co_return co_await refund.future;
  });
  (void)engine->start(kCleanup, "pay-4", 0);
  auto token = token_of(*engine, "pay-4");
  engine->cancel("pay-4", "changed my mind");
  auto message = error_message(errc::not_found, [&] { engine->complete_awakeable(token, 1); });
  CHECK(contains(message, "awakeable 'paid' of run 'pay-4' no longer waits"));
  engine->complete_awakeable(engine->query<std::string>("pay-4", "refund"), 7);
  CHECK(result_of(engine, kCleanup, "pay-4") == 7);
}
}

TEST_SUITE("unit") {
TEST_CASE("after the log failed, an awakeable's completion and an update answer storage instead of waiting for good") {
  // The completion's record cannot be journaled any more: the caller must
  // hear so (a payment provider retries, or alerts), not wait on a record
  // that will never be durable.
  testing::FaultFileSystem fs;
  auto clock = std::make_shared<ManualClock>();
  auto config = testing::crash_config(fs, clock);
  config.shards = 1;  // one shard: the run's shard is the one that fails
  auto engine = std::shared_ptr<Engine>(Engine::open(config));
  register_payment(*engine);
  const WorkflowRef<int, int> kCounter{"counter"};
  const Update<int, int> kAdd{"add"};
  engine->register_workflow(kCounter, [kAdd](Ctx& ctx, int start) -> Task<int> {
    int total = start;
    ctx.on_update(kAdd);
    for (;;) {
      auto request = co_await ctx.next_update(kAdd);
      total += request.arg;
      co_await ctx.reply(request, total);
    }
  });
  (void)engine->start(kPayment, "pay-f", 0);
  (void)engine->start(kCounter, "count-f", 0);
  auto token = token_of(*engine, "pay-f");
  require_waiting(*engine, "count-f");
  fs.inject(testing::Fault{testing::OpKind::any, 1, testing::FaultEffect::io_error, /*persistent=*/true});
  // The next record fails the log (a start, refused with the log's error).
  try {
    (void)engine->start(kPayment, "pay-g", 0);
  } catch (const Error&) {
  }
  Background<std::string> completed([&] {
    try {
      engine->complete_awakeable(token, 5);
      return std::string("acknowledged");
    } catch (const Error& error) {
      return std::string(errc_name(error.error()));
    }
  });
  CHECK(completed.get() == "storage");
  Background<std::string> updated([&] {
    try {
      (void)engine->update("count-f", kAdd, 1, "u-1");
      return std::string("answered");
    } catch (const Error& error) {
      return std::string(errc_name(error.error())) + ": " + error.what();
    }
  });
  auto answer = updated.get();
  CHECK_MESSAGE(answer.rfind("storage", 0) == 0, answer);
}
}
