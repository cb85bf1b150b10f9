// A 1-step (and, on POST /ten, a 10-step) durable workflow for DBOS, started and awaited per HTTP request:
// the same work as Fusee's http_bench workflow (one journaled step, then the
// result), the start and result in one call like POST /v1/runs/execute.
import { DBOS } from "@dbos-inc/dbos-sdk";
import http from "node:http";

DBOS.setConfig({
  name: "fusee-peer-bench",
  systemDatabaseUrl: process.env.DBOS_SYSTEM_DATABASE_URL,
});

async function oneStep(n) {
  const value = await DBOS.runStep(async () => n + 1, { name: "step" });
  return { value };
}
const workflow = DBOS.registerWorkflow(oneStep, { name: "oneStep" });

// The 10-step workload (POST /ten): ten journaled steps, one after another.
async function tenSteps(n) {
  let value = n;
  for (let step = 0; step < 10; step++) {
    const previous = value;
    value = await DBOS.runStep(async () => previous + 1, { name: "add" });
  }
  return { value };
}
const tenStepWorkflow = DBOS.registerWorkflow(tenSteps, { name: "tenSteps" });

await DBOS.launch();

http
  .createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", async () => {
      try {
        const n = JSON.parse(body || "{}").n ?? 0;
        const chosen = request.url === "/ten" ? tenStepWorkflow : workflow;
        const handle = await DBOS.startWorkflow(chosen)(n);
        const result = await handle.getResult();
        response.writeHead(200, { "content-type": "application/json" });
        response.end(JSON.stringify(result));
      } catch (error) {
        response.writeHead(500, { "content-type": "text/plain" });
        response.end(String(error));
      }
    });
  })
  .listen(9090);
