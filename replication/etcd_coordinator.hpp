// EtcdCoordinator: the replica core's coordinator calls
// (replication/replica_messages.hpp, CoordinatorCall) as etcd v3
// transactions over etcd's JSON gateway, with Boost.Beast (Debian has no C++
// etcd client; docs/replication.md, "etcd"). Blocking: a replica runs it on
// a thread of its own, one call at a time.
//
// Keys, under /fusee/<cluster>/:
//   register   the Register as JSON (view, primary, normal, starts), changed
//              only by transactions that compare its mod_revision
//   primary    the primary's id, attached to its lease: etcd deletes it when
//              the lease expires, and only then may another replica campaign
//
// Every answer that reached etcd carries the register as the transaction
// found or left it. A call that etcd did not answer within the timeout is
// `reached = false`, though it may have applied (the core is written for that).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "replication/replica_messages.hpp"

namespace fusee::replication {

struct EtcdOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 2379;
  // Other members of the same etcd cluster, tried in turn when a member
  // cannot be reached (a connection refused or timed out) or a call on it
  // failed: a replica whose one member is down could neither campaign nor
  // keep its lease while etcd's majority is up.
  std::vector<std::pair<std::string, std::uint16_t>> more;
  std::string cluster = "default";
  std::chrono::milliseconds timeout{2000};  // per HTTP call
  // The primary's lease. etcd rounds a short TTL up to its own minimum
  // (about 1.5 s with its default election timeout).
  std::int64_t lease_ttl_seconds = 2;
};

class EtcdCoordinator {
 public:
  explicit EtcdCoordinator(EtcdOptions options);
  ~EtcdCoordinator();
  EtcdCoordinator(const EtcdCoordinator&) = delete;
  EtcdCoordinator& operator=(const EtcdCoordinator&) = delete;

  // Runs one call for replica `caller` (see CoordinatorCall for each op).
  CoordinatorAnswer run(ReplicaId caller, const CoordinatorCall& call);

  // Revokes the lease (a primary stepping down, a candidate giving up): the
  // primary key goes at once, so another replica need not wait for the TTL.
  void resign();

  // The lease this coordinator holds for its replica, if any (tests).
  std::optional<std::int64_t> lease() const { return lease_; }
  // Why the last call did not reach etcd, for the replica's log.
  const std::string& last_error() const { return last_error_; }

 private:
  struct Stored;
  class Http;
  // Whether a transaction's compare held (a plain bool would convert from
  // an error code).
  enum class Cas { failed, succeeded };

  Result<Stored> read_register();
  Result<Cas> campaign(ReplicaId caller, View view, Stored& stored);
  Result<Cas> publish_start(ReplicaId caller, View view, Seq start, Stored& stored);
  Result<Cas> keepalive(ReplicaId caller, View view, Stored& stored);
  std::string key(const char* name) const;

  EtcdOptions options_;
  std::unique_ptr<Http> http_;
  std::optional<std::int64_t> lease_;
  std::string last_error_;
};

// The register's JSON as the coordinator stores it (tests read it back).
std::string register_json(const Register& reg);
Result<Register> parse_register_json(const std::string& text);

}  // namespace fusee::replication
