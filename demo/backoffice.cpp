#include "demo/backoffice.hpp"

#include <charconv>
#include <chrono>

namespace fusee::cli {

std::string pack_id(std::uint32_t index) { return "pack-" + order_id(index); }

std::optional<std::int64_t> audit_due_ms(std::string_view run_id) {
  // <id>@YYYY-MM-DDTHH:MM:SS.mmmZ
  const std::string prefix = std::string(kAuditSchedule) + "@";
  if (!run_id.starts_with(prefix)) return std::nullopt;
  auto text = run_id.substr(prefix.size());
  if (text.size() != 24 || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' ||
      text[16] != ':' || text[19] != '.' || text[23] != 'Z') {
    return std::nullopt;
  }
  auto number = [&](std::size_t at, std::size_t width, int& out) {
    auto [end, error] = std::from_chars(text.data() + at, text.data() + at + width, out);
    return error == std::errc() && end == text.data() + at + width;
  };
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, ms = 0;
  if (!number(0, 4, year) || !number(5, 2, month) || !number(8, 2, day) || !number(11, 2, hour) ||
      !number(14, 2, minute) || !number(17, 2, second) || !number(20, 3, ms)) {
    return std::nullopt;
  }
  const std::chrono::year_month_day date{std::chrono::year(year), std::chrono::month(static_cast<unsigned>(month)),
                                         std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok() || hour > 23 || minute > 59 || second > 59) return std::nullopt;
  auto at = std::chrono::sys_days(date) + std::chrono::hours(hour) + std::chrono::minutes(minute) +
            std::chrono::seconds(second) + std::chrono::milliseconds(ms);
  return std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
}

Task<std::uint32_t> pack_workflow(Ctx& ctx, std::uint32_t index, OrderServices& calls, BackofficeServices& report) {
  // A named local, not a lambda inside the co_await (see order_workflow.cpp).
  const auto pack = [id = ctx.run_id(), index, &calls, &report]() -> Task<std::uint32_t> {
    report.packing(id, false);
    co_await ServiceCall(calls, id, kPackStep);
    report.packing(id, true);
    co_return index;
  };
  co_return co_await ctx.step(std::string(kPackStep), pack);
}

Task<int> audit_workflow(Ctx& ctx, BackofficeServices& report) {
  const auto audit = [id = ctx.run_id(), &report] {
    report.audited(id);
    return 0;
  };
  co_return co_await ctx.step("audit", audit);
}

}  // namespace fusee::cli
