// The partition proxy (tcp_proxy.hpp): bytes flow; a cut direction holds
// them, in order, until healed, while the other direction flows; a new
// connection across a cut forward direction is not made until healed; reset
// ends every connection.
#include <doctest/doctest.h>

#include <poll.h>

#include <boost/asio.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "tests/support/tcp_proxy.hpp"

namespace fusee::testing {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

std::string read_exactly(tcp::socket& socket, std::size_t bytes) {
  std::string text(bytes, '\0');
  net::read(socket, net::buffer(text));
  return text;
}

// Whether bytes arrive within a while: a cut must hold them (a wait, not a
// timing claim: any bytes at all would be wrong).
bool arrives(tcp::socket& socket) {
  pollfd ready{socket.native_handle(), POLLIN, 0};
  return ::poll(&ready, 1, 150) > 0 && socket.available() > 0;
}

TEST_SUITE("unit") {
  TEST_CASE("tcp proxy: each direction cut on its own, held bytes delivered in order once healed") {
    net::io_context io;
    tcp::acceptor target(io, {net::ip::make_address("127.0.0.1"), 0});
    TcpProxy proxy("127.0.0.1", target.local_endpoint().port());

    tcp::socket client(io);
    client.connect({net::ip::make_address("127.0.0.1"), proxy.port()});
    tcp::socket server(io);
    target.accept(server);

    net::write(client, net::buffer(std::string("hello")));
    CHECK(read_exactly(server, 5) == "hello");
    net::write(server, net::buffer(std::string("world")));
    CHECK(read_exactly(client, 5) == "world");

    // Forward cut: the client's bytes wait; the server's still come.
    proxy.cut(true, false);
    net::write(client, net::buffer(std::string("ping-1")));
    net::write(client, net::buffer(std::string("ping-2")));
    CHECK_FALSE(arrives(server));
    net::write(server, net::buffer(std::string("pong")));
    CHECK(read_exactly(client, 4) == "pong");
    proxy.heal();
    CHECK(read_exactly(server, 12) == "ping-1ping-2");

    // Backward cut: the other way round.
    proxy.cut(false, true);
    net::write(server, net::buffer(std::string("late")));
    CHECK_FALSE(arrives(client));
    net::write(client, net::buffer(std::string("still")));
    CHECK(read_exactly(server, 5) == "still");
    proxy.heal();
    CHECK(read_exactly(client, 4) == "late");
    CHECK(proxy.bytes_forward() == 5 + 12 + 5);
    CHECK(proxy.bytes_backward() == 5 + 4 + 4);
  }

  TEST_CASE("tcp proxy: a connection across a cut is made once healed; reset ends every connection") {
    net::io_context io;
    tcp::acceptor target(io, {net::ip::make_address("127.0.0.1"), 0});
    target.non_blocking(true);
    TcpProxy proxy("127.0.0.1", target.local_endpoint().port());

    proxy.cut(true, true);
    tcp::socket client(io);
    client.connect({net::ip::make_address("127.0.0.1"), proxy.port()});
    // Across the cut no connection reaches the target (a wait with a
    // deadline: any connection at all would be wrong).
    pollfd pending{target.native_handle(), POLLIN, 0};
    CHECK(::poll(&pending, 1, 150) == 0);
    tcp::socket server(io);
    boost::system::error_code error;
    target.accept(server, error);
    CHECK(error == net::error::would_block);

    proxy.heal();
    // The connection made onward once healed: wait for it on the acceptor.
    pollfd ready{target.native_handle(), POLLIN, 0};
    REQUIRE(::poll(&ready, 1, 5000) == 1);
    target.accept(server, error);
    REQUIRE(server.is_open());
    server.non_blocking(false);
    net::write(client, net::buffer(std::string("after")));
    CHECK(read_exactly(server, 5) == "after");
    CHECK(proxy.connections() == 1);

    proxy.reset();
    char byte = 0;
    client.read_some(net::buffer(&byte, 1), error);
    CHECK((error == net::error::connection_reset || error == net::error::eof));
    server.read_some(net::buffer(&byte, 1), error);
    CHECK((error == net::error::connection_reset || error == net::error::eof));
    CHECK(proxy.connections() == 0);
  }
}

}  // namespace
}  // namespace fusee::testing
