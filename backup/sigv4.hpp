// AWS Signature Version 4 for S3 requests (docs/backup.md, "S3"): the
// canonical request, the string to sign and the Authorization header, as
// AWS's "Authenticating Requests (AWS Signature Version 4)" defines them.
// The hashes and MACs are OpenSSL's; this file only arranges their inputs.
// Pure functions: no clock, no network, so a test checks them against the
// worked example in AWS's documentation.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fusee::backup {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary credentials
};

struct SignedRequest {
  std::string method;  // "GET", "PUT", "HEAD"
  // The path as sent, already URI-encoded ("/bucket/prefix/name").
  std::string encoded_path;
  // Query parameters, not encoded; sorted and encoded when signed.
  std::vector<std::pair<std::string, std::string>> query;
  // Headers to sign, by lower-case name; must hold "host" and
  // "x-amz-date" (and "x-amz-content-sha256" for S3).
  std::map<std::string, std::string> headers;
  std::string payload_sha256_hex;
};

// Lower-case hex SHA-256 of the bytes.
std::string sha256_hex(std::span<const std::byte> bytes);
std::string sha256_hex(std::string_view text);

// RFC 3986 percent-encoding as SigV4 wants it: every byte but A-Z a-z 0-9
// - . _ ~ (and '/' when keep_slash) becomes %XX with upper-case hex.
std::string uri_encode(std::string_view text, bool keep_slash);

// The query string as sent and as signed: encoded pairs sorted by name.
std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query);

std::string canonical_request(const SignedRequest& request);

// amz_date: "20130524T000000Z"; service: "s3".
std::string string_to_sign(const SignedRequest& request, std::string_view amz_date, std::string_view region,
                           std::string_view service);

// The Authorization header's value.
std::string authorization(const SignedRequest& request, const AwsCredentials& credentials,
                          std::string_view amz_date, std::string_view region, std::string_view service);

}  // namespace fusee::backup
