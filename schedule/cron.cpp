#include "schedule/cron.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <vector>

#include "fusee/error.hpp"

namespace fusee::schedule {
namespace {

using namespace std::chrono;

struct Field {
  const char* name;
  int low;
  int high;
  const char* const* names;  // names for low, low+1, ... (nullptr: none)
};

constexpr const char* kMonthNames[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                       "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
constexpr const char* kWeekdayNames[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

constexpr Field kSecond{"second", 0, 59, nullptr};
constexpr Field kMinute{"minute", 0, 59, nullptr};
constexpr Field kHour{"hour", 0, 23, nullptr};
constexpr Field kDay{"day of month", 1, 31, nullptr};
constexpr Field kMonth{"month", 1, 12, kMonthNames};
// 7 is Sunday too: read up to 7, folded to 0 below.
constexpr Field kWeekday{"day of week", 0, 7, kWeekdayNames};

[[noreturn]] void refuse(std::string_view expression, const Field& field, std::string_view part, std::string_view why) {
  throw Error(errc::invalid_argument,
              fmt::format("cron expression '{}': the {} field '{}' {}", expression, field.name, part, why));
}

int value_of(std::string_view expression, const Field& field, std::string_view whole, std::string_view text) {
  if (field.names != nullptr && text.size() == 3 && std::isalpha(static_cast<unsigned char>(text[0]))) {
    std::string upper(text);
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const int count = field.high - field.low + 1 - (&field == &kWeekday ? 1 : 0);
    for (int i = 0; i < count; ++i) {
      if (upper == field.names[i]) return field.low + i;
    }
  }
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) {
    refuse(expression, field, whole, field.names ? "is not a number or a name" : "is not a number");
  }
  if (value < field.low || value > field.high) {
    refuse(expression, field, whole, fmt::format("is out of range ({} to {})", field.low, field.high));
  }
  return value;
}

// Sets the field's values in `bits`; returns whether the field was `*`
// (or `?`) alone, unrestricted.
template <std::size_t N>
bool parse_field(std::string_view expression, const Field& field, std::string_view text, std::bitset<N>& bits) {
  bool any = false;
  std::size_t at = 0;
  while (at <= text.size()) {
    auto comma = text.find(',', at);
    if (comma == std::string_view::npos) comma = text.size();
    auto part = text.substr(at, comma - at);
    if (part.empty()) refuse(expression, field, text, "has an empty list item");
    int step = 1;
    auto slash = part.find('/');
    auto range = part.substr(0, slash);
    if (slash != std::string_view::npos) {
      auto step_text = part.substr(slash + 1);
      auto [end, error] = std::from_chars(step_text.data(), step_text.data() + step_text.size(), step);
      if (step_text.empty() || error != std::errc{} || end != step_text.data() + step_text.size() || step < 1) {
        refuse(expression, field, part, "has a step that is not a positive number");
      }
    }
    int low = field.low;
    int high = field.high;
    if (range == "*" || range == "?") {
      if (range == "?" && &field != &kDay && &field != &kWeekday) refuse(expression, field, part, "may not be '?'");
      if (slash == std::string_view::npos && text.size() == range.size()) any = true;
      if (&field == &kWeekday) high = 6;  // 7 is 0 again
    } else if (auto dash = range.find('-'); dash != std::string_view::npos) {
      low = value_of(expression, field, part, range.substr(0, dash));
      high = value_of(expression, field, part, range.substr(dash + 1));
      if (low > high) refuse(expression, field, part, "is a range that runs backwards");
    } else {
      low = value_of(expression, field, part, range);
      // "a/n": from a to the field's end, every n.
      high = slash == std::string_view::npos ? low : field.high;
    }
    for (int value = low; value <= high; value += step) {
      bits.set(static_cast<std::size_t>(&field == &kWeekday && value == 7 ? 0 : value));
    }
    at = comma + 1;
  }
  return any;
}

// The macros, as their five fields.
std::string_view expand_macro(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kMacros{{
      {"@yearly", "0 0 1 1 *"},
      {"@annually", "0 0 1 1 *"},
      {"@monthly", "0 0 1 * *"},
      {"@weekly", "0 0 * * 0"},
      {"@daily", "0 0 * * *"},
      {"@midnight", "0 0 * * *"},
      {"@hourly", "0 * * * *"},
  }};
  for (const auto& [macro, fields] : kMacros) {
    if (text == macro) return fields;
  }
  if (!text.empty() && text[0] == '@') {
    throw Error(errc::invalid_argument,
                fmt::format("cron expression '{}' is not a macro cron knows (@yearly, @annually, @monthly, @weekly, "
                            "@daily, @midnight, @hourly)",
                            text));
  }
  return text;
}

}  // namespace

CronExpression CronExpression::parse(std::string_view text) {
  CronExpression cron;
  cron.text_ = std::string(text);
  std::vector<std::string_view> fields;
  auto expanded = expand_macro(text);
  std::size_t at = 0;
  while (at < expanded.size()) {
    while (at < expanded.size() && std::isspace(static_cast<unsigned char>(expanded[at]))) ++at;
    auto end = at;
    while (end < expanded.size() && !std::isspace(static_cast<unsigned char>(expanded[end]))) ++end;
    if (end > at) fields.push_back(expanded.substr(at, end - at));
    at = end;
  }
  if (fields.size() != 5 && fields.size() != 6) {
    throw Error(errc::invalid_argument,
                fmt::format("cron expression '{}' has {} fields: it takes 5 (minute hour day-of-month month "
                            "day-of-week) or 6 (a second first)",
                            text, fields.size()));
  }
  std::size_t first = 0;
  if (fields.size() == 6) {
    parse_field(text, kSecond, fields[0], cron.seconds_);
    first = 1;
  } else {
    cron.seconds_.set(0);
  }
  parse_field(text, kMinute, fields[first], cron.minutes_);
  parse_field(text, kHour, fields[first + 1], cron.hours_);
  cron.days_restricted_ = !parse_field(text, kDay, fields[first + 2], cron.days_);
  parse_field(text, kMonth, fields[first + 3], cron.months_);
  cron.weekdays_restricted_ = !parse_field(text, kWeekday, fields[first + 4], cron.weekdays_);
  return cron;
}

bool CronExpression::day_matches(year_month_day date) const {
  const bool day = days_.test(static_cast<unsigned>(date.day()));
  const bool weekday = weekdays_.test(std::chrono::weekday(sys_days(date)).c_encoding());
  // Cron's rule: with both day fields restricted, either one will do.
  if (days_restricted_ && weekdays_restricted_) return day || weekday;
  return day && weekday;
}

bool CronExpression::matches(LocalSeconds time) const {
  auto day_start = floor<days>(time);
  year_month_day date{sys_days(day_start.time_since_epoch())};
  hh_mm_ss clock{time - day_start};
  return months_.test(static_cast<unsigned>(date.month())) && day_matches(date) &&
         hours_.test(static_cast<std::size_t>(clock.hours().count())) &&
         minutes_.test(static_cast<std::size_t>(clock.minutes().count())) &&
         seconds_.test(static_cast<std::size_t>(clock.seconds().count()));
}

std::optional<LocalSeconds> CronExpression::next_after(LocalSeconds after) const {
  // Field by field, coarsest first: a field that does not match moves the
  // time to the start of its next value, and the search starts again.
  LocalSeconds time = after + seconds(1);
  const auto give_up = after + days(366 * 8);
  while (time <= give_up) {
    auto day_start = floor<days>(time);
    year_month_day date{sys_days(day_start.time_since_epoch())};
    if (!months_.test(static_cast<unsigned>(date.month()))) {
      auto next_month = year_month{date.year(), date.month()} + months(1);
      time = LocalSeconds(local_days(sys_days(next_month / 1).time_since_epoch()));
      continue;
    }
    if (!day_matches(date)) {
      time = LocalSeconds(day_start + days(1));
      continue;
    }
    hh_mm_ss clock{time - day_start};
    if (!hours_.test(static_cast<std::size_t>(clock.hours().count()))) {
      time = LocalSeconds(floor<hours>(time) + hours(1));
      continue;
    }
    if (!minutes_.test(static_cast<std::size_t>(clock.minutes().count()))) {
      time = LocalSeconds(floor<minutes>(time) + minutes(1));
      continue;
    }
    if (!seconds_.test(static_cast<std::size_t>(clock.seconds().count()))) {
      time += seconds(1);
      continue;
    }
    return time;
  }
  return std::nullopt;
}

}  // namespace fusee::schedule
