#include "cli/server_command.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>

#include "cli/stop_signals.hpp"
#include "fusee/error.hpp"
#include "protocol/address.hpp"
#include "server/log_service.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {

int run_server(const ServerOptions& options) {
  sigset_t stop_signals = block_stop_signals();

  server::LogServiceOptions service_options;
  service_options.dir = options.dir;
  service_options.listen = options.listen;
  service_options.shards = options.shards;
  service_options.direct_io = !options.buffered;
  service_options.lease_ttl = std::chrono::milliseconds(options.lease_ttl_ms);
  service_options.http_listen = options.http;
  service_options.http_allowed_hosts = options.http_allowed_hosts;
  if (!options.token_file.empty()) {
    std::ifstream file(options.token_file);
    std::stringstream text;
    text << file.rdbuf();
    auto token = text.str();
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
    if (!file || token.empty()) {
      fmt::print(stderr, "fusee server: cannot read a token from {}\n", options.token_file);
      return 1;
    }
    service_options.token = token;
  }
  protocol::Address listen;
  protocol::Address http;
  try {
    listen = protocol::parse_address(options.listen, "listen address");
    if (!options.http.empty()) http = protocol::parse_address(options.http, "--http address", /*unix_allowed=*/false);
  } catch (const Error& error) {
    fmt::print(stderr, "fusee server: {}\n", error.what());
    return 2;
  }
  bool tcp = !listen.unix_socket;
  bool loopback = tcp && listen.tcp.address().is_loopback();
  bool http_loopback = options.http.empty() || http.tcp.address().is_loopback();
  if (!http_loopback && service_options.token.empty()) {
    fmt::print(stderr, "fusee server: HTTP on {} (not loopback) needs --token-file\n", options.http);
    return 2;
  }
  if (tcp && !loopback && service_options.token.empty()) {
    fmt::print(stderr, "fusee server: listening on {} (not loopback) needs --token-file\n", options.listen);
    return 2;
  }
  io::PosixFileSystem fs;
  std::unique_ptr<server::LogService> service;
  try {
    service = server::LogService::open(fs, service_options);
  } catch (const Error& error) {
    fmt::print(stderr, "fusee server: {}\n", error.what());
    return 1;
  }
  fmt::print("fusee server: {} ({} shards), listening on {}{}\n", options.dir, service->shard_count(),
             service->endpoint(),
             service->http_endpoint().empty() ? std::string() : ", HTTP on " + service->http_endpoint());
  std::fflush(stdout);
  int received = 0;
  sigwait(&stop_signals, &received);
  fmt::print("fusee server: {}: closing\n", received == SIGTERM ? "SIGTERM" : "SIGINT");
  service->stop();
  fmt::print("fusee server: closed cleanly\n");
  return 0;
}

}  // namespace fusee::cli
