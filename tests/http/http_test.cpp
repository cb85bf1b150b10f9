// The HTTP/JSON API (http/), served by an engine with
// Config::http_listen: every route, its errors, the bearer token, and
// streams as NDJSON and as server-sent events resumed with Last-Event-ID.
// A real socket and a Beast client, so the bytes on the wire are checked.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fusee/fusee.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "tests/engine/engine_harness.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/temp_dir.hpp"

using namespace fusee;
namespace beast_http = boost::beast::http;
namespace json = boost::json;
using fusee::testing::call;
using fusee::testing::raw;
using fusee::testing::Reply;
using namespace std::chrono_literals;

namespace {

const WorkflowRef<int, int> kOrder{"order"};
const WorkflowRef<std::string, std::string> kEcho{"echo"};
const WorkflowRef<int, int> kNap{"nap"};
const Signal<int> kApproval{"approval"};

struct Served {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::unique_ptr<Engine> engine;
  std::string at;
  explicit Served(Config config) {
    config.clock = clock;
    config.http_listen = "127.0.0.1:0";
    engine = Engine::open(config);
    engine->register_workflow(kOrder, [](Ctx& ctx, int amount) -> Task<int> {
      int quote = co_await ctx.step("quote", [amount] { return amount * 10; });
      co_await ctx.stream("progress").write(quote);
      auto approval = co_await ctx.wait_for(kApproval);
      int total = quote + approval.value_or(0);
      co_await ctx.stream("progress").write(total);
      co_return total;
    }, kApproval);
    engine->register_workflow(kEcho, [](Ctx& ctx, std::string text) -> Task<std::string> {
      co_return co_await ctx.step("echo", [text] { return text; });
    });
    engine->register_workflow(kNap, [](Ctx& ctx, int input) -> Task<int> {
      co_await ctx.sleep("nap", std::chrono::hours(1));
      co_return input;
    });
    at = engine->http_endpoint();
  }
};

Config memory_config() {
  auto config = Config::memory();
  config.shards = 2;
  return config;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("http: start, execute, get, list, signal, cancel, health and metrics") {
    Served served(memory_config());
    const auto& at = served.at;
    REQUIRE_FALSE(at.empty());

    auto health = call(at, beast_http::verb::get, "/healthz");
    CHECK(health.status == 200);
    CHECK(health.json().at("status") == "ok");

    auto started = call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"o-1","input":4})");
    CHECK(started.status == 201);
    CHECK(started.json().at("outcome") == "started");
    auto again = call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"o-1","input":4})");
    CHECK(again.status == 200);
    CHECK(again.json().at("outcome") == "attached");

    auto running = call(at, beast_http::verb::get, "/v1/runs/o-1");
    CHECK(running.status == 200);
    CHECK(running.json().at("status") == "running");
    CHECK(running.json().at("workflow") == "order");
    CHECK(running.json().at("finished_at_ms").is_null());
    CHECK(running.json().at("stuck_position").is_null());
    // What it waits on: once its code reached the wait, the signal.
    json::value waiting;
    CHECK(fusee::testing::eventually([&] {
      waiting = call(at, beast_http::verb::get, "/v1/runs/o-1").json().at("waiting_on");
      return !waiting.as_array().empty() && waiting.as_array()[0].at("command") == "wait_for";
    }));
    REQUIRE(waiting.as_array().size() == 1);
    CHECK(waiting.as_array()[0].at("name") == "approval");
    CHECK(waiting.as_array()[0].at("position") == 2);  // after the step and the stream's write
    CHECK(waiting.as_array()[0].at("due_ms").is_null());  // no timeout

    auto signalled = call(at, beast_http::verb::post, "/v1/runs/o-1/signals/approval", R"({"value":2,"signal_id":"a-1"})");
    CHECK(signalled.status == 202);
    CHECK(served.engine->result(kOrder, "o-1") == 42);
    auto repeat = call(at, beast_http::verb::post, "/v1/runs/o-1/signals/approval", R"({"value":3,"signal_id":"a-1"})");
    CHECK(repeat.status == 202);  // the same id again: acknowledged, dropped
    auto done = call(at, beast_http::verb::get, "/v1/runs/o-1").json();
    CHECK(done.at("status") == "completed");
    CHECK(done.at("result") == 42);
    CHECK(done.at("finished_at_ms").is_int64());

    auto executed = call(at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"e-1","input":"hi"})");
    CHECK(executed.status == 200);
    CHECK(executed.json().at("status") == "completed");
    CHECK(executed.json().at("result") == "hi");
    auto journal = call(at, beast_http::verb::get, "/v1/runs/e-1/journal");
    CHECK(journal.status == 200);
    auto journal_json = journal.json();
    const auto& commands = journal_json.at("commands").as_array();
    REQUIRE(commands.size() == 1);
    CHECK(commands[0].at("command") == "step");
    CHECK(commands[0].at("name") == "echo");
    CHECK(commands[0].at("outcome") == "completed");
    CHECK(commands[0].at("value") == "hi");
    CHECK(journal_json.at("records").as_array().back().at("kind") == "run_completed");
    auto slow = call(at, beast_http::verb::post, "/v1/runs/execute?timeout_ms=50", R"({"workflow":"nap","id":"n-1","input":1})");
    CHECK(slow.status == 504);
    CHECK(slow.error() == "timed_out");

    call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"o-2","input":1})");
    auto cancelled = call(at, beast_http::verb::post, "/v1/runs/o-2/cancel", R"({"reason":"no longer wanted"})");
    CHECK(cancelled.status == 202);
    CHECK(cancelled.json().at("cancelled") == true);
    // The cancel is accepted; the run ends once its code lets it through.
    // Attaching with execute waits for that.
    auto ended = call(at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"order","id":"o-2","input":1})");
    CHECK(ended.json().at("status") == "cancelled");
    auto after = call(at, beast_http::verb::get, "/v1/runs/o-2").json();
    CHECK(after.at("status") == "cancelled");
    CHECK(after.at("error").as_string().find("no longer wanted") != json::string::npos);

    auto all = call(at, beast_http::verb::get, "/v1/runs").json();
    CHECK(all.at("runs").as_array().size() == 4);
    auto orders = call(at, beast_http::verb::get, "/v1/runs?workflow=order").json();
    CHECK(orders.at("runs").as_array().size() == 2);
    auto completed = call(at, beast_http::verb::get, "/v1/runs?status=completed").json();
    CHECK(completed.at("runs").as_array().size() == 2);
    auto first = call(at, beast_http::verb::get, "/v1/runs?limit=3").json();
    REQUIRE(first.at("runs").as_array().size() == 3);
    REQUIRE(first.at("next_cursor").is_string());
    auto second = call(at, beast_http::verb::get,
                       "/v1/runs?limit=3&cursor=" + std::string(first.at("next_cursor").as_string())).json();
    CHECK(second.at("runs").as_array().size() == 1);
    CHECK(second.at("next_cursor").is_null());
    CHECK(first.at("total") == 4);
    CHECK(first.at("total_exact") == true);
    CHECK(first.at("previous_cursor").is_null());
    // Back from the second page: the first again.
    auto back = call(at, beast_http::verb::get,
                     "/v1/runs?limit=3&cursor=" + std::string(second.at("previous_cursor").as_string())).json();
    CHECK(back.at("runs") == first.at("runs"));
    CHECK(call(at, beast_http::verb::get, "/v1/runs?cursor=nonsense").status == 400);
    CHECK(call(at, beast_http::verb::get, "/v1/runs?order=sideways").status == 400);
    // The console's filters: an id prefix, a start time range [from, to).
    auto ids_of = [&](const std::string& target) {
      std::vector<std::string> ids;
      auto page = call(at, beast_http::verb::get, target).json();
      for (const auto& run : page.at("runs").as_array()) {
        ids.emplace_back(run.at("id").as_string());
      }
      return ids;
    };
    CHECK(ids_of("/v1/runs?id_prefix=o-&order=id") == std::vector<std::string>{"o-1", "o-2"});
    // Newest first by default; the workflow filter is a prefix, in any case.
    CHECK(ids_of("/v1/runs?id_prefix=o-") == std::vector<std::string>{"o-2", "o-1"});
    CHECK(ids_of("/v1/runs?workflow=ORD&order=id") == std::vector<std::string>{"o-1", "o-2"});
    CHECK(ids_of("/v1/runs?id_prefix=o-&status=cancelled") == std::vector<std::string>{"o-2"});
    CHECK(ids_of("/v1/runs?id_prefix=zz").empty());
    const auto o2_started = after.at("started_at_ms").as_int64();
    auto from_o2 = ids_of(fmt::format("/v1/runs?started_from_ms={}", o2_started));
    CHECK(std::find(from_o2.begin(), from_o2.end(), "o-2") != from_o2.end());
    auto before_o2 = ids_of(fmt::format("/v1/runs?started_to_ms={}", o2_started));
    CHECK(std::find(before_o2.begin(), before_o2.end(), "o-2") == before_o2.end());
    CHECK(ids_of("/v1/runs?started_from_ms=0&started_to_ms=1").empty());
    CHECK(ids_of("/v1/runs?started_from_ms=1").size() == 4);
    for (const char* bad : {"/v1/runs?started_from_ms=yesterday", "/v1/runs?started_to_ms=-5"}) {
      auto refused = call(at, beast_http::verb::get, bad);
      CHECK(refused.status == 400);
      CHECK(refused.error() == "invalid_argument");
    }
    // Not fusee server's front: the console's engine page shows this engine only.
    CHECK(call(at, beast_http::verb::get, "/v1/server").json().at("server") == false);

    auto metrics = call(at, beast_http::verb::get, "/metrics");
    CHECK(metrics.status == 200);
    CHECK(metrics.headers["Content-Type"].starts_with("text/plain"));
    CHECK(metrics.body.find("fusee_runs{status=\"completed\"} 2") != std::string::npos);
    CHECK(metrics.body.find("fusee_runs{status=\"running\"} 1") != std::string::npos);
    CHECK(metrics.body.find("fusee_runs{status=\"stuck\"} 0") != std::string::npos);
    CHECK(metrics.body.find("# TYPE fusee_flushes_total counter") != std::string::npos);
    CHECK(metrics.body.find("# TYPE fusee_flush_duration_seconds histogram") != std::string::npos);
    CHECK(metrics.body.find("fusee_flush_duration_seconds_bucket{le=\"5e-05\"}") != std::string::npos);  // 50 us
    CHECK(metrics.body.find("fusee_flush_duration_seconds_bucket{le=\"+Inf\"}") != std::string::npos);
    CHECK(metrics.body.find("fusee_staged_bytes") != std::string::npos);

    // The same as JSON.
    auto stats = call(at, beast_http::verb::get, "/v1/stats");
    CHECK(stats.status == 200);
    auto figures = stats.json();
    CHECK(figures.at("runs").at("completed") == 2);
    CHECK(figures.at("runs").at("running") == 1);
    CHECK(figures.at("runs").at("stuck") == 0);
    CHECK(figures.at("shards").as_int64() >= 1);
    const auto& latency = figures.at("flush_latency").as_object();
    CHECK(latency.at("bounds_us").as_array().front() == 50);
    CHECK(latency.at("counts").as_array().size() == latency.at("bounds_us").as_array().size() + 1);
    CHECK(figures.at("log_error").is_null());
    CHECK(call(at, beast_http::verb::post, "/v1/stats").status == 405);
    CHECK(figures.at("runs_started") == 4);
    CHECK(figures.at("runs_finished") == 3);  // o-1, e-1 completed; o-2 cancelled
    CHECK(figures.at("runs_failed") == 0);
    CHECK(figures.at("steps_completed").to_number<std::uint64_t>() >= 2);
    CHECK(metrics.body.find("fusee_runs_started_total 4") != std::string::npos);
    CHECK(metrics.body.find("fusee_runs_finished_total 3") != std::string::npos);
    // The sleeping run, in the list, says what it sleeps on and until when.
    auto naps = call(at, beast_http::verb::get, "/v1/runs?workflow=nap").json().at("runs").as_array();
    REQUIRE(naps.size() == 1);
    const auto& nap_wait = naps[0].at("waiting_on").as_array();
    REQUIRE(nap_wait.size() == 1);
    CHECK(nap_wait[0].at("command") == "sleep");
    CHECK(nap_wait[0].at("name") == "nap");
    CHECK(nap_wait[0].at("due_ms").as_int64() == naps[0].at("started_at_ms").as_int64() + 3'600'000);
    // Its history, a sample a second (the first comes a second after open).
    auto activity = call(at, beast_http::verb::get, "/v1/stats/activity");
    CHECK(activity.status == 200);
    CHECK(activity.json().at("samples").is_array());
    CHECK(call(at, beast_http::verb::post, "/v1/stats/activity").status == 405);
    CHECK(call(at, beast_http::verb::get, "/v1/stats/nothing").status == 404);
    // A local engine is no replica: its cluster is empty.
    auto cluster = call(at, beast_http::verb::get, "/v1/cluster");
    CHECK(cluster.status == 200);
    CHECK(cluster.json().at("replicated") == false);
    CHECK(cluster.json().at("replicas").as_array().empty());
    CHECK(call(at, beast_http::verb::delete_, "/v1/cluster").status == 405);
  }

  TEST_CASE("http: terminate ends a run at once; cancel and terminate of a finished run change nothing") {
    Served served(memory_config());
    const auto& at = served.at;
    REQUIRE(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"nap","id":"n-1","input":1})").status == 201);
    auto terminated = call(at, beast_http::verb::post, "/v1/runs/n-1/terminate", R"({"reason":"operator"})");
    CHECK(terminated.status == 202);
    CHECK(terminated.json().at("terminated") == true);
    auto run = call(at, beast_http::verb::get, "/v1/runs/n-1").json();  // ended when terminate answered
    CHECK(run.at("status") == "cancelled");
    CHECK(run.at("error") == "run 'n-1' was terminated: operator");
    CHECK(call(at, beast_http::verb::post, "/v1/runs/n-1/cancel").status == 202);
    CHECK(call(at, beast_http::verb::post, "/v1/runs/n-1/terminate").status == 202);
    CHECK(call(at, beast_http::verb::get, "/v1/runs/n-1").json().at("error") == "run 'n-1' was terminated: operator");
  }

  TEST_CASE("http: a start says when the id runs with another input, and a declared signal refuses other values") {
    Served served(memory_config());
    const auto& at = served.at;
    auto expect = [&](const Reply& reply, unsigned status, const std::string& error) {
      CHECK(reply.status == status);
      CHECK(reply.error() == error);
    };
    REQUIRE(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"twice","input":1})").status == 201);
    auto again = call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"twice","input":2})");
    CHECK(again.status == 200);
    CHECK(again.json().at("outcome") == "attached_other_input");
    expect(call(at, beast_http::verb::post, "/v1/runs",
                R"({"workflow":"order","id":"twice","input":2,"if_input_differs":"reject"})"),
           409, "conflict");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"twice","input":1,"if_running":"reject"})"),
           409, "already_exists");
    // The order declares its approval signal: a value of another type, or
    // another signal, is refused and records nothing.
    expect(call(at, beast_http::verb::post, "/v1/runs/twice/signals/approval", R"({"value":"ten"})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/twice/signals/refund", R"({"value":1})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/twice/signals/approval", R"({"value":1,"id":"a"})"), 400,
           "invalid_argument");
    CHECK(call(at, beast_http::verb::post, "/v1/runs/twice/signals/approval", R"({"value":5})").status == 202);
  }

  TEST_CASE("http: a query answers from a running run") {
    Config config = memory_config();
    config.clock = std::make_shared<ManualClock>();
    config.http_listen = "127.0.0.1:0";
    auto engine = Engine::open(config);
    const WorkflowRef<int, int> counter{"counter"};
    engine->register_workflow(counter, [](Ctx& ctx, int start) -> Task<int> {
      int total = start;
      ctx.on_query<int>("times", [&total](int factor) { return total * factor; });
      ctx.on_query("odd", []() -> int { throw "not ready"; });  // no std::exception
      (void)co_await ctx.wait_for(kApproval);
      co_return total;
    });
    const auto at = engine->http_endpoint();
    REQUIRE(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"counter","id":"q-1","input":7})").status == 201);
    // A handler throwing what is no std::exception once ended the process
    // for any client that asked; now it is the query's failure alone.
    auto odd = call(at, beast_http::verb::post, "/v1/runs/q-1/queries/odd");
    CHECK(odd.status >= 400);
    CHECK(odd.body.find("not a std::exception") != std::string::npos);
    auto answered = call(at, beast_http::verb::post, "/v1/runs/q-1/queries/times", R"({"arg":3})");
    CHECK(answered.status == 200);
    CHECK(answered.json().at("answer") == 21);
    CHECK(call(at, beast_http::verb::post, "/v1/runs/q-1/queries/times", R"({"arg":"x"})").status == 400);
    CHECK(call(at, beast_http::verb::post, "/v1/runs/q-1/queries/nothing").status == 404);
    CHECK(call(at, beast_http::verb::post, "/v1/runs/q-1/queries/times", R"({"argument":3})").status == 400);
    CHECK(call(at, beast_http::verb::get, "/v1/runs/q-1/queries/times").status == 405);
    CHECK(call(at, beast_http::verb::post, "/v1/runs/nobody/queries/times").status == 404);
    engine->shutdown();
  }

  TEST_CASE("http: updates wait for the code's answer, by id; awakeables complete by token") {
    Config config = memory_config();
    config.clock = std::make_shared<ManualClock>();
    config.http_listen = "127.0.0.1:0";
    auto engine = Engine::open(config);
    const WorkflowRef<int, int> cart{"cart"};
    const Update<int, int> add{"add"};
    engine->register_workflow(cart, [add](Ctx& ctx, int total) -> Task<int> {
      ctx.on_update(add, [](const int& n) { return n > 0 ? "" : "add a positive number"; });
      auto paid = ctx.awakeable<int>("paid");
      ctx.on_query("token", [token = paid.token] { return token; });
      for (;;) {
        auto request = co_await ctx.next_update(add);
        if (request.arg == 13) {
          co_await ctx.reply_error(request, "13 is unlucky");
          continue;
        }
        total += request.arg;
        co_await ctx.reply(request, total);
        if (request.arg == 100) break;
      }
      co_return total + co_await paid.future;
    });
    const auto at = engine->http_endpoint();
    auto expect = [&](const Reply& reply, unsigned status, const std::string& error) {
      CHECK(reply.status == status);
      CHECK(reply.error() == error);
    };
    // Update-with-start, then by id: the same answer again.
    auto first = call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add",
                      R"({"arg":2,"update_id":"u-1","start":{"workflow":"cart","input":10}})");
    CHECK(first.status == 200);
    CHECK(first.json().at("status") == "completed");
    CHECK(first.json().at("result") == 12);
    CHECK(first.json().at("update_id") == "u-1");
    auto again = call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add", R"({"arg":5,"update_id":"u-1"})");
    CHECK(again.json().at("result") == 12);
    // Without an id the engine names one.
    auto named = call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add", R"({"arg":3})");
    CHECK(named.json().at("result") == 15);
    CHECK(named.json().at("update_id").as_string().starts_with("update-"));
    auto unlucky = call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add", R"({"arg":13})");
    CHECK(unlucky.status == 200);
    CHECK(unlucky.json().at("status") == "failed");
    CHECK(unlucky.json().at("error").at("message").as_string().find("13 is unlucky") != std::string::npos);
    expect(call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add", R"({"arg":0})"), 422, "rejected");
    expect(call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add", R"({"arg":"x"})"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/c-1/updates/remove", R"({"arg":1})"), 404, "not_found");
    expect(call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add", R"({"value":1})"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add", R"({"arg":1,"start":{"id":"x"}})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add?timeout_ms=0", R"({"arg":1})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::get, "/v1/runs/c-1/updates/add"), 405, "method_not_allowed");
    expect(call(at, beast_http::verb::post, "/v1/runs/nobody/updates/add", R"({"arg":1})"), 404, "not_found");

    // Awakeables: a token a caller got from a query.
    auto token = call(at, beast_http::verb::post, "/v1/runs/c-1/queries/token").json().at("answer").as_string();
    std::string path = "/v1/awakeables/" + std::string(token);
    expect(call(at, beast_http::verb::post, "/v1/awakeables/nonsense/complete", R"({"value":1})"), 400,
           "invalid_argument");
    auto wrong = path;
    wrong.back() = wrong.back() == '0' ? '1' : '0';
    expect(call(at, beast_http::verb::post, wrong + "/complete", R"({"value":1})"), 404, "not_found");
    expect(call(at, beast_http::verb::post, path + "/fail", R"({"value":1})"), 400, "invalid_argument");
    auto completed = call(at, beast_http::verb::post, path + "/complete", R"({"value":1000})");
    CHECK(completed.status == 200);
    CHECK(completed.json().at("status") == "completed");
    CHECK(call(at, beast_http::verb::post, path + "/complete", R"({"value":1000})").status == 200);  // a repeat
    expect(call(at, beast_http::verb::post, path + "/complete", R"({"value":1})"), 409, "already_exists");
    expect(call(at, beast_http::verb::post, path + "/fail", R"({"message":"no"})"), 409, "already_exists");
    // An update that ends the run; its answer comes first.
    CHECK(call(at, beast_http::verb::post, "/v1/runs/c-1/updates/add", R"({"arg":100})").json().at("result") == 115);
    CHECK(engine->result(cart, "c-1") == 1115);
    // After the run ended: the repeat is still acknowledged, another value refused.
    CHECK(call(at, beast_http::verb::post, path + "/complete", R"({"value":1000})").status == 200);
    expect(call(at, beast_http::verb::post, path + "/complete", R"({"value":1})"), 409, "already_exists");
    engine->shutdown();
  }

  TEST_CASE("http: an update not answered in time gets 504 naming its id, and the same id answers later") {
    Config config = memory_config();
    config.http_listen = "127.0.0.1:0";
    auto engine = Engine::open(config);
    const WorkflowRef<int, int> slow{"slow"};
    const Update<int, int> ask{"ask"};
    engine->register_workflow(slow, [ask](Ctx& ctx, int) -> Task<int> {
      ctx.on_update(ask);
      (void)co_await ctx.wait_for(kApproval);  // takes no update before approval
      auto request = co_await ctx.next_update(ask);
      co_await ctx.reply(request, request.arg * 2);
      co_return 0;
    });
    const auto at = engine->http_endpoint();
    REQUIRE(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"slow","id":"w-1","input":0})").status == 201);
    auto late = call(at, beast_http::verb::post, "/v1/runs/w-1/updates/ask?timeout_ms=50", R"({"arg":21,"update_id":"q"})");
    CHECK(late.status == 504);
    CHECK(late.error() == "timed_out");
    CHECK(late.json().at("message").as_string().find("\"update_id\": \"q\"") != std::string::npos);
    CHECK(call(at, beast_http::verb::post, "/v1/runs/w-1/signals/approval", R"({"value":1})").status == 202);
    auto answered = call(at, beast_http::verb::post, "/v1/runs/w-1/updates/ask", R"({"arg":0,"update_id":"q"})");
    CHECK(answered.json().at("result") == 42);
    engine->shutdown();
  }

  TEST_CASE("http: reset starts a new generation from a point of the journal") {
    Served served(memory_config());
    const auto& at = served.at;
    auto executed = call(at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"e-1","input":"hi"})");
    REQUIRE(executed.json().at("status") == "completed");
    auto reset = call(at, beast_http::verb::post, "/v1/runs/e-1/reset", R"({"position":0,"reason":"again"})");
    CHECK(reset.status == 202);
    CHECK(reset.json().at("generation") == 2);
    auto again = call(at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"e-1","input":"hi"})");
    CHECK(again.json().at("status") == "completed");
    CHECK(again.json().at("result") == "hi");
    auto expect = [&](const Reply& reply, unsigned status, const std::string& error) {
      CHECK(reply.status == status);
      CHECK(reply.error() == error);
    };
    expect(call(at, beast_http::verb::post, "/v1/runs/e-1/reset", R"({})"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/e-1/reset", R"({"position":0,"after_step":"echo"})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/e-1/reset", R"({"position":-1})"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/e-1/reset", R"({"after_step":"nothing"})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/nobody/reset", R"({"position":0})"), 404, "not_found");
    expect(call(at, beast_http::verb::get, "/v1/runs/e-1/reset"), 405, "method_not_allowed");
  }

  TEST_CASE("http: streams as NDJSON and as server-sent events, resumed from an offset") {
    Served served(memory_config());
    const auto& at = served.at;
    call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"s-1","input":3})");
    call(at, beast_http::verb::post, "/v1/runs/s-1/signals/approval", R"({"value":5})");
    REQUIRE(served.engine->result(kOrder, "s-1") == 35);
    auto lines = call(at, beast_http::verb::get, "/v1/runs/s-1/streams/progress");
    CHECK(lines.status == 200);
    CHECK(lines.headers["Content-Type"] == "application/x-ndjson");
    CHECK(lines.body == "{\"offset\":0,\"value\":30}\n{\"offset\":1,\"value\":35}\n");
    auto from_one = call(at, beast_http::verb::get, "/v1/runs/s-1/streams/progress?from=1");
    CHECK(from_one.body == "{\"offset\":1,\"value\":35}\n");
    auto events = call(at, beast_http::verb::get, "/v1/runs/s-1/streams/progress", {}, {{"Accept", "text/event-stream"}});
    CHECK(events.headers["Content-Type"] == "text/event-stream");
    CHECK(events.body == "id: 0\ndata: 30\n\nid: 1\ndata: 35\n\nevent: end\ndata: {}\n\n");
    auto resumed = call(at, beast_http::verb::get, "/v1/runs/s-1/streams/progress", {},
                        {{"Accept", "text/event-stream"}, {"Last-Event-ID", "0"}});
    CHECK(resumed.body == "id: 1\ndata: 35\n\nevent: end\ndata: {}\n\n");
    CHECK(call(at, beast_http::verb::get, "/v1/runs/nobody/streams/progress").status == 404);
    CHECK(call(at, beast_http::verb::get, "/v1/runs/s-1/streams/progress?from=x").status == 400);
  }

  TEST_CASE("http: bad requests get a 4xx with a JSON error and change nothing") {
    auto config = memory_config();
    config.http_body_bytes_max = 1024;
    Served served(config);
    const auto& at = served.at;
    auto expect = [&](const Reply& reply, unsigned status, const std::string& error) {
      CHECK(reply.status == status);
      CHECK(reply.headers.at("Content-Type") == "application/json");
      CHECK(reply.error() == error);
      CHECK(reply.json().at("message").as_string().size() > 0);
    };
    expect(call(at, beast_http::verb::post, "/v1/runs", "{not json"), 400, "invalid_json");
    expect(call(at, beast_http::verb::post, "/v1/runs", "[1,2]"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"id":"x"})"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":7})"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":""})"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"nope","id":"x"})"), 404, "unknown_workflow");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"x","deadline_ms":-5})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"x","if_finished":"maybe"})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"x","input":"not a number"})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs/execute?timeout_ms=0", R"({"workflow":"echo","id":"x"})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"x","if_runing":"reject"})"), 400,
           "invalid_argument");  // a misspelt option is refused, not ignored
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"x","if_running":"maybe"})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"x","if_input_differs":"x"})"), 400,
           "invalid_argument");
    expect(call(at, beast_http::verb::get, "/v1/runs/nobody"), 404, "not_found");
    expect(call(at, beast_http::verb::post, "/v1/runs/nobody/signals/approval", R"({"value":1})"), 404, "not_found");
    expect(call(at, beast_http::verb::post, "/v1/runs/nobody/cancel"), 404, "not_found");
    expect(call(at, beast_http::verb::post, "/v1/runs/nobody/terminate"), 404, "not_found");
    expect(call(at, beast_http::verb::get, "/v1/runs/nobody/journal"), 404, "not_found");
    expect(call(at, beast_http::verb::post, "/v1/runs/nobody/journal"), 405, "method_not_allowed");
    expect(call(at, beast_http::verb::get, "/v1/runs/nobody/terminate"), 405, "method_not_allowed");
    expect(call(at, beast_http::verb::get, "/v1/runs?status=sleeping"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::get, "/v1/runs?limit=abc"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::get, "/v1/runs/%zz"), 400, "invalid_argument");
    expect(call(at, beast_http::verb::get, "/v2/things"), 404, "no_route");
    expect(call(at, beast_http::verb::get, "/nothing"), 404, "no_route");  // "/" is the console's
    auto wrong = call(at, beast_http::verb::delete_, "/v1/runs");
    expect(wrong, 405, "method_not_allowed");
    CHECK(wrong.headers["Allow"] == "GET, POST");
    expect(call(at, beast_http::verb::post, "/v1/runs", std::string(2000, ' ')), 413, "too_large");
    expect(call(at, beast_http::verb::get, "/healthz", {}, {{"X-Padding", std::string(20000, 'a')}}), 431, "too_large");
    auto garbage = raw(at, "\x16\x03\x01 this is not HTTP\r\n\r\n");
    CHECK(garbage.starts_with("HTTP/1.1 400"));
    CHECK(garbage.find("bad_request") != std::string::npos);
    // Nothing was started by any of them, and the server goes on.
    CHECK(served.engine->list_runs().empty());
    auto fine = call(at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"ok","input":"still here"})");
    CHECK(fine.json().at("result") == "still here");
  }

  TEST_CASE("http: with a token, every route but /healthz wants it") {
    fusee::testing::TempDir dir;
    auto config = Config::local(dir.path());
    config.http_token = "s3cret";
    Served served(config);
    const auto& at = served.at;
    CHECK(call(at, beast_http::verb::get, "/healthz").status == 200);
    auto missing = call(at, beast_http::verb::get, "/v1/runs");
    CHECK(missing.status == 401);
    CHECK(missing.error() == "unauthorized");
    CHECK(missing.headers["WWW-Authenticate"] == "Bearer");
    CHECK(call(at, beast_http::verb::get, "/metrics", {}, {{"Authorization", "Bearer wrong"}}).status == 401);
    // What the engine did, as for /v1/stats: the token's.
    CHECK(call(at, beast_http::verb::get, "/v1/stats/activity").status == 401);
    CHECK(call(at, beast_http::verb::get, "/v1/stats/activity", {}, {{"Authorization", "Bearer s3cret"}}).status == 200);
    CHECK(call(at, beast_http::verb::get, "/v1/cluster").status == 401);
    CHECK(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"echo","id":"t","input":"x"})",
               {{"Authorization", "Basic s3cret"}}).status == 401);
    CHECK(served.engine->list_runs().empty());
    auto ok = call(at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"t","input":"x"})",
                   {{"Authorization", "Bearer s3cret"}});
    CHECK(ok.status == 200);
    CHECK(ok.json().at("result") == "x");
    // The scheme in any case (RFC 9110); a longer or shorter token is wrong.
    CHECK(call(at, beast_http::verb::get, "/v1/runs", {}, {{"Authorization", "bearer s3cret"}}).status == 200);
    CHECK(call(at, beast_http::verb::get, "/v1/runs", {}, {{"Authorization", "BEARER s3cret"}}).status == 200);
    CHECK(call(at, beast_http::verb::get, "/v1/runs", {}, {{"Authorization", "Bearer s3cret2"}}).status == 401);
    CHECK(call(at, beast_http::verb::get, "/v1/runs", {}, {{"Authorization", "Bearer s3cre"}}).status == 401);
    CHECK(call(at, beast_http::verb::get, "/v1/runs", {}, {{"Authorization", "Bearer"}}).status == 401);
    // Two Authorization headers: refused, whichever would be right.
    auto twice = raw(at, "GET /v1/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer wrong\r\n"
                         "Authorization: Bearer s3cret\r\nConnection: close\r\n\r\n");
    CHECK_MESSAGE(twice.rfind("HTTP/1.1 400", 0) == 0, twice);
    CHECK(twice.find("two Authorization headers") != std::string::npos);
    // HEAD: GET's status and headers, no body.
    auto head = raw(at, "HEAD /v1/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n");
    CHECK_MESSAGE(head.rfind("HTTP/1.1 200", 0) == 0, head);
    const auto end_of_headers = head.find("\r\n\r\n");
    REQUIRE(end_of_headers != std::string::npos);
    CHECK_MESSAGE(head.size() == end_of_headers + 4, "HEAD sent a body: " << head);
    CHECK(head.find("Content-Length: 0") == std::string::npos);  // GET's length, though nothing follows
  }

  TEST_CASE("http: the console's files are served from the binary, with a strict policy and no token") {
    fusee::testing::TempDir dir;
    auto config = Config::local(dir.path());
    config.http_token = "s3cret";  // the page asks for it; its files do not need it
    Served served(config);
    const auto& at = served.at;
    auto root = call(at, beast_http::verb::get, "/");
    CHECK(root.status == 302);
    CHECK(root.headers["Location"] == "/ui/");
    auto page = call(at, beast_http::verb::get, "/ui/");
    CHECK(page.status == 200);
    CHECK(page.headers["Content-Type"] == "text/html; charset=utf-8");
    CHECK(page.body.find("<script type=\"module\" src=\"/ui/console.js\">") != std::string::npos);
    CHECK(page.headers["Content-Security-Policy"].find("default-src 'none'") != std::string::npos);
    CHECK(page.headers["Content-Security-Policy"].find("connect-src 'self'") != std::string::npos);
    CHECK(page.headers["X-Content-Type-Options"] == "nosniff");
    auto script = call(at, beast_http::verb::get, "/ui/console.js");
    CHECK(script.status == 200);
    CHECK(script.headers["Content-Type"] == "text/javascript; charset=utf-8");
    CHECK(call(at, beast_http::verb::get, "/ui/console.css").headers["Content-Type"] == "text/css; charset=utf-8");
    CHECK(call(at, beast_http::verb::get, "/ui/index.html").body == page.body);
    CHECK(call(at, beast_http::verb::get, "/ui/nothing.js").status == 404);
    CHECK(call(at, beast_http::verb::post, "/ui/").status == 405);
    CHECK(call(at, beast_http::verb::get, "/v1/stats").status == 401);  // the API still wants the token
  }

  TEST_CASE("http: schedules and queues have their routes; step limits show in /metrics and /v1/stats") {
    Served served(memory_config());
    const auto& at = served.at;
    served.engine->limit("payments", StepLimit{.concurrent = 2, .per_second = 5});
    auto metrics = call(at, beast_http::verb::get, "/metrics");
    CHECK(metrics.body.find("fusee_limit_permits_in_use{limit=\"payments\"} 0") != std::string::npos);
    CHECK(metrics.body.find("fusee_limit_waiting{limit=\"payments\"} 0") != std::string::npos);
    auto stats = json::parse(call(at, beast_http::verb::get, "/v1/stats").body);
    REQUIRE(stats.at("limits").as_array().size() == 1);
    CHECK(stats.at("limits").at(0).at("name") == "payments");
    CHECK(stats.at("limits").at(0).at("concurrent") == 2);

    auto made = call(at, beast_http::verb::post, "/v1/schedules",
                     R"({"id":"s","spec":{"every_ms":60000},"workflow":"echo","input":"hi"})");
    CHECK(made.status == 201);
    CHECK(json::parse(made.body).at("spec").at("every_ms") == 60000);
    CHECK(call(at, beast_http::verb::post, "/v1/schedules", R"({"id":"s","spec":{"every_ms":60000},"workflow":"echo"})")
              .status == 409);
    CHECK(call(at, beast_http::verb::post, "/v1/schedules", R"({"id":"t","spec":{"every_ms":-1},"workflow":"echo"})")
              .status == 400);
    CHECK(call(at, beast_http::verb::post, "/v1/schedules/s/pause", R"({"note":"x"})").status == 200);
    CHECK(call(at, beast_http::verb::post, "/v1/schedules/s/pause", R"({"colour":"x"})").status == 400);
    CHECK(call(at, beast_http::verb::post, "/v1/schedules/s/update", R"({"options":{"overlap":"never"}})").status ==
          422);
    CHECK(call(at, beast_http::verb::get, "/v1/schedules/none").status == 404);
    CHECK(call(at, beast_http::verb::put, "/v1/schedules/s").status == 405);
    CHECK(call(at, beast_http::verb::delete_, "/v1/schedules/s").status == 200);

    CHECK(call(at, beast_http::verb::post, "/v1/queues", R"({"name":"q","options":{"concurrency":1}})").status == 200);
    auto queued = call(at, beast_http::verb::post, "/v1/queues/q/runs", R"({"workflow":"echo","id":"e-1","input":"x"})");
    CHECK(queued.status == 202);
    CHECK(json::parse(queued.body).at("outcome") == "queued");
    CHECK(call(at, beast_http::verb::post, "/v1/queues/q/runs", R"({"workflow":"echo","id":"e-2","priority":"high"})")
              .status == 400);
    CHECK(call(at, beast_http::verb::post, "/v1/queues/nowhere/runs", R"({"workflow":"echo","id":"e-3"})").status ==
          404);
    CHECK(json::parse(call(at, beast_http::verb::get, "/v1/queues").body).at("queues").as_array().size() == 1);
  }

  TEST_CASE("http: a listen address that is not HOST:PORT is refused at open") {
    auto config = Config::memory();
    for (const char* bad : {"nonsense", "127.0.0.1:", "127.0.0.1:99999", "not.an.ip:80"}) {
      config.http_listen = bad;
      CHECK_THROWS_AS(Engine::open(config), Error);
    }
  }
}
