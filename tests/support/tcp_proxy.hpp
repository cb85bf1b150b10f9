// TcpProxy: a userspace TCP proxy that a test puts on a link (a replica to a
// replica, a replica to etcd) to partition it without root: each direction
// can be cut on its own, so a test gets one-way and asymmetric partitions.
//
// What a cut does, and why: a real partition loses packets, and TCP keeps
// retransmitting until the link heals (then the stream resumes, nothing lost
// or reordered) or a timeout gives up on the connection. The proxy does the
// same within the stream's guarantees: while a direction is cut it stops
// reading from that side, so bytes wait (in the proxy's and the kernel's
// buffers, and then the sender's) and flow again, in order, once healed. A new
// connection while the forward direction is cut is accepted but not connected
// onward until healed (its SYN "lost"). reset() ends every connection, as a
// timeout that gives up would. Bytes are never dropped from inside a stream:
// TCP never delivers a stream with a hole.
//
// One thread of its own; every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace fusee::testing {

class TcpProxy {
 public:
  // Listens on 127.0.0.1 at a port the kernel picks, forwarding to target.
  TcpProxy(std::string target_host, std::uint16_t target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  std::uint16_t port() const;

  // Cuts a direction (forward: from the connecting side to the target;
  // backward: the answers), or both; heal() restores both.
  void cut(bool forward, bool backward);
  void heal() { cut(false, false); }
  // Ends every connection now (both sides see the connection reset).
  void reset();

  // Connections open now, and bytes handed on so far in each direction
  // (counted as each piece is passed on, so never behind what was read).
  std::size_t connections() const;
  std::uint64_t bytes_forward() const;
  std::uint64_t bytes_backward() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace fusee::testing
