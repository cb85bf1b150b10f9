// What a replica process sends and receives over TCP (docs/replication.md,
// "The replica process"): the protocol's frames (protocol/frame.hpp) carrying
// either a message between replicas (replication/replica_messages.hpp) or a
// client's call. One listening port per replica takes both; each replica
// sends to a peer on a connection of its own, so a pair talks over two.
//
// Frame types (request ids are the client's, echoed; 0 between replicas):
//   1 peer message   u32 from, u32 to, u64 view, u8 kind, the body's fields
//   2 append         the payload's bytes: one record of shard 0 of the
//                    primary's log (wal::Log, which seals the records of
//                    one turn of the primary's loop into one batch)
//   3 append reply   u8 AppendStatus, u64 seq (the batch), u32 the primary
//                    as known, u64 the record's LSN
//   4 status         (empty)
//   5 status reply   ReplicaStatus's fields
//   6 call           u32 shard, bytes: a call of the engine's forwarded from
//                    a backup's application to the primary's engine
//                    (remote/forwarded_call.hpp; sdk/facade/primary_router.hpp)
//   7 call reply     u8 CallPart, bytes: a part of its answer
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "replication/replica_core.hpp"
#include "replication/replica_messages.hpp"
#include "wal/log_format.hpp"

namespace fusee::replica {

enum class FrameType : std::uint8_t {
  peer_message = 1,
  append = 2,
  append_reply = 3,
  status = 4,
  status_reply = 5,
  call = 6,
  call_reply = 7,
};

std::vector<std::byte> encode_message(const replication::Message& message);
// Nothing when the bytes are not a whole, well-formed message.
std::optional<replication::Message> decode_message(std::span<const std::byte> bytes);

enum class AppendStatus : std::uint8_t {
  published = 0,    // a quorum holds it durably: it survives any minority's loss
  not_primary = 1,  // nothing was appended; try `primary`
  unknown = 2,      // appended, then this replica stopped serving before a
                    // quorum confirmed it: it may or may not survive
};
const char* append_status_name(AppendStatus status);

struct AppendReply {
  AppendStatus status = AppendStatus::not_primary;
  replication::Seq seq = 0;                                  // the batch it is in
  replication::ReplicaId primary = replication::kNoReplica;  // the serving primary, when known
  wal::Lsn lsn = 0;                                          // published: the record's LSN (shard 0)
};

std::vector<std::byte> encode_append_reply(const AppendReply& reply);
std::optional<AppendReply> decode_append_reply(std::span<const std::byte> bytes);

struct ReplicaStatus {
  replication::ReplicaId self = 0;
  replication::Role role = replication::Role::booting;
  replication::View promised = 0;
  replication::View lead = 0;
  replication::Seq commit = 0;  // what it knows committed (ReplicaCore::known_committed), whatever its role
  replication::Seq log_end = 0;
  replication::Seq durable_end = 0;
  bool suspect = false;
  replication::Seq held_from = 1;          // batches before it are held on disk only
  std::uint64_t batches_read_back = 0;     // sent to peers from the segments, this life
  // A primary's: what each replica holds durably in its view, by id (its
  // own: its durable end); a backup's lag is log_end less its entry. Empty
  // on a replica that is not the primary.
  std::vector<replication::Seq> holds;
  // A primary's too, by id: the payload bytes each replica lacks of its log,
  // and how long ago the oldest batch it lacks was proposed, µs (0: it
  // lacks none; for a batch proposed before this primary's lead, the age
  // of its lead's first proposal: a lower bound).
  std::vector<std::uint64_t> lag_bytes;
  std::vector<std::uint64_t> lag_us;
  replication::Seq retired_through = 0;  // the last batch its log retired (0: none)
  std::uint64_t segment_bytes = 0;       // its log's segments' size (a rebuilt replica takes the primary's)
};
std::vector<std::byte> encode_status(const ReplicaStatus& status);
std::optional<ReplicaStatus> decode_status(std::span<const std::byte> bytes);

struct ForwardedCall {
  std::uint32_t shard = 0;
  std::vector<std::byte> body;
};
std::vector<std::byte> encode_call(const ForwardedCall& call);
std::optional<ForwardedCall> decode_call(std::span<const std::byte> bytes);

enum class CallPart : std::uint8_t {
  more = 0,      // a part of the answer (a stream's chunk); more follow
  last = 1,      // the answer
  not_here = 2,  // nothing was done: this replica runs no engine that could take it now
};
struct CallReply {
  CallPart part = CallPart::last;
  std::vector<std::byte> body;
};
std::vector<std::byte> encode_call_reply(const CallReply& reply);
std::optional<CallReply> decode_call_reply(std::span<const std::byte> bytes);

}  // namespace fusee::replica
