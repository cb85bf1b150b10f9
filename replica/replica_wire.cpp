#include "replica/replica_wire.hpp"

#include <type_traits>

#include "base/assert.hpp"
#include "protocol/wire.hpp"

namespace fusee::replica {

namespace {

using protocol::Reader;
using protocol::Writer;
using namespace replication;

// A batch's payload and the message's other byte strings are bounded by the
// frame (protocol::kFrameBytesMax). Nothing is reserved from a count: a
// hostile one fails on the bytes that are not there.
constexpr std::uint32_t kEntriesMax = 1u << 20;
constexpr std::uint32_t kStartsMax = 1u << 20;

void put_starts(Writer& w, const ViewStarts& starts) {
  w.u32(static_cast<std::uint32_t>(starts.size()));
  for (const auto& [view, start] : starts) w.u64(view).u64(start);
}
bool get_starts(Reader& r, ViewStarts& starts) {
  std::uint32_t count = 0;
  if (!r.u32(count) || count > kStartsMax) return false;
  for (std::uint32_t i = 0; i < count; ++i) {
    View view = 0;
    Seq start = 0;
    if (!r.u64(view) || !r.u64(start)) return false;
    starts[view] = start;
  }
  return true;
}

void put_entries(Writer& w, const std::vector<Entry>& entries) {
  w.u32(static_cast<std::uint32_t>(entries.size()));
  for (const Entry& e : entries) {
    FUSEE_ASSERT(!e.elided, "a batch is sent with its payload (the driver fills elided ones in)");
    w.u64(e.seq).u64(e.view).u64(e.acked).text(e.payload);
  }
}
bool get_entries(Reader& r, std::vector<Entry>& entries) {
  std::uint32_t count = 0;
  if (!r.u32(count) || count > kEntriesMax) return false;
  for (std::uint32_t i = 0; i < count; ++i) {
    Entry e;
    if (!r.u64(e.seq) || !r.u64(e.view) || !r.u64(e.acked) || !r.text(e.payload)) return false;
    entries.push_back(std::move(e));
  }
  return true;
}

// A status's holdings, one per replica: a count no cluster reaches is no
// status (and must not size a vector).
bool get_holds(Reader& r, std::vector<replication::Seq>& holds) {
  constexpr std::uint32_t kReplicasMax = 255;
  std::uint32_t count = 0;
  if (!r.u32(count) || count > kReplicasMax) return false;
  holds.resize(count);
  for (replication::Seq& seq : holds) {
    if (!r.u64(seq)) return false;
  }
  return true;
}

bool get_bool(Reader& r, bool& value) {
  std::uint8_t byte = 0;
  if (!r.u8(byte) || byte > 1) return false;
  value = byte == 1;
  return true;
}

void put(Writer& w, const SealRequest& m) { put_starts(w, m.starts); }
void put(Writer& w, const SealReply& m) { w.u64(m.end).u64(m.last_view).u64(m.acked_seen).u8(m.suspect); }
void put(Writer& w, const FetchRequest& m) { w.u64(m.after_seq).u64(m.after_view).u64(m.up_to); }
void put_anchor(Writer& w, const std::optional<replication::LogAnchor>& anchor) {
  w.u8(anchor.has_value());
  if (anchor) w.u64(anchor->seq).u64(anchor->view).u64(anchor->segment).u32(anchor->crc);
}
bool get_anchor(Reader& r, std::optional<replication::LogAnchor>& anchor) {
  bool anchored = false;
  if (!get_bool(r, anchored)) return false;
  if (!anchored) return true;
  replication::LogAnchor& got = anchor.emplace();
  return r.u64(got.seq) && r.u64(got.view) && r.u64(got.segment) && r.u32(got.crc);
}
void put(Writer& w, const FetchReply& m) {
  w.u8(m.match).u64(m.hint);
  put_entries(w, m.entries);
  put_anchor(w, m.anchor);
}
void put(Writer& w, const AppendRequest& m) {
  w.u64(m.prev_seq).u64(m.prev_view);
  put_entries(w, m.entries);
  w.u64(m.commit).u64(m.primary_end);
  put_starts(w, m.starts);
  w.u64(m.to_incarnation).u64(m.retire_below);
  put_anchor(w, m.anchor);
}
void put(Writer& w, const replication::AppendReply& m) {
  w.u8(m.ok).u64(m.match_end).u64(m.hint).u64(m.promised).u64(m.incarnation);
}
void put(Writer&, const ProbeRequest&) {}
void put(Writer& w, const ProbeReply& m) { w.u8(m.granted); }

bool get(Reader& r, SealRequest& m) { return get_starts(r, m.starts); }
bool get(Reader& r, SealReply& m) {
  return r.u64(m.end) && r.u64(m.last_view) && r.u64(m.acked_seen) && get_bool(r, m.suspect);
}
bool get(Reader& r, FetchRequest& m) { return r.u64(m.after_seq) && r.u64(m.after_view) && r.u64(m.up_to); }
bool get(Reader& r, FetchReply& m) {
  return get_bool(r, m.match) && r.u64(m.hint) && get_entries(r, m.entries) && get_anchor(r, m.anchor);
}
bool get(Reader& r, AppendRequest& m) {
  return r.u64(m.prev_seq) && r.u64(m.prev_view) && get_entries(r, m.entries) && r.u64(m.commit) &&
         r.u64(m.primary_end) && get_starts(r, m.starts) && r.u64(m.to_incarnation) && r.u64(m.retire_below) &&
         get_anchor(r, m.anchor);
}
bool get(Reader& r, replication::AppendReply& m) {
  return get_bool(r, m.ok) && r.u64(m.match_end) && r.u64(m.hint) && r.u64(m.promised) && r.u64(m.incarnation);
}
bool get(Reader&, ProbeRequest&) { return true; }
bool get(Reader& r, ProbeReply& m) { return get_bool(r, m.granted); }

template <std::size_t I>
bool get_body(Reader& r, std::size_t kind, MessageBody& body) {
  if constexpr (I == std::variant_size_v<MessageBody>) {
    return false;
  } else {
    if (kind != I) return get_body<I + 1>(r, kind, body);
    std::variant_alternative_t<I, MessageBody> value;
    if (!get(r, value)) return false;
    body = std::move(value);
    return true;
  }
}

}  // namespace

std::vector<std::byte> encode_message(const Message& message) {
  Writer w;
  w.u32(message.from).u32(message.to).u64(message.view).u8(static_cast<std::uint8_t>(message.body.index()));
  std::visit([&](const auto& body) { put(w, body); }, message.body);
  return w.take();
}

std::optional<Message> decode_message(std::span<const std::byte> bytes) {
  return protocol::decode_with<Message>(bytes, [](Reader& r, Message& m) {
    std::uint8_t kind = 0;
    return r.u32(m.from) && r.u32(m.to) && r.u64(m.view) && r.u8(kind) && get_body<0>(r, kind, m.body);
  });
}

const char* append_status_name(AppendStatus status) {
  switch (status) {
    case AppendStatus::published: return "published";
    case AppendStatus::not_primary: return "not_primary";
    case AppendStatus::unknown: return "unknown";
  }
  return "?";
}

std::vector<std::byte> encode_append_reply(const AppendReply& reply) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(reply.status)).u64(reply.seq).u32(reply.primary).u64(reply.lsn);
  return w.take();
}

std::optional<AppendReply> decode_append_reply(std::span<const std::byte> bytes) {
  return protocol::decode_with<AppendReply>(bytes, [](Reader& r, AppendReply& m) {
    std::uint8_t status = 0;
    if (!r.u8(status) || status > 2) return false;
    m.status = static_cast<AppendStatus>(status);
    return r.u64(m.seq) && r.u32(m.primary) && r.u64(m.lsn);
  });
}

std::vector<std::byte> encode_status(const ReplicaStatus& s) {
  Writer w;
  w.u32(s.self).u8(static_cast<std::uint8_t>(s.role)).u64(s.promised).u64(s.lead).u64(s.commit);
  w.u64(s.log_end).u64(s.durable_end).u8(s.suspect).u64(s.held_from).u64(s.batches_read_back);
  w.u32(static_cast<std::uint32_t>(s.holds.size()));
  for (replication::Seq seq : s.holds) w.u64(seq);
  for (const auto* values : {&s.lag_bytes, &s.lag_us}) {
    w.u32(static_cast<std::uint32_t>(values->size()));
    for (std::uint64_t value : *values) w.u64(value);
  }
  w.u64(s.retired_through).u64(s.segment_bytes);
  return w.take();
}

std::optional<ReplicaStatus> decode_status(std::span<const std::byte> bytes) {
  return protocol::decode_with<ReplicaStatus>(bytes, [](Reader& r, ReplicaStatus& s) {
    std::uint8_t role = 0;
    if (!r.u32(s.self) || !r.u8(role) || role > static_cast<std::uint8_t>(Role::primary)) return false;
    s.role = static_cast<Role>(role);
    return r.u64(s.promised) && r.u64(s.lead) && r.u64(s.commit) && r.u64(s.log_end) && r.u64(s.durable_end) &&
           get_bool(r, s.suspect) && r.u64(s.held_from) && r.u64(s.batches_read_back) && get_holds(r, s.holds) &&
           get_holds(r, s.lag_bytes) && get_holds(r, s.lag_us) && r.u64(s.retired_through) &&
           r.u64(s.segment_bytes);
  });
}

std::vector<std::byte> encode_call(const ForwardedCall& call) {
  Writer w;
  w.u32(call.shard).bytes(call.body);
  return w.take();
}

std::optional<ForwardedCall> decode_call(std::span<const std::byte> bytes) {
  return protocol::decode_with<ForwardedCall>(bytes, [](Reader& r, ForwardedCall& m) {
    return r.u32(m.shard) && r.bytes(m.body);
  });
}

std::vector<std::byte> encode_call_reply(const CallReply& reply) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(reply.part)).bytes(reply.body);
  return w.take();
}

std::optional<CallReply> decode_call_reply(std::span<const std::byte> bytes) {
  return protocol::decode_with<CallReply>(bytes, [](Reader& r, CallReply& m) {
    std::uint8_t part = 0;
    if (!r.u8(part) || part > 2) return false;
    m.part = static_cast<CallPart>(part);
    return r.bytes(m.body);
  });
}

}  // namespace fusee::replica
