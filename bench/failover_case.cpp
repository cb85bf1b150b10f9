#include "bench/failover_case.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "fusee/fusee.hpp"
#include "replica/local_etcd.hpp"
#include "replica/replica_store.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::bench {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace json = boost::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// --- The replica process ---

void register_workflows(Engine& engine) {
  // One step: the first completed step on a new primary.
  engine.register_workflow(WorkflowRef<int, int>{"probe"}, [](Ctx& ctx, int n) -> Task<int> {
    co_return co_await ctx.step("one", [n] { return n + 1; });
  });
  // A step, a wait, a step: the runs parked when the primary dies.
  engine.register_workflow(WorkflowRef<int, int>{"parked"}, [](Ctx& ctx, int n) -> Task<int> {
    int a = co_await ctx.step("a", [n] { return 2 * n; });
    auto go = co_await ctx.wait_for(Signal<int>{"go"});
    co_return co_await ctx.step("b", [a, go] { return a + go.value_or(0); });
  });
}

// --- The driver's HTTP calls ---

struct Answer {
  unsigned status = 0;  // 0: no answer (refused, down, timed out)
  std::string body;
};

Answer http(std::uint16_t port, beast::http::verb verb, const std::string& target, const std::string& body,
            std::chrono::milliseconds timeout) {
  try {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.expires_after(timeout);
    stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    beast::http::request<beast::http::string_body> request(verb, target, 11);
    request.set(beast::http::field::host, "127.0.0.1");
    if (!body.empty()) {
      request.set(beast::http::field::content_type, "application/json");
      request.body() = body;
      request.prepare_payload();
    }
    beast::http::write(stream, request);
    beast::flat_buffer buffer;
    beast::http::response<beast::http::string_body> response;
    beast::http::read(stream, buffer, response);
    return {response.result_int(), response.body()};
  } catch (const std::exception&) {
    return {};
  }
}

struct Replica {
  std::string dir;
  std::uint16_t http_port = 0;
  pid_t pid = 0;
};

class Cluster {
 public:
  Cluster(const FailoverOptions& options) : options_(options) {
    std::filesystem::create_directories(options.dir);
    etcd_ = std::make_unique<replica::LocalEtcd>(options.dir);
    if (!etcd_->ready()) {
      throw std::runtime_error("etcd did not start (scripts/install-deps installs it): " + etcd_->problem());
    }
    io::PosixFileSystem fs;
    for (std::uint32_t id = 0; id < 3; ++id) {
      addresses_.push_back(fmt::format("127.0.0.1:{}", replica::free_loopback_port()));
      Replica replica;
      replica.dir = fmt::format("{}/replica-{}", options.dir, id);
      replica.http_port = replica::free_loopback_port();
      if (auto made = replica::ReplicaStore::initialize(fs, replica.dir, "failover", false); !made) {
        throw std::runtime_error(fmt::format("cannot make {}: {}", replica.dir, made.error().message()));
      }
      replicas_.push_back(replica);
    }
    for (std::uint32_t id = 0; id < 3; ++id) start(id);
  }
  ~Cluster() {
    for (auto& replica : replicas_) {
      if (replica.pid > 0) {
        ::kill(replica.pid, SIGKILL);
        ::waitpid(replica.pid, nullptr, 0);
      }
    }
  }

  void start(std::uint32_t id) {
    std::string joined;
    for (const auto& address : addresses_) joined += (joined.empty() ? "" : ",") + address;
    const std::vector<std::string> args = {options_.self,
                                           "--failover-replica",
                                           replicas_[id].dir,
                                           std::to_string(id),
                                           joined,
                                           fmt::format("127.0.0.1:{}", etcd_->client_port()),
                                           fmt::format("127.0.0.1:{}", replicas_[id].http_port),
                                           std::to_string(options_.lease_ms / 1000)};
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      // A replica dies with the benchmark (the thread that forked it: the
      // main one), rather than serve on as an orphan.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    replicas_[id].pid = pid;
  }

  void kill(std::uint32_t id) {
    ::kill(replicas_[id].pid, SIGKILL);
    ::waitpid(replicas_[id].pid, nullptr, 0);
    replicas_[id].pid = 0;
  }

  std::uint16_t port(std::uint32_t id) const { return replicas_[id].http_port; }

  // The replicas as one answers for all (GET /v1/cluster), asked of `id`.
  std::optional<json::array> cluster_of(std::uint32_t id) {
    auto answer = http(port(id), beast::http::verb::get, "/v1/cluster", "", 2s);
    if (answer.status != 200) return std::nullopt;
    try {
      return json::parse(answer.body).at("replicas").as_array();
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  // The replica whose engine runs the workflows, and all three holding
  // the whole log (a restarted one caught up), within 60 s.
  std::uint32_t settled_primary() {
    const auto give_up = Clock::now() + 60s;
    while (Clock::now() < give_up) {
      for (std::uint32_t id = 0; id < 3; ++id) {
        auto replicas = cluster_of(id);
        if (!replicas) continue;
        std::optional<std::uint32_t> primary;
        bool caught_up = true;
        for (const auto& value : *replicas) {
          const auto& replica = value.as_object();
          if (!replica.at("answered").as_bool()) caught_up = false;
          if (replica.at("role") == "primary") primary = static_cast<std::uint32_t>(replica.at("id").to_number<int>());
          if (replica.at("lag_batches").is_null() || replica.at("lag_batches").to_number<std::uint64_t>() > 0) {
            caught_up = false;
          }
        }
        // Its engine open: a start through it is answered.
        if (primary && caught_up &&
            http(port(*primary), beast::http::verb::get, "/v1/runs?limit=1", "", 2s).status == 200) {
          auto stats = http(port(*primary), beast::http::verb::get, "/v1/stats", "", 2s);
          if (stats.status == 200 && json::parse(stats.body).at("shards_held").to_number<int>() > 0) return *primary;
        }
      }
      std::this_thread::sleep_for(20ms);
    }
    throw std::runtime_error("no primary with every replica caught up within 60 s");
  }

  // POST until a replica other than `not_this` answers 2xx; the time it did.
  Clock::time_point post_until_done(std::uint32_t not_this, const std::string& target, const std::string& body) {
    const auto give_up = Clock::now() + 60s;
    std::uint32_t next = (not_this + 1) % 3;
    while (Clock::now() < give_up) {
      auto answer = http(port(next), beast::http::verb::post, target, body, 30s);
      if (answer.status >= 200 && answer.status < 300) return Clock::now();
      if (answer.status != 0 && answer.status != 503) {
        throw std::runtime_error(fmt::format("POST {} {}: {} {}", target, body, answer.status, answer.body));
      }
      next = next == (not_this + 1) % 3 ? (not_this + 2) % 3 : (not_this + 1) % 3;
      std::this_thread::sleep_for(5ms);
    }
    throw std::runtime_error(fmt::format("POST {} was never answered within 60 s", target));
  }

 private:
  const FailoverOptions& options_;
  std::unique_ptr<replica::LocalEtcd> etcd_;
  std::vector<std::string> addresses_;
  std::vector<Replica> replicas_;
};

}  // namespace

int failover_replica_main(int argc, char** argv) {
  if (argc != 8) {
    fmt::print(stderr, "usage: engine_bench --failover-replica DIR ID REPLICAS ETCD HTTP LEASE_S\n");
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before any thread starts: they inherit it
  std::vector<std::string> replicas;
  std::stringstream list(argv[4]);
  for (std::string address; std::getline(list, address, ',');) replicas.push_back(address);
  auto config = Config::replicated(argv[2], argv[5], "failover", static_cast<std::uint32_t>(std::stoul(argv[3])),
                                   replicas);
  config.shards = 2;
  config.replica_tick = 5ms;
  config.etcd_lease_ttl = std::chrono::seconds(std::stoul(argv[7]));
  config.http_listen = argv[6];
  config.checkpoint_interval = 500ms;
  config.warn = [](const std::string&) {};
  try {
    auto engine = Engine::open(config);
    register_workflows(*engine);
    int received = 0;
    sigwait(&stop, &received);
    engine->shutdown();
  } catch (const std::exception& error) {
    fmt::print(stderr, "engine_bench --failover-replica: {}\n", error.what());
    return 1;
  }
  return 0;
}

FailoverFigures run_failover(const FailoverOptions& options) {
  Cluster cluster(options);
  FailoverFigures figures;
  figures.lease_ms = options.lease_ms;
  figures.parked_runs = options.parked_runs;
  for (std::uint32_t round = 0; round < options.kills; ++round) {
    const std::uint32_t primary = cluster.settled_primary();
    // Runs parked on their wait, their first step durable.
    std::vector<std::string> parked;
    for (std::uint32_t n = 0; n < options.parked_runs; ++n) {
      parked.push_back(fmt::format("parked-{}-{}", round, n));
      auto answer = http(cluster.port(primary), beast::http::verb::post, "/v1/runs",
                         json::serialize(json::object{{"workflow", "parked"}, {"id", parked.back()}, {"input", n}}), 10s);
      if (answer.status / 100 != 2) {
        throw std::runtime_error(fmt::format("a start on the primary: {} {}", answer.status, answer.body));
      }
    }
    for (const auto& id : parked) {
      // A signal it ignores is acknowledged once durable with every record
      // of its shard before it: the run's first step too.
      auto answer = http(cluster.port(primary), beast::http::verb::post, fmt::format("/v1/runs/{}/signals/noise", id),
                         R"({"value": 0, "signal_id": "noise"})", 10s);
      if (answer.status / 100 != 2) throw std::runtime_error(fmt::format("a signal: {} {}", answer.status, answer.body));
    }
    const auto killed_at = Clock::now();
    cluster.kill(primary);
    const auto first_step = cluster.post_until_done(
        primary, "/v1/runs/execute", json::serialize(json::object{{"workflow", "probe"}, {"id", fmt::format("probe-{}", round)}, {"input", 1}}));
    // The next primary's own account of its opening.
    for (std::uint32_t via : {(primary + 1) % 3, (primary + 2) % 3}) {
      auto replicas = cluster.cluster_of(via);
      if (!replicas) continue;
      for (const auto& value : *replicas) {
        const auto& replica = value.as_object();
        if (replica.at("role") != "primary") continue;
        auto metrics = http(cluster.port(static_cast<std::uint32_t>(replica.at("id").to_number<int>())),
                            beast::http::verb::get, "/metrics", "", 2s);
        const std::string name = "\nfusee_replica_last_open_seconds ";
        if (auto at = metrics.body.find(name); at != std::string::npos) {
          figures.open_ms.push_back(std::stod(metrics.body.substr(at + name.size())) * 1000);
        }
      }
      break;
    }
    std::vector<std::thread> signals;
    std::vector<Clock::time_point> done(parked.size());
    std::exception_ptr failed;
    std::mutex failed_mu;
    for (std::size_t k = 0; k < parked.size(); ++k) {
      signals.emplace_back([&, k] {
        try {
          (void)cluster.post_until_done(primary, fmt::format("/v1/runs/{}/signals/go", parked[k]),
                                        R"({"value": 1, "signal_id": "go"})");
          const auto give_up = Clock::now() + 60s;
          std::uint32_t via = (primary + 1 + k % 2) % 3;
          for (;;) {
            auto answer = http(cluster.port(via), beast::http::verb::get, fmt::format("/v1/runs/{}", parked[k]), "", 10s);
            if (answer.status == 200 && json::parse(answer.body).at("status") == "completed") break;
            if (Clock::now() > give_up) throw std::runtime_error(parked[k] + " did not finish within 60 s");
            via = via == (primary + 1) % 3 ? (primary + 2) % 3 : (primary + 1) % 3;
            std::this_thread::sleep_for(5ms);
          }
          done[k] = Clock::now();
        } catch (...) {
          std::lock_guard lock(failed_mu);
          failed = std::current_exception();
        }
      });
    }
    for (auto& thread : signals) thread.join();
    if (failed) std::rethrow_exception(failed);
    auto ms = [&](Clock::time_point at) { return std::chrono::duration<double, std::milli>(at - killed_at).count(); };
    figures.first_step_ms.push_back(ms(first_step));
    figures.all_resumed_ms.push_back(ms(*std::max_element(done.begin(), done.end())));
    cluster.start(primary);  // back, as a backup
  }
  return figures;
}

}  // namespace fusee::bench
