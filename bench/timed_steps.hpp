// The timed workflow the engine benchmarks share (engine_bench,
// checkpoint_bench): a run of n no-op steps that writes each step's latency
// (the time between its completion and the previous one's; the first's:
// since the workflow body began), read with std::chrono::steady_clock. The
// clock is the benchmark's, not the engine's: the timing never enters the
// journal.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "fusee/fusee.hpp"

namespace fusee::bench {

// Steps of the untimed warm-up run each measurement starts first: enough for
// the log's first segment, the writer and the shard threads to be up and
// running before the timed runs, few enough to cost little on a slow disk.
inline constexpr std::uint32_t kWarmupSteps = 20;

// "noop-0", "noop-1", ...: made before timing, so no formatting in the loop.
inline std::vector<std::string> make_step_names(std::uint32_t count) {
  std::vector<std::string> names;
  names.reserve(count);
  for (std::uint32_t step = 0; step < count; ++step) names.push_back(fmt::format("noop-{}", step));
  return names;
}

// Where the timed runs write their step latencies: run i owns slots
// [i * steps_per_run, (i + 1) * steps_per_run); run index `runs` is the
// warm-up run, with its own slots. Each run writes only its own slots, from
// its shard's thread; the main thread reads them only after every result()
// has returned, which orders the writes before the reads.
struct StepTimes {
  std::uint32_t runs = 0;
  std::uint32_t steps_per_run = 0;
  std::vector<std::string> step_names;
  std::vector<double> step_us;
  std::vector<double> warmup_us;

  StepTimes(std::uint32_t runs_in, std::uint32_t steps)
      : runs(runs_in),
        steps_per_run(steps),
        step_names(make_step_names(std::max(steps, kWarmupSteps))),
        step_us(std::size_t(runs_in) * steps, 0.0),
        warmup_us(kWarmupSteps) {}
  std::uint32_t warmup_index() const { return runs; }
  std::uint32_t steps_of(std::uint32_t run_index) const {
    return run_index == warmup_index() ? kWarmupSteps : steps_per_run;
  }
};

// In: the run's index into StepTimes. Out: the steps it took.
using TimedStepsRef = WorkflowRef<std::uint32_t, std::uint32_t>;

inline Task<std::uint32_t> timed_steps(Ctx& ctx, std::uint32_t run_index, StepTimes* times) {
  using Clock = std::chrono::steady_clock;
  if (run_index > times->warmup_index())
    throw TerminalError(fmt::format("run index {} past the benchmark's {} runs", run_index, times->runs));
  const std::uint32_t steps = times->steps_of(run_index);
  double* out = run_index == times->warmup_index()
                    ? times->warmup_us.data()
                    : times->step_us.data() + std::size_t(run_index) * times->steps_per_run;
  auto previous = Clock::now();
  for (std::uint32_t step = 0; step < steps; ++step) {
    co_await ctx.step(times->step_names[step], [] {});
    auto completed = Clock::now();
    out[step] = std::chrono::duration<double, std::micro>(completed - previous).count();
    previous = completed;
  }
  co_return steps;
}

inline void register_timed(Engine& engine, const TimedStepsRef& ref, StepTimes* times) {
  engine.register_workflow(ref, [times](Ctx& ctx, std::uint32_t run_index) { return timed_steps(ctx, run_index, times); });
}

}  // namespace fusee::bench
