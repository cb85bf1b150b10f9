#include "sdk/facade/engine_wide_calls.hpp"

#include "remote/forwarded_call.hpp"

namespace fusee::facade {

namespace json = boost::json;

std::optional<json::object> engine_wide_call(std::span<const std::byte> body) {
  auto call = remote::forwarded::from_bytes(body);
  if (!call) return std::nullopt;
  const auto* op = call->if_contains("op");
  if (op == nullptr || !op->is_string() || (op->as_string() != "count_runs" && op->as_string() != "query_runs")) {
    return std::nullopt;
  }
  return call;
}

std::optional<json::object> answer_engine_wide(Engine& engine, const json::object& call) {
  try {
    if (remote::forwarded::text(call, "op") == "count_runs") {
      json::array counts;
      for (auto count : engine.count_runs()) counts.push_back(count);
      return json::object{{"counts", std::move(counts)}};
    }
    if (!call.contains("query")) throw Error(errc::invalid_argument, "a forwarded query without its query");
    auto page = engine.query_runs(remote::forwarded::list_query_of(call.at("query")));
    return json::object{{"page", remote::forwarded::list_page_json(page)}};
  } catch (const Error& error) {
    if (error.error() == errc::unavailable || error.error() == errc::shut_down) return std::nullopt;
    return remote::forwarded::error_json(error.error(), error.what());
  } catch (const std::exception& error) {
    return remote::forwarded::error_json(errc::invalid_argument, error.what());
  }
}

}  // namespace fusee::facade
