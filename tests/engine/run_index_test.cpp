// The run index (engine/run_index.hpp): its pages and counts against a
// model that sorts and filters every run (random queries, cursors both
// ways), and, through an engine in each mode, against list_runs() -- the
// scan it replaces -- as runs start, finish, stick, reset, continue as new,
// park, expire, and across a reopen.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/run_index.hpp"
#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;
using engine::IndexQuery;
using engine::RunIndex;

namespace {

TimePoint at_ms(std::int64_t ms) { return TimePoint(std::chrono::milliseconds(ms)); }
std::int64_t ms_of(TimePoint time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}

bool folded_prefix(const std::string& text, const std::string& prefix) {
  if (prefix.size() > text.size()) return false;
  for (std::size_t k = 0; k < prefix.size(); ++k) {
    if (std::tolower(static_cast<unsigned char>(text[k])) != std::tolower(static_cast<unsigned char>(prefix[k]))) {
      return false;
    }
  }
  return true;
}

// What a query should give: every run, filtered and sorted.
std::vector<std::string> model(const std::map<std::string, RunInfo>& runs, const IndexQuery& query) {
  std::vector<const RunInfo*> out;
  for (const auto& [id, run] : runs) {
    if (query.status && run.status != *query.status) continue;
    if (!folded_prefix(run.workflow, query.workflow_prefix)) continue;
    if (!id.starts_with(query.id_prefix)) continue;
    if (query.started_from_ms && ms_of(run.started_at) < *query.started_from_ms) continue;
    if (query.started_to_ms && ms_of(run.started_at) >= *query.started_to_ms) continue;
    out.push_back(&run);
  }
  auto key = [](const RunInfo* run) { return std::make_pair(ms_of(run->started_at), run->id); };
  if (query.order == IndexQuery::Order::newest) {
    std::sort(out.begin(), out.end(), [&](auto a, auto b) { return key(b) < key(a); });
  } else if (query.order == IndexQuery::Order::oldest) {
    std::sort(out.begin(), out.end(), [&](auto a, auto b) { return key(a) < key(b); });
  }  // id: the map's order already
  std::vector<std::string> ids;
  for (const auto* run : out) ids.push_back(run->id);
  return ids;
}

std::vector<std::string> ids_of(const std::vector<RunInfo>& runs) {
  std::vector<std::string> ids;
  for (const auto& run : runs) ids.push_back(run.id);
  return ids;
}

// Every page from the first, onward; then back from the last to the first.
// Both must list the model's runs in order, each once.
void walk_both_ways(const RunIndex& index, IndexQuery query, const std::vector<std::string>& expected) {
  std::vector<std::vector<std::string>> pages;
  std::vector<std::string> onward;
  for (int guard = 0; guard < 10000; ++guard) {
    auto page = index.query(query);
    CHECK(page.runs.size() <= query.limit);
    pages.push_back(ids_of(page.runs));
    onward.insert(onward.end(), pages.back().begin(), pages.back().end());
    CHECK(page.total == expected.size());
    CHECK(page.total_exact);
    if (page.next_cursor.empty()) {
      // Back from the last page: each previous page is the one seen before.
      std::vector<std::string> back;
      auto previous = page.previous_cursor;
      std::size_t k = pages.size() - 1;
      while (!previous.empty()) {
        query.cursor = previous;
        auto earlier = index.query(query);
        REQUIRE(k > 0);
        --k;
        CHECK(ids_of(earlier.runs) == pages[k]);
        previous = earlier.previous_cursor;
      }
      CHECK(k == 0);
      break;
    }
    query.cursor = page.next_cursor;
  }
  CHECK(onward == expected);
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("run index: pages, cursors both ways and totals match a model that sorts every run") {
  std::mt19937_64 random(20261203);
  RunIndex index;
  std::map<std::string, RunInfo> runs;
  const std::vector<std::string> workflows = {"order", "Orders", "payment", "refund", "ship"};
  for (int n = 0; n < 3000; ++n) {
    RunInfo run;
    run.id = fmt::format("{}-{}", random() % 2 ? "a" : "b", n);
    run.workflow = workflows[random() % workflows.size()];
    run.status = kRunStatuses[random() % kRunStatuses.size()];
    run.generation = 1;
    run.started_at = at_ms(static_cast<std::int64_t>(random() % 500));  // many ties: ordered by id then
    if (run.status != RunStatus::running && run.status != RunStatus::stuck) run.finished_at = run.started_at;
    runs[run.id] = run;
    index.put(run);
  }
  // Some change state, some leave.
  for (int n = 0; n < 300; ++n) {
    auto it = std::next(runs.begin(), static_cast<std::ptrdiff_t>(random() % runs.size()));
    if (n % 3 == 0) {
      index.remove(it->first);
      runs.erase(it);
    } else {
      it->second.status = RunStatus::completed;
      it->second.finished_at = it->second.started_at;
      ++it->second.generation;
      index.put(it->second);
    }
  }
  CHECK(index.size() == runs.size());
  auto counts = index.counts_by_status();
  for (auto status : kRunStatuses) {
    auto expected = std::count_if(runs.begin(), runs.end(), [&](const auto& run) { return run.second.status == status; });
    CHECK(counts[static_cast<std::size_t>(status)] == static_cast<std::uint64_t>(expected));
  }
  for (int round = 0; round < 60; ++round) {
    IndexQuery query;
    query.order = static_cast<IndexQuery::Order>(random() % 3);
    query.limit = 1 + random() % 400;
    if (random() % 2) query.status = kRunStatuses[random() % kRunStatuses.size()];
    if (random() % 3 == 0) query.workflow_prefix = random() % 2 ? "ORD" : "pay";
    if (random() % 3 == 0) query.id_prefix = random() % 2 ? "a-1" : "b-";
    if (random() % 3 == 0) query.started_from_ms = static_cast<std::int64_t>(random() % 250);
    if (random() % 3 == 0) query.started_to_ms = static_cast<std::int64_t>(250 + random() % 250);
    CAPTURE(round);
    walk_both_ways(index, query, model(runs, query));
  }
}

TEST_CASE("run index: a cursor it did not give is refused; retention forgets finished runs only") {
  RunIndex index;
  IndexQuery query;
  query.cursor = "not a cursor";
  CHECK_THROWS_AS(index.query(query), Error);
  query.cursor = "at12:x";
  query.order = IndexQuery::Order::id;  // a time cursor in id order
  CHECK_THROWS_AS(index.query(query), Error);
  RunInfo done{"done", "w", RunStatus::completed, 1, 1, at_ms(10), at_ms(20), ""};
  RunInfo late{"late", "w", RunStatus::failed, 1, 1, at_ms(10), at_ms(90), "boom"};
  RunInfo live{"live", "w", RunStatus::running, 1, 1, at_ms(5), std::nullopt, ""};
  index.put(done);
  index.put(late);
  index.put(live);
  index.expire_finished(50);
  CHECK_FALSE(index.get("done"));
  CHECK(index.get("late")->error == "boom");
  CHECK(index.get("live"));
  // A finished run started anew is running again: retention leaves it.
  late.status = RunStatus::running;
  late.finished_at.reset();
  index.put(late);
  index.expire_finished(100);
  CHECK(index.get("late"));
  CHECK(index.counts_by_workflow().at("w")[static_cast<std::size_t>(RunStatus::running)] == 2);
}
}

namespace {

const WorkflowRef<int, int> kWaits{"waits"};
const WorkflowRef<int, int> kLoops{"loops"};
const Signal<int> kGo{"go"};

void register_all(Engine& engine) {
  engine.register_workflow(kWaits, [](Ctx& ctx, int input) -> Task<int> {
    int x = co_await ctx.step("a", [input] { return input; });
    auto go = co_await ctx.wait_for(kGo);
    if (go.value_or(0) < 0) throw std::runtime_error("told to fail");
    co_return x + go.value_or(0);
  }, kGo);
  engine.register_workflow(kLoops, [](Ctx& ctx, int left) -> Task<int> {
    if (left > 0) ctx.continue_as_new(left - 1);
    co_return 7;
  });
}

// The index's view (every page, newest first) against the scan's.
// Call it when no run changes state (the scan and the index are read one
// after the other).
void agrees(Engine& engine, const std::string& when) {
  CAPTURE(when);
  std::map<std::string, std::pair<RunStatus, std::uint32_t>> scanned, indexed;
  std::map<std::string, std::vector<PendingCommand>> scanned_waits, indexed_waits;
  for (const auto& run : engine.list_runs()) {
    scanned[run.id] = {run.status, run.generation};
    scanned_waits[run.id] = run.waiting_on;
  }
  RunListQuery query;
  query.limit = 7;
  std::int64_t newest = INT64_MAX;
  for (;;) {
    auto page = engine.query_runs(query);
    CHECK(page.total == scanned.size());
    for (const auto& run : page.runs) {
      CHECK(ms_of(run.started_at) <= newest);
      newest = ms_of(run.started_at);
      CHECK_MESSAGE(indexed.emplace(run.id, std::make_pair(run.status, run.generation)).second, run.id);
      indexed_waits[run.id] = run.waiting_on;
    }
    if (page.next_cursor.empty()) break;
    query.cursor = page.next_cursor;
  }
  for (const auto& entry : scanned) {
    const auto& id = entry.first;
    const auto& seen = entry.second;
    auto found = indexed.find(id);
    CHECK_MESSAGE(found != indexed.end(), "not in the index: " << id);
    if (found == indexed.end()) continue;
    CHECK_MESSAGE(found->second.first == seen.first,
                  id << ": index " << run_status_name(found->second.first) << ", scan " << run_status_name(seen.first));
    CHECK_MESSAGE(found->second.second == seen.second, id << ": generation " << found->second.second << " vs " << seen.second);
  }
  for (const auto& entry : indexed) CHECK_MESSAGE(scanned.contains(entry.first), "only in the index: " << entry.first);
  // What the running runs wait on: the same from the page as from the scan.
  for (const auto& entry : scanned_waits) {
    const auto& id = entry.first;
    CHECK_MESSAGE(indexed_waits[id] == entry.second, id << ": the page and the scan differ in what it waits on");
  }
  auto counts = engine.count_runs();
  for (auto status : kRunStatuses) {
    auto expected = std::count_if(scanned.begin(), scanned.end(), [&](const auto& run) { return run.second.first == status; });
    CHECK_MESSAGE(counts[static_cast<std::size_t>(status)] == static_cast<std::uint64_t>(expected), run_status_name(status));
  }
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("run index: the engine's pages and counts agree with list_runs as runs change state", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto config = harness.config();
  config.park_after = std::chrono::seconds(1);
  config.finished_retention = std::chrono::hours(1);
  config.checkpoint_interval = std::chrono::milliseconds::zero();
  auto engine = harness.open(config);
  register_all(*engine);
  for (int n = 0; n < 20; ++n) {
    (void)engine->start(kWaits, fmt::format("w-{}", n), n);
    harness.clock().advance(std::chrono::milliseconds(3));
  }
  (void)engine->start(kLoops, "loop-1", 3);
  for (int n = 0; n < 20; ++n) {
    REQUIRE(eventually([&] { return engine->journal_json(fmt::format("w-{}", n)).find("wait_started") != std::string::npos; }));
  }
  // The loop's generations come one after another: quiet once it ends.
  CHECK(engine->result(kLoops, "loop-1") == 7);
  agrees(*engine, "started");
  // Some finish each way; one is reset after its step; the loop continues.
  for (int n = 0; n < 5; ++n) engine->signal(fmt::format("w-{}", n), kGo, 1);
  engine->signal("w-5", kGo, -1);
  engine->cancel("w-6", "no longer wanted");
  engine->terminate("w-7", "stop");
  for (int n = 0; n < 8; ++n) {
    (void)engine->get_run(fmt::format("w-{}", n));
    REQUIRE(eventually([&] { return engine->get_run(fmt::format("w-{}", n))->status != RunStatus::running; }));
  }
  engine->reset("w-8", ResetPoint::after("a"), "again");
  REQUIRE(eventually([&] { return engine->get_run("w-8")->generation == 2; }));
  agrees(*engine, "finished");
  if (M::mode == Mode::memory) return;
  // Waiting runs park, finished ones go to the run store.
  const auto version = engine->get_run("w-15")->version;
  CHECK(version != 0);
  harness.clock().advance(std::chrono::seconds(2));
  engine->checkpoint();
  CHECK(engine->stats().runs_parked > 0);
  // A parked run keeps its version (the store's row has none; the index does).
  CHECK(engine->get_run("w-15")->version == version);
  agrees(*engine, "parked");
  // Across a reopen: rebuilt from the run store and the log.
  engine->shutdown();
  engine = harness.open(config);
  register_all(*engine);
  agrees(*engine, "reopened");
  engine->signal("w-12", kGo, 2);
  REQUIRE(eventually([&] { return engine->get_run("w-12")->status == RunStatus::completed; }));
  agrees(*engine, "signalled after reopen");
  // Retention: the finished runs leave the store and the index together.
  harness.clock().advance(std::chrono::hours(2));
  engine->checkpoint();
  REQUIRE(eventually([&] { return !engine->get_run("w-0"); }));
  // The index hears of an expiry just after the store has done it.
  REQUIRE(eventually([&] { return engine->query_runs({}).total == engine->list_runs().size(); }));
  agrees(*engine, "expired");
}
}

TEST_SUITE("unit") {
TEST_CASE("run index: a run whose replay diverges is stuck in the index, and cancelled once cancelled") {
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_all(*engine);
    (void)engine->start(kWaits, "s-1", 1);
    REQUIRE(eventually([&] { return engine->journal_json("s-1").find("wait_started") != std::string::npos; }));
    engine->shutdown();
  }
  auto config = harness.config();
  config.warn = [](const std::string&) {};
  auto engine = harness.open(config);
  engine->register_workflow(kWaits, [](Ctx& ctx, int input) -> Task<int> {
    co_return co_await ctx.step("renamed", [input] { return input; });  // not what the journal has
  }, kGo);
  REQUIRE(eventually([&] { return engine->get_run("s-1")->status == RunStatus::stuck; }));
  agrees(*engine, "stuck");
  RunListQuery stuck;
  stuck.status = RunStatus::stuck;
  CHECK(engine->query_runs(stuck).total == 1);
  engine->cancel("s-1", "give up");
  REQUIRE(eventually([&] { return engine->get_run("s-1")->status == RunStatus::cancelled; }));
  // Its error is why it ended now, not the divergence it had.
  CHECK(engine->get_run("s-1")->error.find("nondeterminism") == std::string::npos);
  CHECK(engine->get_run("s-1")->error.find("give up") != std::string::npos);
  agrees(*engine, "cancelled");
}
}
