// The application of docs/tutorial.md, which quotes this file piece by piece
// (tests/examples.sh checks that every quoted piece is here verbatim, then
// builds and runs this program, crash included).
//
// One workflow, "order": quote a price, charge it, wait for an approval
// signal, ship. Usage:
//   tutorial DATA_DIR                    run order-1 to its end and print the result
//   tutorial DATA_DIR --crash-in-charge  die by SIGKILL inside the charge step,
//                                        as a power cut would; run again
//                                        without the flag and order-1 resumes
#include <fusee/fusee.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <string_view>

using namespace fusee;

// Set from the command line: the charge step kills the process.
bool crash_in_charge = false;

const WorkflowRef<int, std::string> kOrder{"order"};
const Signal<bool> kApproval{"approval"};

Task<std::string> order(Ctx& ctx, int quantity) {
  int price = co_await ctx.step("quote", [quantity] {
    std::printf("quote: %d x 25 = %d\n", quantity, quantity * 25);
    return quantity * 25;
  });

  std::string receipt = co_await ctx.step("charge", [price](StepContext& step) {
    // A real charge would pass step.key() to the payment service, which then
    // charges once however often this step runs.
    std::printf("charge: %d, idempotency key %s\n", price, step.key().c_str());
    if (crash_in_charge) std::raise(SIGKILL);
    return "receipt " + step.key();
  });

  auto approved = co_await ctx.wait_for(kApproval).timeout(std::chrono::minutes(10));
  if (!approved.value_or(false)) co_return "not approved, refund " + receipt;

  co_await ctx.step("ship", [] { std::printf("ship: handed to the carrier\n"); });
  co_return "shipped, " + receipt;
}

int main(int argc, char** argv) {
  if (argc < 2 || (argc == 3 && std::string_view(argv[2]) != "--crash-in-charge") || argc > 3) {
    std::fprintf(stderr, "usage: tutorial DATA_DIR [--crash-in-charge]\n");
    return 2;
  }
  crash_in_charge = argc == 3;
  // Line by line, so that what was printed before a SIGKILL is not lost.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  auto engine = Engine::open(Config::local(argv[1]));
  engine->register_workflow(kOrder, order);

  auto started = engine->start(kOrder, "order-1", 3);
  std::printf("start: %s\n", started == StartOutcome::started ? "started" : "attached to the existing run");

  engine->signal("order-1", kApproval, true, "approve-order-1");
  std::printf("result: %s\n", engine->result(kOrder, "order-1").c_str());
}
