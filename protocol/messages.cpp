#include "protocol/messages.hpp"

#include <cstring>

#include "protocol/wire.hpp"

namespace fusee::protocol {
const char* message_type_name(MessageType type) {
  switch (type) {
    case MessageType::hello: return "hello";
    case MessageType::welcome: return "welcome";
    case MessageType::acquire: return "acquire";
    case MessageType::lease: return "lease";
    case MessageType::append: return "append";
    case MessageType::durable: return "durable";
    case MessageType::read: return "read";
    case MessageType::records: return "records";
    case MessageType::read_end: return "read_end";
    case MessageType::error: return "error";
    case MessageType::release: return "release";
    case MessageType::ping: return "ping";
    case MessageType::announce: return "announce";
    case MessageType::store_call: return "store_call";
    case MessageType::store_part: return "store_part";
    case MessageType::store_rows: return "store_rows";
    case MessageType::store_reply: return "store_reply";
    case MessageType::checkpoint_soon: return "checkpoint_soon";
    case MessageType::forward: return "forward";
    case MessageType::forwarded: return "forwarded";
    case MessageType::forward_reply: return "forward_reply";
    case MessageType::acquired: return "acquired";
    case MessageType::limit: return "limit";
    case MessageType::permit_ask: return "permit_ask";
    case MessageType::permit_grant: return "permit_grant";
    case MessageType::permit_release: return "permit_release";
    case MessageType::pong: return "pong";
  }
  return "unknown";
}

std::vector<std::byte> encode(const Hello& m) { return Writer().text(m.token).text(m.worker).take(); }
std::vector<std::byte> encode(const Welcome& m) {
  return Writer().u32(m.shard_count).u32(m.lease_ttl_ms).text(m.http_token).take();
}
namespace {
void put_shards(Writer& writer, const std::vector<std::uint32_t>& shards) {
  writer.u32(static_cast<std::uint32_t>(shards.size()));
  for (auto shard : shards) writer.u32(shard);
}
bool get_shards(Reader& reader, std::vector<std::uint32_t>& shards) {
  std::uint32_t count = 0;
  if (!reader.u32(count)) return false;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t shard = 0;
    if (!reader.u32(shard)) return false;
    shards.push_back(shard);
  }
  return true;
}
}  // namespace

std::vector<std::byte> encode(const Acquire& m) {
  Writer writer;
  writer.u32(m.shards_max);
  put_shards(writer, m.shards);
  return writer.take();
}
std::vector<std::byte> encode(const Lease& m) { return Writer().u32(m.shard).u64(m.epoch).u64(m.durable_lsn).take(); }
std::vector<std::byte> encode(const Append& m) {
  return Writer().u32(m.shard).u64(m.epoch).u64(m.lsn).bytes(m.record).take();
}
std::vector<std::byte> encode(const Durable& m) { return Writer().u32(m.shard).u64(m.lsn).take(); }
std::vector<std::byte> encode(const Read& m) { return Writer().u32(m.shard).u64(m.epoch).u64(m.first_lsn).take(); }
std::vector<std::byte> encode(const RecordsChunk& m) {
  Writer writer;
  writer.u32(m.shard).u32(static_cast<std::uint32_t>(m.records.size()));
  for (const auto& [lsn, bytes] : m.records) writer.u64(lsn).bytes(bytes);
  return writer.take();
}
std::vector<std::byte> encode(const ReadEnd& m) { return Writer().u32(m.shard).take(); }
std::vector<std::byte> encode(const ErrorMessage& m) { return Writer().text(m.code).text(m.message).take(); }
std::vector<std::byte> encode(const Release& m) { return Writer().u32(m.shard).u64(m.epoch).take(); }

std::optional<Hello> decode_hello(std::span<const std::byte> p) {
  return decode_with<Hello>(p, [](Reader& r, Hello& m) { return r.text(m.token) && r.text(m.worker); });
}
std::optional<Welcome> decode_welcome(std::span<const std::byte> p) {
  // A server from before the HTTP token ends after the TTL.
  return decode_with<Welcome>(
      p, [](Reader& r, Welcome& m) { return r.u32(m.shard_count) && r.u32(m.lease_ttl_ms) && (r.done() || r.text(m.http_token)); });
}
std::optional<Acquire> decode_acquire(std::span<const std::byte> p) {
  return decode_with<Acquire>(p, [](Reader& r, Acquire& m) { return r.u32(m.shards_max) && get_shards(r, m.shards); });
}
std::optional<Lease> decode_lease(std::span<const std::byte> p) {
  return decode_with<Lease>(p, [](Reader& r, Lease& m) { return r.u32(m.shard) && r.u64(m.epoch) && r.u64(m.durable_lsn); });
}
std::optional<Append> decode_append(std::span<const std::byte> p) {
  return decode_with<Append>(
      p, [](Reader& r, Append& m) { return r.u32(m.shard) && r.u64(m.epoch) && r.u64(m.lsn) && r.bytes(m.record); });
}
std::optional<Durable> decode_durable(std::span<const std::byte> p) {
  return decode_with<Durable>(p, [](Reader& r, Durable& m) { return r.u32(m.shard) && r.u64(m.lsn); });
}
std::optional<Read> decode_read(std::span<const std::byte> p) {
  return decode_with<Read>(p, [](Reader& r, Read& m) { return r.u32(m.shard) && r.u64(m.epoch) && r.u64(m.first_lsn); });
}
std::optional<RecordsChunk> decode_records(std::span<const std::byte> p) {
  return decode_with<RecordsChunk>(p, [](Reader& r, RecordsChunk& m) {
    std::uint32_t count = 0;
    if (!r.u32(m.shard) || !r.u32(count)) return false;
    for (std::uint32_t i = 0; i < count; ++i) {
      std::uint64_t lsn = 0;
      std::vector<std::byte> bytes;
      if (!r.u64(lsn) || !r.bytes(bytes)) return false;
      m.records.emplace_back(lsn, std::move(bytes));
    }
    return true;
  });
}
std::optional<ReadEnd> decode_read_end(std::span<const std::byte> p) {
  return decode_with<ReadEnd>(p, [](Reader& r, ReadEnd& m) { return r.u32(m.shard); });
}
std::optional<ErrorMessage> decode_error(std::span<const std::byte> p) {
  return decode_with<ErrorMessage>(p, [](Reader& r, ErrorMessage& m) { return r.text(m.code) && r.text(m.message); });
}
std::vector<std::byte> encode(const Announce& m) { return Writer().text(m.http).take(); }
std::optional<Announce> decode_announce(std::span<const std::byte> p) {
  return decode_with<Announce>(p, [](Reader& r, Announce& m) { return r.text(m.http); });
}
std::optional<Release> decode_release(std::span<const std::byte> p) {
  return decode_with<Release>(p, [](Reader& r, Release& m) { return r.u32(m.shard) && r.u64(m.epoch); });
}
std::vector<std::byte> encode(const CheckpointSoon& m) {
  Writer writer;
  put_shards(writer, m.shards);
  return writer.take();
}
std::optional<CheckpointSoon> decode_checkpoint_soon(std::span<const std::byte> p) {
  return decode_with<CheckpointSoon>(p, [](Reader& r, CheckpointSoon& m) { return get_shards(r, m.shards); });
}
std::vector<std::byte> encode(const Acquired& m) { return Writer().u32(m.granted).take(); }
std::optional<Acquired> decode_acquired(std::span<const std::byte> p) {
  return decode_with<Acquired>(p, [](Reader& r, Acquired& m) { return r.u32(m.granted); });
}
std::vector<std::byte> encode(const Forward& m) { return Writer().u32(m.shard).bytes(m.body).take(); }
std::optional<Forward> decode_forward(std::span<const std::byte> p) {
  return decode_with<Forward>(p, [](Reader& r, Forward& m) { return r.u32(m.shard) && r.bytes(m.body); });
}
std::vector<std::byte> encode(const ForwardReply& m) {
  return Writer().u8(static_cast<std::uint8_t>(m.part)).bytes(m.body).take();
}
std::optional<ForwardReply> decode_forward_reply(std::span<const std::byte> p) {
  return decode_with<ForwardReply>(p, [](Reader& r, ForwardReply& m) {
    std::uint8_t part = 0;
    if (!r.u8(part) || part > static_cast<std::uint8_t>(ReplyPart::lost)) return false;
    m.part = static_cast<ReplyPart>(part);
    return r.bytes(m.body);
  });
}

std::vector<std::byte> encode(const Limit& m) {
  std::uint64_t bits = 0;
  static_assert(sizeof bits == sizeof m.per_second);
  std::memcpy(&bits, &m.per_second, sizeof bits);
  return Writer().text(m.name).u32(m.concurrent).u64(bits).take();
}
std::optional<Limit> decode_limit(std::span<const std::byte> p) {
  return decode_with<Limit>(p, [](Reader& r, Limit& m) {
    std::uint64_t bits = 0;
    if (!r.text(m.name) || !r.u32(m.concurrent) || !r.u64(bits)) return false;
    std::memcpy(&m.per_second, &bits, sizeof bits);
    return true;
  });
}
std::vector<std::byte> encode(const PermitAsk& m) {
  return Writer().text(m.name).u8(m.held ? 1 : 0).take();
}
std::optional<PermitAsk> decode_permit_ask(std::span<const std::byte> p) {
  return decode_with<PermitAsk>(p, [](Reader& r, PermitAsk& m) {
    std::uint8_t held = 0;
    if (!r.text(m.name) || !r.u8(held) || held > 1) return false;
    m.held = held == 1;
    return true;
  });
}

}  // namespace fusee::protocol
