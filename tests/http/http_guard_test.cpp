// The HTTP surface as an adversary uses it (issue 36): requests a browser
// sends cross-site, names re-pointed at loopback, floods of half-sent
// requests, doors without a token, and input past what the engine takes.
// Each case failed on the code before these guards.
#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <fusee/fusee.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "http/http_server.hpp"
#include "http/json_text.hpp"
#include "http/request_guard.hpp"
#include "server/log_service.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

using namespace fusee;
namespace net = boost::asio;
namespace beast_http = boost::beast::http;
namespace json = boost::json;
using fusee::testing::call;
using fusee::testing::HttpClient;
using fusee::testing::raw;
using fusee::testing::Reply;

namespace {

const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kApproval{"approval"};

void register_order(Engine& engine) {
  engine.register_workflow(kOrder, [](Ctx& ctx, int amount) -> Task<int> {
    auto approval = co_await ctx.wait_for(kApproval);
    co_return amount + approval.value_or(0);
  }, kApproval);
}

struct Served {
  std::unique_ptr<Engine> engine;
  std::string at;
  explicit Served(Config config = Config::memory()) {
    if (config.http_listen.empty()) config.http_listen = "127.0.0.1:0";
    engine = Engine::open(config);
    register_order(*engine);
    at = engine->http_endpoint();
  }
  ~Served() { engine->shutdown(); }
};

http::HttpRequest request(std::string method, std::map<std::string, std::string> headers) {
  http::HttpRequest out;
  out.method = std::move(method);
  out.target = "/v1/runs";
  out.headers = std::move(headers);
  return out;
}

unsigned refused(const http::HttpRequest& request, const http::HostPolicy& policy) {
  auto response = http::refuse_unsafe(request, policy);
  return response ? response->status : 0;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("http guard: Host names loopback, a listed name or the bound address; anything else is 421") {
  http::HostPolicy loopback{true, {}, "127.0.0.1:8080"};
  for (const char* host : {"127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "api.localhost:1", "127.9.9.9"}) {
    CHECK_MESSAGE(refused(request("GET", {{"host", host}}), loopback) == 0, host);
  }
  for (const char* host : {"evil.example:8080", "evil.example", "10.0.0.1:8080", "localhost.evil.example", "[::2]:8080"}) {
    CHECK_MESSAGE(refused(request("GET", {{"host", host}}), loopback) == 421, host);
  }
  // Named names: with or without a port.
  http::HostPolicy named{true, {"api.example.com", "ops.example.com:9000"}, ""};
  CHECK(refused(request("GET", {{"host", "api.example.com:443"}}), named) == 0);
  CHECK(refused(request("GET", {{"host", "ops.example.com:9000"}}), named) == 0);
  CHECK(refused(request("GET", {{"host", "ops.example.com:9001"}}), named) == 421);
  // Beyond loopback with no names given, the token is the guard: any Host.
  http::HostPolicy open{false, {}, ""};
  CHECK(refused(request("GET", {{"host", "evil.example"}}), open) == 0);
  http::HostPolicy open_named{false, {"api.example.com"}, ""};
  CHECK(refused(request("GET", {{"host", "evil.example"}}), open_named) == 421);
  // Two of a header the guard reads: a proxy might read the other one.
  for (const char* name : {"host", "origin", "sec-fetch-site", "content-type"}) {
    auto twice = request("POST", {{"host", "localhost"}, {"content-type", "application/json"}});
    twice.repeated_headers.insert(name);
    CHECK_MESSAGE(refused(twice, loopback) == 400, name);
  }
  // An HTTP/1.0 client may send no Host (browsers always do).
  CHECK(refused(request("GET", {}), loopback) == 0);
}

TEST_CASE("http guard: a POST needs application/json, and a change from another site is 403") {
  http::HostPolicy loopback{true, {}, ""};
  auto post = [&](std::map<std::string, std::string> headers) {
    headers.emplace("host", "127.0.0.1:8080");
    return refused(request("POST", std::move(headers)), loopback);
  };
  // What a form or a no-cors fetch can send.
  CHECK(post({{"content-type", "application/x-www-form-urlencoded"}}) == 415);
  CHECK(post({{"content-type", "text/plain;charset=UTF-8"}}) == 415);
  CHECK(post({{"content-type", "multipart/form-data; boundary=x"}}) == 415);
  CHECK(post({}) == 415);
  CHECK(post({{"content-type", "application/json"}}) == 0);
  CHECK(post({{"content-type", "Application/JSON; charset=utf-8"}}) == 0);
  // Origin: the page's own (the console) or none (curl); any other is 403.
  CHECK(post({{"content-type", "application/json"}, {"origin", "http://127.0.0.1:8080"}}) == 0);
  CHECK(post({{"content-type", "application/json"}, {"origin", "http://localhost:18090"}}) == 403);
  CHECK(post({{"content-type", "application/json"}, {"origin", "http://127.0.0.1:18090"}}) == 403);
  CHECK(post({{"content-type", "application/json"}, {"origin", "null"}}) == 403);
  // Sec-Fetch-Site: same-origin and none (typed in) pass; same-site is
  // another port of localhost.
  CHECK(post({{"content-type", "application/json"}, {"sec-fetch-site", "same-origin"}}) == 0);
  CHECK(post({{"content-type", "application/json"}, {"sec-fetch-site", "none"}}) == 0);
  CHECK(post({{"content-type", "application/json"}, {"sec-fetch-site", "same-site"}}) == 403);
  CHECK(post({{"content-type", "application/json"}, {"sec-fetch-site", "cross-site"}}) == 403);
  // DELETE is never sent cross-site without a preflight, but a page that
  // got one through is still refused by its Origin.
  CHECK(refused(request("DELETE", {{"host", "127.0.0.1:8080"}, {"origin", "http://evil.example"}}), loopback) == 403);
  CHECK(refused(request("DELETE", {{"host", "127.0.0.1:8080"}}), loopback) == 0);
  // Reads are not refused for their origin: the browser hides the answer.
  CHECK(refused(request("GET", {{"host", "127.0.0.1:8080"}, {"origin", "http://evil.example"}}), loopback) == 0);
}

TEST_CASE("http guard: tokens are compared whole, any scheme case, one Authorization header") {
  CHECK(http::bearer_matches("Bearer s3cret", "s3cret"));
  CHECK(http::bearer_matches("bEaReR s3cret", "s3cret"));
  CHECK_FALSE(http::bearer_matches("Bearer s3cre", "s3cret"));
  CHECK_FALSE(http::bearer_matches("Bearer s3cret ", "s3cret"));
  CHECK_FALSE(http::bearer_matches("Basic s3cret", "s3cret"));
  CHECK_FALSE(http::bearer_matches("Bearer ", "s3cret"));
  auto with = [](std::string value) { return request("GET", {{"authorization", std::move(value)}}); };
  CHECK_FALSE(http::refuse_without_token(with("Bearer a"), {"a", "b"}));
  CHECK_FALSE(http::refuse_without_token(with("Bearer b"), {"a", "b"}));
  CHECK(http::refuse_without_token(with("Bearer c"), {"a", "b"})->status == 401);
  CHECK(http::refuse_without_token(request("GET", {}), {"", "b"})->status == 401);
  CHECK_FALSE(http::refuse_without_token(request("GET", {}), {"", ""}));
  auto twice = with("Bearer a");
  twice.repeated_headers.insert("authorization");
  CHECK(http::refuse_without_token(twice, {"a"})->status == 400);
}

TEST_CASE("http guard: UTF-8, duplicate keys and echoed bytes") {
  CHECK_FALSE(http::first_invalid_utf8("plain, \xc3\xa9t\xc3\xa9, \xf0\x9f\x98\x80"));
  CHECK(http::first_invalid_utf8("ab\xff") == 2u);
  CHECK(http::first_invalid_utf8("\xc0\xaf") == 0u);          // overlong '/'
  CHECK(http::first_invalid_utf8("x\xed\xa0\x80") == 1u);     // a surrogate
  CHECK(http::first_invalid_utf8("\xf4\x90\x80\x80") == 0u);  // past U+10FFFF
  CHECK(http::first_invalid_utf8("\xe2\x82") == 0u);          // cut short
  CHECK(http::first_duplicate_key(R"({"a":1,"b":2,"a":3})") == std::string("a"));
  CHECK(http::first_duplicate_key(R"({"a":{"x":1,"x":2}})") == std::string("x"));
  CHECK(http::first_duplicate_key(R"([{"a":1},{"a":2}])") == std::nullopt);  // two objects, once each
  CHECK(http::first_duplicate_key(R"({"a":{"a":1}})") == std::nullopt);
  CHECK(http::first_duplicate_key(R"({"a\u0062":1,"ab":2})") == std::string("ab"));  // the same key, escaped
  CHECK(http::first_duplicate_key("not json") == std::nullopt);
  CHECK(http::printable("ok \xc3\xa9 \xff\x01") == "ok \xc3\xa9 \\xff\\x01");
  CHECK(http::printable(std::string(300, 'a'), 10) == "aaaaaaaaaa...");
}

TEST_CASE("http guard: run ids are a defined alphabet and length") {
  for (const char* id : {"order-1", "a:b@c~d+e=f,g_h.i", "x", ".a", "a..b", "schedule:nightly@2026-01-01T06:00:00.000Z"}) {
    CHECK_MESSAGE(!run_id_problem(id), id);
  }
  for (std::string id : {std::string(), std::string("."), std::string(".."), std::string("a b"), std::string("a/b"),
                         std::string("a?b"), std::string("a#b"), std::string("a%b"), std::string("\xc3\xa9"),
                         std::string("a\nb"), std::string(kRunIdBytesMax + 1, 'a')}) {
    CHECK_MESSAGE(run_id_problem(id), id);
  }
  CHECK_FALSE(run_id_problem(std::string(kRunIdBytesMax, 'a')));
  CHECK(run_id_problem("a b")->find("0x20") != std::string::npos);
}

TEST_CASE("http guard: a cross-site form POST and a text/plain fetch start, signal and cancel nothing") {
  Served served;
  REQUIRE(served.engine->start(kOrder, "order-1", 1) == StartOutcome::started);
  auto form = [&](const std::string& target, const std::string& type, const std::string& origin) {
    std::string body = R"({"workflow":"order","id":"evil","input":1})";
    std::string text = "POST " + target + " HTTP/1.1\r\nHost: " + served.at + "\r\nContent-Type: " + type +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    if (!origin.empty()) text += "Origin: " + origin + "\r\n";
    return raw(served.at, text + "Connection: close\r\n\r\n" + body);
  };
  CHECK(form("/v1/runs", "application/x-www-form-urlencoded", "http://localhost:18090").starts_with("HTTP/1.1 403"));
  CHECK(form("/v1/runs", "text/plain", "").starts_with("HTTP/1.1 415"));
  CHECK(form("/v1/runs/order-1/cancel", "text/plain", "http://localhost:18090").starts_with("HTTP/1.1 403"));
  CHECK(form("/v1/runs/order-1/signals/approval", "application/x-www-form-urlencoded", "")
            .starts_with("HTTP/1.1 415"));
  // Even JSON, from another origin (a page that got past a preflight).
  CHECK(form("/v1/runs", "application/json", "http://localhost:18090").starts_with("HTTP/1.1 403"));
  CHECK_FALSE(served.engine->get_run("evil"));
  CHECK(served.engine->get_run("order-1")->status == RunStatus::running);
  // DNS rebinding: a page's own name, pointed at 127.0.0.1.
  auto rebound = raw(served.at, "GET /v1/runs HTTP/1.1\r\nHost: evil.example:" + served.at.substr(served.at.find(':') + 1) +
                                    "\r\nConnection: close\r\n\r\n");
  CHECK(rebound.starts_with("HTTP/1.1 421"));
  CHECK(rebound.find("order-1") == std::string::npos);
  // The way the console and curl call it still works.
  CHECK(call(served.at, beast_http::verb::post, "/v1/runs/order-1/signals/approval", R"({"value":1})",
             {{"Host", served.at}, {"Origin", "http://" + served.at}})
            .status == 202);
}

TEST_CASE("http guard: a flood of half-sent requests holds one peer's share for the header's time, and others get in") {
  auto engine = Engine::open(Config::memory());
  register_order(*engine);
  http::HttpServerOptions options;
  options.limits.connections_max = 40;
  options.limits.peer_connections_max = 8;
  options.limits.reserve_connections = 8;
  options.limits.reserve_peer_connections = 2;
  options.limits.header_timeout = std::chrono::milliseconds(400);
  options.limits.idle_timeout = std::chrono::milliseconds(400);
  options.limits.body_timeout = std::chrono::milliseconds(400);
  http::HttpApiOptions api;
  api.token = "s3cret";
  http::HttpServer server(*engine, "127.0.0.1:0", api, options);
  const auto at = server.endpoint();
  // The flood, from 127.0.0.1: headers begun, never finished.
  std::vector<std::unique_ptr<HttpClient>> flood;
  int busy = 0;
  for (int k = 0; k < 20; ++k) {
    flood.push_back(std::make_unique<HttpClient>(at));
    flood.back()->send("GET /v1/runs HTTP/1.1\r\nHost: localhost\r\nX-Slow: ");
  }
  // Past its share, the peer is told so at once.
  for (int k = 8; k < 20; ++k) {
    auto answer = flood[k]->read_to_close();
    if (answer.starts_with("HTTP/1.1 503") && answer.find("from your address") != std::string::npos) ++busy;
  }
  CHECK(busy == 12);
  // Another peer: health, metrics and an authenticated call get through.
  auto other = [&](const std::string& target, std::map<std::string, std::string> headers) {
    HttpClient client(at, "127.0.0.2");
    return client.call(beast_http::verb::get, target, {}, headers).status;
  };
  CHECK(other("/healthz", {}) == 200);
  CHECK(other("/metrics", {{"Authorization", "Bearer s3cret"}}) == 200);
  CHECK(other("/v1/runs", {{"Authorization", "Bearer s3cret"}}) == 200);
  CHECK(other("/v1/runs", {}) == 401);
  // The flood's held connections end by themselves: each is closed
  // unanswered once its header's time is out.
  for (int k = 0; k < 8; ++k) CHECK(flood[k]->closed_by_server());
  // And the peer may connect again.
  HttpClient again(at);
  CHECK(again.call(beast_http::verb::get, "/healthz").status == 200);
  // A kept-alive connection that goes quiet is closed after the idle time;
  // one that sends its body too slowly, after the body's.
  CHECK(again.closed_by_server());
  HttpClient slow_body(at);
  slow_body.send("POST /v1/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\n"
                 "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"work");
  CHECK(slow_body.closed_by_server());
  CHECK_FALSE(engine->get_run("x"));
  server.stop();
  engine->shutdown();
}

TEST_CASE("http guard: the last slots go to peers holding few connections") {
  auto engine = Engine::open(Config::memory());
  http::HttpServerOptions options;
  options.limits.connections_max = 12;
  options.limits.peer_connections_max = 100;
  options.limits.reserve_connections = 4;
  options.limits.reserve_peer_connections = 2;
  http::HttpServer server(*engine, "127.0.0.1:0", http::HttpApiOptions{}, options);
  const auto at = server.endpoint();
  std::vector<std::unique_ptr<HttpClient>> many;
  for (int k = 0; k < 8; ++k) {
    many.push_back(std::make_unique<HttpClient>(at));
    CHECK(many.back()->call(beast_http::verb::get, "/healthz").status == 200);
  }
  // 8 open: the rest is the reserve, which 127.0.0.1 (holding 8) may not take.
  HttpClient ninth(at);
  CHECK(ninth.read_to_close().starts_with("HTTP/1.1 503"));
  // 127.0.0.2 holds none: it gets two.
  HttpClient first(at, "127.0.0.2");
  HttpClient second(at, "127.0.0.2");
  CHECK(first.call(beast_http::verb::get, "/healthz").status == 200);
  CHECK(second.call(beast_http::verb::get, "/healthz").status == 200);
  HttpClient third(at, "127.0.0.2");
  CHECK(third.read_to_close().starts_with("HTTP/1.1 503"));
  server.stop();
  engine->shutdown();
}

TEST_CASE("http guard: Engine::open refuses a listener beyond loopback without a token, unless told loudly") {
  auto config = Config::memory();
  config.http_listen = "0.0.0.0:0";
  auto message = [&] {
    try {
      (void)Engine::open(config);
    } catch (const Error& error) {
      CHECK(error.error() == errc::invalid_argument);
      return std::string(error.what());
    }
    return std::string("opened");
  }();
  CHECK(message.find("http_insecure_no_token") != std::string::npos);
  config.http_token = "s3cret";
  Engine::open(config)->shutdown();
  config.http_token.clear();
  config.http_insecure_no_token = true;
  Engine::open(config)->shutdown();
}

TEST_CASE("http guard: a worker behind fusee server's front takes the front's token on its own listener") {
  io::PosixFileSystem fs;
  fusee::testing::TempDir dir;
  server::LogServiceOptions options;
  options.dir = dir.sub("data");
  options.listen = "unix:" + dir.sub("sock");
  options.shards = 2;
  options.direct_io = false;
  options.token = "front-token";
  options.http_listen = "127.0.0.1:0";
  options.log = [](const std::string&) {};
  auto service = server::LogService::open(fs, options);
  auto config = Config::remote(options.listen);
  config.http_listen = "127.0.0.1:0";
  auto worker = Engine::open(config);
  register_order(*worker);
  const auto own = worker->http_endpoint();
  // The door the front lists: no token, no way in.
  CHECK(call(own, beast_http::verb::get, "/v1/runs").status == 401);
  CHECK(call(own, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"o-1","input":1})").status == 401);
  CHECK(call(own, beast_http::verb::get, "/v1/runs", {}, {{"Authorization", "Bearer front-token"}}).status == 200);
  // Through the front, with its token, as before.
  const auto front = service->http_endpoint();
  auto started = call(front, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"o-1","input":1})",
                      {{"Authorization", "Bearer front-token"}});
  CHECK(started.status == 201);
  CHECK(call(front, beast_http::verb::get, "/v1/runs/o-1", {}, {{"Authorization", "bearer front-token"}}).status == 200);
  CHECK(call(front, beast_http::verb::get, "/v1/runs/o-1", {}, {{"Authorization", "Bearer front-toke"}}).status == 401);
  worker->shutdown();
  service->stop();
}

TEST_CASE("http guard: durations, times, ids and bodies past the bounds are 400s naming what is wrong") {
  Served served;
  auto post = [&](const std::string& target, const std::string& body) {
    return call(served.at, beast_http::verb::post, target, body);
  };
  auto start = [&](const std::string& fields) {
    return post("/v1/runs", R"({"workflow":"order","input":1,)" + fields + "}");
  };
  for (const char* deadline : {"9223372036854775807", "1000000000000000", "0", "-5", "1.5", "\"10\""}) {
    auto reply = start(std::string(R"("id":"d-1","deadline_ms":)") + deadline);
    CHECK_MESSAGE(reply.status == 400, deadline);
    CHECK(reply.body.find("deadline_ms") != std::string::npos);
  }
  CHECK(start(R"("id":"d-1","deadline_ms":3155760000000)").status == 201);
  CHECK_FALSE(served.engine->get_run("d-1")->finished_at);
  // Ids: too long, "..", outside the alphabet.
  auto long_id = start(R"("id":")" + std::string(300 * 1024, 'a') + "\"");
  CHECK(long_id.status == 400);
  CHECK(long_id.body.find("at most 255 bytes") != std::string::npos);
  for (const char* id : {"..", ".", "a b", "a/b", "caf\\u00e9", "a%2Fb"}) {
    auto reply = start(std::string(R"("id":")") + id + "\"");
    CHECK_MESSAGE(reply.status == 400, id);
  }
  // Every id the alphabet allows is reachable by every route.
  const std::string odd = "a:b@c~d+e=f,g_h.i-1";
  const std::string path = "a%3Ab%40c~d%2Be%3Df%2Cg_h.i-1";  // as encodeURIComponent writes it
  CHECK(start(R"("id":")" + odd + "\"").status == 201);
  CHECK(call(served.at, beast_http::verb::get, "/v1/runs/" + path).json().at("id") == json::value(odd));
  CHECK(call(served.at, beast_http::verb::get, "/v1/runs/" + odd).json().at("id") == json::value(odd));
  CHECK(post("/v1/runs/" + path + "/signals/approval", R"({"value":2})").status == 202);
  CHECK(call(served.at, beast_http::verb::get, "/v1/runs/" + path + "/journal").status == 200);
  // Schedules: intervals and times past the bounds.
  auto every = post("/v1/schedules", R"({"id":"s","spec":{"every_ms":9223372036854775807},"workflow":"order","input":1})");
  CHECK(every.status == 400);
  CHECK(every.body.find("every_ms") != std::string::npos);
  auto end = post("/v1/schedules", R"({"id":"s","spec":{"every_ms":1000,"end_ms":99999999999999999},"workflow":"order","input":1})");
  CHECK(end.status == 400);
  CHECK(end.body.find("end_ms") != std::string::npos);
  CHECK(post("/v1/schedules", R"({"id":"s","spec":{"every_ms":60000},"workflow":"order","input":1})").status == 201);
  auto backfill = post("/v1/schedules/s/backfill", R"({"from_ms":0,"to_ms":18446744073709551615})");
  CHECK(backfill.status == 400);
  CHECK(backfill.body.find("to_ms") != std::string::npos);
  CHECK(post("/v1/schedules", R"({"id":"a b","spec":{"every_ms":60000},"workflow":"order","input":1})").status == 400);
  // Bodies: a key twice (at any depth), bytes that are not UTF-8.
  auto twice = post("/v1/runs", R"({"workflow":"order","id":"t-1","id":"t-2","input":1})");
  CHECK(twice.status == 400);
  CHECK(twice.body.find(R"(\"id\" twice)") != std::string::npos);
  CHECK(post("/v1/runs", R"({"workflow":"order","id":"t-3","input":{"amount":1,"amount":2}})").status == 400);
  CHECK_FALSE(served.engine->get_run("t-1"));
  CHECK_FALSE(served.engine->get_run("t-2"));
  CHECK_FALSE(served.engine->get_run("t-3"));
  auto latin1 = post("/v1/runs", "{\"workflow\":\"order\",\"id\":\"caf\xe9\",\"input\":1}");
  CHECK(latin1.status == 400);
  CHECK_MESSAGE(latin1.body.find("not UTF-8: byte 29 (0xe9)") != std::string::npos, latin1.body);
  // What is echoed is escaped: the answer is JSON (UTF-8) whatever came in.
  auto echoed = raw(served.at, "GET /nowhere\xff\xfe HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  auto body = echoed.substr(echoed.find("\r\n\r\n") + 4);
  CHECK(echoed.starts_with("HTTP/1.1 404"));
  CHECK_FALSE(http::first_invalid_utf8(body));
  CHECK(json::parse(body).at("message").as_string().find("\\xff\\xfe") != json::string::npos);
}

TEST_CASE("http guard: a child id outside the alphabet fails the child call, journaling nothing, the same on replay") {
  const WorkflowRef<std::string, std::string> kParent{"parent"};
  const WorkflowRef<int, int> kChild{"child"};
  auto engine = Engine::open(Config::memory());
  engine->register_workflow(kChild, [](Ctx&, int x) -> Task<int> { co_return x; });
  engine->register_workflow(kParent, [&](Ctx& ctx, std::string id) -> Task<std::string> {
    try {
      (void)co_await ctx.child(kChild, id, 1);
    } catch (const Error& error) {
      co_return std::string(errc_name(error.error())) + ": " + error.what();
    }
    co_return "started";
  });
  (void)engine->start(kParent, "p-1", std::string("bad id"));
  auto answer = engine->result(kParent, "p-1");
  CHECK(answer.find("invalid_argument") == 0);
  CHECK(answer.find("child run id") != std::string::npos);
  CHECK(engine->journal_json("p-1").find("child_started") == std::string::npos);
  engine->shutdown();
}
}
