-- wrk (scripts/peer-bench): every request one call of a peer's 1-step workflow.
wrk.method = "POST"
wrk.body = '{"n":41}'
wrk.headers["Content-Type"] = "application/json"
