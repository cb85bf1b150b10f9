// A step function that captures a dead local by reference, for
// tests/misuse_compile.sh: charge_for returns the step's awaitable, and
// its local `label` dies at that return, before the step runs. The tutorial's rule (docs/
// tutorial.md, "The rules, in short"); this program shows that an
// AddressSanitizer build of the application's tests catches the mistake
// (a use after return or free) instead of journaling garbage for good.
#include <fusee/fusee.hpp>

#include <cstdio>
#include <string>

const fusee::WorkflowRef<int, std::string> kDangling{"dangling"};

auto charge_for(fusee::Ctx& ctx, int order) {
  std::string label = "order " + std::to_string(order) + std::string(64, '.');
  auto charge = [&label] { return label + " charged"; };  // wrong: label dies at return
  return ctx.step("charge", charge);
}

fusee::Task<std::string> dangling(fusee::Ctx& ctx, int order) { co_return co_await charge_for(ctx, order); }

int main() {
  auto engine = fusee::Engine::open(fusee::Config::memory());
  engine->register_workflow(kDangling, dangling);
  std::printf("%s\n", engine->execute(kDangling, "d-1", 0).c_str());
  engine->shutdown();
  return 0;
}
