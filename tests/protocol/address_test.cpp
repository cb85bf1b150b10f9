// Addresses (protocol/address.hpp): what parses and what is refused
// with which reason, listening on a free port and a Unix socket, and a
// remote engine reaching a server over IPv6 loopback when the machine has it.
#include <doctest/doctest.h>
#include <unistd.h>

#include <fusee/fusee.hpp>
#include <string>

#include "protocol/address.hpp"
#include "server/log_service.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

using namespace fusee;
using namespace fusee::protocol;
using fusee::server::LogService;
using fusee::server::LogServiceOptions;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string refusal(const std::string& text, bool unix_allowed = true) {
  try {
    parse_address(text, "listen address", unix_allowed);
  } catch (const Error& error) {
    CHECK(error.code() == errc::invalid_argument);
    return error.what();
  }
  FAIL("'" << text << "' parsed");
  return {};
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("addresses: unix paths, IPv4 and IPv6 literals and localhost parse; anything else is refused saying why") {
    CHECK(parse_address("unix:/run/fusee.sock", "x").unix_socket);
    CHECK(parse_address("unix:/run/fusee.sock", "x").path == "/run/fusee.sock");
    auto v4 = parse_address("10.1.2.3:7470", "x").tcp;
    CHECK(v4.address().to_string() == "10.1.2.3");
    CHECK(v4.port() == 7470);
    CHECK(parse_address("[::1]:80", "x").tcp.address().is_v6());
    CHECK(parse_address("localhost:0", "x").tcp.address().to_string() == "127.0.0.1");
    CHECK(contains(refusal("nonsense"), "expected unix:PATH or HOST:PORT"));
    CHECK(contains(refusal("nonsense", false), "expected HOST:PORT"));
    CHECK(contains(refusal("unix:/x", false), "expected HOST:PORT"));
    CHECK(contains(refusal("127.0.0.1:"), "expected unix:PATH or HOST:PORT"));
    CHECK(contains(refusal("127.0.0.1:99999"), "the port must be 0 to 65535"));
    CHECK(contains(refusal("127.0.0.1:80x"), "the port must be 0 to 65535"));
    CHECK(contains(refusal("not.an.ip:80"), "'not.an.ip' is not an IP address"));
    CHECK(contains(refusal("unix:"), "the socket path is empty"));
    CHECK(contains(refusal("unix:" + std::string(200, 'a')), "longer than 107 bytes"));
  }

  TEST_CASE("addresses: a port of 0 listens on a free one, and a stale socket file is replaced") {
    std::string bound;
    int fd = listen_on(parse_address("127.0.0.1:0", "x"), "127.0.0.1:0", bound);
    REQUIRE(fd >= 0);
    CHECK(bound.starts_with("127.0.0.1:"));
    CHECK(bound != "127.0.0.1:0");
    std::string problem;
    int client = connect_to(parse_address(bound, "x"), bound, problem);
    CHECK_MESSAGE(client >= 0, problem);
    ::close(client);
    ::close(fd);

    testing::TempDir dir;
    auto path = "unix:" + dir.sub("sock");
    int first = listen_on(parse_address(path, "x"), path, bound);
    ::close(first);  // the file stays, as after a crash
    int second = listen_on(parse_address(path, "x"), path, bound);
    CHECK(bound == path);
    ::close(second);
  }

  TEST_CASE("remote: a worker reaches the server over IPv6 loopback") {
    std::string bound;
    int probe = -1;
    try {
      probe = listen_on(parse_address("[::1]:0", "x"), "[::1]:0", bound);
    } catch (const Error& error) {
      MESSAGE("no IPv6 loopback here (" << error.what() << "): nothing to check");
      return;
    }
    ::close(probe);
    testing::TempDir dir;
    io::PosixFileSystem fs;
    LogServiceOptions options;
    options.dir = dir.sub("data");
    options.listen = "[::1]:0";
    options.shards = 2;
    options.direct_io = false;
    options.log = [](const std::string&) {};
    auto service = LogService::open(fs, options);
    CHECK(service->endpoint().starts_with("[::1]:"));
    auto engine = Engine::open(Config::remote(service->endpoint()));
    const WorkflowRef<int, int> twice{"twice"};
    engine->register_workflow(twice, [](Ctx& ctx, int input) -> Task<int> {
      co_return co_await ctx.step("twice", [input] { return 2 * input; });
    });
    CHECK(engine->execute(twice, "v6", 21) == 42);
  }
}
