// Addresses of the server protocol and the HTTP API: "unix:PATH" (the
// protocol only) or "HOST:PORT", HOST an IPv4 or IPv6 literal ("[::1]"),
// or "localhost" (127.0.0.1). One parser for every place that takes one,
// and listening and connecting through Boost.Asio.
//
// listen_on and connect_to hand back the socket's descriptor: the hot path
// (server/log_service.cpp, remote/remote_sink.cpp) polls with the lease
// timeout, peeks, and sends without blocking from the log's thread, which
// Asio's synchronous calls do not offer (they retry a would-block, and
// take no timeout).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <string>

namespace fusee::protocol {

struct Address {
  bool unix_socket = false;
  std::string path;                     // unix_socket
  boost::asio::ip::tcp::endpoint tcp;   // otherwise
};

// `what` names the address in messages ("listen address"). Throws
// fusee::Error (invalid_argument) saying what is wrong.
Address parse_address(const std::string& text, const std::string& what, bool unix_allowed = true);

// A listening socket; `bound` is where it listens ("unix:PATH", or
// "HOST:PORT" with the port a port of 0 got). A stale socket file (one a
// dead server left) is replaced; any other file at PATH is refused. Throws
// fusee::Error.
int listen_on(const Address& address, const std::string& text, std::string& bound);

// A connected socket (TCP_NODELAY on TCP), or -1 with `problem` saying why.
int connect_to(const Address& address, const std::string& text, std::string& problem);

}  // namespace fusee::protocol
