// What the compiler should catch in a workflow (issue 35), for
// tests/misuse_compile.sh. MISUSE selects one form:
//   0  correct code: a move-only step function, a named struct with
//      tag_invoke, every command awaited or its Future kept;
//   1  ctx.step(...) without co_await (it would never run);
//   2  ctx.sleep(...) without co_await;
//   3  a started step whose Future is dropped at once;
//   4  a step whose result type Boost.JSON cannot convert;
//   5  a signal whose value type Boost.JSON cannot convert;
//   6  .retry(...) without co_await;
//   7  a move-only step function passed by name (it cannot be copied).
// Forms 1-6 must be refused (with -Werror for 1-3 and 6), each with the
// message the check looks for.
#include <fusee/fusee.hpp>

#include <memory>
#include <string>

#ifndef MISUSE
#define MISUSE 0
#endif

struct Receipt {
  std::string id;
  int cents = 0;
};
void tag_invoke(const boost::json::value_from_tag&, boost::json::value& json, const Receipt& receipt) {
  json = {{"id", receipt.id}, {"cents", receipt.cents}};
}
Receipt tag_invoke(const boost::json::value_to_tag<Receipt>&, const boost::json::value& json) {
  return Receipt{boost::json::value_to<std::string>(json.at("id")), boost::json::value_to<int>(json.at("cents"))};
}

struct Opaque {  // no conversion to JSON
  int secret = 0;
};

const fusee::Signal<int> kGo{"go"};
const fusee::Signal<Opaque> kOpaque{"opaque"};

fusee::Task<int> flow(fusee::Ctx& ctx, int input) {
  // Move-only: owns a unique_ptr (std::function alone would refuse it).
  auto owned = std::make_unique<int>(input);
  auto charge = [owned = std::move(owned)] { return Receipt{"r-" + std::to_string(*owned), *owned}; };
  Receipt receipt = co_await ctx.step("charge", fusee::moved(charge));
#if MISUSE == 1
  auto noop = [] { return 1; };
  ctx.step("forgotten", noop);
#elif MISUSE == 2
  ctx.sleep("forgotten", std::chrono::seconds(1));
#elif MISUSE == 3
  auto noop = [] { return 1; };
  ctx.step("dropped", noop).start();
#elif MISUSE == 4
  auto opaque = [] { return Opaque{1}; };
  (void)co_await ctx.step("opaque", opaque);
#elif MISUSE == 5
  (void)co_await ctx.wait_for(kOpaque);
#elif MISUSE == 6
  auto noop = [] { return 1; };
  std::move(ctx.step("forgotten", noop)).retry(fusee::RetryPolicy{});
#elif MISUSE == 7
  auto again = [owned = std::make_unique<int>(1)] { return *owned; };
  (void)co_await ctx.step("again", again);
#endif
  auto notify = [] { return 1; };
  auto notified = ctx.step("notify", notify).start();
  auto go = co_await ctx.wait_for(kGo);
  co_return receipt.cents + co_await notified + go.value_or(0);
}

int main() {
  auto engine = fusee::Engine::open(fusee::Config::memory());
  engine->register_workflow(fusee::WorkflowRef<int, int>{"flow"}, flow);
  engine->shutdown();
  return 0;
}
