#include "http/request_guard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <cctype>

#include "protocol/address.hpp"

namespace fusee::http {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// "name:port", "[v6]:port" or "name" (lower case): the name, without
// brackets, and the port ("" when none).
std::pair<std::string, std::string> split_host(const std::string& host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    if (close == std::string::npos) return {host, ""};
    auto rest = host.substr(close + 1);
    return {host.substr(1, close - 1), rest.starts_with(":") ? rest.substr(1) : ""};
  }
  auto colon = host.rfind(':');
  if (colon == std::string::npos) return {host, ""};
  return {host.substr(0, colon), host.substr(colon + 1)};
}

bool loopback_name(const std::string& name) {
  if (name == "localhost" || name.ends_with(".localhost")) return true;
  boost::system::error_code error;
  auto address = boost::asio::ip::make_address(name, error);
  if (error) return false;
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6()).is_loopback();
  }
  return address.is_loopback();
}

// Whether Host (lower case) is one the policy answers to.
bool host_allowed(const std::string& host, const HostPolicy& policy) {
  if (!policy.bound.empty() && host == lower(policy.bound)) return true;
  auto [name, port] = split_host(host);
  for (const auto& entry : policy.allowed) {
    auto wanted = lower(entry);
    auto [wanted_name, wanted_port] = split_host(wanted);
    if (wanted_name == name && (wanted_port.empty() || wanted_port == port)) return true;
  }
  if (loopback_name(name)) return true;
  return !policy.loopback && policy.allowed.empty();
}

bool changes_something(const std::string& method) { return method != "GET" && method != "HEAD" && method != "OPTIONS"; }

const std::string* header(const HttpRequest& request, const char* name) {
  auto found = request.headers.find(name);
  return found == request.headers.end() ? nullptr : &found->second;
}

}  // namespace

std::optional<HttpResponse> refuse_unsafe(const HttpRequest& request, const HostPolicy& policy) {
  // Two of a header this guard reads: which one counts would depend on who
  // reads it (a proxy may take the first, this server takes the last).
  for (const char* name : {"host", "origin", "sec-fetch-site", "content-type"}) {
    if (request.repeated_headers.contains(name)) {
      return HttpApi::error(400, "bad_request", fmt::format("two {} headers: send one", name));
    }
  }
  const auto* host_header = header(request, "host");
  // HTTP/1.0 clients may send no Host; browsers always send one.
  std::string host = host_header ? lower(trim(*host_header)) : std::string();
  if (host_header != nullptr && !host_allowed(host, policy)) {
    return HttpApi::error(421, "misdirected",
                          fmt::format("this server does not answer to the name in Host; it answers to loopback names{}",
                                      policy.allowed.empty() ? std::string() : " and those it was told (http_allowed_hosts)"));
  }
  if (!changes_something(request.method)) return std::nullopt;
  if (const auto* site = header(request, "sec-fetch-site")) {
    auto value = lower(trim(*site));
    if (value != "same-origin" && value != "none") {
      return HttpApi::error(403, "cross_site",
                            fmt::format("a {} request from another site (Sec-Fetch-Site: {}) is refused", request.method, value));
    }
  }
  if (const auto* origin = header(request, "origin")) {
    auto value = lower(trim(*origin));
    std::string authority;
    for (std::string_view scheme : {"http://", "https://"}) {
      if (value.starts_with(scheme)) authority = value.substr(scheme.size());
    }
    bool same = !authority.empty() && host_header != nullptr && authority == host;
    // Behind a proxy that sets Host to its upstream, the page's own name is
    // one of the allowed ones.
    for (const auto& entry : policy.allowed) same = same || (!authority.empty() && authority == lower(entry));
    if (!same) {
      return HttpApi::error(403, "cross_site",
                            fmt::format("a {} request from another origin is refused (Origin is not this server)", request.method));
    }
  }
  // POST is the one such method a browser sends cross-site unasked; PUT
  // and DELETE always ask first (a preflight this server never allows).
  if (request.method != "POST") return std::nullopt;
  const auto* type = header(request, "content-type");
  auto media = type ? lower(trim(std::string_view(*type).substr(0, type->find(';')))) : std::string();
  if (media != "application/json") {
    auto response = HttpApi::error(415, "unsupported_media_type",
                                   fmt::format("a {} request needs \"Content-Type: application/json\", with a body or "
                                               "without (curl: --json, or -H 'Content-Type: application/json')",
                                               request.method));
    response.headers["Accept-Post"] = "application/json";
    return response;
  }
  return std::nullopt;
}

bool bearer_matches(std::string_view value, std::string_view token) {
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size()) return false;
  for (std::size_t k = 0; k < kScheme.size(); ++k) {
    if (std::tolower(static_cast<unsigned char>(value[k])) != kScheme[k]) return false;
  }
  value.remove_prefix(kScheme.size());
  unsigned char differ = value.size() == token.size() ? 0 : 1;
  for (std::size_t k = 0; k < token.size(); ++k) {
    differ |= static_cast<unsigned char>(token[k]) ^ static_cast<unsigned char>(k < value.size() ? value[k] : 0);
  }
  return differ == 0;
}

std::optional<HttpResponse> refuse_without_token(const HttpRequest& request, const std::vector<std::string>& tokens) {
  bool wanted = std::any_of(tokens.begin(), tokens.end(), [](const std::string& token) { return !token.empty(); });
  if (!wanted) return std::nullopt;
  if (request.repeated_headers.contains("authorization")) {
    return HttpApi::error(400, "bad_request", "two Authorization headers: send one");
  }
  const auto* given = header(request, "authorization");
  bool matched = false;
  for (const auto& token : tokens) {
    // Every token is compared, so the time taken says nothing of which.
    if (!token.empty() && given != nullptr) matched = bearer_matches(*given, token) || matched;
  }
  if (matched) return std::nullopt;
  auto response = HttpApi::error(401, "unauthorized", "a bearer token is required (Authorization: Bearer <token>)");
  response.headers["WWW-Authenticate"] = "Bearer";
  return response;
}

bool is_loopback_listen(const std::string& listen) {
  auto endpoint = protocol::parse_address(listen, "http listen address", /*unix_allowed=*/false).tcp;
  auto address = endpoint.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6()).is_loopback();
  }
  return address.is_loopback();
}

}  // namespace fusee::http
