// The demo's ledger: what it says of the orders and pack runs that never
// ended when a final life runs out of time (fusee demo's last clue).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "demo/order_events.hpp"
#include "demo/order_ledger.hpp"
#include "demo/order_workflow.hpp"

using namespace fusee::cli;

namespace {

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& line : lines) {
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

void feed(OrderLedger& ledger, int life, const std::string& line) {
  auto text = line;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  (void)ledger.feed(life, text, 1);
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("demo ledger: the orders that reported no result are named with what is known of them") {
  OrderLedger ledger(7, 3, std::chrono::milliseconds(1000));
  const auto waits = order_id(0);
  const auto done = order_id(1);
  feed(ledger, 0, started_line(waits));
  feed(ledger, 0, ran_line(waits, "charge", 1, "key-1"));
  feed(ledger, 0, pay_line(waits, "token-1", "key-1"));
  feed(ledger, 1, started_line(done));
  feed(ledger, 1, result_line(done, boost::json::object{{"outcome", "shipped"}}));
  auto lines = ledger.unfinished(10);
  CHECK(any_contains(lines, waits + ": started in life 0"));
  CHECK(any_contains(lines, "payment requested and never confirmed"));
  CHECK(any_contains(lines, "charge x1"));
  CHECK_FALSE(any_contains(lines, done + ":"));  // it reported its result
  CHECK_FALSE(any_contains(lines, order_id(2)));  // never started
  CHECK(ledger.unfinished(0) == std::vector<std::string>{"... 1 orders in all reported no result"});
}
}
