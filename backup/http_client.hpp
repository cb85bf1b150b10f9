// HttpClient: one HTTP(S) connection's worth of requests through libcurl's
// easy interface, for the S3 target (s3_target.hpp). It keeps the
// connection open between requests. Transport failures come back as
// error codes of curl_category() (curl's own texts); any HTTP status is a
// response, which the caller judges.
//
// Thread-compatible: one request at a time per client.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "base/result.hpp"

namespace fusee::backup {

const std::error_category& curl_category();

struct HttpRequest {
  std::string method;  // "GET", "PUT", "HEAD", "DELETE"
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::span<const std::byte> body;   // sent for PUT
};

struct HttpResponse {
  long status = 0;
  std::string body;
};

class HttpClient {
 public:
  HttpClient(std::chrono::milliseconds connect_timeout, std::chrono::milliseconds request_timeout);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  [[nodiscard]] Result<HttpResponse> perform(const HttpRequest& request);

 private:
  void* easy_;  // CURL*, kept out of the header
  std::chrono::milliseconds connect_timeout_;
  std::chrono::milliseconds request_timeout_;
};

}  // namespace fusee::backup
