#include "backup/http_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace fusee::backup {
namespace {

class CurlCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "curl"; }
  std::string message(int code) const override { return curl_easy_strerror(static_cast<CURLcode>(code)); }
};

std::error_code curl_error(CURLcode code) { return {static_cast<int>(code), curl_category()}; }

// curl_global_init is not thread-safe and must run once per process.
void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Upload {
  std::span<const std::byte> body;
  std::size_t sent = 0;
};

std::size_t read_body(char* out, std::size_t size, std::size_t count, void* context) {
  auto& upload = *static_cast<Upload*>(context);
  std::size_t n = std::min(size * count, upload.body.size() - upload.sent);
  std::memcpy(out, upload.body.data() + upload.sent, n);
  upload.sent += n;
  return n;
}

std::size_t write_body(char* in, std::size_t size, std::size_t count, void* context) {
  static_cast<std::string*>(context)->append(in, size * count);
  return size * count;
}

struct HeaderList {
  curl_slist* list = nullptr;
  ~HeaderList() { curl_slist_free_all(list); }
};

}  // namespace

const std::error_category& curl_category() {
  static const CurlCategory category;
  return category;
}

HttpClient::HttpClient(std::chrono::milliseconds connect_timeout, std::chrono::milliseconds request_timeout)
    : connect_timeout_(connect_timeout), request_timeout_(request_timeout) {
  init_curl_once();
  easy_ = curl_easy_init();
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(easy_)); }

Result<HttpResponse> HttpClient::perform(const HttpRequest& request) {
  auto* easy = static_cast<CURL*>(easy_);
  if (easy == nullptr) return curl_error(CURLE_FAILED_INIT);
  curl_easy_reset(easy);  // keeps the open connection, forgets the last request's options
  HeaderList headers;
  for (const auto& header : request.headers) {
    auto* grown = curl_slist_append(headers.list, header.c_str());
    if (grown == nullptr) return curl_error(CURLE_OUT_OF_MEMORY);
    headers.list = grown;
  }
  HttpResponse response;
  Upload upload{request.body};
  curl_easy_setopt(easy, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.list);
  // Threads of the engine call this: no signals for timeouts.
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout_.count()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(request_timeout_.count()));
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &response.body);
  if (request.method == "PUT") {
    curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(easy, CURLOPT_READFUNCTION, read_body);
    curl_easy_setopt(easy, CURLOPT_READDATA, &upload);
    curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method == "HEAD") {
    curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
  } else if (request.method != "GET") {
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  if (auto code = curl_easy_perform(easy); code != CURLE_OK) return curl_error(code);
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

}  // namespace fusee::backup
