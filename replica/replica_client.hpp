// ReplicaClient: a client of a replicated log's replicas (replica_wire.hpp),
// for the log demo, the benchmark and tests. It sends each append to the
// replica it last found serving and, when that one does not answer in time
// or is not the primary, tries the next. One call at a time; one client per
// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "replica/replica_wire.hpp"

namespace fusee::replica {

struct AppendOutcome {
  AppendStatus status = AppendStatus::unknown;  // published, or unknown (not_primary only from append_to)
  replication::Seq seq = 0;                     // the batch it went into (published, or unknown with a seq)
  replication::ReplicaId primary = replication::kNoReplica;
  wal::Lsn lsn = 0;                             // the record's LSN (shard 0); published only
};

// Of the replicas' statuses (by id; nothing: no answer), the one that
// answers as primary of the newest lead: two may say so, one deposed and
// not yet told.
std::optional<replication::ReplicaId> newest_primary(const std::vector<std::optional<ReplicaStatus>>& statuses);

class ReplicaClient {
 public:
  explicit ReplicaClient(std::vector<std::string> addresses);
  ~ReplicaClient();
  ReplicaClient(const ReplicaClient&) = delete;
  ReplicaClient& operator=(const ReplicaClient&) = delete;

  // Appends one batch. Tries replicas until one publishes it or says the
  // outcome is unknown, or `deadline` passes (unknown, seq 0: it may or may
  // not have been appended). `per_try` bounds the wait on one replica: a
  // stopped primary answers nothing.
  AppendOutcome append(const std::string& payload, std::chrono::milliseconds deadline,
                       std::chrono::milliseconds per_try = std::chrono::milliseconds(1000));

  // One try at one replica, whatever it is: published, not_primary, or
  // unknown (no answer within `timeout`, or it stopped serving).
  AppendOutcome append_to(replication::ReplicaId id, const std::string& payload, std::chrono::milliseconds timeout);

  // One replica's status, or nothing when it did not answer within `timeout`.
  std::optional<ReplicaStatus> status(replication::ReplicaId id, std::chrono::milliseconds timeout);

  // One forwarded call (frame 6) to one replica and the first part of its
  // answer, or nothing when it did not answer within `timeout` (for calls
  // answered in one part: the run store's transfer, store_transfer.hpp).
  std::optional<CallReply> call(replication::ReplicaId id, const ForwardedCall& call,
                                std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusee::replica
