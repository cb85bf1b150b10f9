// A backup target in S3-compatible object storage (docs/backup.md, "S3"):
// AWS S3, or any server that speaks its API (MinIO, Ceph's radosgw,
// s3rver). Objects are <prefix>/<name> in one bucket, written with PUT
// (durable when the server answers 200), read with GET, listed with
// ListObjectsV2. Requests are signed with SigV4 (sigv4.hpp) and sent by
// libcurl (http_client.hpp).
//
// The address is s3://BUCKET[/PREFIX]; the rest comes from the variables
// the AWS tools read: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_REGION (or AWS_DEFAULT_REGION; us-east-1 when
// neither), and AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for a server other
// than AWS's. With an endpoint the bucket is in the path
// (http://host:port/bucket/key), as S3-compatible servers take it; without
// one, in the host name (https://bucket.s3.REGION.amazonaws.com/key).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "backup/backup_target.hpp"
#include "backup/sigv4.hpp"

namespace fusee::backup {

inline constexpr std::string_view kS3Scheme = "s3://";

struct S3Settings {
  std::string bucket;
  std::string prefix;    // no leading or trailing '/'; may be empty
  std::string endpoint;  // scheme and authority: "http://127.0.0.1:4568"
  bool path_style = true;
  std::string region = "us-east-1";
  AwsCredentials credentials;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{60000};
  // Attempts per request when the server or the network fails (5xx,
  // timeouts, refused connections); 4xx answers are not tried again.
  int attempts = 3;
};

bool is_s3_address(std::string_view address);

// Reads the settings for `address` (s3://BUCKET[/PREFIX]) from `getenv`
// (std::getenv in production). Fails with `problem` for a malformed address
// or endpoint, or missing credentials.
Result<S3Settings> s3_settings(std::string_view address, const std::function<const char*(const char*)>& getenv,
                               std::string* problem);

std::unique_ptr<BackupTarget> open_s3_target(S3Settings settings);

}  // namespace fusee::backup
