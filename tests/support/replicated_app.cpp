// An application in replicated mode, for tests/replicated_engine_kill_test.sh:
// one replica of a cluster (Config::replicated) serving the HTTP API, with
// the `order` workflow -- step "a" (2n), a chunk of stream "progress" (a),
// updates "bump" (each answered with the sum of the bumps so far) until the
// signal "go", step "b" (a + go + the bumps) -- until SIGTERM or SIGINT (or
// SIGKILL, which is the point).
//
// Each time a step's body runs, it appends a line to the step ledger,
// "STEP N REALTIME_NS PID" (one write to a file opened O_APPEND, which
// every replica shares): the test checks that no step ran again once it was
// durable (once a later call on its run was acknowledged).
//
// Usage: replicated_app DIR ID REPLICAS ETCD HTTP_LISTEN STEP_LEDGER
//   REPLICAS: every replica's HOST:PORT, comma-separated, in id order.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fusee/fusee.hpp>
#include <sstream>
#include <string>
#include <vector>

using namespace fusee;
using namespace std::chrono_literals;

namespace {

int ledger = -1;  // the step ledger, O_APPEND

// A step's body ran: one write per line (appends of a few bytes do not
// interleave). A global, not a capture: the workflow's coroutine must not
// hold on to its lambda's captures.
void ran(const char* step, int n) {
  const auto line = fmt::format("{} {} {} {}\n", step, n,
                                std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count(),
                                ::getpid());
  if (::write(ledger, line.data(), line.size()) != static_cast<ssize_t>(line.size())) std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    fmt::print(stderr, "usage: replicated_app DIR ID REPLICAS ETCD HTTP_LISTEN STEP_LEDGER\n");
    return 2;
  }
  ledger = ::open(argv[6], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (ledger < 0) {
    fmt::print(stderr, "replicated_app: cannot open the step ledger {}\n", argv[6]);
    return 2;
  }

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before any thread starts: they inherit it
  std::vector<std::string> replicas;
  std::stringstream list(argv[3]);
  for (std::string address; std::getline(list, address, ',');) replicas.push_back(address);
  auto config = Config::replicated(argv[1], argv[4], "kill", static_cast<std::uint32_t>(std::stoul(argv[2])),
                                   replicas);
  config.shards = 2;
  config.replica_tick = 5ms;
  config.etcd_lease_ttl = 1s;
  config.http_listen = argv[5];
  // Checkpoints all along: the run store's records travel in the log
  // through every kill.
  config.checkpoint_interval = 300ms;
  config.warn = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  try {
    auto engine = Engine::open(config);
    engine->register_workflow(WorkflowRef<int, int>{"order"}, [](Ctx& ctx, int n) -> Task<int> {
      int a = co_await ctx.step("a", [n] {
        ran("a", n);
        return 2 * n;
      });
      co_await ctx.stream("progress").write(a);  // one chunk: a
      // Bumps (updates, each answered with the total so far) until "go".
      const Update<int, int> bump{"bump"};
      ctx.on_update(bump);
      auto next_bump = ctx.next_update(bump).start();
      auto go = ctx.wait_for(Signal<int>{"go"}).start();
      int bumped = 0;
      while (co_await ctx.any(next_bump, go) == 0) {
        auto request = co_await next_bump;
        bumped += request.arg;
        co_await ctx.reply(request, bumped);
        next_bump = ctx.next_update(bump).start();
      }
      const int go_value = (co_await go).value_or(-1000);
      co_return co_await ctx.step("b", [a, go_value, bumped, n] {
        ran("b", n);
        return a + go_value + bumped;
      });
    });
    fmt::print(stderr, "replicated_app: replica {} serves HTTP on {}\n", argv[2], engine->http_endpoint());
    int received = 0;
    sigwait(&stop, &received);
    engine->shutdown();
  } catch (const Error& error) {
    fmt::print(stderr, "replicated_app: {}\n", error.what());
    return 1;
  }
  return 0;
}
