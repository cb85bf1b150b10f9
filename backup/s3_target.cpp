#include "backup/s3_target.hpp"

#include <fmt/format.h>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <ctime>
#include <mutex>
#include <sstream>
#include <thread>

#include "backup/http_client.hpp"

namespace fusee::backup {
namespace {

// What an S3 server's error answer says, as error codes: the well-known S3
// error codes by name, any other status as "HTTP <status>".
enum class S3Errc {
  access_denied = 1001,
  no_such_bucket,
  signature_mismatch,
  invalid_access_key,
  malformed_listing,
};

class S3Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "s3"; }
  std::string message(int code) const override {
    switch (static_cast<S3Errc>(code)) {
      case S3Errc::access_denied: return "S3 AccessDenied: the credentials may not do this in the bucket";
      case S3Errc::no_such_bucket: return "S3 NoSuchBucket: the bucket does not exist (make it first)";
      case S3Errc::signature_mismatch:
        return "S3 SignatureDoesNotMatch: check AWS_SECRET_ACCESS_KEY and AWS_REGION";
      case S3Errc::invalid_access_key: return "S3 InvalidAccessKeyId: the server does not know AWS_ACCESS_KEY_ID";
      case S3Errc::malformed_listing: return "S3: a listing that does not read as ListObjectsV2's XML";
    }
    return fmt::format("HTTP {} from the S3 server", code);
  }
};

const std::error_category& s3_category() {
  static const S3Category category;
  return category;
}

std::error_code s3_error(S3Errc code) { return {static_cast<int>(code), s3_category()}; }

// The error a non-2xx answer stands for: its <Error><Code> when it names one
// we explain, else its status.
std::error_code answer_error(const HttpResponse& response) {
  boost::property_tree::ptree tree;
  try {
    std::istringstream in(response.body);
    boost::property_tree::read_xml(in, tree);
  } catch (const boost::property_tree::xml_parser_error&) {
    return {static_cast<int>(response.status), s3_category()};  // a HEAD's, or not S3's XML
  }
  const auto code = tree.get<std::string>("Error.Code", "");
  if (code == "AccessDenied") return s3_error(S3Errc::access_denied);
  if (code == "NoSuchBucket") return s3_error(S3Errc::no_such_bucket);
  if (code == "SignatureDoesNotMatch") return s3_error(S3Errc::signature_mismatch);
  if (code == "InvalidAccessKeyId") return s3_error(S3Errc::invalid_access_key);
  return {static_cast<int>(response.status), s3_category()};
}

std::string amz_date_now() {
  auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[17];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

class S3Target final : public BackupTarget {
 public:
  explicit S3Target(S3Settings settings)
      : settings_(std::move(settings)), http_(settings_.connect_timeout, settings_.request_timeout) {
    auto authority = settings_.endpoint.substr(settings_.endpoint.find("://") + 3);
    scheme_ = settings_.endpoint.substr(0, settings_.endpoint.find("://"));
    host_ = settings_.path_style ? authority : settings_.bucket + "." + authority;
  }

  Result<void> put(const std::string& name, std::span<const std::byte> bytes) override {
    auto answer = FUSEE_TRY(send("PUT", object_path(name), {}, bytes, {}));
    if (answer.status / 100 != 2) return answer_error(answer);
    return ok();
  }

  Result<bool> put_new(const std::string& name, std::span<const std::byte> bytes) override {
    // HEAD first, for servers that ignore If-None-Match; the header makes
    // it atomic where the server honours it (AWS S3 does).
    using Out = Result<bool>;
    auto head = send("HEAD", object_path(name), {}, {}, {});
    if (!head) return Out(boost::system::in_place_error, head.error());
    if (head->status == 200) return false;
    if (head->status != 404) return Out(boost::system::in_place_error, answer_error(*head));
    auto answer = send("PUT", object_path(name), {}, bytes, {"If-None-Match: *"});
    if (!answer) return Out(boost::system::in_place_error, answer.error());
    if (answer->status == 412) return false;
    if (answer->status / 100 != 2) return Out(boost::system::in_place_error, answer_error(*answer));
    return true;
  }

  Result<std::optional<std::vector<std::byte>>> get(const std::string& name) override {
    using Out = std::optional<std::vector<std::byte>>;
    auto answer = FUSEE_TRY(send("GET", object_path(name), {}, {}, {}));
    if (answer.status != 200) {
      auto error = answer_error(answer);
      if (answer.status == 404 && error != s3_error(S3Errc::no_such_bucket)) return Out();  // NoSuchKey
      return Result<Out>(boost::system::in_place_error, error);
    }
    auto* data = reinterpret_cast<const std::byte*>(answer.body.data());
    return Out(std::vector<std::byte>(data, data + answer.body.size()));
  }

  Result<void> remove(const std::string& name) override {
    // 204 when deleted, and for a key that is not there (S3 answers so).
    auto answer = FUSEE_TRY(send("DELETE", object_path(name), {}, {}, {}));
    if (answer.status / 100 != 2 && answer.status != 404) return answer_error(answer);
    if (answer.status == 404 && answer_error(answer) == s3_error(S3Errc::no_such_bucket)) return answer_error(answer);
    return ok();
  }

  Result<std::vector<std::string>> list(const std::string& prefix) override {
    std::vector<std::string> names;
    std::string token;
    const auto key_prefix = key(prefix);
    for (;;) {
      std::vector<std::pair<std::string, std::string>> query{{"list-type", "2"}, {"prefix", key_prefix}};
      if (!token.empty()) query.emplace_back("continuation-token", token);
      auto answer = FUSEE_TRY(send("GET", bucket_path(), query, {}, {}));
      if (answer.status != 200) return answer_error(answer);
      boost::property_tree::ptree tree;
      try {
        std::istringstream in(answer.body);
        boost::property_tree::read_xml(in, tree);
      } catch (const boost::property_tree::xml_parser_error&) {
        return s3_error(S3Errc::malformed_listing);
      }
      auto result = tree.get_child_optional("ListBucketResult");
      if (!result) return s3_error(S3Errc::malformed_listing);
      for (const auto& [tag, child] : *result) {
        if (tag != "Contents") continue;
        auto object_key = child.get<std::string>("Key", "");
        if (!object_key.starts_with(key_prefix)) return s3_error(S3Errc::malformed_listing);
        names.push_back(settings_.prefix.empty() ? object_key : object_key.substr(settings_.prefix.size() + 1));
      }
      token = result->get<std::string>("NextContinuationToken", "");
      if (result->get<std::string>("IsTruncated", "false") != "true" || token.empty()) break;
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string describe() const override {
    return fmt::format("s3://{}{}{} at {}", settings_.bucket, settings_.prefix.empty() ? "" : "/", settings_.prefix,
                       settings_.endpoint);
  }

 private:
  std::string key(const std::string& name) const {
    return settings_.prefix.empty() ? name : settings_.prefix + "/" + name;
  }
  std::string bucket_path() const { return settings_.path_style ? "/" + uri_encode(settings_.bucket, false) : "/"; }
  std::string object_path(const std::string& name) const {
    auto encoded = uri_encode(key(name), true);
    return settings_.path_style ? "/" + uri_encode(settings_.bucket, false) + "/" + encoded : "/" + encoded;
  }

  // One request, signed afresh for each attempt (the date is in the
  // signature); tried again after a transport failure or a 5xx answer.
  Result<HttpResponse> send(const std::string& method, const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& query,
                            std::span<const std::byte> body, const std::vector<std::string>& extra_headers) {
    std::lock_guard lock(mu_);
    const auto payload_hash = sha256_hex(body);
    Result<HttpResponse> last = std::make_error_code(std::errc::io_error);
    for (int attempt = 0; attempt < std::max(1, settings_.attempts); ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100) * (1 << (2 * (attempt - 1))));
      SignedRequest signed_request{method, path, query, {}, payload_hash};
      const auto date = amz_date_now();
      signed_request.headers["host"] = host_;
      signed_request.headers["x-amz-content-sha256"] = payload_hash;
      signed_request.headers["x-amz-date"] = date;
      if (!settings_.credentials.session_token.empty()) {
        signed_request.headers["x-amz-security-token"] = settings_.credentials.session_token;
      }
      HttpRequest request;
      request.method = method;
      auto query_text = canonical_query(query);
      request.url = fmt::format("{}://{}{}{}{}", scheme_, host_, path, query_text.empty() ? "" : "?", query_text);
      for (const auto& [name, value] : signed_request.headers) request.headers.push_back(name + ": " + value);
      request.headers.push_back("Authorization: " + authorization(signed_request, settings_.credentials, date,
                                                                  settings_.region, "s3"));
      request.headers.emplace_back("Content-Type: application/octet-stream");
      request.headers.emplace_back("Expect:");  // no 100-continue round trip
      for (const auto& header : extra_headers) request.headers.push_back(header);
      request.body = body;
      last = http_.perform(request);
      if (last && last->status < 500) return last;
    }
    return last;
  }

  S3Settings settings_;
  std::string scheme_;
  std::string host_;
  std::mutex mu_;  // one request at a time on the connection
  HttpClient http_;
};

bool good_bucket(std::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  return std::all_of(bucket.begin(), bucket.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'; });
}

}  // namespace

bool is_s3_address(std::string_view address) { return address.starts_with(kS3Scheme); }

Result<S3Settings> s3_settings(std::string_view address, const std::function<const char*(const char*)>& getenv,
                               std::string* problem) {
  auto refuse = [&](std::string why) {
    if (problem) *problem = std::move(why);
    return Result<S3Settings>(boost::system::in_place_error, std::make_error_code(std::errc::invalid_argument));
  };
  auto env = [&](const char* name) -> std::string {
    const char* value = getenv(name);
    return value ? value : "";
  };
  if (!is_s3_address(address)) return refuse(fmt::format("{}: not an s3://BUCKET[/PREFIX] address", address));
  S3Settings settings;
  auto rest = address.substr(kS3Scheme.size());
  auto slash = rest.find('/');
  settings.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) {
    auto prefix = rest.substr(slash + 1);
    while (prefix.ends_with('/')) prefix.remove_suffix(1);
    settings.prefix = std::string(prefix);
  }
  if (!good_bucket(settings.bucket)) {
    return refuse(fmt::format("{}: '{}' is not a bucket name (3 to 63 of a-z, 0-9, '-' and '.')", address,
                              settings.bucket));
  }
  if (settings.prefix.starts_with('/') || settings.prefix.find("//") != std::string::npos) {
    return refuse(fmt::format("{}: the prefix has an empty part", address));
  }
  settings.credentials.access_key_id = env("AWS_ACCESS_KEY_ID");
  settings.credentials.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
  settings.credentials.session_token = env("AWS_SESSION_TOKEN");
  if (settings.credentials.access_key_id.empty() || settings.credentials.secret_access_key.empty()) {
    return refuse(fmt::format("{}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the S3 target", address));
  }
  if (auto region = env("AWS_REGION"); !region.empty()) {
    settings.region = region;
  } else if (auto fallback = env("AWS_DEFAULT_REGION"); !fallback.empty()) {
    settings.region = fallback;
  }
  auto endpoint = env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL");
  if (endpoint.empty()) {
    settings.endpoint = fmt::format("https://s3.{}.amazonaws.com", settings.region);
    settings.path_style = false;
  } else {
    while (endpoint.ends_with('/')) endpoint.pop_back();
    auto scheme_end = endpoint.find("://");
    auto scheme = scheme_end == std::string::npos ? "" : endpoint.substr(0, scheme_end);
    if ((scheme != "http" && scheme != "https") || endpoint.size() == scheme_end + 3 ||
        endpoint.find('/', scheme_end + 3) != std::string::npos) {
      return refuse(fmt::format("AWS_ENDPOINT_URL={}: give http://HOST[:PORT] or https://HOST[:PORT]", endpoint));
    }
    settings.endpoint = endpoint;
    settings.path_style = true;
  }
  return settings;
}

std::unique_ptr<BackupTarget> open_s3_target(S3Settings settings) {
  return std::make_unique<S3Target>(std::move(settings));
}

}  // namespace fusee::backup
