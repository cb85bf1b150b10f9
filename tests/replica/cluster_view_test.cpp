// ClusterView (hosting/cluster_view.hpp), what a replica shows of its
// cluster: latest(), for an HTTP front's router, never waits on a replica.
// Three replicas that never answer (listeners that accept nothing: each
// connection waits in the backlog, silent, as behind a stopped machine):
// the first call has nothing yet and returns at once, the refresh runs on
// a thread of its own, and its answer (every replica unanswered) is served
// afterwards.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hosting/cluster_view.hpp"

namespace fusee::hosting {
namespace {

// A loopback listener that never accepts; closed with the test.
struct SilentListener {
  SilentListener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port = ntohs(address.sin_port);
  }
  ~SilentListener() { ::close(fd); }
  int fd = -1;
  unsigned port = 0;
};

TEST_SUITE("unit") {
  TEST_CASE("cluster view: latest() waits on no replica; the refresh runs on its own thread, then serves") {
    SilentListener replicas[3];
    std::vector<std::string> addresses;
    for (const auto& replica : replicas) addresses.push_back("127.0.0.1:" + std::to_string(replica.port));
    ClusterView view(addresses);
    // Nothing yet: the asking takes its whole timeout (nobody answers), and
    // its result is stored only under the lock latest() holds while it
    // answers, so this cannot see one.
    CHECK_FALSE(view.latest(std::chrono::milliseconds(300)).has_value());
    std::optional<std::vector<ClusterReplica>> answer;
    for (int i = 0; i < 200 && !answer; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      answer = view.latest(std::chrono::milliseconds(300));
    }
    REQUIRE(answer.has_value());
    REQUIRE(answer->size() == 3);
    for (std::uint32_t id = 0; id < 3; ++id) {
      CHECK((*answer)[id].id == id);
      CHECK((*answer)[id].address == addresses[id]);
      CHECK_FALSE((*answer)[id].answered);
      CHECK_FALSE((*answer)[id].lag_batches.has_value());
    }
    // Asked again while a refresh may be under way: the last answer, at once.
    CHECK(view.latest(std::chrono::milliseconds(300)).has_value());
  }  // the view waits for a refresh under way as it goes
}

}  // namespace
}  // namespace fusee::hosting
