#include "protocol/address.hpp"

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "fusee/error.hpp"

namespace fusee::protocol {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;

// The largest path a Unix socket address holds (sun_path, with its NUL).
constexpr std::size_t kSocketPathMax = 107;

// Asio opens sockets without close-on-exec; a worker process the demo
// spawns must not inherit the server's socket (it would keep it open after
// the server closed it).
int keep_from_children(int fd) {
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

}  // namespace

Address parse_address(const std::string& text, const std::string& what, bool unix_allowed) {
  Address address;
  if (text.starts_with("unix:")) {
    if (!unix_allowed) throw Error(errc::invalid_argument, fmt::format("{} '{}': expected HOST:PORT", what, text));
    address.unix_socket = true;
    address.path = text.substr(5);
    if (address.path.empty() || address.path.size() > kSocketPathMax) {
      throw Error(errc::invalid_argument,
                  fmt::format("{} '{}': the socket path is empty or longer than {} bytes", what, text, kSocketPathMax));
    }
    return address;
  }
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    throw Error(errc::invalid_argument, fmt::format("{} '{}': expected {}HOST:PORT", what, text,
                                                    unix_allowed ? "unix:PATH or " : ""));
  }
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "localhost") host = "127.0.0.1";
  boost::system::error_code error;
  auto ip = asio::ip::make_address(host, error);
  if (error) {
    throw Error(errc::invalid_argument,
                fmt::format("{} '{}': '{}' is not an IP address ({})", what, text, host, error.message()));
  }
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1 || port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    throw Error(errc::invalid_argument, fmt::format("{} '{}': the port must be 0 to 65535", what, text));
  }
  address.tcp = tcp::endpoint(ip, static_cast<unsigned short>(port));
  return address;
}

int listen_on(const Address& address, const std::string& text, std::string& bound) {
  asio::io_context io;
  boost::system::error_code error;
  auto refuse = [&](const boost::system::error_code& why) {
    return Error(errc::storage, fmt::format("cannot listen on {}: {}", text, why.message()));
  };
  if (address.unix_socket) {
    struct stat existing {};
    if (::stat(address.path.c_str(), &existing) == 0) {
      // A socket left by a server that died; anything else is not ours to remove.
      if (!S_ISSOCK(existing.st_mode)) {
        throw Error(errc::invalid_argument, fmt::format("listen address '{}': {} exists and is not a socket", text,
                                                        address.path));
      }
      ::unlink(address.path.c_str());
    }
    local::acceptor acceptor(io);
    local::endpoint endpoint(address.path);
    acceptor.open(endpoint.protocol(), error);
    if (!error) acceptor.bind(endpoint, error);
    if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
    if (error) throw refuse(error);
    bound = text;
    return keep_from_children(acceptor.release());
  }
  tcp::acceptor acceptor(io);
  acceptor.open(address.tcp.protocol(), error);
  if (!error) acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(address.tcp, error);
  if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) throw refuse(error);
  auto where = acceptor.local_endpoint(error);
  if (error) throw refuse(error);
  auto host = where.address().to_string();
  if (where.address().is_v6()) host = "[" + host + "]";
  bound = fmt::format("{}:{}", host, where.port());
  return keep_from_children(acceptor.release());
}

int connect_to(const Address& address, const std::string& text, std::string& problem) {
  asio::io_context io;
  boost::system::error_code error;
  if (address.unix_socket) {
    local::socket socket(io);
    socket.connect(local::endpoint(address.path), error);
    if (error) {
      problem = fmt::format("cannot connect to {}: {}", text, error.message());
      return -1;
    }
    return keep_from_children(socket.release());
  }
  tcp::socket socket(io);
  socket.connect(address.tcp, error);
  if (!error) socket.set_option(tcp::no_delay(true), error);
  if (error) {
    problem = fmt::format("cannot connect to {}: {}", text, error.message());
    return -1;
  }
  return keep_from_children(socket.release());
}

}  // namespace fusee::protocol
