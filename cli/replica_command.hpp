// `fusee replica`: one replica of a replicated log (docs/replication.md, "The
// replica process"): `init` makes a directory a replica of a cluster (or,
// with --rebuild, remakes a lost one), `run` serves it until SIGTERM or
// SIGINT, `status` asks each replica what it holds, `inspect` reads a
// replica's directory without changing it, `rebuild` makes a lost or
// stranded replica of an application whole again from the primary.
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
  std::uint64_t segment_bytes = 80ull << 20;  // init, rebuild: the log's segments (the same on every replica)
};

int run_replica_init(const ReplicaCommandOptions& options);
int run_replica(const ReplicaCommandOptions& options);
int run_replica_status(const ReplicaCommandOptions& options);
int run_replica_inspect(const ReplicaCommandOptions& options);
int run_replica_rebuild(const ReplicaCommandOptions& options);  // replica_rebuild.cpp

}  // namespace fusee::cli
