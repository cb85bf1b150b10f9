// A 1-step (and a 10-step) durable handler for Restate: the same work as Fusee's http_bench
// workflow (one journaled step, then the result).
import * as restate from "@restatedev/restate-sdk";

const bench = restate.service({
  name: "Bench",
  handlers: {
    oneStep: async (ctx, input) => {
      const value = await ctx.run("step", () => (input?.n ?? 0) + 1);
      return { value };
    },
    // The 10-step workload: ten journaled steps, one after another.
    tenSteps: async (ctx, input) => {
      let value = input?.n ?? 0;
      for (let step = 0; step < 10; step++) {
        const previous = value;
        value = await ctx.run("add", () => previous + 1);
      }
      return { value };
    },
  },
});

restate.endpoint().bind(bench).listen(9080);
