// The "waits" workflow of the code-change and reset tests: a step (named by
// the test, so that a change of code can rename it) that returns the input,
// then a wait for signal "go"; the result is the input plus the signal.
#pragma once

#include <string>

#include "tests/engine/engine_harness.hpp"

namespace fusee::testing {

inline const WorkflowRef<int, int> kWaits{"waits"};
inline const Signal<int> kWaitsGo{"go"};

inline void register_waits(Engine& engine, const std::string& step_name) {
  engine.register_workflow(kWaits, [step_name](Ctx& ctx, int input) -> Task<int> {
    auto a = [input] { return input; };
    int x = co_await ctx.step(step_name, a);
    auto go = co_await ctx.wait_for(kWaitsGo);
    co_return x + go.value_or(0);
  });
}

}  // namespace fusee::testing
