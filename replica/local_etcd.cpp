#include "replica/local_etcd.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "replication/etcd_coordinator.hpp"

namespace fusee::replica {

std::uint16_t free_loopback_port() {
  // Below the kernel's ephemeral range: a replica binds its port again at
  // every restart, and a port the kernel hands out to outgoing connections
  // (the other replicas', the clients') can be held by one of them just
  // then -- the replica could not listen, and would exit.
  std::uint32_t ephemeral_low = 32768;
  if (std::FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(range, "%u", &ephemeral_low) != 1) ephemeral_low = 32768;
    std::fclose(range);
  }
  boost::asio::io_context io;
  const auto loopback = boost::asio::ip::make_address("127.0.0.1");
  constexpr std::uint32_t kLowest = 10000;
  if (ephemeral_low > kLowest + 1000) {
    std::random_device entropy;
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const auto port = static_cast<std::uint16_t>(kLowest + entropy() % (ephemeral_low - kLowest));
      boost::asio::ip::tcp::acceptor acceptor(io);
      boost::system::error_code error;
      acceptor.open(boost::asio::ip::tcp::v4(), error);
      if (!error) acceptor.bind({loopback, port}, error);
      if (!error) return port;
    }
  }
  boost::asio::ip::tcp::acceptor acceptor(io, {loopback, 0});
  return acceptor.local_endpoint().port();
}

LocalEtcd::LocalEtcd(const std::string& dir) : client_port_(free_loopback_port()) {
  const std::uint16_t peer_port = free_loopback_port();
  const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
  std::vector<std::string> args = {"etcd", "--name", "demo", "--data-dir", dir + "/etcd",
                                   "--listen-client-urls", client, "--advertise-client-urls", client,
                                   "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                   "--initial-cluster", "demo=" + peer,
                                   "--heartbeat-interval", "10", "--election-timeout", "100",
                                   "--log-outputs", dir + "/etcd.log", "--logger", "zap"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // etcd's path, found before the fork (the child calls only what is safe
  // between a fork and an exec in a process with threads).
  std::string program;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string entry; std::getline(dirs, entry, ':');) {
      const std::string candidate = (entry.empty() ? std::string(".") : entry) + "/etcd";
      if (::access(candidate.c_str(), X_OK) == 0) {
        program = candidate;
        break;
      }
    }
  }
  if (program.empty()) {
    problem_ = "cannot start etcd (Debian's etcd-server; scripts/install-deps installs it)";
    return;
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    pid_ = 0;
    problem_ = "cannot start etcd: fork failed";
    return;
  }
  if (pid_ == 0) {
    // etcd dies with the process that started it (with the thread that
    // did: every user starts it on its main thread), so a test or a
    // benchmark that crashes leaves no etcd behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  replication::EtcdOptions options;
  options.port = client_port_;
  options.cluster = "probe";
  options.timeout = std::chrono::milliseconds(500);
  const auto give_up_at = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up_at) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      problem_ = "etcd exited at start (see " + dir + "/etcd.log)";
      return;
    }
    replication::EtcdCoordinator coordinator(options);
    if (coordinator.run(0, {1, replication::CoordinatorOp::read, 0, 0}).reached) {
      ready_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  problem_ = "etcd did not answer within 20 s";
}

LocalEtcd::~LocalEtcd() {
  if (pid_ == 0) return;
  kill(pid_, SIGCONT);
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

void LocalEtcd::pause() {
  if (pid_ != 0) kill(pid_, SIGSTOP);
}
void LocalEtcd::resume() {
  if (pid_ != 0) kill(pid_, SIGCONT);
}

}  // namespace fusee::replica
