#include "demo/order_demo.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "backup/manifest.hpp"
#include "backup/open_target.hpp"
#include "backup/s3_target.hpp"
#include "backup/restore.hpp"
#include "demo/backoffice.hpp"
#include "demo/demo_process.hpp"
#include "demo/order_demo_child.hpp"
#include "demo/order_ledger.hpp"
#include "demo/order_workflow.hpp"
#include "demo/replicated_order_demo.hpp"
#include "engine/offline_dir.hpp"
#include "server/log_service.hpp"
#include "wal/io/posix_file_system.hpp"


namespace fusee::cli {
namespace {

using std::chrono::milliseconds;

// Restores the backup's latest into `restored`, emptied first (only if the
// demo made it) and marked the demo's. Nothing, with `why`, when it fails;
// with `empty_is_nothing`, a target no engine has made yet (no identity)
// gives a summary of no batches instead.
std::optional<backup::RestoreSummary> restore_latest(const OrderDemoOptions& options, const std::string& restored,
                                                     bool empty_is_nothing, std::string& why) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::exists(restored, error)) {
    if (!fs::exists(fs::path(restored) / kMarker, error)) {
      why = fmt::format("{} holds files the demo did not make; remove it or choose another --dir", restored);
      return std::nullopt;
    }
    fs::remove_all(restored, error);
    if (error) {
      why = fmt::format("cannot empty {}: {}", restored, error.message());
      return std::nullopt;
    }
  }
  io::PosixFileSystem posix;
  std::string problem;
  auto target = backup::open_target(posix, options.backup, &problem);
  if (!target) {
    why = fmt::format("cannot open the backup: {}", problem);
    return std::nullopt;
  }
  if (empty_is_nothing) {
    auto identity = (*target)->get(backup::kIdentityName);
    if (!identity) {
      why = fmt::format("cannot read the backup: {}", identity.error().message());
      return std::nullopt;
    }
    if (!*identity) return backup::RestoreSummary{};
  }
  auto summary = backup::restore_directory(posix, **target, restored, std::nullopt, &problem);
  if (!summary) {
    why = fmt::format("the restore from {} failed: {}", options.backup, problem);
    return std::nullopt;
  }
  std::ofstream(fs::path(restored) / kMarker) << "made by `fusee demo --backup`, which wipes this directory\n";
  return *summary;
}

// fusee demo --backup, after a kill: restores the backup's latest into
// <dir>-after-kill and reads its runs as recovery would assemble them
// (engine/offline_dir.hpp), and the finished ones of the run store's
// snapshot it started from; every approval and result the parent received
// before the newest batch on the target was published must be there. Empty
// when so; else why not. `line` gets what to print.
std::string check_backup_after_kill(const OrderDemoOptions& options, const OrderLedger& ledger, std::string& line) {
  namespace fs = std::filesystem;
  const auto restored = options.dir + "-after-kill";
  // A worker killed before its engine made the target leaves it empty; it
  // had acknowledged nothing either (the open comes first).
  std::string why;
  auto summary = restore_latest(options, restored, true, why);
  if (!summary) return why;
  io::PosixFileSystem posix;
  std::string problem;
  std::error_code error;
  std::map<std::string, bool> runs;  // id -> finished
  if (summary->batches > 0) {
    auto offline = engine::read_offline_dir(posix, restored);
    if (!offline) return fmt::format("cannot read the restored {}: {}", restored, offline.error().message());
    if (!offline->refusal.empty()) return fmt::format("the restored {} would not open: {}", restored, offline->refusal);
    for (std::uint32_t shard = 0; offline->meta && shard < offline->meta->shards; ++shard) {
      auto collected = engine::collect_runs(posix, *offline, shard, &problem);
      if (!collected) return fmt::format("cannot read the runs of the restored {}: {}", restored, problem);
      for (const auto& run : *collected) runs[run.id] = run.status != RunStatus::running;
    }
    // Runs that finished before the snapshot of the run store the restore
    // started from are in its finished runs, not in any journal.
    if (offline->store) {
      engine::RunQuery query;
      query.limit = 1000;
      while (true) {
        auto page = offline->store->list(query);
        if (!page) return fmt::format("cannot list the finished runs of the restored {}", restored);
        for (const auto& run : page->runs) runs[run.id] = true;
        if (page->next_cursor.empty()) break;
        query.cursor = page->next_cursor;
      }
    }
  }
  fs::remove_all(restored, error);
  auto check = ledger.check_backup_prefix(runs, summary->last_at_ms);
  if (summary->batches == 0 && check.missing.empty()) {
    line = "the backup holds no batch yet (the worker died before its first upload)";
    return {};
  }
  if (!check.missing.empty()) {
    std::string text = fmt::format("the backup's latest after the kill lost what was acknowledged before it: {}",
                                   check.missing.front());
    if (check.missing.size() > 1) text += fmt::format(" (and {} more)", check.missing.size() - 1);
    return text;
  }
  line = fmt::format("the backup's latest ({} batches{}) holds the {} approvals and {} results acknowledged before "
                     "its newest batch",
                     summary->batches,
                     summary->snapshot_sequence > 0
                         ? fmt::format(" over the run store's snapshot at batch {}", summary->snapshot_sequence)
                         : std::string(),
                     check.approvals, check.results);
  return {};
}

// fusee demo --backup: restores the latest from the backup into
// <dir>-restored and has one more child run the final check there, into the
// ledger, which holds it to the final life's checks. Empty when it ran;
// else why not.
std::string check_restored(const OrderDemoOptions& options, std::uint64_t seed, OrderLedger& ledger) {
  const auto restored = options.dir + "-restored";
  std::string why;
  auto summary = restore_latest(options, restored, false, why);
  if (!summary) return why;
  auto check_options = options;
  check_options.dir = restored;
  check_options.check_only = true;
  auto child = spawn_child(check_options, seed, 0, false, "");
  if (!child) return fmt::format("cannot start the check of {}: {}", restored, std::strerror(errno));
  ::close(child->state_fd);
  child->state_fd = -1;
  ledger.begin_restored_check();
  LineReader reader(ledger, options.kills + 1, "");
  // As long as a final life may take: a run that never ends in the restored
  // directory (a restore that lost something) would hold the check for ever.
  const auto give_up = Clock::now() + kFinalLifeLimit;
  bool open = true;
  while (open && Clock::now() < give_up) {
    pollfd ready{child->report_fd, POLLIN, 0};
    if (::poll(&ready, 1, 100) > 0) open = reader.read_from(child->report_fd);
  }
  if (open) {
    ::kill(child->pid, SIGKILL);
    while (reader.read_from(child->report_fd)) {
    }
  }
  ::close(child->report_fd);
  int status = 0;
  while (::waitpid(child->pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (open) {
    return fmt::format("the check of the directory restored from the backup had not finished after {} s (a run "
                       "that never ends there?)",
                       kFinalLifeLimit.count() / 1000);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !ledger.complete()) {
    return fmt::format("the check of the directory restored from the backup failed ({})", describe_status(status));
  }
  if (!options.quiet) {
    fmt::print("restored: the latest of {} ({} batches) into {}, reopened and re-read every stream, result and run\n",
               options.backup, summary->batches, restored);
  }
  return {};
}

}  // namespace

int run_order_demo(const OrderDemoOptions& options) {
  if (options.child) return run_order_demo_child(options);
  if (options.replicated) {
    if (options.remote || options.split || !options.server.empty() || !options.backup.empty()) {
      fmt::print(stderr, "fusee demo: --replicated takes none of --remote, --server, --split, --backup\n");
      return 2;
    }
    return run_replicated_order_demo(options);
  }
  if (options.split && !options.remote && options.server.empty()) {
    fmt::print(stderr, "fusee demo: --split needs --remote or --server\n");
    return 2;
  }
  if (!options.backup.empty() && (options.remote || !options.server.empty())) {
    fmt::print(stderr, "fusee demo: --backup is for local mode (a server's directory is not backed up yet)\n");
    return 2;
  }
  if (!prepare_dir(options.dir)) return 2;
  // A bucket is not wiped: an s3:// target wants a prefix no earlier demo
  // wrote (the backup refuses another directory's target, loudly).
  if (!options.backup.empty() && !backup::is_s3_address(options.backup) && !prepare_dir(options.backup)) return 2;
  std::signal(SIGPIPE, SIG_IGN);
  io::PosixFileSystem service_fs;
  const auto seed = options.seed != 0 ? options.seed : static_cast<std::uint64_t>(system_ms());
  std::mt19937_64 random(seed);
  if (!options.quiet) {
    fmt::print("fusee demo: {} orders through the `order` workflow in {}; the worker process is SIGKILLed {} times "
               "(seed {}){}\n",
               options.orders, options.dir, options.kills, seed,
               options.split    ? "; remote mode: two workers split the shards of a log service, and a standby takes "
                                  "the killed one's half over each kill"
               : options.remote ? "; remote mode: workers lease the shards from a log service, a standby takes over "
                                  "each kill"
                                : "");
  }

  OrderLedger ledger(seed, options.orders, kApprovalTimeout);
  // The second half of the lives runs changed code: a patch, while orders
  // are in flight (the split demo's partner keeps the first code throughout,
  // as in a rolling deploy).
  const int patch_life = std::max(1, (options.kills + 1) / 2);
  ledger.set_patched_from(patch_life);
  std::vector<std::string> failures;  // about the children themselves
  const auto started = Clock::now();
  int kills = 0;
  const auto lives = static_cast<std::uint64_t>(options.kills) + 1;
  // New orders are spread over the lives, so every life has fresh work.
  auto allow_for = [&](int life) {
    return static_cast<std::uint32_t>(
        (static_cast<std::uint64_t>(options.orders) * (static_cast<std::uint64_t>(life) + 1) + lives - 1) / lives);
  };
  // Remote mode: the log service, here in the parent, which no kill touches.
  std::unique_ptr<server::LogService> service;
  std::string server_address;
  if (!options.server.empty()) {
    server_address = options.server;  // a `fusee server` of the caller's
  } else if (options.remote) {
    server::LogServiceOptions service_options;
    service_options.dir = options.dir + "/log";
    service_options.listen = "unix:" + options.dir + "/server.sock";
    service_options.shards = kSplitShards;
    service_options.segment_bytes = 1u << 20;  // as a local engine's in the demo: rolls ask for checkpoints
    service_options.log = [](const std::string&) {};
    try {
      service = server::LogService::open(service_fs, service_options);
    } catch (const std::exception& error) {
      fmt::print(stderr, "fusee demo: cannot start the log service: {}\n", error.what());
      return 2;
    }
    server_address = service->endpoint();
  }
  // Split: the partner holds half the shards through every life.
  std::optional<Child> partner;
  std::optional<LineReader> partner_reader;
  auto read_partner = [&](int wait_ms) {
    if (!partner) return;
    pollfd poll_fd{partner->report_fd, POLLIN, 0};
    while (::poll(&poll_fd, 1, wait_ms) > 0 && partner_reader->read_from(partner->report_fd)) wait_ms = 0;
  };
  if (options.split) {
    partner = spawn_child(options, seed, 0, false, server_address, /*partner=*/true);
    if (!partner) {
      fmt::print(stderr, "fusee demo: cannot start the partner worker: {}\n", std::strerror(errno));
      return 2;
    }
    ::close(partner->state_fd);
    partner->state_fd = -1;
    partner_reader.emplace(ledger, 0, "");
    // Its engine open first, so the killed workers take the other half.
    auto give_up = Clock::now() + std::chrono::seconds(30);
    while (!partner_reader->heard() && Clock::now() < give_up) read_partner(100);
    if (!partner_reader->heard()) {
      fmt::print(stderr, "fusee demo: the partner worker did not open its engine\n");
      ::kill(partner->pid, SIGKILL);
      return 2;
    }
  }
  std::optional<Child> standby;  // remote mode: the next life's worker, waiting for the leases
  for (int life = 0; life <= options.kills && failures.empty(); ++life) {
    if (partner_reader) partner_reader->set_life(life);
    const bool final = life == options.kills;
    const auto allow = allow_for(life);
    auto child = standby ? standby : spawn_child(options, seed, allow, final, server_address, false, life >= patch_life);
    standby.reset();
    if (!child) {
      fmt::print(stderr, "fusee demo: cannot start the worker process: {}\n", std::strerror(errno));
      return 2;
    }
    send_state(*child, ledger.child_state());
    const auto life_started = Clock::now();
    const auto kill = final ? KillPlan{kFinalLifeLimit} : pick_kill(random, options.orders / lives);
    const auto deadline = life_started + kill.after;
    LineReader reader(ledger, life, kill.after_kind);
    bool open = true;
    while (open && (kill.after_kind.empty() || reader.watched_lines() < kill.after_count)) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd poll_fds[2] = {{child->report_fd, POLLIN, 0}, {partner ? partner->report_fd : -1, POLLIN, 0}};
      if (::poll(poll_fds, partner ? 2 : 1, static_cast<int>(std::min<long long>(left, 100))) > 0) {
        if (poll_fds[0].revents != 0) open = reader.read_from(child->report_fd);
        if (partner && poll_fds[1].revents != 0) read_partner(0);
      }
      // Only with its own log service: against an outside server that may
      // restart, a standby could win the leases back from a live holder
      // and be left stale (it is then deposed, and must reopen).
      if (service && !final && !standby && reader.heard()) {
        // The holder has its leases; the next worker connects and waits for them.
        standby = spawn_child(options, seed, allow_for(life + 1), life + 1 == options.kills, server_address, false,
                              life + 1 >= patch_life);
      }
    }
    const bool ended_by_itself = !open;
    if (!ended_by_itself) {
      ledger.killed(child->pid, steady_us());
      ::kill(child->pid, SIGKILL);
      if (!final) ++kills;
      // What the child wrote before it died is still in the pipe.
      while (reader.read_from(child->report_fd)) {
      }
    }
    read_partner(0);
    ::close(child->report_fd);
    int status = 0;
    while (::waitpid(child->pid, &status, 0) < 0 && errno == EINTR) {
    }
    const auto ran_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - life_started).count();
    if (reader.has_partial()) failures.push_back(fmt::format("life {}: the child's last line arrived cut short", life));

    auto counts = ledger.life_counts(life);
    auto acknowledged = fmt::format("{} starts, {} step runs, {} chunks, {} signals, {} results", counts.starts,
                                    counts.steps, counts.chunks, counts.signals, counts.results);
    if (!final) {
      if (ended_by_itself) {
        failures.push_back(fmt::format("life {}: the worker ended by itself ({}) before its SIGKILL", life,
                                       describe_status(status)));
      } else if (!options.quiet) {
        auto when = fmt::format("after {} ms", ran_ms);
        if (!kill.after_kind.empty() && reader.watched_lines() >= kill.after_count)
          when += fmt::format(", right behind new `{}` line {}", kill.after_kind.substr(0, kill.after_kind.size() - 1),
                              kill.after_count);
        fmt::print("life {}: SIGKILL {}; {}\n", life, when, acknowledged);
      }
      if (!options.backup.empty() && !ended_by_itself) {
        std::string line;
        if (auto why = check_backup_after_kill(options, ledger, line); !why.empty()) {
          failures.push_back(fmt::format("life {}: {}", life, why));
        } else if (!options.quiet) {
          fmt::print("  backup: {}\n", line);
        }
      }
      continue;
    }
    if (!ended_by_itself) {
      failures.push_back(fmt::format("the final worker had not finished after {} s (a run that never ends?)",
                                     kFinalLifeLimit.count() / 1000));
      for (const auto& line : ledger.unfinished(10)) failures.push_back("  unfinished: " + line);
    } else if (final_life_ended_well(status, ledger, "worker", failures) && !options.quiet) {
      fmt::print("life {} (final): every order finished in {} ms; {}; then reopened and re-read every stream, "
                 "result and run\n",
                 life, ran_ms, acknowledged);
    }
  }

  if (standby) {
    ledger.killed(standby->pid, steady_us());
    ::kill(standby->pid, SIGKILL);
    ::close(standby->report_fd);
    if (standby->state_fd >= 0) ::close(standby->state_fd);
    int status = 0;
    while (::waitpid(standby->pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (partner) {
    // Everything it ran is reported by now (the final check saw every
    // order finish); what is left in its pipe still counts.
    ::kill(partner->pid, SIGKILL);
    while (partner_reader->read_from(partner->report_fd)) {
    }
    ::close(partner->report_fd);
    int status = 0;
    while (::waitpid(partner->pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (partner_reader->has_partial()) failures.push_back("the partner's last line arrived cut short");
    if (partner_reader->lines() == 0) failures.push_back("the partner ran nothing: the shards were not split");
    if (!options.quiet) fmt::print("partner: {} lines reported from its half of the shards\n", partner_reader->lines());
  }
  if (service) service->stop();
  if (!options.backup.empty() && failures.empty() && ledger.complete()) {
    if (auto why = check_restored(options, seed, ledger); !why.empty()) failures.push_back(why);
  }
  return print_outcome(ledger, std::move(failures), kills, patch_life, started, seed);
}

}  // namespace fusee::cli
