// The S3 target's parts that need no server (backup/sigv4.hpp,
// backup/s3_target.hpp): SigV4 against the worked examples of AWS's
// "Authenticating Requests (AWS Signature Version 4)" S3 documentation, and
// the reading of an s3:// address and the AWS_* variables. The target
// against a real S3-compatible server is tests/backup_s3_test.sh.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "backup/s3_target.hpp"
#include "backup/sigv4.hpp"

using namespace fusee;

namespace {

const backup::AwsCredentials kExampleCredentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
const std::string kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

backup::SignedRequest example(std::string method, std::string path) {
  backup::SignedRequest request;
  request.method = std::move(method);
  request.encoded_path = std::move(path);
  request.headers["host"] = "examplebucket.s3.amazonaws.com";
  request.headers["x-amz-date"] = "20130524T000000Z";
  request.headers["x-amz-content-sha256"] = kEmptySha256;
  request.payload_sha256_hex = kEmptySha256;
  return request;
}

std::string signature_of(const std::string& authorization) {
  return authorization.substr(authorization.find("Signature=") + 10);
}

}  // namespace

TEST_CASE("sigv4: the hashes and the encoding the signature is made of") {
  CHECK(backup::sha256_hex(std::string_view()) == kEmptySha256);
  CHECK(backup::sha256_hex(std::string_view("Welcome to Amazon S3.")) ==
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  CHECK(backup::uri_encode("a/b c$~", true) == "a/b%20c%24~");
  CHECK(backup::uri_encode("a/b", false) == "a%2Fb");
  CHECK(backup::canonical_query({{"prefix", "J"}, {"max-keys", "2"}}) == "max-keys=2&prefix=J");
  CHECK(backup::canonical_query({{"prefix", "p/manifest-"}, {"list-type", "2"}}) == "list-type=2&prefix=p%2Fmanifest-");
}

TEST_CASE("sigv4: AWS's GET Object example (a Range header signed)") {
  auto request = example("GET", "/test.txt");
  request.headers["range"] = "bytes=0-9";
  CHECK(backup::canonical_request(request) ==
        "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(backup::string_to_sign(request, "20130524T000000Z", "us-east-1", "s3") ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  auto authorization = backup::authorization(request, kExampleCredentials, "20130524T000000Z", "us-east-1", "s3");
  CHECK(authorization ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST_CASE("sigv4: AWS's PUT Object and list examples") {
  SUBCASE("PUT, with a Date and a storage class signed") {
    auto request = example("PUT", "/" + backup::uri_encode("test$file.text", true));
    request.headers["date"] = "Fri, 24 May 2013 00:00:00 GMT";
    request.headers["x-amz-storage-class"] = "REDUCED_REDUNDANCY";
    request.headers["x-amz-content-sha256"] = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
    request.payload_sha256_hex = request.headers["x-amz-content-sha256"];
    CHECK(signature_of(backup::authorization(request, kExampleCredentials, "20130524T000000Z", "us-east-1", "s3")) ==
          "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
  }
  SUBCASE("a bucket listing, its query sorted") {
    auto request = example("GET", "/");
    request.query = {{"prefix", "J"}, {"max-keys", "2"}};
    CHECK(signature_of(backup::authorization(request, kExampleCredentials, "20130524T000000Z", "us-east-1", "s3")) ==
          "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
  }
  SUBCASE("another secret, another signature") {
    auto request = example("GET", "/");
    auto other = kExampleCredentials;
    other.secret_access_key += "x";
    CHECK(signature_of(backup::authorization(request, other, "20130524T000000Z", "us-east-1", "s3")) !=
          signature_of(backup::authorization(request, kExampleCredentials, "20130524T000000Z", "us-east-1", "s3")));
  }
}

TEST_CASE("s3 target: the address and the AWS variables") {
  std::map<std::string, std::string> env{{"AWS_ACCESS_KEY_ID", "key"}, {"AWS_SECRET_ACCESS_KEY", "secret"}};
  auto getenv = [&](const char* name) -> const char* {
    auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
  };
  std::string problem;
  SUBCASE("AWS itself: the bucket in the host name, the region's endpoint") {
    env["AWS_DEFAULT_REGION"] = "eu-west-3";
    auto settings = backup::s3_settings("s3://my-bucket/backups/orders/", getenv, &problem);
    REQUIRE(settings.has_value());
    CHECK(settings->bucket == "my-bucket");
    CHECK(settings->prefix == "backups/orders");
    CHECK(settings->region == "eu-west-3");
    CHECK(settings->endpoint == "https://s3.eu-west-3.amazonaws.com");
    CHECK_FALSE(settings->path_style);
    CHECK(settings->credentials.access_key_id == "key");
  }
  SUBCASE("an S3-compatible server: its endpoint, the bucket in the path") {
    env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000/";
    env["AWS_REGION"] = "local";
    env["AWS_SESSION_TOKEN"] = "token";
    auto settings = backup::s3_settings("s3://fusee", getenv, &problem);
    REQUIRE(settings.has_value());
    CHECK(settings->prefix.empty());
    CHECK(settings->endpoint == "http://127.0.0.1:9000");
    CHECK(settings->path_style);
    CHECK(settings->region == "local");
    CHECK(settings->credentials.session_token == "token");
    env["AWS_ENDPOINT_URL_S3"] = "https://s3.example.net";
    CHECK(backup::s3_settings("s3://fusee", getenv, &problem)->endpoint == "https://s3.example.net");
  }
  SUBCASE("refused, saying why") {
    CHECK_FALSE(backup::s3_settings("s3://", getenv, &problem).has_value());
    CHECK(problem.find("not a bucket name") != std::string::npos);
    CHECK_FALSE(backup::s3_settings("s3://Upper_Case", getenv, &problem).has_value());
    CHECK_FALSE(backup::s3_settings("s3://bucket//x", getenv, &problem).has_value());
    CHECK(problem.find("empty part") != std::string::npos);
    CHECK_FALSE(backup::s3_settings("/mnt/backup", getenv, &problem).has_value());
    env["AWS_ENDPOINT_URL"] = "127.0.0.1:9000";
    CHECK_FALSE(backup::s3_settings("s3://bucket", getenv, &problem).has_value());
    CHECK(problem.find("AWS_ENDPOINT_URL") != std::string::npos);
    env["AWS_ENDPOINT_URL"] = "http://host/path";
    CHECK_FALSE(backup::s3_settings("s3://bucket", getenv, &problem).has_value());
    env.erase("AWS_SECRET_ACCESS_KEY");
    CHECK_FALSE(backup::s3_settings("s3://bucket", getenv, &problem).has_value());
    CHECK(problem.find("AWS_SECRET_ACCESS_KEY") != std::string::npos);
  }
}
