-- wrk: every request a 1-step invocation of Bench/oneStep (service.mjs).
wrk.method = "POST"
wrk.body = '{"n":41}'
wrk.headers["Content-Type"] = "application/json"
