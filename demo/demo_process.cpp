#include "demo/demo_process.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "demo/backoffice.hpp"
#include "demo/order_events.hpp"
#include "demo/order_workflow.hpp"

extern char** environ;

namespace fusee::cli {

using std::chrono::milliseconds;

namespace {
// A pipe end moved above the standard descriptors and fd 3, so the child's
// dup2 onto 0 and 3 never meets one of them.
int high_fd(int fd) {
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return moved;
}

}  // namespace

std::int64_t steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count();
}

std::int64_t system_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Empties options.dir if the demo made it (or the log demo did, or it is
// empty) and marks it as the demo's. False, with a message, otherwise.
bool prepare_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::exists(dir, error)) {
    bool ours = fs::exists(fs::path(dir) / kMarker, error);
    bool only_log_demo = fs::is_directory(dir, error);  // `fusee log-demo` leaves only wal/
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      auto name = entry.path().filename().string();
      if (name != "wal" && name != "wal.new") only_log_demo = false;
    }
    if (error || (!ours && !only_log_demo)) {
      fmt::print(stderr, "fusee demo: {} holds files the demo did not make; choose another --dir\n", dir);
      return false;
    }
    fs::remove_all(dir, error);
    if (error) {
      fmt::print(stderr, "fusee demo: cannot empty {}: {}\n", dir, error.message());
      return false;
    }
  }
  fs::create_directories(dir, error);
  std::ofstream marker(fs::path(dir) / kMarker);
  marker << "made by `fusee demo`, which wipes this directory when it starts\n";
  if (error || !marker) {
    fmt::print(stderr, "fusee demo: cannot create {}: {}\n", dir, error ? error.message() : std::strerror(errno));
    return false;
  }
  return true;
}

// The ledger's view of what earlier lives did: the child reads it once its
// engine is open.
void send_state(Child& child, const std::string& state) {
  for (std::size_t sent = 0; sent < state.size();) {
    auto wrote = ::write(child.state_fd, state.data() + sent, state.size() - sent);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) break;
    sent += static_cast<std::size_t>(wrote);
  }
  ::close(child.state_fd);
  child.state_fd = -1;
}

// Starts `fusee demo --child ...`; send_state() gives it the ledger's state
// on its stdin.
std::optional<Child> spawn_child(const OrderDemoOptions& options, std::uint64_t seed, std::uint32_t allow, bool final,
                                 const std::string& server, bool partner, bool patched,
                                 const std::vector<std::string>& extra_args) {
  int report[2], input[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return std::nullopt;
  if (::pipe2(input, O_CLOEXEC) != 0) {
    ::close(report[0]);
    ::close(report[1]);
    return std::nullopt;
  }
  for (int* fd : {&report[0], &report[1], &input[0], &input[1]}) *fd = high_fd(*fd);

  std::vector<std::string> args{"/proc/self/exe", "demo",           "--child",
                                "--dir",          options.dir,      "--orders",
                                std::to_string(options.orders),     "--seed",
                                std::to_string(seed),               "--allow",
                                std::to_string(allow)};
  if (final) args.emplace_back("--final");
  if (patched) args.emplace_back("--patched");
  if (!server.empty()) {
    args.emplace_back("--server");
    args.push_back(server);
  }
  if (options.split) {
    args.emplace_back("--shards-max");
    args.push_back(std::to_string(kSplitShards / 2));
  }
  if (partner) args.emplace_back("--partner");
  if (options.check_only) args.emplace_back("--check-only");
  if (!options.backup.empty() && !options.check_only) {
    args.emplace_back("--backup");
    args.push_back(options.backup);
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, input[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, report[1], 3);
  std::fflush(nullptr);
  pid_t pid = -1;
  int spawned = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(input[0]);
  ::close(report[1]);
  if (spawned != 0) {
    ::close(input[1]);
    ::close(report[0]);
    errno = spawned;
    return std::nullopt;
  }
  // The child reads all of it before it opens the engine. A child that died
  // first gives EPIPE (SIGPIPE is ignored): nothing to do about it here.
  return Child{pid, report[0], input[1]};
}

bool LineReader::read_from(int fd) {
  char buffer[8192];
  auto got = ::read(fd, buffer, sizeof buffer);
  if (got < 0) return errno == EINTR || errno == EAGAIN;
  if (got == 0) return false;
  partial_.append(buffer, static_cast<std::size_t>(got));
  heard_ = true;
  auto now = system_ms();
  std::size_t start = 0;
  for (auto end = partial_.find('\n'); end != std::string::npos; end = partial_.find('\n', start)) {
    auto line = std::string_view(partial_).substr(start, end - start);
    if (line == kReadyLine) {  // a partner's engine is open
      start = end + 1;
      continue;
    }
    if (line.starts_with(kRoleLinePrefix)) {  // a replica's role, for the parent alone
      role_ = std::string(line.substr(kRoleLinePrefix.size()));
      start = end + 1;
      continue;
    }
    if (line.starts_with(kDroppedLinePrefix)) {  // a replicated driver's dropped call, for the parent alone
      ++dropped_;
      last_dropped_ = std::string(line.substr(kDroppedLinePrefix.size()));
      start = end + 1;
      continue;
    }
    ++lines_;
    bool fresh = ledger_.feed(life_, line, now);
    if (fresh && !watched_.empty() && line.starts_with(watched_)) ++watched_lines_;
    start = end + 1;
  }
  partial_.erase(0, start);
  return true;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("status {}", status);
}

KillPlan pick_kill(std::mt19937_64& random, std::uint64_t new_orders) {
  static constexpr std::string_view kKinds[] = {"started ", "ran ", "signalled ", "chunk "};
  KillPlan plan;
  auto draw = std::uniform_int_distribution<int>(0, 9)(random);
  if (draw < 2) {  // early: while the engine opens and replays
    plan.after = milliseconds(std::uniform_int_distribution<int>(5, 120)(random));
  } else if (draw < 7) {  // right behind the child's work
    plan.after = milliseconds(900);
    plan.after_kind = kKinds[std::uniform_int_distribution<std::size_t>(0, std::size(kKinds) - 1)(random)];
    plan.after_count = std::uniform_int_distribution<std::uint64_t>(1, std::max<std::uint64_t>(3, 2 * new_orders))(random);
  } else {
    plan.after = milliseconds(std::uniform_int_distribution<int>(120, 900)(random));
  }
  return plan;
}

int wait_for_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

bool final_life_ended_well(int status, const OrderLedger& ledger, std::string_view who,
                           std::vector<std::string>& failures) {
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    failures.push_back(fmt::format("the final {} failed ({})", who, describe_status(status)));
    return false;
  }
  if (!ledger.complete()) {
    failures.push_back(fmt::format("the final {} exited without finishing its check", who));
    return false;
  }
  return true;
}

int print_outcome(OrderLedger& ledger, std::vector<std::string> failures, int kills, int patch_life,
                  Clock::time_point started, std::uint64_t seed) {
  auto violations = std::move(failures);
  for (auto& violation : ledger.check(ledger.complete())) violations.push_back(std::move(violation));
  for (std::size_t i = 0; i < violations.size() && i < kViolationsShown; ++i)
    fmt::print(stderr, "VIOLATION: {}\n", violations[i]);
  if (violations.size() > kViolationsShown)
    fmt::print(stderr, "... and {} more violations\n", violations.size() - kViolationsShown);

  const auto totals = ledger.totals();
  const auto backoffice = ledger.backoffice_totals();
  const auto elapsed_s = std::chrono::duration<double>(Clock::now() - started).count();
  fmt::print("fusee demo: {} runs finished ({} shipped, {} rejected, {} expired), {} step runs ({} repeated after a "
             "kill before they were durable), {} kills, {} chunks, {} signals, {} updates answered ({} took effect), "
             "{} payments confirmed by the provider, {} took the life-{} patch, {} packed through the `{}` queue (at "
             "most {} at once; it allows {}), {} audits on schedule, {} violations, {:.1f} s (seed {})\n",
             totals.finished, totals.shipped, totals.rejected, totals.expired, totals.step_runs, totals.step_reruns,
             kills, totals.chunks, totals.signals, totals.updates, totals.updates_applied, totals.payments,
             ledger.took_patch(), patch_life, backoffice.packs, kPackingQueue, backoffice.most_in_flight,
             kPackingConcurrency, backoffice.audits, violations.size(), elapsed_s, seed);
  return violations.empty() ? 0 : 1;
}

}  // namespace fusee::cli
