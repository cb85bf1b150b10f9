// An application that serves the HTTP/JSON API (docs/http-api.md) from its
// own engine: "order" quotes a price, reports progress on a stream, waits
// for an approval signal and returns the total; "payment" takes tips as
// updates until a payment provider completes its awakeable; "batch" starts
// that many orders at once, each a child run of its own, and sums them. Any
// process can then start, signal, update, cancel and read them with curl.
//
// Usage: http_service DATA_DIR [HOST:PORT] (default 127.0.0.1:8080; port 0
// picks a free one), or http_service --remote ADDR [HOST:PORT [SHARDS_MAX]]
// to run as a worker of `fusee server` at ADDR (its --http then passes calls
// on to this worker), holding at most SHARDS_MAX shards when given
// (Config::server_shards_max: calls for the other workers' runs go to them
// through the server). Prints "listening on HOST:PORT"; SIGINT or SIGTERM shuts it down
// cleanly.
#include <fusee/fusee.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

using namespace fusee;

const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kApproval{"approval"};
const WorkflowRef<int, int> kPayment{"payment"};
const Update<int, int> kAddTip{"add_tip"};
const WorkflowRef<int, int> kBatch{"batch"};

int main(int argc, char** argv) {
  const bool remote = argc > 1 && std::string_view(argv[1]) == "--remote";
  const int first = remote ? 2 : 1;
  if (argc < first + 1 || argc > first + (remote ? 3 : 2)) {
    std::fprintf(stderr,
                 "usage: http_service DATA_DIR [HOST:PORT]\n       http_service --remote ADDR [HOST:PORT [SHARDS_MAX]]\n");
    return 2;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before any thread starts

  auto config = remote ? Config::remote(argv[first]) : Config::local(argv[first]);
  config.http_listen = argc > first + 1 ? argv[first + 1] : "127.0.0.1:8080";
  if (argc > first + 2) config.server_shards_max = static_cast<std::uint32_t>(std::strtoul(argv[first + 2], nullptr, 10));
  auto engine = Engine::open(config);
  engine->register_workflow(kOrder, [](Ctx& ctx, int quantity) -> Task<int> {
    int quote = co_await ctx.step("quote", [quantity] { return quantity * 25; });
    co_await ctx.stream("progress").write(quote);
    auto approval = co_await ctx.wait_for(kApproval);
    int total = quote + approval.value_or(0);
    co_await ctx.stream("progress").write(total);
    co_return total;
  }, kApproval);  // the signals it takes, with their types: others are refused
  engine->register_workflow(kPayment, [](Ctx& ctx, int amount) -> Task<int> {
    // The token goes to the payment provider, which completes it with the
    // amount it charged; meanwhile tips may be added, and answered.
    auto charged = ctx.awakeable<int>("charged");
    ctx.on_query("token", [token = charged.token] { return token; });
    ctx.on_update(kAddTip, [](const int& tip) { return tip >= 0 ? "" : "a tip is not negative"; });
    auto tip = ctx.next_update(kAddTip).start();
    for (;;) {
      if (co_await ctx.any(tip, charged.future) == 1) break;
      auto request = co_await tip;
      amount += request.arg;
      co_await ctx.reply(request, amount);
      tip = ctx.next_update(kAddTip).start();
    }
    co_return co_await charged.future;
  });
  engine->register_workflow(kBatch, [](Ctx& ctx, int orders) -> Task<int> {
    // Started together, the orders run (and wait for their approvals) at
    // once: <batch id>-1, <batch id>-2, ...
    std::vector<Future<int>> started;
    for (int order = 1; order <= orders; ++order) {
      started.push_back(ctx.child(kOrder, ctx.run_id() + "-" + std::to_string(order), order).start());
    }
    int total = 0;
    for (int value : co_await ctx.all(started)) total += value;
    co_return total;
  });
  std::printf("listening on %s\n", engine->http_endpoint().c_str());
  std::fflush(stdout);

  int received = 0;
  sigwait(&stop_signals, &received);
  engine->shutdown();
  return 0;
}
