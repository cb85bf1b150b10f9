// The `fusee` command. Subcommands live in their own files; this one only
// parses arguments (CLI11) and dispatches.
#include <CLI/CLI.hpp>

#include "cli/log_demo.hpp"
#include "cli/order_demo.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fusee: a durable workflow engine"};
  app.require_subcommand(1);

  fusee::cli::OrderDemoOptions demo;
  auto* demo_command = app.add_subcommand(
      "demo", "Run order workflows in a worker process, SIGKILL and restart it, check that nothing acknowledged was lost");
  demo_command->add_option("--dir", demo.dir, "Data directory (wiped if a previous demo made it)")->capture_default_str();
  demo_command->add_option("--orders", demo.orders, "How many orders to run")->capture_default_str()->check(CLI::Range(1, 100000));
  demo_command->add_option("--kills", demo.kills, "How many times to SIGKILL the worker")->capture_default_str()->check(CLI::Range(0, 100000));
  demo_command->add_option("--seed", demo.seed, "Seed for the orders and the kill times (0: from the clock)");
  demo_command->add_flag("--quiet", demo.quiet, "Print only the summary");
  // The worker process: the demo starts itself with these.
  demo_command->add_flag("--child", demo.child)->group("");
  demo_command->add_option("--allow", demo.allow)->group("");
  demo_command->add_flag("--final", demo.final)->group("");

  fusee::cli::LogDemoOptions log_demo;
  auto* log_demo_command = app.add_subcommand(
      "log-demo", "The shared log alone: append from several threads, SIGKILL, reopen, check every acknowledged record");
  log_demo_command->group("");  // hidden: a test of the log, below the engine
  log_demo_command->add_option("--dir", log_demo.dir, "Data directory (wiped if a previous log demo made it)")->capture_default_str();
  log_demo_command->add_option("--kills", log_demo.kills, "How many times to SIGKILL the worker")->capture_default_str()->check(CLI::Range(1, 100000));
  log_demo_command->add_option("--shards", log_demo.shards, "Shards (one appender thread each)")->capture_default_str()->check(CLI::Range(1, 64));
  log_demo_command->add_option("--seed", log_demo.seed, "Seed for the kill times (0: from the clock)");
  log_demo_command->add_flag("--quiet", log_demo.quiet, "Print only the summary");

  CLI11_PARSE(app, argc, argv);
  if (app.got_subcommand(demo_command)) return fusee::cli::run_order_demo(demo);
  if (app.got_subcommand(log_demo_command)) return fusee::cli::run_log_demo(log_demo);
  return 2;
}
