// `fusee replica`: one replica of a replicated log (docs/replication.md, "The
// replica process"): `init` makes a directory a replica of a cluster (or,
// with --rebuild, remakes a lost one), `run` serves it until SIGTERM or
// SIGINT, `status` asks each replica what it holds, `inspect` reads a
// replica's directory without changing it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fusee::cli {

struct ReplicaCommandOptions {
  std::string dir;
  std::string cluster = "default";
  bool rebuild = false;
  std::uint32_t id = 0;
  std::vector<std::string> replicas;  // every replica's HOST:PORT, by id
  std::string etcd = "127.0.0.1:2379";
  std::uint32_t tick_ms = 10;
  std::uint32_t lease_ttl_s = 2;
  bool quiet = false;
  bool disk_thread = false;
  std::uint64_t held_mib = 64;  // run: recent batches' payloads held in memory
  bool batches = false;  // inspect: every batch
};

int run_replica_init(const ReplicaCommandOptions& options);
int run_replica(const ReplicaCommandOptions& options);
int run_replica_status(const ReplicaCommandOptions& options);
int run_replica_inspect(const ReplicaCommandOptions& options);

}  // namespace fusee::cli
