#include "demo/log_demo.hpp"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include "wal/io/posix_file_system.hpp"
#include "wal/log.hpp"

namespace fusee::cli {
namespace {

using wal::Lsn;
using wal::ShardId;

// What the record for a shard's LSN must hold: the checker recomputes it,
// so a changed byte anywhere is caught.
std::string order_record(ShardId shard, Lsn lsn) {
  return fmt::format("order shard={} lsn={} item={} quantity={} note={}", shard, lsn, (lsn * 7919 + shard) % 1000,
                     1 + lsn % 9, std::string(lsn % 97, static_cast<char>('a' + (lsn + shard) % 26)));
}

std::span<const std::byte> as_bytes(const std::string& text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

// The child: append from one thread per shard until killed, writing
// "shard lsn\n" to ack_fd after each record is durable.
[[noreturn]] void run_worker(const LogDemoOptions& options, int ack_fd) {
  io::PosixFileSystem fs;
  wal::LogOptions log_options;
  log_options.dir = options.dir;
  log_options.shard_count = options.shards;
  log_options.segment_bytes = 1 * wal::kMiB;  // small, so the demo crosses segment rolls
  auto log = wal::Log::open(fs, log_options);
  if (!log) {
    std::fprintf(stderr, "log-demo worker: cannot open the log: %s\n", log.error().message().c_str());
    _exit(3);
  }
  std::vector<std::thread> appenders;
  for (ShardId shard = 0; shard < options.shards; ++shard) {
    appenders.emplace_back([&, shard] {
      for (;;) {
        auto next = (*log)->last_lsn(shard) + 1;
        auto appended = (*log)->append(shard, as_bytes(order_record(shard, next)));
        if (!appended || !(*log)->wait_durable(shard, *appended)) _exit(4);
        auto line = fmt::format("{} {}\n", shard, *appended);
        // One short write per line: atomic on a pipe, so lines never interleave.
        if (::write(ack_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(5);
      }
    });
  }
  for (auto& appender : appenders) appender.join();
  _exit(0);
}

struct Ledger {
  std::vector<Lsn> acked;  // highest acknowledged LSN per shard, from the child
  std::string partial;     // an incomplete line read so far

  void feed(const char* data, std::size_t size) {
    partial.append(data, size);
    std::size_t start = 0;
    for (auto end = partial.find('\n'); end != std::string::npos; end = partial.find('\n', start)) {
      unsigned shard = 0;
      unsigned long long lsn = 0;
      if (std::sscanf(partial.c_str() + start, "%u %llu", &shard, &lsn) == 2 && shard < acked.size())
        acked[shard] = std::max<Lsn>(acked[shard], lsn);
      start = end + 1;
    }
    partial.erase(0, start);
  }
};

// Reopens the directory and checks it against the ledger. Returns the number
// of violations, printing each.
int verify(const LogDemoOptions& options, const Ledger& ledger, std::uint64_t& records_out) {
  io::PosixFileSystem fs;
  wal::LogOptions log_options;
  log_options.dir = options.dir;
  log_options.shard_count = options.shards;
  log_options.segment_bytes = 1 * wal::kMiB;
  wal::RecoveryPlan plan;
  auto log = wal::Log::open(fs, log_options, &plan);
  if (!log) {
    fmt::print(stderr, "VIOLATION: the log did not reopen after SIGKILL: {} {}\n", log.error().message(),
               plan.refusal);
    return 1;
  }
  int violations = 0;
  records_out = 0;
  for (ShardId shard = 0; shard < options.shards; ++shard) {
    Lsn expected = 1;
    auto read = (*log)->read(shard, 1, ~Lsn{0}, [&](Lsn lsn, std::span<const std::byte> bytes) {
      auto want = order_record(shard, lsn);
      if (lsn != expected || bytes.size() != want.size() || std::memcmp(bytes.data(), want.data(), want.size()) != 0) {
        if (violations++ < 10) fmt::print(stderr, "VIOLATION: shard {} LSN {} differs from what was written\n", shard, lsn);
      }
      expected = lsn + 1;
      ++records_out;
    });
    if (!read) {
      fmt::print(stderr, "VIOLATION: reading shard {} failed: {}\n", shard, read.error().message());
      ++violations;
    }
    auto recovered = (*log)->durable_lsn(shard);
    if (recovered < ledger.acked[shard]) {
      fmt::print(stderr, "VIOLATION: shard {} acknowledged up to LSN {} but only {} survived\n", shard,
                 ledger.acked[shard], recovered);
      ++violations;
    }
  }
  if (!options.quiet)
    fmt::print("  reopened: {} records in {} batches over {} segment(s); tail: {}\n", plan.chain_records,
               plan.chain_batches, plan.segments.size(), plan.tail.empty() ? "clean" : plan.tail);
  return violations;
}

}  // namespace

int run_log_demo(const LogDemoOptions& options) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::exists(options.dir)) {
    // Only ever wipe a directory this demo made.
    for (const auto& entry : fs::directory_iterator(options.dir)) {
      auto name = entry.path().filename().string();
      if (name != "wal" && name != "wal.new") {
        fmt::print(stderr, "fusee log-demo: {} holds {}, which the demo did not make; choose another --dir\n",
                   options.dir, name);
        return 2;
      }
    }
    fs::remove_all(options.dir, error);
  }
  auto seed = options.seed != 0 ? options.seed : static_cast<std::uint64_t>(::time(nullptr));
  std::mt19937_64 random(seed);
  fmt::print("fusee log-demo: {} appender threads on the shared log in {}; {} SIGKILLs (seed {})\n", options.shards,
             options.dir, options.kills, seed);

  Ledger ledger;
  ledger.acked.assign(options.shards, 0);
  auto started = std::chrono::steady_clock::now();
  int violations = 0;
  std::uint64_t records = 0;
  for (int kill = 1; kill <= options.kills; ++kill) {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) {
      std::perror("pipe");
      return 2;
    }
    std::fflush(nullptr);
    pid_t child = ::fork();
    if (child < 0) {
      std::perror("fork");
      return 2;
    }
    if (child == 0) {
      ::close(pipe_fds[0]);
      run_worker(options, pipe_fds[1]);
    }
    ::close(pipe_fds[1]);
    // Let it run a random while, reading acknowledgements, then kill it.
    auto run_ms = std::uniform_int_distribution<int>(150, 600)(random);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(run_ms);
    char buffer[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd poll_fd{pipe_fds[0], POLLIN, 0};
      if (::poll(&poll_fd, 1, 10) > 0) {
        auto got = ::read(pipe_fds[0], buffer, sizeof buffer);
        if (got <= 0) break;
        ledger.feed(buffer, static_cast<std::size_t>(got));
      }
    }
    ::kill(child, SIGKILL);
    // Acknowledgements sent before the kill are still in the pipe: drain them.
    for (;;) {
      auto got = ::read(pipe_fds[0], buffer, sizeof buffer);
      if (got <= 0) break;
      ledger.feed(buffer, static_cast<std::size_t>(got));
    }
    ::close(pipe_fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      fmt::print(stderr, "VIOLATION: the worker exited on its own (status {}) before the kill\n", status);
      ++violations;
    }
    Lsn acked_total = 0;
    for (auto lsn : ledger.acked) acked_total += lsn;
    if (!options.quiet) fmt::print("kill {}: after {} ms, {} records acknowledged so far\n", kill, run_ms, acked_total);
    violations += verify(options, ledger, records);
  }
  auto elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  Lsn acked_total = 0;
  for (auto lsn : ledger.acked) acked_total += lsn;
  fmt::print("fusee log-demo: {} kills, {} records acknowledged, {} recovered, {} violations, {:.1f} s\n", options.kills,
             acked_total, records, violations, elapsed_s);
  return violations == 0 ? 0 : 1;
}

}  // namespace fusee::cli
