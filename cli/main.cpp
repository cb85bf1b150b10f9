// The `fusee` command. Subcommands live in their own files; this one only
// parses arguments (CLI11) and dispatches.
#include <CLI/CLI.hpp>

#include "cli/demo.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fusee: a durable workflow engine"};
  app.require_subcommand(1);

  fusee::cli::DemoOptions demo;
  auto* demo_command = app.add_subcommand("demo", "Append from several threads, SIGKILL, reopen, check nothing acknowledged was lost");
  demo_command->add_option("--dir", demo.dir, "Data directory (wiped if a previous demo made it)")->capture_default_str();
  demo_command->add_option("--kills", demo.kills, "How many times to SIGKILL the worker")->capture_default_str()->check(CLI::Range(1, 100000));
  demo_command->add_option("--shards", demo.shards, "Shards (one appender thread each)")->capture_default_str()->check(CLI::Range(1, 64));
  demo_command->add_option("--seed", demo.seed, "Seed for the kill times (0: from the clock)");
  demo_command->add_flag("--quiet", demo.quiet, "Print only the summary");

  CLI11_PARSE(app, argc, argv);
  if (app.got_subcommand(demo_command)) return fusee::cli::run_demo(demo);
  return 2;
}
