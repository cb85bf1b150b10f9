// The messages of the server protocol (docs/server-protocol.md), each the
// payload of one frame (protocol/frame.hpp) of its type. Encoding:
// little-endian integers, strings and byte strings as a u32 length then the
// bytes. decode_* refuses (nothing) a payload that is short, has bytes left
// over, or names a length past its end. Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fusee::protocol {

enum class MessageType : std::uint8_t {
  hello = 1,     // worker -> server: protocol check and token
  welcome = 2,   // server -> worker: the directory's shard count
  acquire = 3,   // worker -> server: lease shards (all, or at most N), waiting for them if held
  lease = 4,     // server -> worker: one shard leased, with its epoch and durable end
  append = 5,    // worker -> server: one record of a leased shard, at the LSN it expects
  durable = 6,   // server -> worker: a shard's records are durable up to an LSN
  read = 7,      // worker -> server: a shard's records from an LSN (recovery)
  records = 8,   // server -> worker: some of them
  read_end = 9,  // server -> worker: no more for that read
  error = 10,    // server -> worker: a refusal; the server closes the connection after it
  release = 11,  // worker -> server: give a lease back (clean shutdown)
  ping = 12,     // worker -> server: still here (keeps its leases from lapsing)
  announce = 13, // worker -> server: where its HTTP API listens, for calls the server passes on
  // The run store (protocol/store_call.hpp has their payloads):
  store_call = 14,       // worker -> server: one call on the server's run store
  store_part = 15,       // worker -> server: a leading piece of the next store_call's payload (a large write)
  store_rows = 16,       // server -> worker: some of a call's rows
  store_reply = 17,      // server -> worker: the call's end: its value, or why it failed
  checkpoint_soon = 18,  // server -> worker: checkpoint these shards (the log wants to retire, or the server stops)
  // Calls for a shard another worker holds (an API call, a child run):
  forward = 19,        // worker -> server: a call for a shard, passed on to its holder
  forwarded = 20,      // server -> holder: that call
  forward_reply = 21,  // holder -> server -> caller: part of the answer, its end, or "no holder"
  acquired = 22,       // server -> worker: an acquire's leases granted now were all sent
  // Step limits' permits, granted by the server to every worker (request_id: the ask's id):
  limit = 23,           // worker -> server: a step limit's bounds (Engine::limit)
  permit_ask = 24,      // worker -> server: a permit of a limit, for one step attempt
  permit_grant = 25,    // server -> worker: that ask's permit is granted
  permit_release = 26,  // worker -> server: the permit goes back (or the ask is withdrawn)
  pong = 27,            // server -> worker: the answer to a ping (a worker that hears nothing takes the server for gone)
};

const char* message_type_name(MessageType type);

struct Hello {
  std::string token;   // empty on a Unix socket
  std::string worker;  // a name for logs
};
struct Welcome {
  std::uint32_t shard_count = 0;
  // A worker that sends nothing for this long loses its leases; it pings
  // well within it.
  std::uint32_t lease_ttl_ms = 0;
  // The token the server's HTTP front wants (empty: none). The front passes
  // its clients' calls to the worker's own HTTP API as they came, token
  // included, so the worker takes this token too: its API is then no
  // softer a door than the front.
  std::string http_token;
};
struct Acquire {
  std::uint32_t shards_max = 0;  // 0: all of them
  // These shards first (a worker taking back what it held before the
  // server restarted), waiting for any of them another holds; then free
  // ones up to shards_max in all.
  std::vector<std::uint32_t> shards;
};
struct Acquired {
  std::uint32_t granted = 0;  // leases sent for this acquire so far
};
// A call on a shard's runs, for whichever worker holds the shard. The body
// is the engine's (remote/forwarded_call.hpp); the server only routes it.
struct Forward {
  std::uint32_t shard = 0;
  std::vector<std::byte> body;
};
enum class ReplyPart : std::uint8_t {
  more = 0,       // part of the answer (a stream's chunk); more follow
  last = 1,       // the answer, or its end
  no_holder = 2,  // server: nobody holds the shard now; the call went nowhere
  lost = 3,       // server: the holder went before its answer; the call may or may not have happened
};
struct ForwardReply {
  ReplyPart part = ReplyPart::last;
  std::vector<std::byte> body;  // the engine's; a reason for no_holder and lost
};
struct Lease {
  std::uint32_t shard = 0;
  std::uint64_t epoch = 0;
  std::uint64_t durable_lsn = 0;  // the shard's last durable LSN: the next append is this + 1
};
struct Append {
  std::uint32_t shard = 0;
  std::uint64_t epoch = 0;
  std::uint64_t lsn = 0;
  std::vector<std::byte> record;
};
struct Durable {
  std::uint32_t shard = 0;
  std::uint64_t lsn = 0;
};
struct Read {
  std::uint32_t shard = 0;
  std::uint64_t epoch = 0;
  std::uint64_t first_lsn = 0;
};
struct RecordsChunk {
  std::uint32_t shard = 0;
  std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> records;  // (lsn, bytes)
};
struct ReadEnd {
  std::uint32_t shard = 0;
};
struct ErrorMessage {
  std::string code;  // "fenced", "unauthorized", "bad_request", "storage", ...
  std::string message;
};
struct Announce {
  std::string http;  // "host:port"
};
struct CheckpointSoon {
  std::vector<std::uint32_t> shards;
};
struct Release {
  std::uint32_t shard = 0;
  std::uint64_t epoch = 0;
};
struct Limit {
  std::string name;
  std::uint32_t concurrent = 0;  // 0: no bound
  double per_second = 0;         // 0: no bound (sent as its IEEE-754 bits)
};
struct PermitAsk {
  std::string name;
  // The worker holds this permit already: it was granted over a connection
  // that went (the server restarted). Counted at once, over the bound if
  // need be, since the step is running.
  bool held = false;
};

std::vector<std::byte> encode(const Hello& m);
std::vector<std::byte> encode(const Welcome& m);
std::vector<std::byte> encode(const Acquire& m);
std::vector<std::byte> encode(const Lease& m);
std::vector<std::byte> encode(const Append& m);
std::vector<std::byte> encode(const Durable& m);
std::vector<std::byte> encode(const Read& m);
std::vector<std::byte> encode(const RecordsChunk& m);
std::vector<std::byte> encode(const ReadEnd& m);
std::vector<std::byte> encode(const ErrorMessage& m);
std::vector<std::byte> encode(const Release& m);
std::vector<std::byte> encode(const Announce& m);
std::vector<std::byte> encode(const CheckpointSoon& m);
std::vector<std::byte> encode(const Acquired& m);
std::vector<std::byte> encode(const Forward& m);
std::vector<std::byte> encode(const ForwardReply& m);
std::vector<std::byte> encode(const Limit& m);
std::vector<std::byte> encode(const PermitAsk& m);

std::optional<Hello> decode_hello(std::span<const std::byte> payload);
std::optional<Welcome> decode_welcome(std::span<const std::byte> payload);
std::optional<Acquire> decode_acquire(std::span<const std::byte> payload);
std::optional<Lease> decode_lease(std::span<const std::byte> payload);
std::optional<Append> decode_append(std::span<const std::byte> payload);
std::optional<Durable> decode_durable(std::span<const std::byte> payload);
std::optional<Read> decode_read(std::span<const std::byte> payload);
std::optional<RecordsChunk> decode_records(std::span<const std::byte> payload);
std::optional<ReadEnd> decode_read_end(std::span<const std::byte> payload);
std::optional<ErrorMessage> decode_error(std::span<const std::byte> payload);
std::optional<Release> decode_release(std::span<const std::byte> payload);
std::optional<Announce> decode_announce(std::span<const std::byte> payload);
std::optional<CheckpointSoon> decode_checkpoint_soon(std::span<const std::byte> payload);
std::optional<Acquired> decode_acquired(std::span<const std::byte> payload);
std::optional<Forward> decode_forward(std::span<const std::byte> payload);
std::optional<ForwardReply> decode_forward_reply(std::span<const std::byte> payload);
std::optional<Limit> decode_limit(std::span<const std::byte> payload);
std::optional<PermitAsk> decode_permit_ask(std::span<const std::byte> payload);

}  // namespace fusee::protocol
