// An etcd of a demo's or a benchmark's own: one member on loopback ports the
// kernel picked, its data in the directory it is given, tuned so that a lease
// of one second is honoured (etcd raises any TTL below 1.5 election timeouts to
// that; its 100 ms election timeout allows 150 ms). Killed with the
// object. Debian's etcd-server (scripts/install-deps) provides the binary.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace fusee::replica {

// A loopback port nobody listens on, outside the kernel's ephemeral range so
// that it can be bound again later (a replica restarting).
std::uint16_t free_loopback_port();

class LocalEtcd {
 public:
  // Starts it and waits until it answers; check ready(). Start it on the
  // thread that outlives it (the main one): etcd is killed when that
  // thread ends (PR_SET_PDEATHSIG), so a crash leaves none behind.
  explicit LocalEtcd(const std::string& dir);
  ~LocalEtcd();
  LocalEtcd(const LocalEtcd&) = delete;
  LocalEtcd& operator=(const LocalEtcd&) = delete;

  bool ready() const { return ready_; }
  const std::string& problem() const { return problem_; }
  std::uint16_t client_port() const { return client_port_; }

  void pause();   // SIGSTOP: every call times out
  void resume();  // SIGCONT

 private:
  pid_t pid_ = 0;
  std::uint16_t client_port_ = 0;
  bool ready_ = false;
  std::string problem_;
};

}  // namespace fusee::replica
