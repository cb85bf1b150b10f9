// `fusee server --dir D --listen unix:PATH|HOST:PORT [--token-file F]
// [--shards N]`: holds D's shared log and leases its shards to remote
// engines (server/log_service.hpp, docs/server-protocol.md). Prints where it
// listens; SIGTERM or SIGINT closes the connections, makes everything
// appended durable, closes the log cleanly and exits 0. With --replicated,
// one of N servers over the replicated log (docs/replication.md, "Server
// mode on three replicas"): it serves workers while it is the primary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fusee::cli {

struct ServerOptions {
  std::string dir = "./data";
  std::string listen = "127.0.0.1:7470";
  std::string http;        // the HTTP front, "host:port"; empty: none
  std::string token_file;  // required on a TCP address that is not loopback
  std::vector<std::string> http_allowed_hosts;  // Host names the HTTP front answers besides loopback's
  std::uint32_t shards = 0;
  std::uint32_t lease_ttl_ms = 10'000;  // a silent worker's leases lapse after this
  bool buffered = false;  // buffered writes + fdatasync instead of O_DIRECT
  // --replicated: one of N servers, each a replica of the replicated log;
  // the primary serves the workers (server/replicated_server.hpp).
  bool replicated = false;
  std::uint32_t replica_id = 0;
  std::vector<std::string> replicas;  // every server's replica address (HOST:PORT), by id
  std::string etcd = "127.0.0.1:2379";
  std::string cluster = "default";
  std::uint32_t tick_ms = 10;
  std::uint32_t etcd_lease_ttl_s = 2;
};

int run_server(const ServerOptions& options);

}  // namespace fusee::cli
