// A small application that embeds the engine: one workflow doubles a number
// in a step, then waits up to an hour for an approval signal. The README
// shows this code. Usage: approval [DATA_DIR] (default ./data).
#include <fusee/fusee.hpp>

#include <cstdio>

using namespace fusee;

const WorkflowRef<int, int> kDouble{"double"};
const Signal<bool> kApproval{"approval"};

int main(int argc, char** argv) {
  auto engine = Engine::open(Config::local(argc > 1 ? argv[1] : "./data"));
  engine->register_workflow(kDouble, [](Ctx& ctx, int x) -> Task<int> {
    int doubled = co_await ctx.step("double", [x] { return 2 * x; });
    auto approved = co_await ctx.wait_for(kApproval).timeout(std::chrono::hours(1));
    co_return approved.value_or(false) ? doubled : 0;
  });
  engine->start(kDouble, "job-1", 21);
  engine->signal("job-1", kApproval, true, "approve-job-1");  // an id: safe to send again
  int result = engine->result(kDouble, "job-1");
  std::printf("job-1: %d\n", result);
  return result == 42 ? 0 : 1;
}
