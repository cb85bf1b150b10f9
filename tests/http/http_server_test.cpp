// The HTTP server (http/http_server.*, http/connection*): keep-alive and
// pipelining, 1,100 connections each waiting on an execute at once, stop()
// with requests waiting on runs, an engine's answer that comes after the
// server stopped or went (http/run_wait.*, http/server_gate.hpp), and
// `fusee server`'s relay to a worker, streams included.
#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <fusee/fusee.hpp>
#include <atomic>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <sys/resource.h>
#include <vector>

#include "http/http_server.hpp"
#include "http/run_wait.hpp"
#include "http/server_gate.hpp"
#include "tests/support/http_client.hpp"

using namespace fusee;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace beast_http = beast::http;
namespace json = boost::json;
using fusee::testing::call;
using fusee::testing::HttpClient;
using fusee::testing::Reply;
using tcp = net::ip::tcp;

namespace {

const WorkflowRef<std::string, std::string> kEcho{"echo"};
const WorkflowRef<int, int> kHeld{"held"};
const WorkflowRef<int, int> kOrder{"order"};
const Signal<int> kApproval{"approval"};

// A request's bytes as a client sends them.
std::string request_bytes(const std::string& method, const std::string& target, const std::string& body = {}) {
  std::string text = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n";
  if (!body.empty() || method == "POST") {
    text += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return text + "\r\n" + body;
}

std::string execute_body(const std::string& workflow, const std::string& id, const json::value& input) {
  return json::serialize(json::object{{"workflow", workflow}, {"id", id}, {"input", input}});
}

// An engine in memory mode with its API on a free port. `held` runs call
// arrived() from a step once started, then wait for their approval.
struct Served {
  std::function<void()> arrived;  // before the engine: its runs call it until it shuts down
  std::unique_ptr<Engine> engine;
  std::string at;
  explicit Served(std::function<void()> arrived_fn = [] {}, bool listen = true) : arrived(std::move(arrived_fn)) {
    auto config = Config::memory();
    config.shards = 2;
    if (listen) config.http_listen = "127.0.0.1:0";
    engine = Engine::open(config);
    engine->register_workflow(kEcho, [](Ctx& ctx, std::string text) -> Task<std::string> {
      co_return co_await ctx.step("echo", [text] { return text; });
    });
    engine->register_workflow(kHeld, [fn = &arrived](Ctx& ctx, int input) -> Task<int> {
      co_await ctx.step("arrived", [fn] { (*fn)(); });
      auto approval = co_await ctx.wait_for(kApproval);
      co_return input + approval.value_or(0);
    }, kApproval);
    engine->register_workflow(kOrder, [](Ctx& ctx, int amount) -> Task<int> {
      int quote = co_await ctx.step("quote", [amount] { return amount * 10; });
      co_await ctx.stream("progress").write(quote);
      auto approval = co_await ctx.wait_for(kApproval);
      co_await ctx.stream("progress").write(quote + approval.value_or(0));
      co_return quote + approval.value_or(0);
    }, kApproval);
    if (listen) at = engine->http_endpoint();
  }
  ~Served() { engine->shutdown(); }
};

// A TCP port nothing listens on: bound, then closed.
std::string closed_endpoint() {
  net::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  auto port = acceptor.local_endpoint().port();
  acceptor.close();
  return "127.0.0.1:" + std::to_string(port);
}

// 1,100 connections, each with an execute of its own `held` run, driven
// by one asynchronous client on the test's thread. Once every run has
// started (each run's first step counts), every run is signalled; an answer
// that comes before that is a refusal (or a failure), and ends the client.
struct WaitingLoad {
  static constexpr int kConnections = 1100;
  net::io_context io;
  Engine* engine = nullptr;
  std::atomic<int> started{0};
  bool signalled = false;
  int failed = 0;  // refused, answered before its signal, or cut
  std::vector<Reply> replies = std::vector<Reply>(kConnections);

  struct Caller {
    explicit Caller(net::io_context& io) : socket(io) {}
    tcp::socket socket;
    std::string bytes;
    beast::flat_buffer buffer;
    beast_http::response<beast_http::string_body> response;
  };
  std::vector<std::unique_ptr<Caller>> callers;

  // From a shard's thread, in the step.
  void arrived() {
    if (started.fetch_add(1) + 1 == kConnections) net::post(io, [this] { signal_all(); });
  }
  void signal_all() {
    signalled = true;
    for (int n = 0; n < kConnections; ++n) engine->signal("held-" + std::to_string(n), kApproval, 1000);
  }
  void begin(const std::string& at) {
    for (int n = 0; n < kConnections; ++n) {
      auto& caller = *callers.emplace_back(std::make_unique<Caller>(io));
      caller.bytes = request_bytes("POST", "/v1/runs/execute", execute_body("held", "held-" + std::to_string(n), n));
      caller.socket.async_connect(fusee::testing::endpoint_of(at), [this, n, &caller](boost::system::error_code error) {
        if (error) return give_up(n, "connect: " + error.message());
        net::async_write(caller.socket, net::buffer(caller.bytes), [this, n, &caller](boost::system::error_code error, std::size_t) {
          if (error) return give_up(n, "write: " + error.message());
          beast_http::async_read(caller.socket, caller.buffer, caller.response,
                                 [this, n, &caller](boost::system::error_code error, std::size_t) {
                                   if (error) return give_up(n, "read: " + error.message());
                                   replies[n].status = caller.response.result_int();
                                   replies[n].body = caller.response.body();
                                   if (!signalled) give_up(n, "answered before its signal: " + replies[n].body);
                                 });
        });
      });
    }
  }
  void give_up(int n, const std::string& why) {
    MESSAGE("connection " << n << ": " << why);
    ++failed;
    io.stop();
  }
};

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("http server: one connection kept alive serves several requests, blocking and waiting routes alike") {
    Served served;
    HttpClient client(served.at);
    auto health = client.call(beast_http::verb::get, "/healthz");
    CHECK(health.status == 200);
    CHECK(health.keep_alive);
    auto started = client.call(beast_http::verb::post, "/v1/runs", R"({"workflow":"echo","id":"k-1","input":"a"})");
    CHECK(started.status == 201);
    auto executed = client.call(beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"k-2","input":"b"})");
    CHECK(executed.status == 200);
    CHECK(executed.json().at("result") == "b");
    CHECK(executed.keep_alive);
    auto timed_out = client.call(beast_http::verb::post, "/v1/runs/execute?timeout_ms=1",
                                 R"({"workflow":"held","id":"k-3","input":1})");
    CHECK(timed_out.status == 504);
    CHECK(timed_out.error() == "timed_out");
    auto run = client.call(beast_http::verb::get, "/v1/runs/k-1");
    CHECK(run.json().at("result") == "a");
    // The run that timed out goes on, and an execute on the same connection attaches.
    served.engine->signal("k-3", kApproval, 2);
    auto attached = client.call(beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"held","id":"k-3","input":1})");
    CHECK(attached.json().at("outcome") == "attached");
    CHECK(attached.json().at("result") == 3);
    // Connection: close is answered, then the server closes.
    auto last = client.call(beast_http::verb::get, "/healthz", {}, {{"Connection", "close"}});
    CHECK(last.status == 200);
    CHECK_FALSE(last.keep_alive);
    CHECK(client.read_to_close().empty());
  }

  TEST_CASE("http server: pipelined requests are answered in order, each after the one before it has ended") {
    Served served;
    HttpClient client(served.at);
    // One write: an execute (answered later, from an engine thread), a read
    // of the run it ran (a blocking route: it sees the run completed only if
    // it runs after the execute's answer), another execute, and a health check.
    client.send(request_bytes("POST", "/v1/runs/execute", execute_body("echo", "p-1", "first")) +
                request_bytes("GET", "/v1/runs/p-1") +
                request_bytes("POST", "/v1/runs/execute", execute_body("echo", "p-2", "second")) +
                request_bytes("GET", "/healthz"));
    auto first = client.read();
    CHECK(first.status == 200);
    CHECK(first.json().at("result") == "first");
    auto read_back = client.read();
    CHECK(read_back.status == 200);
    CHECK(read_back.json().at("status") == "completed");
    CHECK(read_back.json().at("result") == "first");
    auto second = client.read();
    CHECK(second.json().at("result") == "second");
    auto health = client.read();
    CHECK(health.json().at("status") == "ok");
  }

  TEST_CASE("http server: 1,100 connections each waiting on an execute are all answered, none refused") {
    WaitingLoad load;
    Served served([&load] { load.arrived(); });
    load.engine = served.engine.get();
    // Both ends of every connection are in this process: 2,200 descriptors
    // and the engine's. The server raised the soft limit as far as the hard
    // one allows; a machine whose hard limit is lower cannot run this test.
    rlimit limit{};
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
    REQUIRE_MESSAGE(limit.rlim_cur >= 2 * WaitingLoad::kConnections + 256,
                    "RLIMIT_NOFILE's hard limit is too low for " << WaitingLoad::kConnections << " connections");
    load.begin(served.at);
    load.io.run();
    CHECK(load.failed == 0);
    CHECK(load.started.load() == WaitingLoad::kConnections);
    int answered = 0;
    for (int n = 0; n < WaitingLoad::kConnections; ++n) {
      if (load.replies[n].status != 200) continue;
      auto body = load.replies[n].json();
      if (body.at("status") == "completed" && body.at("result") == n + 1000) ++answered;
    }
    CHECK(answered == WaitingLoad::kConnections);
    MESSAGE(answered << " of " << WaitingLoad::kConnections << " executes waited at once and were answered");
  }

  TEST_CASE("http server: a connection past the cap is answered 503 and closed; those within it go on") {
    Served served([] {}, /*listen=*/false);
    http::HttpServerOptions options;
    options.limits.connections_max = 2;
    options.limits.reserve_connections = 0;
    http::HttpServer server(*served.engine, "127.0.0.1:0", http::HttpApiOptions{}, options);
    const auto at = server.endpoint();
    HttpClient first(at);
    HttpClient second(at);
    // Answered: both are counted by now.
    CHECK(first.call(beast_http::verb::get, "/healthz").status == 200);
    CHECK(second.call(beast_http::verb::get, "/healthz").status == 200);
    HttpClient third(at);
    auto refused = third.read();
    CHECK(refused.status == 503);
    CHECK(refused.error() == "busy");
    CHECK_FALSE(refused.keep_alive);
    CHECK(first.call(beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"cap","input":"x"})")
              .json()
              .at("result") == "x");
  }

  TEST_CASE("http server: stop() ends connections waiting on runs at once; the runs' answers after it touch nothing") {
    std::latch arrived(2);
    Served served([&arrived] { arrived.count_down(); }, /*listen=*/false);
    auto server = std::make_unique<http::HttpServer>(*served.engine, "127.0.0.1:0", http::HttpApiOptions{},
                                                     http::HttpServerOptions{});
    const auto at = server->endpoint();
    HttpClient first(at);
    HttpClient second(at);
    first.send(request_bytes("POST", "/v1/runs/execute", execute_body("held", "s-1", 1)));
    second.send(request_bytes("POST", "/v1/runs/execute", execute_body("held", "s-2", 2)));
    arrived.wait();  // both runs were started by their executes, which wait for them
    server->stop();
    // No answer: the connections were closed.
    CHECK(first.read_to_close().empty());
    CHECK(second.read_to_close().empty());
    CHECK_THROWS(HttpClient(at));  // nothing listens
    // The runs go on; their answers to the stopped server are dropped.
    served.engine->signal("s-1", kApproval, 10);
    CHECK(served.engine->result(kHeld, "s-1") == 11);
    server.reset();
    served.engine->signal("s-2", kApproval, 20);
    CHECK(served.engine->result(kHeld, "s-2") == 22);
    // And an engine with its own server shuts down with an execute waiting:
    // the server stops first, then the shards fail the run's waiters.
    std::latch again_arrived(1);
    Served again([&again_arrived] { again_arrived.count_down(); });
    HttpClient waiting(again.at);
    waiting.send(request_bytes("POST", "/v1/runs/execute", execute_body("held", "s-3", 3)));
    again_arrived.wait();
    again.engine->shutdown();
    // Cut with no answer, or, when the start's answer reached the server
    // after the shutdown began, 503 shut_down.
    auto cut = waiting.read_to_close();
    CHECK((cut.empty() || (cut.starts_with("HTTP/1.1 503") && cut.find("\"shut_down\"") != std::string::npos)));
  }

  TEST_CASE("http server: an engine's answer to a wait after the server has gone is dropped") {
    // The wait's parts by hand, on an io_context the test runs: the engine's
    // side is then() called from this thread.
    auto gate = std::make_shared<http::ServerGate>();
    auto io = std::make_unique<net::io_context>();
    int answers = 0;
    int engine_answers = 0;
    std::function<void(std::variant<int, Error>)> late;
    {
      auto wait = std::make_shared<http::RunWait>(net::make_strand(*io), gate);
      late = wait->then<int>([&engine_answers](http::RunWait&, std::variant<int, Error>) { ++engine_answers; });
      wait->arm(std::chrono::hours(1), http::HttpApi::error(504, "timed_out", "late"),
                [&answers](http::Routed) { ++answers; });
    }
    // Only the armed deadline's handler holds the wait now. The server stops:
    // the gate closes, the io_context goes, and the wait with it.
    gate->close();
    io.reset();
    late(7);
    CHECK(answers == 0);
    CHECK(engine_answers == 0);
  }

  TEST_CASE("http server: a wait answers once, by the engine or by the deadline, whichever comes first") {
    auto gate = std::make_shared<http::ServerGate>();
    net::io_context io;
    auto strand = net::make_strand(io);
    std::vector<unsigned> answers;
    auto record = [&answers](http::Routed routed) { answers.push_back(std::get<http::HttpResponse>(routed).status); };
    std::function<void(std::variant<int, Error>)> engine_then;
    {
      auto wait = std::make_shared<http::RunWait>(strand, gate);
      engine_then = wait->then<int>([](http::RunWait& wait, std::variant<int, Error> value) {
        wait.answer(http::HttpApi::error(200 + static_cast<unsigned>(std::get<int>(value)), "x", "engine"));
      });
      wait->arm(std::chrono::hours(1), http::HttpApi::error(504, "timed_out", "deadline"), record);
    }
    engine_then(1);
    io.run();  // the answer, then the cancelled deadline: nothing left
    CHECK(answers == std::vector<unsigned>{201});

    io.restart();
    {
      auto wait = std::make_shared<http::RunWait>(strand, gate);
      engine_then = wait->then<int>([](http::RunWait& wait, std::variant<int, Error>) {
        wait.answer(http::HttpApi::error(200, "x", "engine"));
      });
      wait->arm(std::chrono::milliseconds(0), http::HttpApi::error(504, "timed_out", "deadline"), record);
    }
    io.run();  // the deadline answers
    engine_then(2);  // the engine's late answer finds nothing to answer
    io.restart();
    io.run();
    CHECK(answers == std::vector<unsigned>{201, 504});
  }

  TEST_CASE("http server: HttpApi::waits names the routes answered without a thread") {
    auto request = [](const std::string& method, const std::string& target) {
      http::HttpRequest out;
      out.method = method;
      out.target = target;
      return out;
    };
    CHECK(http::HttpApi::waits(request("POST", "/v1/runs/execute")));
    CHECK(http::HttpApi::waits(request("POST", "/v1/runs/execute?timeout_ms=5")));
    CHECK_FALSE(http::HttpApi::waits(request("GET", "/v1/runs/execute")));
    CHECK_FALSE(http::HttpApi::waits(request("POST", "/v1/runs")));
    CHECK_FALSE(http::HttpApi::waits(request("POST", "/v1/runs/execute/more")));
  }

  TEST_CASE("http server: an execute answered without a thread and one answered by route() say the same bytes") {
    Served served;
    // %65 is "e": HttpApi::waits does not recognise the path, so the server
    // routes it with the blocking route(), which answers the same route.
    const std::string blocking = "/v1/runs/%65xecute";
    REQUIRE(call(served.at, beast_http::verb::post, "/v1/runs", R"({"workflow":"echo","id":"same","input":"x"})").status == 201);
    REQUIRE(served.engine->result(kEcho, "same") == "x");
    auto waited = call(served.at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"same","input":"x"})");
    auto blocked = call(served.at, beast_http::verb::post, blocking, R"({"workflow":"echo","id":"same","input":"x"})");
    CHECK(waited.status == 200);
    CHECK(waited.body == blocked.body);
    CHECK(waited.body == "{\"id\":\"same\",\"outcome\":\"attached\",\"status\":\"completed\",\"result\":\"x\"}\n");
    auto late = call(served.at, beast_http::verb::post, "/v1/runs/execute?timeout_ms=1", R"({"workflow":"held","id":"h","input":1})");
    auto late_blocked = call(served.at, beast_http::verb::post, blocking + "?timeout_ms=1", R"({"workflow":"held","id":"h","input":1})");
    CHECK(late.status == 504);
    CHECK(late_blocked.status == 504);
    CHECK(late.body == late_blocked.body);
    auto bad = call(served.at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":""})");
    CHECK(bad.status == 400);
    CHECK(bad.body == call(served.at, beast_http::verb::post, blocking, R"({"workflow":"echo","id":""})").body);
  }

  TEST_CASE("http server: a router's relay passes calls and streams to a worker, and stop() does not wait on one") {
    Served worker;
    std::mutex target_mu;  // the router reads it on the server's threads
    std::string target = worker.at;
    http::HttpServer front(
        [&](const http::HttpRequest&) -> http::HttpRoute {
          std::lock_guard lock(target_mu);
          return http::Relay{target};
        },
        "127.0.0.1:0", http::HttpServerOptions{});
    const auto at = front.endpoint();
    auto executed = call(at, beast_http::verb::post, "/v1/runs/execute", R"({"workflow":"echo","id":"r-1","input":"via"})");
    CHECK(executed.status == 200);
    CHECK(executed.json().at("result") == "via");
    CHECK_FALSE(executed.keep_alive);  // the relay ends the connection
    CHECK(call(at, beast_http::verb::get, "/v1/runs/nobody").status == 404);
    CHECK(call(at, beast_http::verb::post, "/v1/runs", R"({"workflow":"order","id":"r-2","input":3})").status == 201);
    // A stream the worker keeps open (r-2 waits for its approval), relayed as it comes.
    HttpClient streaming(at);
    streaming.send(request_bytes("GET", "/v1/runs/r-2/streams/progress"));
    auto first = streaming.read_until("{\"offset\":0,\"value\":30}\n");
    CHECK(first.find("{\"offset\":0,\"value\":30}\n") != std::string::npos);
    // A worker that does not answer: 502.
    {
      std::lock_guard lock(target_mu);
      target = closed_endpoint();
    }
    auto refused = call(at, beast_http::verb::get, "/v1/runs/r-2");
    CHECK(refused.status == 502);
    CHECK(refused.error() == "bad_gateway");
    front.stop();
    streaming.read_to_close();  // returns: the relayed stream was cut
    CHECK(worker.engine->get_run("r-2")->status == RunStatus::running);
  }
}
