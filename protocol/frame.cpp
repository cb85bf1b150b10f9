#include "protocol/frame.hpp"

#include <fmt/format.h>

#include "base/crc32c.hpp"

namespace fusee::protocol {
namespace {

void put_le(std::vector<std::byte>& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xff));
}

std::uint64_t get_le(std::span<const std::byte> in, int bytes) {
  std::uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | std::to_integer<std::uint64_t>(in[i]);
  return value;
}

}  // namespace

void encode_frame(std::uint8_t type, std::uint64_t request_id, std::span<const std::byte> payload,
                  std::vector<std::byte>& out, std::uint8_t version) {
  auto start = out.size();
  auto checked_bytes = kFrameHeaderBytes - kFramePrefixBytes + payload.size();
  put_le(out, checked_bytes, 4);
  put_le(out, 0, 4);  // the CRC, once the checked part is in place
  out.push_back(static_cast<std::byte>(version));
  out.push_back(static_cast<std::byte>(type));
  put_le(out, 0, 2);
  put_le(out, request_id, 8);
  out.insert(out.end(), payload.begin(), payload.end());
  auto crc = crc32c(std::span<const std::byte>(out).subspan(start + kFramePrefixBytes));
  for (int i = 0; i < 4; ++i) out[start + 4 + i] = static_cast<std::byte>((crc >> (8 * i)) & 0xff);
}

void FrameDecoder::feed(std::span<const std::byte> bytes) {
  if (!error_.empty()) return;
  // Drop what was returned before growing, so the buffer holds at most one
  // frame plus what arrived behind it.
  if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_));
    consumed_ = 0;
  }
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
}

void FrameDecoder::refuse(std::string why) {
  error_ = std::move(why);
  buffer_.clear();
  consumed_ = 0;
}

std::optional<Frame> FrameDecoder::next() {
  if (!error_.empty()) return std::nullopt;
  auto pending = std::span<const std::byte>(buffer_).subspan(consumed_);
  if (pending.size() < kFramePrefixBytes) return std::nullopt;
  auto checked_bytes = get_le(pending, 4);
  auto frame_bytes = kFramePrefixBytes + checked_bytes;
  if (frame_bytes > frame_bytes_max_) {
    refuse(fmt::format("a frame of {} bytes is larger than the {} allowed", frame_bytes, frame_bytes_max_));
    return std::nullopt;
  }
  if (frame_bytes < kFrameHeaderBytes) {
    refuse(fmt::format("a frame of {} bytes is shorter than its {}-byte header", frame_bytes, kFrameHeaderBytes));
    return std::nullopt;
  }
  if (pending.size() < frame_bytes) return std::nullopt;
  auto checked = pending.subspan(kFramePrefixBytes, checked_bytes);
  auto crc = static_cast<std::uint32_t>(get_le(pending.subspan(4), 4));
  if (crc32c(checked) != crc) {
    refuse(fmt::format("a frame of {} bytes fails its checksum", frame_bytes));
    return std::nullopt;
  }
  auto version = std::to_integer<std::uint8_t>(checked[0]);
  if (version != version_) {
    refuse(fmt::format("a frame of protocol version {}; this end speaks version {}", version, version_));
    return std::nullopt;
  }
  if (get_le(checked.subspan(2), 2) != 0) {
    refuse("a frame with reserved flags set");
    return std::nullopt;
  }
  Frame frame;
  frame.type = std::to_integer<std::uint8_t>(checked[1]);
  frame.request_id = get_le(checked.subspan(4), 8);
  auto payload = checked.subspan(kFrameHeaderBytes - kFramePrefixBytes);
  frame.payload.assign(payload.begin(), payload.end());
  consumed_ += frame_bytes;
  return frame;
}

}  // namespace fusee::protocol
