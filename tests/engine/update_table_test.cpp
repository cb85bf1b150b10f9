// UpdateTable: the dedup table of a run's updates -- accepted updates taken
// in order by name, answers told to callers only once durable, an earlier
// generation's answers remembered without overriding this one's, the
// callers carried across continue-as-new, and the callers failed at the end.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/update_table.hpp"

using namespace fusee;
using engine::Outcome;
using engine::Remembered;
using engine::UpdateTable;

namespace {

Outcome done(int value) { return Outcome{RunStatus::completed, value, errc::failed, {}}; }

struct Heard {
  std::vector<Outcome> outcomes;
  UpdateTable::Caller caller() {
    return [this](const Outcome& outcome) { outcomes.push_back(outcome); };
  }
};

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("update table: accepted updates are taken by name in the order they came") {
  UpdateTable table;
  table.accept("add", "u1", 1);
  table.accept("remove", "u2", 2);
  table.accept("add", "u3", 3);
  auto first = table.take("add");
  REQUIRE(first);
  CHECK(first->first == "u1");
  CHECK(first->second == boost::json::value(1));
  CHECK(table.take("add")->first == "u3");
  CHECK_FALSE(table.take("add"));
  CHECK_FALSE(table.take("other"));
  // Each accepted id is in the table with its name, taken or not.
  REQUIRE(table.find("u2") != nullptr);
  CHECK(table.find("u2")->name == "remove");
  CHECK_FALSE(table.find("u2")->answered);
  CHECK(table.find("nope") == nullptr);
}

TEST_CASE("update table: an update_taken record takes exactly its id, wherever it waits") {
  UpdateTable table;
  table.accept("add", "u1", 1);
  table.accept("add", "u2", 2);
  table.accept("add", "u3", 3);
  table.taken("add", "u2");
  table.taken("add", "unknown");
  table.taken("no-such-name", "u1");
  auto waiting = table.waiting();
  REQUIRE(waiting.size() == 2);
  CHECK(waiting[0].id == "u1");
  CHECK(waiting[1].id == "u3");
}

TEST_CASE("update table: what continue-as-new carries is by name, then arrival") {
  UpdateTable table;
  table.accept("zeta", "z1", 1);
  table.accept("alpha", "a1", 2);
  table.accept("zeta", "z2", 3);
  table.accept("alpha", "a2", 4);
  std::vector<std::string> order;
  for (const auto& update : table.waiting()) order.push_back(update.name + "/" + update.id);
  CHECK(order == std::vector<std::string>{"alpha/a1", "alpha/a2", "zeta/z1", "zeta/z2"});
}

TEST_CASE("update table: callers hear an answer only once it is durable, and each hears it once") {
  UpdateTable table;
  Heard heard;
  table.add_caller("u1", "add", heard.caller());
  table.accept("add", "u1", 1);
  CHECK(table.has_callers());
  table.answer("u1", "add", done(7), 100, false);
  CHECK(heard.outcomes.empty());  // appended, not durable
  REQUIRE(table.find("u1")->answered);
  CHECK_FALSE(table.find("u1")->durable);
  table.answer_durable("u1");
  REQUIRE(heard.outcomes.size() == 1);
  CHECK(heard.outcomes[0].value == boost::json::value(7));
  CHECK_FALSE(table.has_callers());
  table.answer_durable("u1");
  table.answer_durable("unknown");
  CHECK(heard.outcomes.size() == 1);
  CHECK(table.find("u1")->answered_ms == 100);
}

TEST_CASE("update table: a caller that adds to the table while it hears the answer is safe") {
  UpdateTable table;
  std::vector<Outcome> heard;
  table.add_caller("u1", "add", [&](const Outcome& outcome) {
    heard.push_back(outcome);
    for (int i = 0; i < 100; ++i) table.accept("add", "more-" + std::to_string(i), i);  // rehashes
  });
  table.answer("u1", "add", done(5), 1, false);
  table.answer_durable("u1");
  REQUIRE(heard.size() == 1);
  CHECK(heard[0].value == boost::json::value(5));
}

TEST_CASE("update table: an earlier generation's answer is remembered, not taken again, and yields to this one's") {
  UpdateTable table;
  table.accept("add", "old", 1);  // carried as accepted, and answered before a reset's cut
  table.accept("add", "other", 2);
  table.remember(Remembered::Answer{"old", "add", boost::json::object{{"ok", true}, {"value", 41}}, 10});
  table.remember(Remembered::Answer{
      "failed", "add", boost::json::object{{"ok", false}, {"code", "rejected"}, {"message", "no"}}, 11});
  auto* old = table.find("old");
  REQUIRE(old != nullptr);
  CHECK(old->earlier);
  CHECK(old->durable);
  CHECK(old->answer.value == boost::json::value(41));
  auto* failed = table.find("failed");
  REQUIRE(failed != nullptr);
  CHECK(failed->answer.status == RunStatus::failed);
  CHECK(failed->answer.code == errc::rejected);
  CHECK(failed->answer.message == "no");
  // Answered already: the new code does not take it again.
  REQUIRE(table.waiting().size() == 1);
  CHECK(table.waiting()[0].id == "other");

  // This generation's own answer stands against a later remembered one...
  table.answer("other", "add", done(2), 20, true);
  table.remember(Remembered::Answer{"other", "add", boost::json::object{{"ok", true}, {"value", 99}}, 30});
  CHECK(table.find("other")->answer.value == boost::json::value(2));
  CHECK_FALSE(table.find("other")->earlier);
  // ... and a reset's replay answering an earlier one makes it this one's.
  table.answer("old", "add", done(42), 40, true);
  CHECK_FALSE(table.find("old")->earlier);
  CHECK(table.find("old")->answer.value == boost::json::value(42));
}

TEST_CASE("update table: fail_callers tells every caller still waiting, and none of a durable answer") {
  UpdateTable table;
  Heard waiting, answered_not_durable, durable;
  table.add_caller("w", "add", waiting.caller());
  table.add_caller("a", "add", answered_not_durable.caller());
  table.answer("a", "add", done(1), 1, false);
  table.answer("d", "add", done(2), 2, true);
  table.add_caller("d", "add", durable.caller());  // (the shard answers such a repeat at once)
  std::vector<std::string> asked;
  table.fail_callers([&](const std::string& id, const UpdateTable::Update& update) {
    asked.push_back(id + "/" + update.name);
    return Outcome{RunStatus::failed, {}, errc::failed, "ended"};
  });
  std::sort(asked.begin(), asked.end());
  CHECK(asked == std::vector<std::string>{"a/add", "w/add"});
  REQUIRE(waiting.outcomes.size() == 1);
  CHECK(waiting.outcomes[0].message == "ended");
  CHECK(answered_not_durable.outcomes.size() == 1);
  CHECK(durable.outcomes.empty());
  table.fail_callers([](const std::string&, const UpdateTable::Update&) { return Outcome{}; });
  CHECK(waiting.outcomes.size() == 1);  // told once
}

TEST_CASE("update table: continue-as-new moves the callers of the updates not taken to the next generation") {
  UpdateTable old_generation;
  Heard took, waits;
  old_generation.accept("add", "took", 1);
  old_generation.add_caller("took", "add", took.caller());
  old_generation.accept("add", "waits", 2);
  old_generation.add_caller("waits", "add", waits.caller());
  REQUIRE(old_generation.take("add")->first == "took");  // the code took it
  old_generation.accept("add", "waits-2", 3);

  UpdateTable next_generation;
  for (const auto& update : old_generation.waiting()) next_generation.accept(update.name, update.id, update.arg);
  auto callers = old_generation.take_waiting_callers();
  REQUIRE(callers.size() == 2);
  CHECK(callers.count("waits") == 1);
  CHECK(callers.count("waits-2") == 1);
  CHECK(old_generation.find("waits") == nullptr);     // the next generation answers it
  CHECK(old_generation.find("took") != nullptr);   // the old one took it: it fails there
  for (auto& [id, list] : callers) next_generation.adopt_callers(id, std::move(list));
  next_generation.answer("waits", "add", done(9), 1, false);
  next_generation.answer_durable("waits");
  REQUIRE(waits.outcomes.size() == 1);
  CHECK(waits.outcomes[0].value == boost::json::value(9));
  CHECK(took.outcomes.empty());
}
}
