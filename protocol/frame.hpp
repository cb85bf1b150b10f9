// Frames of the server protocol (docs/server-protocol.md): what a worker and
// `fusee server` exchange over a Unix socket or TCP. A frame is a small
// fixed header, then a type-specific payload; its CRC-32C covers everything
// after the length and the checksum themselves, so a frame damaged in
// transit or by a buggy peer is refused instead of acted on.
//
//   offset  bytes  field
//   0       4      length      u32 LE: bytes from offset 8 to the frame's end
//   4       4      crc         u32 LE: CRC-32C of those bytes
//   8       1      version     kProtocolVersion
//   9       1      type        the message (protocol/messages.hpp)
//   10      2      flags       0 (reserved)
//   12      8      request_id  u64 LE: chosen by the requester, echoed by the reply
//   20      ...    payload
//
// FrameDecoder reads frames out of a byte stream fed in pieces of any size.
// It refuses, with a reason, a frame longer than its maximum (as soon as the
// length arrives, before buffering the body), one shorter than the header,
// one whose checksum fails, one of another protocol version and one with
// reserved flags set. The connection is then to be closed: after a bad
// frame the stream cannot be trusted to be in step.
//
// Not thread-safe: one decoder per connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fusee::protocol {

// 2: acquire names shards; forwarded calls. 3: a finished run's kept journal
// (StoreOp::journal_of_finished) is engine/kept_journal.hpp's bytes, no
// longer JSON text: a worker of version 2 would show it as text. 4: a
// checkpoint's batch stores a run's journal records as one chunk
// (engine/run_store.cpp), which a server of version 3 would store but hand
// back as one record that does not decode. 5: the server answers a ping
// with a pong, and a worker that hears nothing for the lease TTL reconnects
// (a worker of version 4 would refuse the pong).
inline constexpr std::uint8_t kProtocolVersion = 5;
// The replicated log's wire between replicas (replica/replica_wire.hpp)
// rides the same frames with a version of its own, so that a change to the
// workers' protocol does not stop replicas of two builds from talking in a
// rolling upgrade.
inline constexpr std::uint8_t kReplicaWireVersion = 4;
inline constexpr std::size_t kFramePrefixBytes = 8;   // length + crc
inline constexpr std::size_t kFrameHeaderBytes = 20;  // prefix + version, type, flags, request id
// The largest frame a peer may send: a log batch's worth of records (64 MiB)
// plus room for its framing. Larger lengths are refused unread.
inline constexpr std::size_t kFrameBytesMax = (64u << 20) + (64u << 10);

struct Frame {
  std::uint8_t type = 0;
  std::uint64_t request_id = 0;
  std::vector<std::byte> payload;

  friend bool operator==(const Frame&, const Frame&) = default;
};

// The bytes of one frame; appended to `out`.
void encode_frame(std::uint8_t type, std::uint64_t request_id, std::span<const std::byte> payload,
                  std::vector<std::byte>& out, std::uint8_t version = kProtocolVersion);

class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t frame_bytes_max = kFrameBytesMax, std::uint8_t version = kProtocolVersion)
      : frame_bytes_max_(frame_bytes_max), version_(version) {}

  // Adds bytes read from the connection.
  void feed(std::span<const std::byte> bytes);
  // The next whole frame, or nothing (more bytes needed, or the stream was
  // refused: see error()).
  std::optional<Frame> next();
  // Why the stream was refused; empty while it is fine. Once set, next()
  // returns nothing more.
  const std::string& error() const { return error_; }
  // Bytes fed and not yet returned as frames.
  std::size_t buffered_bytes() const { return buffer_.size() - consumed_; }

 private:
  void refuse(std::string why);

  std::size_t frame_bytes_max_;
  std::uint8_t version_;  // the one version it takes
  std::vector<std::byte> buffer_;
  std::size_t consumed_ = 0;  // bytes of buffer_ already returned
  std::string error_;
};

}  // namespace fusee::protocol
