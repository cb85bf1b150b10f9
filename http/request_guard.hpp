// What a request must pass before any route sees it, on an engine's
// listener and on `fusee server`'s front alike (docs/http-api.md,
// "Who may call"). Pure: a request in, a refusal or nothing out; the
// server (http/connection.cpp) and the routers call these.
//
// A browser is the adversary here. Any page a developer opens may send a
// request to 127.0.0.1, and a browser sends some of them without asking the
// server first (a form POST, a no-cors fetch with a text body): the
// response is hidden from the page, but what the request did is done. So
// a request that changes something must carry what no such request can:
// Content-Type application/json (a browser asks first, and this server
// never says yes), and no Origin or Sec-Fetch-Site naming another site. A
// page may also point a name of its own at 127.0.0.1 (DNS rebinding), after
// which the browser treats the API as the page's own origin, reads
// included: the Host header gives it away.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_api.hpp"

namespace fusee::http {

struct HostPolicy {
  // The listener is on a loopback address: only loopback names (localhost,
  // *.localhost, 127.0.0.0/8, [::1]) and `allowed` may appear in Host.
  bool loopback = false;
  // Further names, "name" or "name:port" (Config::http_allowed_hosts). On a
  // non-loopback listener: when any are given, only they (and loopback's)
  // are answered; with none, any Host is.
  std::vector<std::string> allowed;
  // The address the server is bound to ("127.0.0.1:41234"), always
  // answered: what a relay from `fusee server`'s front sends as Host.
  std::string bound;
};

// 400 when Host, Origin, Sec-Fetch-Site or Content-Type comes twice; 421
// when Host names something this server is not; 403 when a request
// that may change something (any method but GET, HEAD, OPTIONS) comes from
// another site (Origin other than the Host's, or Sec-Fetch-Site cross-site
// or same-site); 415 when a POST is not application/json. Nothing
// when the request may go on.
std::optional<HttpResponse> refuse_unsafe(const HttpRequest& request, const HostPolicy& policy);

// "Bearer <token>", the scheme in any case (RFC 9110), compared in time
// that does not depend on where the bytes differ.
bool bearer_matches(std::string_view value, std::string_view token);

// With tokens, a request must carry one of them (a worker behind `fusee
// server` takes its own and the front's): 401 otherwise, 400 for two
// Authorization headers (which one counts would depend on the proxy in
// front). Nothing when `tokens` is empty or one matches.
std::optional<HttpResponse> refuse_without_token(const HttpRequest& request, const std::vector<std::string>& tokens);

// Whether "host:port" listens on a loopback address (127.0.0.0/8, ::1).
bool is_loopback_listen(const std::string& listen);

}  // namespace fusee::http
