#include "engine/awakeable_token.hpp"

#include <fmt/format.h>
#include <sys/random.h>

#include <array>
#include <charconv>
#include <system_error>

#include "fusee/error.hpp"

namespace fusee::engine {
namespace {

constexpr std::string_view kPrefix = "awk1";
constexpr std::size_t kSecretBytes = 16;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string to_hex(const unsigned char* bytes, std::size_t size) {
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) fmt::format_to(std::back_inserter(out), "{:02x}", bytes[i]);
  return out;
}

}  // namespace

std::string format_token(const AwakeableToken& token) {
  return fmt::format("{}.{}.{}.{}", kPrefix,
                     to_hex(reinterpret_cast<const unsigned char*>(token.run_id.data()), token.run_id.size()),
                     token.position, token.secret);
}

std::optional<AwakeableToken> parse_token(const std::string& text) {
  // Four parts separated by dots; none of them holds a dot.
  std::array<std::string_view, 4> parts;
  std::string_view rest = text;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto dot = rest.find('.');
    if (i + 1 < parts.size()) {
      if (dot == std::string_view::npos) return std::nullopt;
      parts[i] = rest.substr(0, dot);
      rest.remove_prefix(dot + 1);
    } else {
      if (dot != std::string_view::npos) return std::nullopt;
      parts[i] = rest;
    }
  }
  if (parts[0] != kPrefix || parts[1].empty() || parts[1].size() % 2 != 0) return std::nullopt;
  AwakeableToken token;
  for (std::size_t i = 0; i < parts[1].size(); i += 2) {
    int high = hex_digit(parts[1][i]);
    int low = hex_digit(parts[1][i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    token.run_id.push_back(static_cast<char>(high * 16 + low));
  }
  auto [end, error] = std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), token.position);
  if (error != std::errc() || end != parts[2].data() + parts[2].size() || parts[2].empty()) return std::nullopt;
  if (parts[3].size() != kSecretBytes * 2) return std::nullopt;
  for (char c : parts[3]) {
    if (hex_digit(c) < 0) return std::nullopt;
  }
  token.secret = std::string(parts[3]);
  return token;
}

std::string new_secret() {
  std::array<unsigned char, kSecretBytes> bytes{};
  std::size_t got = 0;
  while (got < bytes.size()) {
    auto n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(errc::storage, fmt::format("getrandom failed: {}", std::system_category().message(errno)));
    }
    got += static_cast<std::size_t>(n);
  }
  return to_hex(bytes.data(), bytes.size());
}

bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

}  // namespace fusee::engine
