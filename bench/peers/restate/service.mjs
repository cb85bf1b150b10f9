// A 1-step durable handler for Restate: the same work as Fusee's http_bench
// workflow (one journaled step, then the result).
import * as restate from "@restatedev/restate-sdk";

const bench = restate.service({
  name: "Bench",
  handlers: {
    oneStep: async (ctx, input) => {
      const value = await ctx.run("step", () => (input?.n ?? 0) + 1);
      return { value };
    },
  },
});

restate.endpoint().bind(bench).listen(9080);
