// Writer and Reader: the protocol's field encoding (docs/server-protocol.md)
// -- little-endian integers, byte strings and text as a u32 length then the
// bytes. A Reader's calls return false on a payload too short for the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fusee::protocol {

// Text as bytes and back (a reason in a forward_reply, a forwarded call's JSON).
inline std::vector<std::byte> bytes_of(std::string_view text) {
  auto bytes = std::as_bytes(std::span(text));
  return {bytes.begin(), bytes.end()};
}
inline std::string text_of(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

class Writer {
 public:
  Writer& u8(std::uint8_t value) { return put(value, 1); }
  Writer& u32(std::uint32_t value) { return put(value, 4); }
  Writer& u64(std::uint64_t value) { return put(value, 8); }
  Writer& i64(std::int64_t value) { return put(static_cast<std::uint64_t>(value), 8); }
  Writer& bytes(std::span<const std::byte> data) {
    u32(static_cast<std::uint32_t>(data.size()));
    out_.insert(out_.end(), data.begin(), data.end());
    return *this;
  }
  Writer& text(const std::string& value) { return bytes(std::as_bytes(std::span(value))); }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  Writer& put(std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i) out_.push_back(static_cast<std::byte>(value >> (8 * i)));
    return *this;
  }
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool u8(std::uint8_t& value) {
    std::uint64_t wide = 0;
    if (!get(wide, 1)) return false;
    value = static_cast<std::uint8_t>(wide);
    return true;
  }
  bool u32(std::uint32_t& value) {
    std::uint64_t wide = 0;
    if (!get(wide, 4)) return false;
    value = static_cast<std::uint32_t>(wide);
    return true;
  }
  bool u64(std::uint64_t& value) { return get(value, 8); }
  bool i64(std::int64_t& value) {
    std::uint64_t wide = 0;
    if (!get(wide, 8)) return false;
    value = static_cast<std::int64_t>(wide);
    return true;
  }
  bool bytes(std::vector<std::byte>& value) {
    std::uint32_t length = 0;
    if (!u32(length) || in_.size() - at_ < length) return false;
    value.assign(in_.begin() + static_cast<std::ptrdiff_t>(at_),
                 in_.begin() + static_cast<std::ptrdiff_t>(at_ + length));
    at_ += length;
    return true;
  }
  bool text(std::string& value) {
    std::vector<std::byte> raw;
    if (!bytes(raw)) return false;
    value.assign(reinterpret_cast<const char*>(raw.data()), raw.size());
    return true;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  bool get(std::uint64_t& value, std::size_t width) {
    if (in_.size() - at_ < width) return false;
    value = 0;
    for (std::size_t i = 0; i < width; ++i) value |= std::uint64_t(std::to_integer<std::uint8_t>(in_[at_ + i])) << (8 * i);
    at_ += width;
    return true;
  }
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
};

// Decodes a whole payload: `fields` reads every field of a T; nothing when
// one is short or bytes are left over.
template <typename T, typename F>
std::optional<T> decode_with(std::span<const std::byte> payload, F fields) {
  Reader reader(payload);
  T value;
  if (!fields(reader, value) || !reader.done()) return std::nullopt;
  return value;
}

}  // namespace fusee::protocol
