// A small blocking HTTP client over Boost.Beast for the HTTP tests: one call
// per connection (call), raw bytes (raw), or one connection kept alive for
// several calls, pipelined or not (HttpClient). The bytes on the wire are
// the server's, parsed by Beast. Not thread-safe; one client per thread.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <map>
#include <string>

namespace fusee::testing {

namespace net = boost::asio;
namespace beast_http = boost::beast::http;

struct Reply {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
  bool keep_alive = false;
  boost::json::value json() const { return boost::json::parse(body); }
  std::string error() const { return std::string(boost::json::parse(body).at("error").as_string()); }
};

inline net::ip::tcp::endpoint endpoint_of(const std::string& text) {
  auto colon = text.rfind(':');
  return {net::ip::make_address(text.substr(0, colon)), static_cast<unsigned short>(std::stoi(text.substr(colon + 1)))};
}

inline beast_http::request<beast_http::string_body> make_request(beast_http::verb verb, const std::string& target,
                                                                 const std::string& body = {},
                                                                 const std::map<std::string, std::string>& headers = {}) {
  beast_http::request<beast_http::string_body> request{verb, target, 11};
  request.set(beast_http::field::host, "localhost");
  // A POST says it is JSON, body or not (the server refuses any other, as
  // a browser may send that cross-site); a test may say otherwise.
  if (!body.empty() || verb == beast_http::verb::post) request.set(beast_http::field::content_type, "application/json");
  for (const auto& [name, value] : headers) request.set(name, value);
  request.body() = body;
  request.prepare_payload();
  return request;
}

// One connection, kept alive across calls.
class HttpClient {
 public:
  explicit HttpClient(const std::string& endpoint) : socket_(io_) { socket_.connect(endpoint_of(endpoint)); }
  // From another local address (127.0.0.2: another peer, to the server).
  HttpClient(const std::string& endpoint, const std::string& from) : socket_(io_) {
    socket_.open(net::ip::tcp::v4());
    socket_.bind(net::ip::tcp::endpoint(net::ip::make_address(from), 0));
    socket_.connect(endpoint_of(endpoint));
  }
  // Whether the server closed the connection (waits for it, reading and
  // dropping whatever comes first).
  bool closed_by_server() {
    boost::system::error_code error;
    char chunk[4096];
    while (!error) (void)socket_.read_some(net::buffer(chunk), error);
    return error == net::error::eof || error == net::error::connection_reset;
  }

  Reply call(beast_http::verb verb, const std::string& target, const std::string& body = {},
             const std::map<std::string, std::string>& headers = {}) {
    auto request = make_request(verb, target, body, headers);
    beast_http::write(socket_, request);
    return read();
  }
  // Requests' bytes, as they are: several at once are pipelined.
  void send(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }
  // The next response on the connection; throws when it closes first.
  Reply read() {
    beast_http::response<beast_http::string_body> response;
    beast_http::read(socket_, buffer_, response);
    Reply reply;
    reply.status = response.result_int();
    reply.body = response.body();
    reply.keep_alive = response.keep_alive();
    for (const auto& field : response) reply.headers[std::string(field.name_string())] = std::string(field.value());
    return reply;
  }
  // Reads until the server closes the connection; what came before.
  std::string read_to_close() {
    std::string out(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(buffer_.size());
    boost::system::error_code error;
    char chunk[4096];
    for (;;) {
      auto got = socket_.read_some(net::buffer(chunk), error);
      if (error) break;
      out.append(chunk, got);
    }
    return out;
  }
  // Reads until `text` has come (or the connection closed); what came.
  std::string read_until(const std::string& text) {
    std::string out;
    boost::system::error_code error;
    char chunk[4096];
    while (out.find(text) == std::string::npos) {
      auto got = socket_.read_some(net::buffer(chunk), error);
      if (error) break;
      out.append(chunk, got);
    }
    return out;
  }

 private:
  net::io_context io_;
  net::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

// One call on a connection of its own.
inline Reply call(const std::string& endpoint, beast_http::verb verb, const std::string& target,
                  const std::string& body = {}, const std::map<std::string, std::string>& headers = {}) {
  return HttpClient(endpoint).call(verb, target, body, headers);
}

// Bytes that may not be HTTP; returns what came back before the close.
inline std::string raw(const std::string& endpoint, const std::string& bytes) {
  HttpClient client(endpoint);
  client.send(bytes);
  return client.read_to_close();
}

}  // namespace fusee::testing
