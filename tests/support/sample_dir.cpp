// Makes a small data directory with a run in every state, for the `fusee
// inspect` and `fusee reshard` checks (tests/cli_inspect.sh) and the
// examples in docs/cli.md. The clock and the random source are fixed, so
// what the views print of runs is the same on every machine.
//
//   sample_dir DIR make     runs finished (in the store), failed, cancelled,
//                           parked, and started after the last checkpoint;
//                           a large step result in the blob area; then the
//                           process exits without shutting the engine down
//   sample_dir DIR finish   reopens (any shard count), approves the waiting
//                           orders and prints every run's result
#include <fusee/fusee.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unistd.h>

using namespace fusee;

namespace {

const WorkflowRef<std::string, std::string> kGreet{"greet"};
const WorkflowRef<int, int> kOrder{"order"};
const WorkflowRef<int, std::string> kBig{"big"};
const WorkflowRef<int, int> kBroken{"broken"};
const Signal<int> kApproval{"approval"};

// 2026-11-30T12:00:00Z, moved only by this program: the runs' times are the
// same in every run of it.
const auto clock = std::make_shared<ManualClock>(TimePoint{std::chrono::milliseconds(1796040000000)});

Config config_for(const std::string& dir, std::uint32_t shards) {
  auto config = Config::local(dir);
  config.shards = shards;
  config.clock = clock;
  config.random = [n = std::uint64_t{0}]() mutable { return ++n; };
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  config.park_after = std::chrono::milliseconds::zero();
  config.payload_offload_bytes = 2048;
  config.segment_bytes = 1 << 20;
  return config;
}

void register_all(Engine& engine) {
  engine.register_workflow(kGreet, [](Ctx& ctx, std::string name) -> Task<std::string> {
    co_return co_await ctx.step("greet", [name] { return "hello, " + name; });
  });
  engine.register_workflow(kOrder, [](Ctx& ctx, int amount) -> Task<int> {
    int quote = co_await ctx.step("quote", [amount] { return amount * 10; });
    co_await ctx.stream("progress").write(quote);
    auto approval = co_await ctx.wait_for(kApproval);
    int total = co_await ctx.step("total", [quote, approval] { return quote + approval.value_or(0); });
    co_await ctx.stream("progress").write(total);
    co_return total;
  });
  engine.register_workflow(kBig, [](Ctx& ctx, int size) -> Task<std::string> {
    co_return co_await ctx.step("fill", [size] { return std::string(static_cast<std::size_t>(size), 'x'); });
  });
  engine.register_workflow(kBroken, [](Ctx& ctx, int) -> Task<int> {
    co_return co_await ctx.step("explode", []() -> int { throw std::runtime_error("the part is out of stock"); });
  });
}

int make(const std::string& dir) {
  auto engine = Engine::open(config_for(dir, 2));
  register_all(*engine);
  engine->start(kGreet, "greet-ada", std::string("Ada"));
  engine->start(kGreet, "greet-grace", std::string("Grace"));
  engine->start(kBig, "big-1", 4096);
  engine->start(kBroken, "broken-1", 1);
  for (int n = 1; n <= 3; ++n) engine->start(kOrder, "order-" + std::to_string(n), n);
  engine->signal("order-1", kApproval, 5, "approve-order-1");
  engine->cancel("order-3", "the customer called it off");
  (void)engine->result(kGreet, "greet-ada");
  (void)engine->result(kGreet, "greet-grace");
  (void)engine->result(kBig, "big-1");
  (void)engine->result(kOrder, "order-1");
  for (const char* id : {"broken-1", "order-3"}) {
    try {
      (void)engine->result(kOrder, id);
    } catch (const Error&) {
    }
  }
  // order-2 waits for its approval: a minute later, checkpoints put the
  // finished runs in the store and park order-2.
  {
    // (A live reader would keep the run in memory.)
    auto reader = engine->read_stream("order-2", "progress", StreamFrom::earliest());
    (void)reader.next();
  }
  clock->advance(std::chrono::minutes(1));
  // Each checkpoint() is a round trip to every shard: once order-2's wait
  // is durable, the next one parks it.
  for (int i = 0; i < 1000 && engine->stats().runs_parked == 0; ++i) engine->checkpoint();
  engine->checkpoint();
  // order-4 starts after the last checkpoint: only the log holds it.
  engine->start(kOrder, "order-4", 4);
  auto late = engine->read_stream("order-4", "progress", StreamFrom::earliest());
  (void)late.next();
  std::printf("made %s: %llu runs parked\n", dir.c_str(),
              static_cast<unsigned long long>(engine->stats().runs_parked));
  std::fflush(stdout);
  // Exit without shutting down, as a crash would: no close marker.
  _exit(0);
}

int finish(const std::string& dir) {
  auto engine = Engine::open(config_for(dir, 0));
  register_all(*engine);
  engine->signal("order-2", kApproval, 7, "approve-order-2");
  engine->signal("order-4", kApproval, 9, "approve-order-4");
  std::printf("shards %u\n", engine->shard_count());
  std::printf("greet-ada %s\n", engine->result(kGreet, "greet-ada").c_str());
  std::printf("big-1 %zu\n", engine->result(kBig, "big-1").size());
  for (const char* id : {"order-1", "order-2", "order-4"}) std::printf("%s %d\n", id, engine->result(kOrder, id));
  for (const char* id : {"broken-1", "order-3"}) {
    try {
      (void)engine->result(kOrder, id);
      std::printf("%s completed?\n", id);
    } catch (const Error& error) {
      std::printf("%s %s\n", id, errc_name(error.error()));
    }
  }
  engine->checkpoint();
  engine->shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: sample_dir DIR make|finish\n");
    return 2;
  }
  if (std::strcmp(argv[2], "make") == 0) return make(argv[1]);
  if (std::strcmp(argv[2], "finish") == 0) return finish(argv[1]);
  std::fprintf(stderr, "usage: sample_dir DIR make|finish\n");
  return 2;
}
