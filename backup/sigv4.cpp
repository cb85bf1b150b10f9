#include "backup/sigv4.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>

namespace fusee::backup {
namespace {

using Digest = std::array<unsigned char, 32>;

std::string hex(std::span<const unsigned char> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (auto b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

Digest sha256(const void* data, std::size_t size) {
  Digest out{};
  unsigned int length = 0;
  // EVP_Digest fails only on allocation failure inside OpenSSL; a digest of
  // zeros then signs nothing valid, and the server refuses the request.
  (void)EVP_Digest(data, size, out.data(), &length, EVP_sha256(), nullptr);
  return out;
}

Digest hmac(std::span<const unsigned char> key, std::string_view text) {
  Digest out{};
  unsigned int length = 0;
  (void)HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
             reinterpret_cast<const unsigned char*>(text.data()), text.size(), out.data(), &length);
  return out;
}

std::string_view date_of(std::string_view amz_date) { return amz_date.substr(0, 8); }

std::string signed_header_names(const SignedRequest& request) {
  std::string out;
  for (const auto& [name, value] : request.headers) {
    if (!out.empty()) out += ';';
    out += name;
  }
  return out;
}

std::string trimmed(std::string_view value) {
  auto begin = value.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  auto end = value.find_last_not_of(" \t");
  // Inner runs of spaces become one, as the canonical form asks.
  std::string out;
  bool space = false;
  for (char c : value.substr(begin, end - begin + 1)) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string scope(std::string_view amz_date, std::string_view region, std::string_view service) {
  return fmt::format("{}/{}/{}/aws4_request", date_of(amz_date), region, service);
}

}  // namespace

std::string sha256_hex(std::span<const std::byte> bytes) { return hex(sha256(bytes.data(), bytes.size())); }

std::string sha256_hex(std::string_view text) { return hex(sha256(text.data(), text.size())); }

std::string uri_encode(std::string_view text, bool keep_slash) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    bool plain = (u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || u == '-' ||
                 u == '.' || u == '_' || u == '~' || (keep_slash && u == '/');
    if (plain) {
      out += c;
    } else {
      out += fmt::format("%{:02X}", u);
    }
  }
  return out;
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) encoded.emplace_back(uri_encode(name, false), uri_encode(value, false));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name + '=' + value;
  }
  return out;
}

std::string canonical_request(const SignedRequest& request) {
  std::string headers;
  for (const auto& [name, value] : request.headers) headers += name + ':' + trimmed(value) + '\n';
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}", request.method, request.encoded_path, canonical_query(request.query),
                     headers, signed_header_names(request), request.payload_sha256_hex);
}

std::string string_to_sign(const SignedRequest& request, std::string_view amz_date, std::string_view region,
                           std::string_view service) {
  return fmt::format("AWS4-HMAC-SHA256\n{}\n{}\n{}", amz_date, scope(amz_date, region, service),
                     sha256_hex(canonical_request(request)));
}

std::string authorization(const SignedRequest& request, const AwsCredentials& credentials,
                          std::string_view amz_date, std::string_view region, std::string_view service) {
  std::string secret = "AWS4" + credentials.secret_access_key;
  auto key = hmac(std::span(reinterpret_cast<const unsigned char*>(secret.data()), secret.size()), date_of(amz_date));
  key = hmac(key, region);
  key = hmac(key, service);
  key = hmac(key, "aws4_request");
  auto signature = hmac(key, string_to_sign(request, amz_date, region, service));
  return fmt::format("AWS4-HMAC-SHA256 Credential={}/{}, SignedHeaders={}, Signature={}", credentials.access_key_id,
                     scope(amz_date, region, service), signed_header_names(request), hex(signature));
}

}  // namespace fusee::backup
