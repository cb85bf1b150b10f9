#include "demo/order_events.hpp"

#include <fmt/format.h>

#include <charconv>
#include <utility>

namespace fusee::cli {
namespace json = boost::json;

namespace {

// A line's text may not hold a newline: the parent splits on them.
std::string one_line(std::string_view text) {
  std::string out(text);
  for (auto& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

class Fields {
 public:
  explicit Fields(std::string_view line) : rest_(line) {}
  // The next space-separated field (empty when there is none).
  std::string_view next() {
    auto space = rest_.find(' ');
    auto field = rest_.substr(0, space);
    rest_ = space == std::string_view::npos ? std::string_view() : rest_.substr(space + 1);
    return field;
  }
  std::string_view rest() { return std::exchange(rest_, std::string_view()); }

 private:
  std::string_view rest_;
};

template <typename Int>
bool parse_int(std::string_view text, Int& out) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size();
}

bool parse_json(std::string_view text, json::value& out) {
  boost::system::error_code error;
  out = json::parse(text, error);
  return !error;
}

}  // namespace

std::string started_line(std::string_view id) { return fmt::format("started {}\n", id); }

std::string ran_line(std::string_view id, std::string_view step, std::int64_t at_ms, std::string_view key) {
  return fmt::format("ran {} {} {} {}\n", id, step, at_ms, one_line(key));
}

std::string signalled_line(std::string_view id, std::string_view signal_id, const json::value& value) {
  return fmt::format("signalled {} {} {}\n", id, signal_id, json::serialize(value));
}

std::string pay_line(std::string_view id, std::string_view token, std::string_view key) {
  return fmt::format("pay {} {} {}\n", id, token, one_line(key));
}

std::string paid_line(std::string_view id, std::string_view key) { return fmt::format("paid {} {}\n", id, one_line(key)); }

std::string updated_line(std::string_view id, std::string_view update_id, const json::value& answer) {
  return fmt::format("updated {} {} {}\n", id, update_id, json::serialize(answer));
}

std::string chunk_line(std::string_view id, std::uint64_t offset, const json::value& value) {
  return fmt::format("chunk {} {} {}\n", id, offset, json::serialize(value));
}

std::string result_line(std::string_view id, const json::value& value) {
  return fmt::format("result {} {}\n", id, json::serialize(value));
}

std::string failed_line(std::string_view id, std::string_view message) {
  return fmt::format("failed {} {}\n", id, one_line(message));
}

std::string final_chunk_line(std::string_view id, std::uint64_t offset, const json::value& value) {
  return fmt::format("final-chunk {} {} {}\n", id, offset, json::serialize(value));
}

std::string final_end_line(std::string_view id) { return fmt::format("final-end {}\n", id); }

std::string final_result_line(std::string_view id, const json::value& value) {
  return fmt::format("final-result {} {}\n", id, json::serialize(value));
}

std::string run_line(std::string_view id, std::string_view status) { return fmt::format("run {} {}\n", id, status); }

std::string complete_line() { return "complete\n"; }

std::string dropped_line(std::string_view what, std::string_view why) {
  return fmt::format("{}{}: {}\n", kDroppedLinePrefix, what, one_line(why));
}

std::string enqueued_line(std::string_view id) { return fmt::format("enqueued {}\n", id); }

std::string pack_line(std::string_view id, bool done, std::int64_t pid, std::int64_t at_us) {
  return fmt::format("{} {} {} {}\n", done ? "pack-end" : "pack-begin", id, pid, at_us);
}

std::string audit_line(std::string_view id, std::int64_t at_ms) { return fmt::format("audit {} {}\n", id, at_ms); }

std::string audit_schedule_line(std::string_view id, std::uint64_t started) {
  return fmt::format("audit-schedule {} {}\n", id, started);
}

std::optional<OrderEvent> parse_order_event(std::string_view line) {
  using Kind = OrderEvent::Kind;
  Fields fields(line);
  auto verb = fields.next();
  OrderEvent event;
  if (verb == "complete") {
    event.kind = Kind::complete;
    return fields.rest().empty() ? std::optional(event) : std::nullopt;
  }
  event.id = std::string(fields.next());
  if (event.id.empty()) return std::nullopt;
  bool ok = true;
  if (verb == "started") {
    event.kind = Kind::started;
    ok = fields.rest().empty();
  } else if (verb == "ran") {
    event.kind = Kind::ran;
    event.step = std::string(fields.next());
    ok = !event.step.empty() && parse_int(fields.next(), event.at_ms);
    event.text = std::string(fields.rest());
  } else if (verb == "signalled") {
    event.kind = Kind::signalled;
    event.text = std::string(fields.next());
    ok = !event.text.empty() && parse_json(fields.rest(), event.value);
  } else if (verb == "pay") {
    event.kind = Kind::pay;
    event.token = std::string(fields.next());
    event.text = std::string(fields.rest());
    ok = !event.token.empty() && !event.text.empty();
  } else if (verb == "paid") {
    event.kind = Kind::paid;
    event.text = std::string(fields.rest());
    ok = !event.text.empty();
  } else if (verb == "updated") {
    event.kind = Kind::updated;
    event.text = std::string(fields.next());
    ok = !event.text.empty() && parse_json(fields.rest(), event.value) && event.value.is_object();
  } else if (verb == "chunk" || verb == "final-chunk") {
    event.kind = verb == "chunk" ? Kind::chunk : Kind::final_chunk;
    ok = parse_int(fields.next(), event.offset) && parse_json(fields.rest(), event.value);
  } else if (verb == "result" || verb == "final-result") {
    event.kind = verb == "result" ? Kind::result : Kind::final_result;
    ok = parse_json(fields.rest(), event.value);
  } else if (verb == "failed") {
    event.kind = Kind::failed;
    event.text = std::string(fields.rest());
  } else if (verb == "final-end") {
    event.kind = Kind::final_end;
    ok = fields.rest().empty();
  } else if (verb == "enqueued") {
    event.kind = Kind::enqueued;
    ok = fields.rest().empty();
  } else if (verb == "pack-begin" || verb == "pack-end") {
    event.kind = verb == "pack-begin" ? Kind::pack_begin : Kind::pack_end;
    ok = parse_int(fields.next(), event.pid) && parse_int(fields.next(), event.at_us) && fields.rest().empty();
  } else if (verb == "audit") {
    event.kind = Kind::audit;
    ok = parse_int(fields.next(), event.at_ms) && fields.rest().empty();
  } else if (verb == "audit-schedule") {
    event.kind = Kind::audit_schedule;
    ok = parse_int(fields.next(), event.offset) && fields.rest().empty();
  } else if (verb == "run") {
    event.kind = Kind::run;
    event.text = std::string(fields.rest());
    ok = !event.text.empty();
  } else {
    ok = false;
  }
  if (!ok) return std::nullopt;
  return event;
}

}  // namespace fusee::cli
