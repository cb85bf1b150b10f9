// list_bench: listing, counting and metrics over the HTTP API at a million
// runs, and what polling them costs a start (issue 36). An engine in local
// mode (direct writes) in the case's own directory, serving HTTP on
// 127.0.0.1:0, is loaded with --runs runs: most completed, some failed,
// some waiting for a signal, of which most are parked out of memory by a
// checkpoint, the rest still loaded. Then, each timed for at least
// --min-seconds, repeated in rounds whose spread is printed:
//  - list_first: GET /v1/runs?limit=50 (newest first, the console's page);
//  - list_deep: the same from a cursor half-way down the runs;
//  - list_filtered: GET /v1/runs?status=failed&workflow=FAI&limit=50;
//  - list_running: GET /v1/runs?status=running&limit=50 (what each waits
//    on is asked of its shard, a parked one's read from the run store);
//  - stats: GET /v1/stats; metrics: GET /metrics;
//  - start: Engine::start of a one-step run, one after another (each waits
//    for its durable start), alone, and then while --pollers clients (the
//    console's tabs) each ask for the first page and /v1/stats every
//    --poll-ms. The aim: start p50 with pollers <= 1.1x alone, and list and
//    stats p99 <= 20 ms at 1,000,000 runs.
// The disk's raw durable 4 KiB write is measured first in the same
// directory (bench/raw_floor.hpp), so the start figures read against it.
//
// Output: a table for people, then one JSON object per line (grep '^{').
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_json.hpp"
#include "bench/figures.hpp"
#include "bench/raw_floor.hpp"
#include "fusee/fusee.hpp"

namespace {

using namespace fusee;
namespace net = boost::asio;
namespace beast_http = boost::beast::http;
using Steady = std::chrono::steady_clock;
using fusee::bench::JsonLine;
using fusee::bench::LatencySummary;
using fusee::bench::RawFloor;
using fusee::bench::spread_of;
using fusee::bench::summarize_latencies;

const WorkflowRef<int, int> kDone{"done"};
const WorkflowRef<int, int> kFails{"fails"};
const WorkflowRef<int, int> kWaits{"waits"};
const Signal<int> kGo{"go"};

struct Options {
  std::string dir = ".";
  std::uint64_t runs = 1'000'000;
  double min_seconds = 1.0;
  int min_rounds = 3;
  int pollers = 4;
  int poll_ms = 2000;
  std::uint32_t shards = 2;
};

// One kept-alive connection to the API.
class Client {
 public:
  explicit Client(const std::string& endpoint) : socket_(io_) {
    auto colon = endpoint.rfind(':');
    socket_.connect({net::ip::make_address(endpoint.substr(0, colon)),
                     static_cast<unsigned short>(std::stoi(endpoint.substr(colon + 1)))});
  }
  // The body of a GET; throws unless it is 200.
  std::string get(const std::string& target) {
    beast_http::request<beast_http::empty_body> request{beast_http::verb::get, target, 11};
    request.set(beast_http::field::host, "localhost");
    beast_http::write(socket_, request);
    beast_http::response<beast_http::string_body> response;
    beast_http::read(socket_, buffer_, response);
    if (response.result_int() != 200) {
      throw std::runtime_error(fmt::format("GET {}: {} {}", target, response.result_int(), response.body()));
    }
    return std::move(response.body());
  }

 private:
  net::io_context io_;
  net::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

// The process's resident memory, MiB (the index's cost shows in it).
double resident_mib() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return -1;
  char line[256];
  double kib = -1;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::sscanf(line, "VmRSS: %lf kB", &kib) == 1) break;
  }
  std::fclose(status);
  return kib / 1024;
}

double us_since(Steady::time_point start) {
  return std::chrono::duration<double, std::micro>(Steady::now() - start).count();
}

// Starts `count` runs, `window` at a time, without a thread each.
void load(Engine& engine, std::uint64_t count) {
  constexpr std::uint64_t kWindow = 20'000;
  std::mutex mu;
  std::condition_variable changed;
  std::uint64_t in_flight = 0, failed = 0;
  auto last_print = Steady::now();
  for (std::uint64_t n = 0; n < count; ++n) {
    {
      std::unique_lock lock(mu);
      changed.wait(lock, [&] { return in_flight < kWindow; });
      ++in_flight;
    }
    // 1 in 20 fails, 1 in 20 waits; the rest complete.
    const auto& workflow = n % 20 == 7 ? kFails.name : n % 20 == 13 ? kWaits.name : kDone.name;
    engine.start_json_then(workflow, fmt::format("run-{:07}", n), static_cast<std::int64_t>(n), StartOptions{},
                           [&](std::variant<StartOutcome, Error> started) {
                             std::lock_guard lock(mu);
                             if (std::holds_alternative<Error>(started)) ++failed;
                             --in_flight;
                             changed.notify_one();
                           });
    if (Steady::now() - last_print > std::chrono::seconds(5)) {
      last_print = Steady::now();
      std::fprintf(stderr, "list_bench: %llu of %llu runs started\n", static_cast<unsigned long long>(n),
                   static_cast<unsigned long long>(count));
    }
  }
  std::unique_lock lock(mu);
  changed.wait(lock, [&] { return in_flight == 0; });
  if (failed != 0) throw std::runtime_error(fmt::format("{} starts failed", failed));
}

struct Measured {
  std::string name;
  std::vector<double> round_p50_us, round_p99_us;
  LatencySummary all;
  std::size_t calls = 0;
};

// Repeats `call` in rounds of at least a third of min_seconds until
// min_seconds and min_rounds are both done.
template <typename Call>
Measured measure(const std::string& name, const Options& options, Call call) {
  Measured out;
  out.name = name;
  std::vector<double> every;
  auto began = Steady::now();
  auto round_length = std::chrono::duration<double>(options.min_seconds / 3);
  for (int round = 0; round < options.min_rounds || std::chrono::duration<double>(Steady::now() - began).count() <
                                                          options.min_seconds;
       ++round) {
    std::vector<double> samples;
    auto round_began = Steady::now();
    while (Steady::now() - round_began < round_length || samples.size() < 20) {
      auto at = Steady::now();
      call();
      samples.push_back(us_since(at));
    }
    auto summary = summarize_latencies(samples);
    out.round_p50_us.push_back(summary.p50_us);
    out.round_p99_us.push_back(summary.p99_us);
    every.insert(every.end(), samples.begin(), samples.end());
  }
  out.calls = every.size();
  out.all = summarize_latencies(std::move(every));
  return out;
}

void print(const Measured& m, const RawFloor& raw, std::uint64_t runs, const std::string& note = {}) {
  auto p50 = spread_of(m.round_p50_us);
  fmt::print("{:<22} {:>9} calls  p50 {:>9.1f} us (rounds {:.1f}-{:.1f})  p99 {:>9.1f} us  max {:>9.1f} us{}\n", m.name,
             m.calls, m.all.p50_us, p50.min, p50.max, m.all.p99_us, m.all.max_us, note);
  JsonLine line("list_bench");
  line.field("case", m.name)
      .field("runs", runs)
      .field("calls", static_cast<std::uint64_t>(m.calls))
      .field("p50_us", m.all.p50_us)
      .field("p99_us", m.all.p99_us)
      .field("max_us", m.all.max_us)
      .field("round_p50_min_us", p50.min)
      .field("round_p50_max_us", p50.max)
      .field("raw_flush_p50_us", raw.measured ? raw.latency.p50_us : -1.0);
  line.print();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"list_bench: listing, counting and metrics at a million runs, and what polling costs a start"};
  app.add_option("--dir", options.dir, "Where the case's data directory goes (a real disk)")->capture_default_str();
  app.add_option("--runs", options.runs, "Runs to load")->capture_default_str();
  app.add_option("--min-seconds", options.min_seconds, "Each measurement's timed seconds, at least")->capture_default_str();
  app.add_option("--pollers", options.pollers, "Clients polling the list and stats during the start case")
      ->capture_default_str();
  app.add_option("--poll-ms", options.poll_ms, "How often each poller asks")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto dir = std::filesystem::path(options.dir) / "list_bench";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto raw = fusee::bench::measure_floor(dir.string(), 2000);
  if (!raw) {
    std::fprintf(stderr, "list_bench: cannot measure the raw flush: %s\n", raw.error().message().c_str());
    return 1;
  }
  if (raw->measured) {
    fmt::print("raw durable 4 KiB write ({}): p50 {:.1f} us, p99 {:.1f} us\n",
               fusee::bench::flush_method_name(raw->method),
               raw->latency.p50_us, raw->latency.p99_us);
  }

  auto config = Config::local((dir / "data").string());
  config.shards = options.shards;
  config.http_listen = "127.0.0.1:0";
  config.park_after = std::chrono::milliseconds(1);  // the waiting runs park at the checkpoint below
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  auto engine = Engine::open(config);
  engine->register_workflow(kDone, [](Ctx& ctx, int n) -> Task<int> { co_return co_await ctx.step("one", [n] { return n; }); });
  engine->register_workflow(kFails, [](Ctx& ctx, int n) -> Task<int> {
    (void)co_await ctx.step("one", [n] { return n; });
    throw std::runtime_error("this run fails");
  });
  engine->register_workflow(kWaits, [](Ctx& ctx, int) -> Task<int> {
    auto go = co_await ctx.wait_for(kGo);
    co_return go.value_or(0);
  }, kGo);
  auto loading = Steady::now();
  load(*engine, options.runs);
  auto load_s = us_since(loading) / 1e6;
  auto checkpointing = Steady::now();
  engine->checkpoint();  // finished runs to the run store, waiting ones parked
  auto checkpoint_s = us_since(checkpointing) / 1e6;
  // A few waiting runs loaded again, beside the parked ones.
  for (int n = 0; n < 100; ++n) (void)engine->get_run(fmt::format("run-{:07}", n * 20 + 13));
  auto counts = engine->count_runs();
  auto rss = resident_mib();
  fmt::print("loaded {} runs in {:.1f} s, checkpointed in {:.1f} s: {} completed, {} failed, {} running ({} parked); "
             "resident {:.0f} MiB\n",
             options.runs, load_s, checkpoint_s, counts[1], counts[2], counts[0], engine->stats().runs_parked, rss);
  JsonLine("list_bench").field("case", "load").field("runs", options.runs).field("load_s", load_s)
      .field("resident_mib", rss).print();

  const auto at = engine->http_endpoint();
  Client client(at);
  std::vector<Measured> results;
  results.push_back(measure("list_first", options, [&] { (void)client.get("/v1/runs?limit=50"); }));
  // A cursor half-way down: pages of 10,000 from the engine, then one of 50.
  RunListQuery half;
  half.limit = 10'000;
  for (std::uint64_t walked = 0; walked < options.runs / 2;) {
    auto page = engine->query_runs(half);
    walked += page.runs.size();
    if (page.next_cursor.empty()) break;
    half.cursor = page.next_cursor;
  }
  std::string deep_target = "/v1/runs?limit=50&cursor=";
  for (char c : half.cursor) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') {
      deep_target += c;
    } else {
      deep_target += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    }
  }
  results.push_back(measure("list_deep", options, [&] { (void)client.get(deep_target); }));
  results.push_back(
      measure("list_filtered", options, [&] { (void)client.get("/v1/runs?status=failed&workflow=FAI&limit=50"); }));
  // Every run on the page running, most parked: each one's waiting_on is
  // read from its shard (the parked ones from the run store).
  results.push_back(measure("list_running", options, [&] { (void)client.get("/v1/runs?status=running&limit=50"); }));
  results.push_back(measure("stats", options, [&] { (void)client.get("/v1/stats"); }));
  results.push_back(measure("metrics", options, [&] { (void)client.get("/metrics"); }));

  std::uint64_t next_id = 0;
  auto start_one = [&] { (void)engine->start(kDone, fmt::format("start-{}", next_id++), 1); };
  auto alone = measure("start_alone", options, start_one);
  // The console's tabs: each asks for the first page and the stats every poll_ms.
  std::atomic<bool> polling{true};
  std::atomic<std::uint64_t> polls{0};
  std::vector<std::thread> pollers;
  for (int k = 0; k < options.pollers; ++k) {
    pollers.emplace_back([&, k] {
      Client tab(at);
      std::this_thread::sleep_for(std::chrono::milliseconds(options.poll_ms * k / std::max(1, options.pollers)));
      while (polling.load()) {
        (void)tab.get("/v1/runs?limit=50");
        (void)tab.get("/v1/stats");
        ++polls;
        for (int slept = 0; slept < options.poll_ms && polling.load(); slept += 10) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    });
  }
  auto polled_options = options;
  polled_options.min_seconds = std::max(options.min_seconds, 2.5 * options.poll_ms / 1000.0);
  auto polled = measure("start_polled", polled_options, start_one);
  polling = false;
  for (auto& poller : pollers) poller.join();

  fmt::print("\nat {} runs ({} shards, local mode, direct writes):\n", options.runs, options.shards);
  for (const auto& m : results) print(m, *raw, options.runs);
  print(alone, *raw, options.runs, fmt::format("  ({:.2f}x the raw flush)", alone.all.p50_us / raw->latency.p50_us));
  print(polled, *raw, options.runs,
        fmt::format("  ({:.2f}x alone; {} polls by {} clients)", polled.all.p50_us / alone.all.p50_us, polls.load(),
                    options.pollers));
  auto worst_p99 = 0.0;
  for (const auto& m : results) {
    if (m.name != "metrics") worst_p99 = std::max(worst_p99, m.all.p99_us);
  }
  fmt::print("aim: list and stats p99 <= 20 ms: {:.1f} ms ({}); start p50 polled <= 1.1x alone: {:.2f}x ({})\n",
             worst_p99 / 1000, worst_p99 <= 20'000 ? "met" : "missed", polled.all.p50_us / alone.all.p50_us,
             polled.all.p50_us <= 1.1 * alone.all.p50_us ? "met" : "missed");
  fusee::bench::print_aim_line("list_aims", "list_and_stats_p99_ms", worst_p99 / 1000, /*at_most=*/true, 20);
  fusee::bench::print_aim_line("list_aims", "start_p50_polled_over_alone", polled.all.p50_us / alone.all.p50_us,
                               /*at_most=*/true, 1.1);
  engine->shutdown();
  std::filesystem::remove_all(dir);
  return 0;
}
