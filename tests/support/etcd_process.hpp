// An etcd of a test's own: one member on loopback, on ports the kernel picks,
// with its data in a temporary directory; stopped by its PID when the object
// goes. Debian's etcd-server (scripts/install-deps) provides the binary; when
// it is missing, available() is false and the test says it skipped.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"

extern char** environ;

namespace fusee::testing {

inline std::uint16_t free_loopback_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

class EtcdProcess {
 public:
  EtcdProcess() : client_port_(free_loopback_port()), peer_port_(free_loopback_port()) {
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> args = {"etcd",
                                     "--name", "test",
                                     "--data-dir", dir_.sub("etcd"),
                                     "--listen-client-urls", client,
                                     "--advertise-client-urls", client,
                                     "--listen-peer-urls", peer,
                                     "--initial-advertise-peer-urls", peer,
                                     "--initial-cluster", "test=" + peer,
                                     "--log-outputs", dir_.sub("etcd.log"),
                                     "--logger", "zap"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "etcd", nullptr, nullptr, argv.data(), environ) != 0) pid_ = 0;
  }
  ~EtcdProcess() { stop(); }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // Whether etcd started (it may still be getting ready: wait with a client).
  bool available() {
    if (pid_ == 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;  // exited at once: missing, or cannot run here
      return false;
    }
    return true;
  }
  std::uint16_t client_port() const { return client_port_; }

  // SIGSTOP and SIGCONT: etcd unreachable, then back, with its state.
  void pause() { if (pid_ != 0) kill(pid_, SIGSTOP); }
  void resume() { if (pid_ != 0) kill(pid_, SIGCONT); }

  void stop() {
    if (pid_ == 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
  }

 private:
  TempDir dir_;
  std::uint16_t client_port_;
  std::uint16_t peer_port_;
  pid_t pid_ = 0;
};

}  // namespace fusee::testing
