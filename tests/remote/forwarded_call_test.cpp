// The bodies of forwarded calls that page the run index
// (remote/forwarded_call.hpp: a backup's query_runs, answered by the
// primary): what is sent comes back the same, and a body that is not one
// is refused with invalid_argument rather than read as something else.
#include <doctest/doctest.h>

#include <fusee/fusee.hpp>

#include "engine/engine_core.hpp"
#include "remote/forwarded_call.hpp"
#include "tests/support/error_checks.hpp"

namespace fusee::remote::forwarded {
namespace {

using testing::error_of;

TEST_SUITE("unit") {
  TEST_CASE("forwarded calls: a run-list query and its page travel whole") {
    RunListQuery query;
    query.status = RunStatus::failed;
    query.workflow_prefix = "Ord";
    query.id_prefix = "order-";
    query.started_from = engine::from_ms(1000);
    query.started_to = engine::from_ms(2000);
    query.order = RunListQuery::Order::oldest;
    query.limit = 7;
    query.cursor = "c:1";
    const auto back = list_query_of(list_query_json(query));
    CHECK(back.status == query.status);
    CHECK(back.workflow_prefix == "Ord");
    CHECK(back.id_prefix == "order-");
    CHECK(back.started_from == query.started_from);
    CHECK(back.started_to == query.started_to);
    CHECK(back.order == RunListQuery::Order::oldest);
    CHECK(back.limit == 7);
    CHECK(back.cursor == "c:1");
    const auto plain = list_query_of(list_query_json(RunListQuery{}));
    CHECK(!plain.status);
    CHECK(!plain.started_from);
    CHECK(plain.order == RunListQuery::Order::newest);

    RunListPage page;
    RunInfo run;
    run.id = "order-1";
    run.workflow = "order";
    run.status = RunStatus::failed;
    run.started_at = engine::from_ms(1500);
    run.finished_at = engine::from_ms(1600);
    run.error = "boom";
    page.runs = {run, run};
    page.runs[1].id = "order-2";
    page.next_cursor = "n";
    page.previous_cursor = "p";
    page.total = 123;
    page.total_exact = false;
    const auto got = list_page_of(list_page_json(page));
    REQUIRE(got.runs.size() == 2);
    CHECK(got.runs[0].id == "order-1");
    CHECK(got.runs[1].id == "order-2");
    CHECK(got.runs[0].status == RunStatus::failed);
    CHECK(got.runs[0].finished_at == run.finished_at);
    CHECK(got.runs[0].error == "boom");
    CHECK(got.next_cursor == "n");
    CHECK(got.previous_cursor == "p");
    CHECK(got.total == 123);
    CHECK(!got.total_exact);
  }

  TEST_CASE("forwarded calls: a query or a page that is not one is refused") {
    auto query = list_query_json(RunListQuery{});
    auto with = [&](const char* field, boost::json::value value) {
      auto changed = query;
      changed[field] = std::move(value);
      return changed;
    };
    CHECK(error_of([&] { list_query_of(with("order", "sideways")); }) == errc::invalid_argument);
    CHECK(error_of([&] { list_query_of(with("limit", -1)); }) == errc::invalid_argument);
    CHECK(error_of([&] { list_query_of(with("status", "sleeping")); }) == errc::invalid_argument);
    CHECK(error_of([&] { list_query_of(with("cursor", 5)); }) == errc::invalid_argument);
    CHECK(error_of([&] { list_query_of(boost::json::value(3)); }) == errc::invalid_argument);
    auto page = list_page_json(RunListPage{});
    auto changed = page;
    changed["runs"] = "none";
    CHECK(error_of([&] { list_page_of(changed); }) == errc::invalid_argument);
    changed = page;
    changed["total_exact"] = 1;
    CHECK(error_of([&] { list_page_of(changed); }) == errc::invalid_argument);
    changed = page;
    changed["total"] = -4;
    CHECK(error_of([&] { list_page_of(changed); }) == errc::invalid_argument);
    changed = page;
    changed["runs"] = boost::json::array{boost::json::object{{"id", "x"}}};
    CHECK(error_of([&] { list_page_of(changed); }) == errc::invalid_argument);
  }
}

}  // namespace
}  // namespace fusee::remote::forwarded
