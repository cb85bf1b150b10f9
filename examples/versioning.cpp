// Changing a workflow's code while its runs are in flight (docs/tutorial.md,
// part 9, quotes this file). An order quotes a price, waits for approval and
// charges. The new code adds a discount step; ctx.patched keeps the orders
// started before the change on the old path.
// Usage: versioning DATA_DIR old|new
//   old: starts order-1 with the old code and leaves it waiting.
//   new: opens the same directory with the new code, starts order-2,
//        approves both and prints their totals.
#include <fusee/fusee.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>

using namespace fusee;

const WorkflowRef<int, int> kOrder{"order"};
const Signal<bool> kApproval{"approval"};

Task<int> order_v1(Ctx& ctx, int quantity) {
  auto quote = [quantity] { return quantity * 100; };
  int price = co_await ctx.step("quote", quote);
  (void)co_await ctx.wait_for(kApproval);
  auto charge = [price] { return price; };
  co_return co_await ctx.step("charge", charge);
}

Task<int> order_v2(Ctx& ctx, int quantity) {
  auto quote = [quantity] { return quantity * 100; };
  int price = co_await ctx.step("quote", quote);
  if (ctx.patched("discount")) {
    // New: orders that reach this point with this code get 10% off.
    auto discount = [price] { return price * 9 / 10; };
    price = co_await ctx.step("discount", discount);
  }
  (void)co_await ctx.wait_for(kApproval);
  auto charge = [price] { return price; };
  co_return co_await ctx.step("charge", charge);
}

int main(int argc, char** argv) {
  const std::string_view phase = argc == 3 ? argv[2] : "";
  if (phase != "old" && phase != "new") {
    std::fprintf(stderr, "usage: versioning DATA_DIR old|new\n");
    return 2;
  }
  auto engine = Engine::open(Config::local(argv[1]));
  // The approval signal is declared: a value that is not a bool is refused.
  if (phase == "old") {
    engine->register_workflow(kOrder, order_v1, kApproval);
    (void)engine->start(kOrder, "order-1", 2);
    // start() returns once the start is durable, before the code runs. A
    // run that has not yet passed the patch point with this code would take
    // the new path after the deploy, so stay until order-1 waits.
    for (;;) {
      auto info = engine->get_run("order-1");
      // (A step under way is among what it waits on too: the quote.)
      if (info && !info->waiting_on.empty() && info->waiting_on.front().command == "wait_for") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::printf("order-1 started with the old code; it waits for its approval\n");
    return 0;
  }
  engine->register_workflow(kOrder, order_v2, kApproval);
  (void)engine->start(kOrder, "order-2", 2);
  for (const char* id : {"order-1", "order-2"}) {
    engine->signal(id, kApproval, true, std::string("approve-") + id);
    std::printf("%s: %d\n", id, engine->result(kOrder, id));
  }
}
