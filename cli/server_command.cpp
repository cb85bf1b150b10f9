#include "cli/server_command.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <functional>
#include <sstream>

#include "cli/stop_signals.hpp"
#include "fusee/error.hpp"
#include "protocol/address.hpp"
#include "replica/etcd_members.hpp"
#include "server/log_service.hpp"
#include "server/replicated_server.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {

namespace {

// Until SIGTERM or SIGINT; then stops cleanly, saying so, and exits 0.
int serve_until_stopped(const sigset_t& stop_signals, const std::function<void()>& stop) {
  std::fflush(stdout);
  int received = 0;
  sigwait(&stop_signals, &received);
  fmt::print("fusee server: {}: closing\n", received == SIGTERM ? "SIGTERM" : "SIGINT");
  stop();
  fmt::print("fusee server: closed cleanly\n");
  return 0;
}

int run_replicated_server(const ServerOptions& options, server::LogServiceOptions service_options,
                          sigset_t stop_signals) {
  if (options.replicas.size() < 3 || options.replicas.size() % 2 == 0 || options.replica_id >= options.replicas.size()) {
    fmt::print(stderr,
               "fusee server: --replicated needs --replicas naming 3, 5, 7... addresses and --replica-id one of them "
               "(0-based); it names {} and --replica-id is {}\n",
               options.replicas.size(), options.replica_id);
    return 2;
  }
  if (options.shards == 0) {
    fmt::print(stderr, "fusee server: --replicated needs --shards, the same on every server of the cluster\n");
    return 2;
  }
  if (options.buffered) {
    fmt::print(stderr, "fusee server: --replicated takes no --buffered: the log is the replica's, written as `fusee "
                       "replica run` writes it\n");
    return 2;
  }
  // Workers name the address: one the kernel picks anew for each view
  // would leave them nowhere to go.
  for (const auto& [flag, text] : {std::pair<const char*, std::string>{"--listen", options.listen},
                                   std::pair<const char*, std::string>{"--http", options.http}}) {
    if (text.empty()) continue;
    const auto address = protocol::parse_address(text, flag, std::string(flag) != "--http");
    if (!address.unix_socket && address.tcp.port() == 0) {
      fmt::print(stderr, "fusee server: --replicated needs a fixed {} port, the same in every view (not 0)\n", flag);
      return 2;
    }
  }
  server::ReplicatedServerOptions replicated;
  replicated.shards = options.shards;
  replicated.node.self = options.replica_id;
  replicated.node.addresses = options.replicas;
  replicated.node.dir = options.dir;
  replicated.node.cluster = options.cluster;
  std::unique_ptr<server::ReplicatedServer> server;
  try {
    for (const std::string& address : options.replicas) protocol::parse_address(address, "--replicas", false);
    replica::set_etcd_members(options.etcd, "--etcd", replicated.node.etcd);
    replica::set_timings_from_lease(replicated.node, options.etcd_lease_ttl_s, options.tick_ms);
    replicated.node.log = [](const std::string& line) { fmt::print(stderr, "fusee server: replica: {}\n", line); };
    replicated.service = std::move(service_options);
    server = std::make_unique<server::ReplicatedServer>(std::move(replicated));
  } catch (const Error& error) {
    fmt::print(stderr, "fusee server: {}\n", error.what());
    return error.error() == errc::invalid_argument ? 2 : 1;
  }
  fmt::print("fusee server: {} ({} shards), replica {} of cluster {}; serves workers on {} while it is the primary\n",
             options.dir, server->shard_count(), options.replica_id, options.cluster, options.listen);
  return serve_until_stopped(stop_signals, [&] { server->stop(); });
}

}  // namespace

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
  if (options.replicated) return run_replicated_server(options, std::move(service_options), stop_signals);
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
  return serve_until_stopped(stop_signals, [&] { service->stop(); });
}

}  // namespace fusee::cli
