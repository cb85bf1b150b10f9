// The `fusee` command. Subcommands live in their own files; this one only
// parses arguments (CLI11) and dispatches.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/disk_check.hpp"
#include "cli/inspect.hpp"
#include "cli/replica_command.hpp"
#include "demo/log_demo.hpp"
#include "demo/order_demo.hpp"
#include "demo/replicated_log_demo.hpp"
#include "cli/reshard.hpp"
#include "cli/restore.hpp"
#include "cli/backup_status.hpp"
#include "cli/backup_verify.hpp"
#include "cli/server_command.hpp"
#include "fusee/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fusee: a durable workflow engine"};
  app.set_version_flag("--version", "fusee " FUSEE_VERSION_STRING);
  app.require_subcommand(1);

  fusee::cli::OrderDemoOptions demo;
  auto* demo_command = app.add_subcommand(
      "demo", "Run order workflows in a worker process, SIGKILL and restart it, check that nothing acknowledged was lost");
  demo_command->add_option("--dir", demo.dir, "Data directory (wiped if a previous demo made it)")->capture_default_str();
  demo_command->add_option("--orders", demo.orders, "How many orders to run")->capture_default_str()->check(CLI::Range(1, 100000));
  demo_command->add_option("--kills", demo.kills, "How many times to SIGKILL the worker")->capture_default_str()->check(CLI::Range(0, 100000));
  demo_command->add_option("--seed", demo.seed, "Seed for the orders and the kill times (0: from the clock)");
  demo_command->add_flag("--quiet", demo.quiet, "Print only the summary");
  demo_command->add_flag("--remote", demo.remote,
                         "Remote mode: run a log service, workers as remote engines, a standby taking over each kill");
  demo_command->add_flag("--replicated", demo.replicated,
                         "Replicated mode: three replicas and an etcd of the demo's own; the primary SIGKILLed each "
                         "life (docs/replication.md)");
  // The worker process: the demo starts itself with these.
  demo_command->add_flag("--child", demo.child)->group("");
  demo_command->add_option("--replica-id", demo.replica_id)->group("");
  demo_command->add_option("--etcd", demo.etcd)->group("");
  demo_command->add_option("--replicas", demo.replicas)->delimiter(',')->group("");
  demo_command->add_option("--allow", demo.allow)->group("");
  demo_command->add_flag("--final", demo.final)->group("");
  demo_command->add_option("--shards-max", demo.shards_max)->group("");
  demo_command->add_flag("--partner", demo.partner)->group("");
  demo_command->add_flag("--patched", demo.patched)->group("");
  demo_command->add_flag("--check-only", demo.check_only)->group("");
  demo_command->add_option("--backup", demo.backup,
                           "Back the workers' engine up to this directory (wiped if a previous demo made it) or s3://BUCKET/PREFIX "
                           "(a prefix no demo wrote yet); at the "
                           "end, restore the latest into DIR-restored and check it as the final life was checked "
                           "(docs/backup.md)");
  demo_command->add_flag("--split", demo.split,
                         "With --remote or --server: two workers split the shards (a server of 4); the killed one's "
                         "half goes to its successor");
  demo_command->add_option("--server", demo.server,
                           "Remote mode against this `fusee server` (unix:PATH or HOST:PORT) instead of one of its own");

  fusee::cli::LogDemoOptions log_demo;
  auto* log_demo_command = app.add_subcommand(
      "log-demo", "The shared log alone: append from several threads, SIGKILL, reopen, check every acknowledged record");
  log_demo_command->group("");  // hidden: a test of the log, below the engine
  log_demo_command->add_option("--dir", log_demo.dir, "Data directory (wiped if a previous log demo made it)")->capture_default_str();
  log_demo_command->add_option("--kills", log_demo.kills, "How many times to SIGKILL the worker")->capture_default_str()->check(CLI::Range(1, 100000));
  log_demo_command->add_option("--shards", log_demo.shards, "Shards (one appender thread each)")->capture_default_str()->check(CLI::Range(1, 64));
  log_demo_command->add_option("--seed", log_demo.seed, "Seed for the kill times (0: from the clock)");
  log_demo_command->add_flag("--quiet", log_demo.quiet, "Print only the summary");
  fusee::cli::ReplicatedLogDemoOptions replicated_demo;
  log_demo_command->add_flag("--replicated", log_demo.replicated,
                             "3 replicas and etcd: the primary and backups SIGKILLed, stopped, wiped (docs/replication.md)");
  log_demo_command->add_option("--primary-kills", replicated_demo.primary_kills, "--replicated: SIGKILLs of the primary")
      ->capture_default_str()->check(CLI::Range(0, 10000));
  log_demo_command->add_option("--backup-kills", replicated_demo.backup_kills, "--replicated: SIGKILLs of a backup")
      ->capture_default_str()->check(CLI::Range(0, 10000));
  log_demo_command->add_option("--appenders", replicated_demo.appenders, "--replicated: appender threads")
      ->capture_default_str()->check(CLI::Range(1, 256));
  log_demo_command->add_option("--replicas", replicated_demo.replicas, "--replicated: replicas (3 or 5)")
      ->capture_default_str()->check(CLI::IsMember({3, 5}));

  fusee::cli::DiskCheckOptions disk_check;
  auto* disk_check_command = app.add_subcommand(
      "disk-check", "Measure the disk's durable 4 KiB write latency on both of the log's write paths: the floor under a "
                    "sequential durable step");
  disk_check_command->add_option("dir", disk_check.dir, "Directory on the disk to measure (a scratch file is made and removed)")
      ->capture_default_str()
      ->check(CLI::ExistingDirectory);
  disk_check_command->add_option("--iterations", disk_check.iterations, "Timed writes per path")
      ->capture_default_str()
      ->check(CLI::Range(10, 1000000));
  disk_check_command->add_flag("--json", disk_check.json, "One JSON object per write path (docs/cli.md)");

  fusee::cli::InspectOptions inspect;
  auto* inspect_command = app.add_subcommand(
      "inspect", "Show a data directory and what opening it would do, without changing a byte (docs/cli.md)");
  inspect_command->add_option("dir", inspect.dir, "The data directory")->required()->check(CLI::ExistingDirectory);
  inspect_command->add_flag("--json", inspect.json, "One JSON document instead of tables (schemas in docs/cli.md)");
  inspect_command->require_subcommand(0, 1);
  inspect_command->fallthrough();
  auto* inspect_segments = inspect_command->add_subcommand("segments", "The log's segment files");
  auto* inspect_batches = inspect_command->add_subcommand("batches", "Every batch of the log's chain");
  inspect_batches->add_option("--segment", inspect.segment, "Only the batches of this segment");
  auto* inspect_shards = inspect_command->add_subcommand("shards", "Each shard's LSNs in the log and its checkpoint");
  auto* inspect_blobs = inspect_command->add_subcommand("blobs", "The blob area's files and what refers to them");
  auto* inspect_runs = inspect_command->add_subcommand("runs", "Runs, with counts by status");
  inspect_runs->add_option("--status", inspect.status, "Only runs with this status")
      ->check(CLI::IsMember({"running", "completed", "failed", "cancelled"}));
  inspect_runs->add_option("--workflow", inspect.workflow, "Only runs of this workflow");
  inspect_runs->add_option("--limit", inspect.limit, "At most this many")->capture_default_str()->check(
      CLI::Range(std::size_t{1}, std::size_t{100000000}));
  auto* inspect_run = inspect_command->add_subcommand("run", "One run: its summary and its journal, decoded");
  inspect_run->add_option("id", inspect.run_id, "The run's id")->required();
  auto* inspect_stream = inspect_command->add_subcommand("stream", "One stream of a run: its chunks");
  inspect_stream->add_option("id", inspect.run_id, "The run's id")->required();
  inspect_stream->add_option("name", inspect.stream, "The stream's name")->required();
  for (auto* view : {inspect_segments, inspect_batches, inspect_shards, inspect_blobs, inspect_runs, inspect_run,
                     inspect_stream}) {
    view->fallthrough();
  }

  fusee::cli::BackupStatusOptions backup_status;
  auto* backup_command = app.add_subcommand("backup", "A data directory's continuous backup (docs/backup.md)");
  backup_command->require_subcommand(1);
  auto* backup_status_command =
      backup_command->add_subcommand("status", "What the backup covers, and what losing the disk now would lose");
  backup_status_command->add_option("dir,--dir", backup_status.dir, "The data directory")->required()->check(
      CLI::ExistingDirectory);
  backup_status_command->add_flag("--json", backup_status.json, "One JSON object instead of text");
  fusee::cli::BackupVerifyOptions backup_verify;
  auto* backup_verify_command = backup_command->add_subcommand(
      "verify", "Check every way a backup target restores, writing nothing (docs/backup.md)");
  backup_verify_command->add_option("--from", backup_verify.from,
                                    "The backup target: a directory, or s3://BUCKET[/PREFIX]")->required();
  backup_verify_command->add_option("--to", backup_verify.to, "The moment: UTC ISO 8601, milliseconds since the epoch, or latest")
      ->capture_default_str();
  backup_verify_command->add_option("--metrics-file", backup_verify.metrics_file,
                                    "On success, write a Prometheus text file with the time (node_exporter's textfile "
                                    "collector)");
  fusee::cli::RestoreCommandOptions restore;
  auto* restore_command = app.add_subcommand(
      "restore", "Rebuild a data directory from a backup as of a moment (docs/backup.md)");
  restore_command->add_option("--from", restore.from, "The backup target: a directory, or s3://BUCKET[/PREFIX] (docs/backup.md)")->required();
  restore_command->add_option("--to", restore.to, "The moment: UTC ISO 8601 (2026-12-02T04:00:00Z), milliseconds (not seconds) since the epoch, or latest")
      ->capture_default_str();
  auto* restore_dir =
      restore_command->add_option("--dir", restore.dir, "The new data directory (absent or empty)");
  auto* restore_check = restore_command->add_flag(
      "--check", restore.check,
      "A restore drill: restore (into --dir, or a new temporary directory), open the result read-only, assemble "
      "every run's journal, count the runs, then remove it");
  restore_command->callback([restore_dir, restore_check] {
    if (restore_dir->count() == 0 && restore_check->count() == 0) {
      throw CLI::RequiredError("--dir (or --check, a drill into a temporary directory)");
    }
  });
  fusee::cli::ReshardCommandOptions reshard;
  auto* reshard_command = app.add_subcommand(
      "reshard", "Change a data directory's shard count, offline and crash-safely (docs/cli.md)");
  reshard_command->add_option("dir", reshard.dir, "The data directory")->required()->check(CLI::ExistingDirectory);
  reshard_command->add_option("--shards", reshard.shards, "The new shard count")->required()->check(
      CLI::Range(1, 4096));
  reshard_command->add_flag("--quiet", reshard.quiet, "No progress, only the summary");

  fusee::cli::ServerOptions server;
  auto* server_command = app.add_subcommand(
      "server", "Hold a data directory's log and lease its shards to remote engines (docs/server-protocol.md)");
  server_command->add_option("--dir", server.dir, "The data directory (created if absent)")->capture_default_str();
  server_command->add_option("--listen", server.listen, "unix:PATH or HOST:PORT")->capture_default_str();
  server_command->add_option("--http", server.http,
                             "Serve the HTTP API on HOST:PORT, passing each call to the worker holding its shard");
  server_command->add_option("--http-allowed-host", server.http_allowed_hosts,
                             "A Host name (NAME or NAME:PORT) the HTTP front answers besides loopback's; repeatable "
                             "(any other Host gets 421: DNS rebinding)");
  server_command->add_option("--token-file", server.token_file,
                             "A file holding the token workers must present on TCP")
      ->check(CLI::ExistingFile);
  server_command->add_option("--shards", server.shards, "A new directory's shard count (0: CPUs)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  server_command->add_option("--lease-ttl-ms", server.lease_ttl_ms,
                             "A worker that sends nothing for this long loses its leases")
      ->capture_default_str()
      ->check(CLI::Range(100, 3600000));
  server_command->add_flag("--buffered", server.buffered, "Buffered writes + fdatasync instead of O_DIRECT");
  auto* server_replicated = server_command->add_flag(
      "--replicated", server.replicated,
      "One of 3, 5, 7... servers over a replicated log (--dir made by `fusee replica init`); the primary serves the "
      "workers");
  server_command->add_option("--replica-id", server.replica_id, "This server's index in --replicas (0-based)")
      ->needs(server_replicated);
  server_command->add_option("--replicas", server.replicas, "Every server's replica address (HOST:PORT), in id order")
      ->delimiter(',')
      ->needs(server_replicated);
  server_command->add_option("--etcd", server.etcd,
                             "etcd's client address (HOST:PORT), or its members' (HOST:PORT,HOST:PORT,...)")
      ->capture_default_str()
      ->needs(server_replicated);
  server_command->add_option("--cluster", server.cluster, "The cluster's name (its key in etcd)")
      ->capture_default_str()
      ->needs(server_replicated);
  server_command->add_option("--tick-ms", server.tick_ms, "The replication protocol's clock")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000))
      ->needs(server_replicated);
  server_command->add_option("--etcd-lease-ttl-s", server.etcd_lease_ttl_s,
                             "The primary's etcd lease: a dead primary is replaced after about this long")
      ->capture_default_str()
      ->check(CLI::Range(1, 600))
      ->needs(server_replicated);

  fusee::cli::ReplicaCommandOptions replica;
  auto* replica_command = app.add_subcommand(
      "replica", "One replica of a replicated log, with etcd deciding the primary (docs/replication.md)");
  replica_command->require_subcommand(1);
  auto* replica_init = replica_command->add_subcommand("init", "Make a directory a replica of a cluster");
  replica_init->add_option("--dir", replica.dir, "The replica's directory")->required();
  replica_init->add_option("--cluster", replica.cluster, "The cluster's name (its key in etcd)")->capture_default_str();
  replica_init->add_flag("--rebuild", replica.rebuild,
                         "Remake a replica whose directory was lost: it counts again once it holds a primary's log");
  replica_init->add_option("--segment-bytes", replica.segment_bytes,
                           "The log's segment size (the same on every replica; small ones retire sooner)")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{64} << 10, std::uint64_t{256} << 20));
  auto* replica_rebuild = replica_command->add_subcommand(
      "rebuild", "Make a stopped application replica whole again: the primary's run store, and its log from the "
                 "primary's start");
  replica_rebuild->add_option("--dir", replica.dir, "The replica's directory")->required();
  replica_rebuild->add_option("--cluster", replica.cluster, "The cluster's name")->capture_default_str();
  replica_rebuild->add_option("--replicas", replica.replicas, "Every replica's HOST:PORT, in id order")
      ->required()->delimiter(',');
  auto* replica_run = replica_command->add_subcommand("run", "Serve one replica until SIGTERM or SIGINT");
  replica_run->add_option("--dir", replica.dir, "The replica's directory (made by init)")->required();
  replica_run->add_option("--cluster", replica.cluster, "The cluster's name")->capture_default_str();
  replica_run->add_option("--id", replica.id, "This replica's index in --replicas (0-based)")->required();
  replica_run->add_option("--replicas", replica.replicas, "Every replica's HOST:PORT, in id order")
      ->required()->delimiter(',');
  replica_run->add_option("--etcd", replica.etcd, "etcd's client address (HOST:PORT), or its members' (HOST:PORT,HOST:PORT,...), tried in turn")->capture_default_str();
  replica_run->add_option("--tick-ms", replica.tick_ms, "The protocol's clock")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  replica_run->add_option("--lease-ttl-s", replica.lease_ttl_s, "The primary's etcd lease")->capture_default_str()
      ->check(CLI::Range(1, 600));
  replica_run->add_flag("--quiet", replica.quiet, "Do not log role changes");
  replica_run->add_flag("--disk-thread", replica.disk_thread,
                        "Write on a thread of its own instead of the loop thread (for comparison)");
  replica_run->add_option("--held-mib", replica.held_mib,
                          "MiB of recent batches held in memory; a backup further behind is sent batches read back "
                          "from the segments")
      ->capture_default_str()->check(CLI::Range(0, 65536));
  auto* replica_inspect =
      replica_command->add_subcommand("inspect", "A replica's directory, read without changing a byte");
  replica_inspect->add_option("--dir", replica.dir, "The replica's directory")->required()->check(CLI::ExistingDirectory);
  replica_inspect->add_flag("--batches", replica.batches, "List every batch");
  auto* replica_status = replica_command->add_subcommand("status", "What each replica holds and serves");
  replica_status->add_option("--replicas", replica.replicas, "Every replica's HOST:PORT, in id order")
      ->required()->delimiter(',');

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    // Wrong arguments: a short error, the usage of the command that was
    // being parsed, and exit code 2 (as getopt-style tools do).
    const CLI::App* context = &app;
    for (const auto* sub = &app; !sub->get_subcommands().empty();) context = sub = sub->get_subcommands().back();
    fmt::print(stderr, "fusee: {}\n\n{}", error.what(), context->help());
    return 2;
  }
  if (app.got_subcommand(demo_command)) return fusee::cli::run_order_demo(demo);
  if (app.got_subcommand(disk_check_command)) return fusee::cli::run_disk_check(disk_check);
  if (app.got_subcommand(log_demo_command) && log_demo.replicated) {
    replicated_demo.dir = log_demo.dir;
    replicated_demo.seed = log_demo.seed;
    replicated_demo.quiet = log_demo.quiet;
    return fusee::cli::run_replicated_log_demo(replicated_demo);
  }
  if (app.got_subcommand(log_demo_command)) return fusee::cli::run_log_demo(log_demo);
  if (app.got_subcommand(reshard_command)) return fusee::cli::run_reshard(reshard);
  if (app.got_subcommand(restore_command)) return fusee::cli::run_restore(restore);
  if (backup_command->got_subcommand(backup_status_command)) return fusee::cli::run_backup_status(backup_status);
  if (backup_command->got_subcommand(backup_verify_command)) return fusee::cli::run_backup_verify(backup_verify);
  if (app.got_subcommand(server_command)) return fusee::cli::run_server(server);
  if (replica_command->got_subcommand(replica_init)) return fusee::cli::run_replica_init(replica);
  if (replica_command->got_subcommand(replica_run)) return fusee::cli::run_replica(replica);
  if (replica_command->got_subcommand(replica_status)) return fusee::cli::run_replica_status(replica);
  if (replica_command->got_subcommand(replica_inspect)) return fusee::cli::run_replica_inspect(replica);
  if (replica_command->got_subcommand(replica_rebuild)) return fusee::cli::run_replica_rebuild(replica);
  if (app.got_subcommand(inspect_command)) {
    using fusee::cli::InspectView;
    const std::pair<CLI::App*, InspectView> views[] = {
        {inspect_segments, InspectView::segments}, {inspect_batches, InspectView::batches},
        {inspect_shards, InspectView::shards},     {inspect_blobs, InspectView::blobs},
        {inspect_runs, InspectView::runs},         {inspect_run, InspectView::run},
        {inspect_stream, InspectView::stream}};
    for (const auto& [command, view] : views) {
      if (inspect_command->got_subcommand(command)) inspect.view = view;
    }
    return fusee::cli::run_inspect(inspect);
  }
  return 2;
}
